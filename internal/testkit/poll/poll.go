// Package poll waits in tests for a condition that has no event to wait
// on (a socket closing in the kernel, a timer of the code under test
// firing): it checks the condition on a ticker until a deadline. Only
// tests import it.
package poll

import (
	"testing"
	"time"
)

// Interval is how often Until checks its condition.
const Interval = 20 * time.Millisecond

// Until checks cond every Interval until it holds, and fails the test
// with what when timeout passes first.
func Until(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			tb.Fatalf("timed out after %v waiting until %s", timeout, what)
		case <-tick.C:
		}
	}
}
