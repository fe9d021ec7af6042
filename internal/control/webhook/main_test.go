package webhook

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any goroutine outlives the tests: Run must
// join its loops and every delivery before it returns.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
