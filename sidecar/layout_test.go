package sidecar_test

import (
	"go/parser"
	"go/token"
	"strconv"
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
