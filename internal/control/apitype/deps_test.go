package apitype_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsOnlyStandardLibrary fails when wire, or anything it imports,
// is outside the standard library: every package of both binaries may
// import wire, so it must bring nothing in with it.
func TestImportsOnlyStandardLibrary(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{.Standard}}", ".")
	cmd.Stderr = new(strings.Builder)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, cmd.Stderr)
	}
	const self = "github.com/aperio-dev/aperio/internal/control/apitype"
	seen := map[string]bool{}
	for line := range strings.Lines(string(out)) {
		path, standard, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			t.Fatalf("go list -deps printed %q, want \"<path> <standard>\"", line)
		}
		seen[path] = true
		if path != self && standard != "true" {
			t.Errorf("wire depends on %s, which is not in the standard library", path)
		}
	}
	// The list must be wire's: an empty or wrong one would pass.
	for _, want := range []string{self, "time"} {
		if !seen[want] {
			t.Fatalf("go list -deps of wire lacks %s: not wire's dependencies", want)
		}
	}
}
