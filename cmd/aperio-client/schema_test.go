package main

import (
	"path/filepath"
	"testing"

	"github.com/aperio-dev/aperio/internal/config/configtest"
)

// TestPrintSchemaPublished: --print-schema prints the schema published in
// docs/schema (go test -update rewrites it), so the published one cannot
// drift from the key table; it exits before loading anything.
func TestPrintSchemaPublished(t *testing.T) {
	path, err := filepath.Abs(filepath.Join("..", "..", "docs", "schema", "aperio-client.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	// No server, token or service: --print-schema needs none.
	code, stdout, stderr := runClient(t, nil, "--print-schema")
	if code != 0 || stderr != "" {
		t.Fatalf("--print-schema = exit %d, stderr %q", code, stderr)
	}
	configtest.PublishedSchema(t, path, stdout, *update)
}
