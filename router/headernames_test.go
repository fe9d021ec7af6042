package router

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"testing"
)

// reservedSpellings are spellings of names the server owns that CGI-style
// backends read as the real ones (#38 item 4, probe F3).
var reservedSpellings = []string{
	"X_Aperio_User", "X-Aperio_Auth", "x_aperio_identity", "X_APERIO_USER",
	"X_Forwarded_For", "X-Forwarded_Proto", "x_forwarded_host", "X_Forwarded_Prefix",
	"X_Real_Ip", "X_Request_Id", "Cf_Connecting_Ip", "True_Client_Ip",
}

// TestReservedHeaderSpellings: a visitor's underscore spelling of a
// server-owned header never reaches the backend, whatever
// underscore_headers says and whether or not the peer is trusted; other
// underscore names pass under allow, go under drop, and are answered 400
// under refuse.
func TestReservedHeaderSpellings(t *testing.T) {
	for _, act := range UnderscoreHeaderActions {
		for _, trusted := range []bool{false, true} {
			name := act + "/untrusted"
			if trusted {
				name = act + "/trusted"
			}
			t.Run(name, func(t *testing.T) {
				rt := newRouter(t, Config{UnderscoreHeaders: act})
				c := newConn("a", 1)
				rt.reg.update(c, ann(svc("", "app.test")))
				var proxies []netip.Prefix
				if trusted {
					proxies = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}
				}
				e := NewEdge(proxies, "")
				req := httptest.NewRequest(http.MethodGet, "http://app.test/", nil)
				for _, k := range reservedSpellings {
					req.Header[k] = []string{"forged"}
				}
				req.Header["My_Header"] = []string{"mine"}
				req.Header["X-Forwarded-Port"] = []string{"8443"}
				w := httptest.NewRecorder()
				rt.ServeHTTP(w, e.Resolve(req))
				if act == "refuse" {
					if w.Code != http.StatusBadRequest || len(c.got) != 0 {
						t.Fatalf("underscore_headers refuse: %d, %d requests reached the backend; want 400, none", w.Code, len(c.got))
					}
					return
				}
				if w.Code != http.StatusOK || len(c.got) != 1 {
					t.Fatalf("GET = %d, %d requests reached the backend; want 200, 1", w.Code, len(c.got))
				}
				h := c.got[0].Header
				for _, k := range reservedSpellings {
					if vv, ok := h[k]; ok {
						t.Errorf("backend got %s = %q, want every spelling of a server-owned name removed", k, vv)
					}
				}
				if got, want := h["My_Header"] != nil, act == "allow"; got != want {
					t.Errorf("backend got My_Header: %v, want %v under %s", got, want, act)
				}
				if got := h["X-Forwarded-Port"]; trusted != slices.Equal(got, []string{"8443"}) {
					t.Errorf("backend X-Forwarded-Port = %q; want it kept from a trusted proxy only", got)
				}
				if got := h.Get("X-Forwarded-For"); got != "192.0.2.1" {
					t.Errorf("backend X-Forwarded-For = %q, want the peer 192.0.2.1", got)
				}
			})
		}
	}
}

// TestExplainHeaderNames: explain given headers shows the header-names
// step: a refusal under refuse, and what is removed otherwise.
func TestExplainHeaderNames(t *testing.T) {
	for _, tc := range []struct {
		act     string
		outcome string
		status  int
	}{
		{"refuse", OutcomeStop, http.StatusBadRequest},
		{"drop", OutcomeInfo, 0},
	} {
		rt := newRouter(t, Config{UnderscoreHeaders: tc.act})
		rt.reg.update(newConn("a", 1), ann(svc("", "app.test")))
		ex := rt.explain(context.Background(), explainQuery{host: "app.test", path: "/", header: http.Header{"My_Header": {"x"}}})
		i := slices.IndexFunc(ex.Steps, func(s ExplainStep) bool { return s.Name == stepHeaderNames })
		if i < 0 || ex.Steps[i].Outcome != tc.outcome || ex.Status != tc.status {
			t.Errorf("underscore_headers %s: explain steps %+v, status %d; want a %s step %s, status %d", tc.act, ex.Steps, ex.Status, stepHeaderNames, tc.outcome, tc.status)
		}
	}
}
