package router

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestPassthroughOnlyBindAnswers421: an HTTP request for a hostname whose
// bind's members all take TLS passthrough is answered 421 and never
// dispatched; explain says so; a bind with a terminated member serves
// HTTP as before (#38 item 14).
func TestPassthroughOnlyBindAnswers421(t *testing.T) {
	rt := newRouter(t, Config{})
	pass := svc("", "vault.test")
	pass.TLSPassthrough = true
	c := newConn("vault", 1)
	rt.reg.update(c, ann(pass))
	w := httptest.NewRecorder()
	rt.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "http://vault.test/", nil))
	if w.Code != http.StatusMisdirectedRequest || len(c.got) != 0 {
		t.Errorf("GET vault.test = %d with %d requests dispatched, want 421 and none", w.Code, len(c.got))
	}
	ex := rt.explain(context.Background(), explainQuery{host: "vault.test", path: "/"})
	if ex.Status != http.StatusMisdirectedRequest || ex.Steps[len(ex.Steps)-1].Name != StepRoute {
		t.Errorf("explain vault.test = %d, steps %+v; want 421 at the route step", ex.Status, ex.Steps)
	}
	// A terminated member joins the bind: HTTP has somewhere to go.
	rt.reg.update(newConn("web", 2), ann(svc("", "vault.test")))
	w = httptest.NewRecorder()
	rt.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "http://vault.test/", nil))
	if w.Code == http.StatusMisdirectedRequest {
		t.Errorf("GET vault.test with a terminated member = 421, want it served")
	}
}
