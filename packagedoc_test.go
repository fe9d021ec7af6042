package aperio_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackageDocs enforces the house rule that every package has exactly
// one package doc comment, saying what it owns.
func TestPackageDocs(t *testing.T) {
	docs := map[string][]string{} // directory → files with a package doc
	pkgs := map[string]bool{}
	for _, path := range moduleGoFiles(t) {
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Dir(path)
		pkgs[dir] = true
		if f.Doc != nil && strings.TrimSpace(f.Doc.Text()) != "" {
			docs[dir] = append(docs[dir], filepath.Base(path))
		}
	}
	if len(pkgs) < 5 {
		t.Fatalf("found %d packages, want the whole tree (walked from the wrong directory?)", len(pkgs))
	}
	for dir := range pkgs {
		switch n := len(docs[dir]); {
		case n == 0:
			t.Errorf("package %s has no package doc comment", dir)
		case n > 1:
			t.Errorf("package %s has %d package doc comments (%v), want exactly one", dir, n, docs[dir])
		}
	}
}

// moduleGoFiles returns the paths of the module's non-test Go files,
// relative to its root, leaving out hidden and testdata directories.
func moduleGoFiles(t testing.TB) []string {
	t.Helper()
	var paths []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "bin") {
				return filepath.SkipDir
			}
			if path != "." {
				// A nested module (examples/kubernetes-provider) is another
				// module: it cannot import this one's internal packages.
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			paths = append(paths, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return paths
}
