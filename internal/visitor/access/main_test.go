package access

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them: a
// fetch or an auth call left running, a cache that starts a janitor.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
