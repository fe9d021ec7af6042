package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/config"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestPrintConfigDefaultsGolden pins --print-config with nothing but the
// master token set: every key, in order, with its default value. A default
// changed or lost anywhere on its way from the package that owns it to the
// key table shows here as a diff.
func TestPrintConfigDefaultsGolden(t *testing.T) {
	path, err := filepath.Abs(filepath.Join("testdata", "print_defaults.golden"))
	if err != nil {
		t.Fatal(err)
	}
	// No variable of the developer's environment may set a key.
	env := map[string]string{"APERIO_SERVER_TOKEN": "0123456789abcdef0123456789abcdef"}
	for _, k := range config.ServerKeys() {
		for _, name := range append([]string{k.Env}, k.EnvAliases...) {
			if _, ok := env[name]; !ok {
				env[name] = ""
			}
		}
	}
	code, stdout, stderr := runServer(t, env, "--print-config")
	if code != 0 {
		t.Fatalf("--print-config = exit %d, stderr %q, want 0", code, stderr)
	}
	if *update {
		if err := os.WriteFile(path, []byte(stdout), 0o644); err != nil {
			t.Fatalf("write %s: %v", path, err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v (run go test -update to create it)", path, err)
	}
	got, wantLines := strings.Split(stdout, "\n"), strings.Split(string(want), "\n")
	for i := range max(len(got), len(wantLines)) {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(wantLines) {
			w = wantLines[i]
		}
		if g != w {
			t.Errorf("--print-config line %d = %q, want %q", i+1, g, w)
		}
	}
}
