package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/config/configtest"
)

// TestPrintSchemaPublished: --print-schema prints the schema published in
// docs/schema (go test -update rewrites it), so the published one cannot
// drift from the key table; it exits before loading anything.
func TestPrintSchemaPublished(t *testing.T) {
	path, err := filepath.Abs(filepath.Join("..", "..", "docs", "schema", "aperio-server.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	// No master token: --print-schema needs none.
	code, stdout, stderr := runServer(t, nil, "--print-schema")
	if code != 0 || stderr != "" {
		t.Fatalf("--print-schema = exit %d, stderr %q", code, stderr)
	}
	configtest.PublishedSchema(t, path, stdout, *update)
}

// TestServerHelpGolden pins `aperio-server --help`: the flags, then every
// setting grouped, with its kind and default. A subcommand's help has no
// settings.
func TestServerHelpGolden(t *testing.T) {
	path, err := filepath.Abs(filepath.Join("testdata", "help.golden"))
	if err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runServer(t, nil, "--help")
	if code != 0 || stderr != "" {
		t.Fatalf("--help = exit %d, stderr %q", code, stderr)
	}
	configtest.Golden(t, path, []byte(stdout), *update)
	if _, out, _ := runServer(t, nil, "version", "--help"); strings.Contains(out, "Settings:") {
		t.Errorf("version --help lists the settings:\n%s", out)
	}
}
