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
	_, methods := pointerMethods(t)
	counts := map[string]int{}
	for _, m := range methods {
		counts[m.recv]++
	}
	if counts["Router"] == 0 {
		t.Fatalf("found no Router method in %d methods; run from the wrong directory?", len(methods))
	}
	if n := counts["Router"]; n > maxRouterMethods {
		t.Errorf("*Router has %d methods, want at most %d (Registry has %d, admission %d): move the new ones to the type whose job they are",
			n, maxRouterMethods, counts["Registry"], counts["admission"])
	}
}

// TestStagesHaveOneBody pins that no method of admission (the stages)
// asks which mode it runs in (issue #40): none compares or asserts the
// admission's mode (or a dry run's explanation, its old marker) nor names
// the modes' types. What differs between the proxy and a dry run is the
// mode's (proxyMode, dryRun), chosen once where the admission is made.
func TestStagesHaveOneBody(t *testing.T) {
	fset, methods := pointerMethods(t)
	marker := func(e ast.Expr) bool {
		sel, ok := e.(*ast.SelectorExpr)
		return ok && (sel.Sel.Name == "mode" || sel.Sel.Name == "ex")
	}
	stages := 0
	for _, m := range methods {
		if m.recv != "admission" || m.fn.Body == nil {
			continue
		}
		stages++
		ast.Inspect(m.fn.Body, func(n ast.Node) bool {
			var bad bool
			switch n := n.(type) {
			case *ast.BinaryExpr:
				bad = marker(n.X) || marker(n.Y)
			case *ast.TypeAssertExpr:
				bad = marker(n.X)
			case *ast.Ident:
				bad = n.Name == "dryRun" || n.Name == "proxyMode" || n.Name == "explanation"
			}
			if bad {
				t.Errorf("%s: admission.%s asks which mode it runs in: ask the mode for the act that differs instead", fset.Position(n.Pos()), m.fn.Name.Name)
			}
			return true
		})
	}
	if stages == 0 {
		t.Fatalf("found no admission method in %d methods; run from the wrong directory?", len(methods))
	}
}

// method is a method declared on a pointer receiver, *recv.
type method struct {
	recv string
	fn   *ast.FuncDecl
}

// pointerMethods parses the package's source, its tests left out, and
// returns the methods declared on pointer receivers.
func pointerMethods(tb testing.TB) (*token.FileSet, []method) {
	tb.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		tb.Fatal(err)
	}
	fset := token.NewFileSet()
	var methods []method
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			tb.Fatal(err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || len(fd.Recv.List) != 1 {
				continue
			}
			if star, ok := fd.Recv.List[0].Type.(*ast.StarExpr); ok {
				if id, ok := star.X.(*ast.Ident); ok {
					methods = append(methods, method{recv: id.Name, fn: fd})
				}
			}
		}
	}
	return fset, methods
}
