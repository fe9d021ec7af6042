package router

import (
	"net/http"
	"testing"
)

// SetProxyHookForTest makes fn run first on every proxied request until
// the test ends.
func SetProxyHookForTest(t testing.TB, fn func(*http.Request)) {
	t.Helper()
	proxyHookForTest = fn
	t.Cleanup(func() { proxyHookForTest = nil })
}

// rateLimitedForTest returns c's count of 429 answers of the limit named
// kind, or -1 when no limit has that name.
func (c Counters) rateLimitedForTest(kind string) int64 {
	for _, l := range c.RateLimited {
		if l.Kind == kind {
			return l.N
		}
	}
	return -1
}
