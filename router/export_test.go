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
