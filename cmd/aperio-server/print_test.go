package main

import (
	"flag"
	"path/filepath"
	"testing"

	"github.com/aperio-dev/aperio/cmd/aperio-server/serverconfig"
	"github.com/aperio-dev/aperio/internal/config/configtest"
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
	for _, k := range serverconfig.Keys() {
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
	configtest.Golden(t, path, []byte(stdout), *update)
}
