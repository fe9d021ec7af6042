package store_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any goroutine outlives the tests: every store
// is closed in its test's cleanup, and Close must join the change listener,
// every subscription's forwarder and the pools' workers.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
