package router

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// maxRouterMethods bounds Router's methods (issue #40): Router is the
// visitors' handler; the clients, pools and route table are Registry's,
// and the stages are the admission's.
const maxRouterMethods = 40

// TestRouterKeepsOneJob counts the methods declared on *Router in the
// package's source and fails above maxRouterMethods: a Router growing
// past it is taking on a job that belongs to Registry or to a stage.
func TestRouterKeepsOneJob(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || len(fd.Recv.List) != 1 {
				continue
			}
			if star, ok := fd.Recv.List[0].Type.(*ast.StarExpr); ok {
				if id, ok := star.X.(*ast.Ident); ok {
					counts[id.Name]++
				}
			}
		}
	}
	if counts["Router"] == 0 {
		t.Fatalf("found no Router method in %d files; run from the wrong directory?", len(files))
	}
	if n := counts["Router"]; n > maxRouterMethods {
		t.Errorf("*Router has %d methods, want at most %d (Registry has %d, admission %d): move the new ones to the type whose job they are",
			n, maxRouterMethods, counts["Registry"], counts["admission"])
	}
}
