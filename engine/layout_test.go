package engine_test

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The decision path (compile, decide, identify, match, canonical paths)
// imports no net/http, so that another HTTP engine can drive it.
func TestDecisionPathImportsNoNetHTTP(t *testing.T) {
	for _, f := range []string{"compile.go", "decide.go", "identity.go", "match.go", "path.go"} {
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range file.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "net/http" {
				t.Errorf("%s imports net/http", f)
			}
		}
	}
}

// The faces call the engine and never each other: the HTTP face (sidecar),
// Envoy's rate limit service (rls) and the gRPC interceptors (grpclimit)
// import none of the others, and the engine imports no face.
func TestFacesImportNoFace(t *testing.T) {
	faces := []string{"sidecar", "rls", "grpclimit"}
	for _, dir := range append([]string{"engine"}, faces...) {
		files, err := filepath.Glob(filepath.Join("..", dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no files (%v)", dir, err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			file, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range file.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				for _, face := range faces {
					if face != dir && p == "github.com/sluicehq/sluice/"+face {
						t.Errorf("%s imports the %s face", f, face)
					}
				}
			}
		}
	}
}
