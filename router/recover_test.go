package router

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/aperio-dev/aperio/internal/recovery"
	"github.com/aperio-dev/aperio/internal/telemetry"
)

func TestProxyRecoversPanic(t *testing.T) {
	recovery.AllowForTest(t)
	rt := newRouter(t, Config{})
	rt.reg.update(newConn("a", 0), ann(svc("", "app.test")))
	SetProxyHookForTest(t, func(r *http.Request) {
		if r.URL.Path == "/boom" {
			panic("boom")
		}
	})
	before := recovery.Total()

	w := httptest.NewRecorder()
	rt.Proxy(w, httptest.NewRequest(http.MethodGet, "http://app.test/boom", nil), new(telemetry.Request))
	if w.Code != http.StatusInternalServerError {
		t.Errorf("Proxy(/boom) status = %d, want 500", w.Code)
	}
	if got := recovery.Total() - before; got != 1 {
		t.Errorf("recovery.Total() grew by %d, want 1", got)
	}
	// The router still serves.
	w = httptest.NewRecorder()
	rt.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "http://app.test/ok", nil))
	if w.Code != http.StatusOK || w.Body.String() != "a/0" {
		t.Errorf("ServeHTTP(/ok) = %d %q, want 200 \"a/0\"", w.Code, w.Body.String())
	}
}
