package aperio_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const logkeyPkg = modulePath + "/internal/logkey"

// slogMethods maps the methods of *slog.Logger (and the package functions
// of the same names) that take alternating keys and values to the index of
// their first key.
var slogMethods = map[string]int{
	"Debug": 1, "Info": 1, "Warn": 1, "Error": 1,
	"DebugContext": 2, "InfoContext": 2, "WarnContext": 2, "ErrorContext": 2,
	"Log": 3, "With": 0,
}

// slogAttrFuncs are the functions of package slog that build one
// attribute from a key.
var slogAttrFuncs = []string{"String", "Int", "Int64", "Uint64", "Float64", "Bool", "Time", "Duration", "Any", "Group"}

// badLogKeys returns, for each key of a log call in f that is not a
// constant of package logkey, its position and the key as written. A log
// call is a call of a slog.Logger method with keys (slogMethods) on any
// value that is not an imported package other than slog, an attribute
// constructor of package slog, or a slog.Attr literal. Keys alternate with
// values; an attribute built in place takes one argument, and a spread
// (args...) ends the keys. Second is the number of log calls in f.
func badLogKeys(fset *token.FileSet, f *ast.File) (bad []string, calls int) {
	imports := map[string]string{} // name in f → import path
	for _, im := range f.Imports {
		path, err := strconv.Unquote(im.Path.Value)
		if err != nil {
			continue
		}
		name := path[strings.LastIndex(path, "/")+1:]
		if im.Name != nil {
			name = im.Name.Name
		}
		imports[name] = path
	}
	// pkgOf returns the import path of the package e names, if it names one.
	pkgOf := func(e ast.Expr) string {
		if id, ok := e.(*ast.Ident); ok && id.Obj == nil {
			return imports[id.Name]
		}
		return ""
	}
	check := func(key ast.Expr) {
		if sel, ok := key.(*ast.SelectorExpr); ok && pkgOf(sel.X) == logkeyPkg {
			return
		}
		bad = append(bad, fmt.Sprintf("%s: log key %s", fset.Position(key.Pos()), source(key)))
	}
	isAttrFunc := func(e ast.Expr) bool {
		call, ok := e.(*ast.CallExpr)
		if !ok {
			return false
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		return ok && pkgOf(sel.X) == "log/slog" && slices.Contains(slogAttrFuncs, sel.Sel.Name)
	}
	// pairs checks the keys of args, alternating keys and values.
	pairs := func(call *ast.CallExpr, args []ast.Expr) {
		for i := 0; i < len(args); {
			if call.Ellipsis.IsValid() && i == len(args)-1 {
				return
			}
			if isAttrFunc(args[i]) {
				i++ // checked where ast.Inspect reaches it
				continue
			}
			check(args[i])
			i += 2
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CompositeLit:
			if sel, ok := n.Type.(*ast.SelectorExpr); ok && pkgOf(sel.X) == "log/slog" && sel.Sel.Name == "Attr" {
				calls++
				for _, elt := range n.Elts {
					if kv, ok := elt.(*ast.KeyValueExpr); ok {
						if id, ok := kv.Key.(*ast.Ident); ok && id.Name == "Key" {
							check(kv.Value)
						}
					} else {
						check(elt) // positional: Key comes first
						break
					}
				}
			}
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if isAttrFunc(n) {
				calls++
				if len(n.Args) > 0 {
					check(n.Args[0])
				}
				if sel.Sel.Name == "Group" {
					pairs(n, n.Args[1:])
				}
				return true
			}
			first, ok := slogMethods[sel.Sel.Name]
			if !ok {
				return true
			}
			if p := pkgOf(sel.X); p != "" && p != "log/slog" {
				return true // a function of another package: http.Error
			}
			calls++
			if first < len(n.Args) {
				pairs(n, n.Args[first:])
			}
		}
		return true
	})
	return bad, calls
}

// source returns e as written, for literals, names and selectors.
func source(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.BasicLit:
		return e.Value
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return source(e.X) + "." + e.Sel.Name
	}
	return fmt.Sprintf("%T", e)
}

// TestBadLogKeys proves badLogKeys finds every way a key can be written
// outside package logkey, and accepts the constants.
func TestBadLogKeys(t *testing.T) {
	const header = `package p

import (
	"log/slog"
	"net/http"
	"github.com/aperio-dev/aperio/internal/logkey"
)

const localKey = "k"

func f(log *slog.Logger, w http.ResponseWriter, args []any, err error) {
`
	tests := []struct {
		name, body string
		want       []string // keys as written, sorted
		calls      int
	}{
		{"logkey constants", `log.Info("m", logkey.Err, err, logkey.Path, "/")`, nil, 1},
		{"literal key", `log.Warn("m", "err", err)`, []string{`"err"`}, 1},
		{"literal value is not a key", `log.Warn("m", logkey.Reason, "why", "host", "h")`, []string{`"host"`}, 1},
		{"local constant", `log.Error("m", localKey, 1)`, []string{"localKey"}, 1},
		{"context variant", `log.InfoContext(nil, "m", "a", 1)`, []string{`"a"`}, 1},
		{"Log", `log.Log(nil, slog.LevelInfo, "m", "a", 1)`, []string{`"a"`}, 1},
		{"With", `log.With("a", 1, logkey.Err, err).Info("m")`, []string{`"a"`}, 2},
		{"package function", `slog.Info("m", "a", 1)`, []string{`"a"`}, 1},
		{"attr in place takes one argument", `log.Info("m", slog.Int("a", 1), "b", 2, logkey.Err, err)`, []string{`"a"`, `"b"`}, 2},
		{"attr constructor", `_ = slog.String("a", "v")`, []string{`"a"`}, 1},
		{"group", `_ = slog.Group("g", "a", 1, slog.Int(logkey.Err, 2))`, []string{`"a"`, `"g"`}, 2},
		{"attr literal", `_ = slog.Attr{Key: "a"}; _ = slog.Attr{"b", slog.IntValue(1)}`, []string{`"a"`, `"b"`}, 2},
		{"spread ends the keys", `log.Info("m", logkey.Err, err, args...)`, nil, 1},
		{"LogAttrs", `log.LogAttrs(nil, slog.LevelInfo, "m", slog.Int("a", 1))`, []string{`"a"`}, 1},
		{"another package's Error", `http.Error(w, "text", 500)`, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, "p.go", header+tt.body+"\n}\n", 0)
			if err != nil {
				t.Fatal(err)
			}
			bad, calls := badLogKeys(fset, f)
			var got []string
			for _, b := range bad {
				got = append(got, b[strings.Index(b, "log key ")+len("log key "):])
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) || calls != tt.calls {
				t.Errorf("badLogKeys(%s) = %q, %d calls, want %q, %d calls", tt.body, got, calls, tt.want, tt.calls)
			}
		})
	}
}

// TestLogKeysAreConstants fails when a non-test file of the module writes
// a log attribute key other than as a constant of package logkey, so that
// one thing keeps one key in every log line.
func TestLogKeysAreConstants(t *testing.T) {
	fset := token.NewFileSet()
	calls := 0
	for _, path := range moduleGoFiles(t) {
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		bad, n := badLogKeys(fset, f)
		calls += n
		for _, b := range bad {
			t.Errorf("%s, want a constant of package logkey", b)
		}
	}
	// The walk must have seen the module's logging: none would pass.
	if calls < 150 {
		t.Fatalf("found %d log calls, want the whole module's (walked from the wrong directory?)", calls)
	}
}

// TestLogKeysOnce fails when package logkey declares a key that is not
// snake_case, or one key under two names.
func TestLogKeysOnce(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("internal", "logkey", "logkey.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	snake := regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	names := map[string]string{} // key → constant
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, name := range vs.Names {
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Errorf("logkey.%s is not a string literal", name.Name)
					continue
				}
				key, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				if !snake.MatchString(key) {
					t.Errorf("logkey.%s = %q, want snake_case", name.Name, key)
				}
				if other, ok := names[key]; ok {
					t.Errorf("logkey.%s and logkey.%s are both %q", other, name.Name, key)
				}
				names[key] = name.Name
			}
		}
	}
	if len(names) < 20 {
		t.Fatalf("logkey declares %d keys, want the module's (wrong file?)", len(names))
	}
}
