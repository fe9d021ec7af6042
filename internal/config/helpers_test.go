package config

import (
	"bytes"
	"testing"

	"github.com/aperio-dev/aperio/internal/config/configtest"
)

// Shared with the server's loader tests.
var (
	filesOf    = configtest.FilesOf
	linesByKey = configtest.LinesByKey
	diffLines  = configtest.DiffLines
)

// envOf returns an Env backed by m.
func envOf(m map[string]string) Env { return configtest.EnvOf(m) }

// problems returns the one-line messages of every *Error joined in err,
// and fails the test if err holds anything else.
func problems(tb testing.TB, err error) []string {
	tb.Helper()
	return configtest.Problems[*Error](tb, err)
}

// printedClient returns the --print-config lines of c by key.
func printedClient(tb testing.TB, c Client, s *Sources) map[string]string {
	tb.Helper()
	var b bytes.Buffer
	if err := PrintClient(&b, c, s); err != nil {
		tb.Fatalf("PrintClient: %v", err)
	}
	return linesByKey(b.String())
}
