package serverconfig

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/config/configtest"
)

var (
	filesOf   = configtest.FilesOf
	diffLines = configtest.DiffLines
)

// envOf returns a config.Env backed by m.
func envOf(m map[string]string) config.Env { return configtest.EnvOf(m) }

// problems returns the one-line messages of every *config.Error joined in err,
// and fails the test if err holds anything else.
func problems(tb testing.TB, err error) []string {
	tb.Helper()
	return configtest.Problems[*config.Error](tb, err)
}

// printed returns the --print-config lines of c by key.
func printed(tb testing.TB, c Config, s *config.Sources) map[string]string {
	tb.Helper()
	var b bytes.Buffer
	if err := Print(&b, c, s); err != nil {
		tb.Fatalf("Print: %v", err)
	}
	return configtest.LinesByKey(b.String())
}

// golden compares got with testdata/name, or rewrites it under -update.
func golden(tb testing.TB, name string, got []byte) {
	tb.Helper()
	configtest.Golden(tb, filepath.Join("testdata", name), got, *update)
}
