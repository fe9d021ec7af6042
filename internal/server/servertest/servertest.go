// Package servertest runs the whole data path in one process for tests: a
// gateway (internal/server) serving real TCP on 127.0.0.1:0, agents
// (internal/agent) holding tunnels to it, httptest backends behind them,
// and the visitor's side: requests, /aperio/health, the admin API. It is
// the harness of internal/server's tests and of test/integration; only
// tests import it.
//
// Everything a helper starts is stopped by t.Cleanup, in reverse order of
// start, so an agent drains before its server stops and its backend
// closes last. Each test starts its own servers, agents, backends and
// store (its own SQLite file or PostgreSQL database), so tests using it
// may call t.Parallel.
package servertest

import (
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

const (
	// Token is the master token of the servers Config returns, and the
	// token of the agents AgentConfig returns.
	Token = "e2e-master-token"
	// AppHost is the hostname Service publishes.
	AppHost = "app.test"
	// WaitFor bounds every poll for a state the data path reaches on its
	// own (a client attaching, a probe passing).
	WaitFor = 15 * time.Second
)

// Main runs m's tests, then calls after (when not nil: what the tests of
// the package share, a browser say, stopped before the check), and exits
// the process: with m's code, or with 1 when the tests passed but left
// goroutines running. A package whose tests use the harness calls it from
// its TestMain.
//
// Every goroutine the harness starts is joined in a cleanup, and those the
// product lets exit on their own once their connection closes (tunnel
// accept loops, the agent's idle backend connections) are gone within
// goleak's retries. One exception: certmagic keeps one rate limiter per
// ACME CA and account email for the life of the process (a package-level
// map it never prunes), which the automatic TLS tests create.
func Main(m *testing.M, after func()) {
	code := m.Run()
	if after != nil {
		after()
	}
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/caddyserver/certmagic.(*RingBufferRateLimiter).loop")); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Logger shows every component's logs under -v and returns nil (discard)
// otherwise.
func Logger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

// Poll calls cond every 20 ms until it reports true or timeout passes, and
// then fails the test with cond's last description.
func Poll(t testing.TB, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, desc := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", timeout, desc)
		}
		<-tick.C
	}
}

// Wait receives from ch or fails the test after timeout; what names the
// awaited value in the failure.
func Wait[T any](t testing.TB, ch <-chan T, timeout time.Duration, what string) T {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("%s: nothing within %v", what, timeout)
		panic("unreachable")
	}
}
