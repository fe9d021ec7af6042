package process_test

import (
	"testing"

	"github.com/aperio-dev/aperio/internal/testkit/procs"
)

// TestMain builds aperio-server and aperio-client once for every test of
// the package (procs.Binaries) and removes them when the tests end.
func TestMain(m *testing.M) { procs.Main(m) }
