package engine_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path"
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
// Envoy's rate limit service (rls), the gRPC interceptors (grpclimit) and
// the client's side (clientlimit) import none of the others, and the
// engine imports no face.
func TestFacesImportNoFace(t *testing.T) {
	faces := []string{"sidecar", "rls", "grpclimit", "clientlimit"}
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

// module is the module's import path, with its trailing slash.
const module = "github.com/sluicehq/sluice/"

// eachImport calls f with every import of every non-test Go file of the
// module, the file's path relative to the module's root (slashes), and
// fails t if the walk reads fewer than 50 files. skip, when not nil, names
// directories (relative, slashes) not to walk.
func eachImport(t *testing.T, skip func(rel string) bool, f func(rel, imp string)) {
	t.Helper()
	checked := 0
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("..", path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && rel != "." || d.Name() == "testdata" || skip != nil && skip(rel) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		file, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		checked++
		for _, imp := range file.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			f(rel, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked only %d files: the walk missed the module", checked)
	}
}

// No package below the faces imports a face, nor anything under one: the
// schema (config), the rule sources, the engine and the mechanisms point
// down only (docs/ARCHITECTURE.md). Checked by import prefix over every
// directory of the module but the faces' own, so that a new package or a
// new face's subpackage is covered without naming it here.
func TestNothingBelowTheFacesImportsAFace(t *testing.T) {
	above := []string{"sidecar", "rls", "grpclimit", "clientlimit", "cmd", "loadtest", "replay", "examples", "deploy"}
	isAbove := func(rel string) bool {
		for _, a := range above {
			if rel == a || strings.HasPrefix(rel, a+"/") {
				return true
			}
		}
		return false
	}
	eachImport(t, isAbove, func(rel, p string) {
		if q, ok := strings.CutPrefix(p, module); ok && isAbove(q) {
			t.Errorf("%s imports %s, above it", rel, p)
		}
	})
}

// One job per package in the HTTP face (docs/ARCHITECTURE.md): only the
// fast engine (sidecar/fastproxy) imports fasthttp, and the net/http
// middleware (sidecar) imports neither the fast engine, the admin port nor
// the daemon, which compose it.
func TestHTTPFacePackagesHaveOneJob(t *testing.T) {
	eachImport(t, nil, func(rel, p string) {
		dir := path.Dir(rel)
		if strings.HasPrefix(p, "github.com/valyala/fasthttp") && dir != "sidecar/fastproxy" {
			t.Errorf("%s imports %s: only sidecar/fastproxy speaks fasthttp", rel, p)
		}
		if q, ok := strings.CutPrefix(p, module+"sidecar/"); ok && dir == "sidecar" && !strings.HasPrefix(q, "internal/") {
			t.Errorf("%s (the middleware) imports %s, which composes it", rel, p)
		}
	})
}
