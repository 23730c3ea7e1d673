package store

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestRecordsAreScannedInOnePlace keeps every read of a record in its scan
// function: outside a function named scan…, a row is read into at most
// three destinations (a count, a lock check, an id with its times).
func TestRecordsAreScannedInOnePlace(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil || strings.HasPrefix(fn.Name.Name, "scan") {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if ok && sel.Sel.Name == "Scan" && len(call.Args) > 3 {
					t.Errorf("%s: %s reads a row into %d destinations; read the record with its scan function",
						fset.Position(call.Pos()), fn.Name.Name, len(call.Args))
				}
				return true
			})
		}
	}
}
