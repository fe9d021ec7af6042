package router

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/visitor/policy"
	"github.com/aperio-dev/aperio/tunnel"
)

// policyRouter returns a router with cfg's policy and one client c
// serving app.test.
func policyRouter(t *testing.T, pc policy.Config) (*Router, *fakeConn) {
	t.Helper()
	rt := newRouter(t, Config{Policy: pc, MaxBodyBytes: 1 << 20})
	c := newConn("a", 1)
	rt.reg.update(c, ann(svc("", "app.test")))
	return rt, c
}

func TestRouteRuleAnswersWithoutClient(t *testing.T) {
	rt := newRouter(t, Config{Policy: policy.Config{Routes: []policy.Route{
		{Host: "gone.test", Redirect: &policy.Redirect{To: "https://new.test/", PreservePath: true, Status: 308}},
		{Host: "up.test", Path: "/healthz", Methods: []string{"GET", "HEAD"}, Respond: &policy.Respond{Body: "ok", Headers: map[string]string{"Cache-Control": "no-store"}}},
	}, SecurityHeaders: true}})
	w := httptest.NewRecorder()
	rt.ServeHTTP(w, httptest.NewRequest("POST", "https://gone.test/a/b?c=d", strings.NewReader("x")))
	if w.Code != 308 || w.Header().Get("Location") != "https://new.test/a/b?c=d" || w.Header().Get("Strict-Transport-Security") == "" {
		t.Errorf("redirect = %d, Location %q, HSTS %q; want 308 to https://new.test/a/b?c=d with HSTS", w.Code, w.Header().Get("Location"), w.Header().Get("Strict-Transport-Security"))
	}
	w = httptest.NewRecorder()
	rt.ServeHTTP(w, httptest.NewRequest("GET", "http://up.test/healthz", nil))
	if w.Code != 200 || w.Body.String() != "ok" || w.Header().Get("Cache-Control") != "no-store" || w.Header().Get("X-Content-Type-Options") != "nosniff" || w.Header().Get("Strict-Transport-Security") != "" {
		t.Errorf("respond = %d %q, headers %v; want 200 ok with the preset and no HSTS over http", w.Code, w.Body.String(), w.Header())
	}
	w = httptest.NewRecorder()
	rt.ServeHTTP(w, httptest.NewRequest("POST", "http://up.test/healthz", nil))
	if w.Code != http.StatusBadGateway {
		t.Errorf("POST /healthz = %d, want 502: the rule is for GET and HEAD only, and no client serves up.test", w.Code)
	}
}

func TestRouteRuleHeaders(t *testing.T) {
	rt, c := policyRouter(t, policy.Config{
		Headers: []policy.HeaderRule{{Host: "app.test",
			Request:  policy.HeaderOps{Set: map[string]string{"X-Env": "prod"}, Remove: []string{"Cookie"}},
			Response: policy.HeaderOps{Set: map[string]string{"X-Frame-Options": "DENY"}, Remove: []string{"Content-Type"}},
		}},
		Routes: []policy.Route{{Path: "/api", Policy: &policy.RoutePolicy{Headers: &policy.RouteHeaders{
			Request:  policy.HeaderOps{Add: map[string]string{"X-Route": "api"}},
			Response: policy.HeaderOps{Set: map[string]string{"Cache-Control": "private"}},
		}}}},
		SecurityHeaders: true,
	})
	req := httptest.NewRequest("GET", "https://app.test/api/x", nil)
	req.Header.Set("Cookie", "secret=1")
	w := httptest.NewRecorder()
	rt.ServeHTTP(w, req)
	if w.Code != 200 {
		t.Fatalf("GET = %d, want 200", w.Code)
	}
	got := c.got[0].Header
	if got.Get("X-Env") != "prod" || got.Get("X-Route") != "api" || got.Get("Cookie") != "" {
		t.Errorf("backend's request headers = %v; want X-Env prod, X-Route api, no Cookie", got)
	}
	h := w.Header()
	for k, want := range map[string]string{"X-Frame-Options": "DENY", "Cache-Control": "private", "Content-Type": "",
		"Strict-Transport-Security": "max-age=31536000", "Referrer-Policy": "strict-origin-when-cross-origin"} {
		if h.Get(k) != want {
			t.Errorf("answer's %s = %q, want %q", k, h.Get(k), want)
		}
	}
	w = httptest.NewRecorder()
	rt.ServeHTTP(w, httptest.NewRequest("GET", "http://app.test/other", nil))
	if w.Header().Get("Cache-Control") != "" || w.Header().Get("X-Frame-Options") != "DENY" {
		t.Errorf("/other's answer %v: want the hostname's rule without the route's", w.Header())
	}
}

func TestRouteRuleRateLimit(t *testing.T) {
	rt, _ := policyRouter(t, policy.Config{
		RateLimits: []policy.RateLimit{{Name: "api", Key: "header:X-Api-Key", Rate: 0.01, Burst: 2}},
		Routes:     []policy.Route{{Path: "/api", Policy: &policy.RoutePolicy{RateLimit: "api"}}},
	})
	send := func(key string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", "http://app.test/api", nil)
		req.Header.Set("X-Api-Key", key)
		w := httptest.NewRecorder()
		rt.ServeHTTP(w, req)
		return w
	}
	for i := range 2 {
		if w := send("k1"); w.Code != 200 {
			t.Fatalf("request %d of k1 = %d, want 200", i, w.Code)
		}
	}
	w := send("k1")
	if w.Code != 429 || w.Header().Get("X-Aperio-Limit") != "route; setting=rate_limits[0]" || w.Header().Get("Retry-After") != "100" {
		t.Errorf("third request = %d, x-aperio-limit %q, Retry-After %q; want 429, route; setting=rate_limits[0], 100",
			w.Code, w.Header().Get("X-Aperio-Limit"), w.Header().Get("Retry-After"))
	}
	if w := send("k2"); w.Code != 200 {
		t.Errorf("another key's request = %d, want 200", w.Code)
	}
	if n := rt.Counters().rateLimitedForTest("route"); n != 1 {
		t.Errorf("Counters() 429s of route = %d, want 1", n)
	}
}

func TestRouteRuleMaxBodySize(t *testing.T) {
	rt, _ := policyRouter(t, policy.Config{Routes: []policy.Route{{Path: "/upload", Policy: &policy.RoutePolicy{MaxBodySize: 4}}}})
	for _, tt := range []struct {
		path string
		want int
	}{{"/upload", http.StatusRequestEntityTooLarge}, {"/other", http.StatusOK}} {
		w := httptest.NewRecorder()
		rt.ServeHTTP(w, httptest.NewRequest("POST", "http://app.test"+tt.path, strings.NewReader("more than four")))
		if w.Code != tt.want {
			t.Errorf("POST %s of 14 bytes = %d, want %d", tt.path, w.Code, tt.want)
		}
	}
}

func TestNewRefusesBadPolicy(t *testing.T) {
	_, err := New(Config{Policy: policy.Config{Routes: []policy.Route{{Path: "/[", Policy: &policy.RoutePolicy{}}}}})
	if err == nil || !strings.Contains(err.Error(), "routes[0]") {
		t.Errorf("New with a bad glob = %v, want an error naming routes[0]", err)
	}
}

// TestServiceHeaders: a client service's announced response rules are
// checked again on the server (bad entries dropped with a notice) and
// applied before the server's, which win on conflict.
func TestServiceHeaders(t *testing.T) {
	rt := newRouter(t, Config{Policy: policy.Config{Headers: []policy.HeaderRule{
		{Host: "app.test", Response: policy.HeaderOps{Set: map[string]string{"X-Frame-Options": "DENY"}}},
	}}})
	a := ann(svc("", "app.test"))
	a.Services[0].Headers = &tunnel.HeaderRules{
		Set:    map[string]string{"X-Frame-Options": "ALLOWALL", "Cache-Control": "public", "Transfer-Encoding": "identity", "X-Aperio-User": "root"},
		Remove: []string{"Content-Type"},
	}
	c := newConn("a", 1)
	notices := rt.reg.update(c, a)
	if len(notices) != 2 || !strings.Contains(strings.Join(notices, "\n"), "Transfer-Encoding is a hop-by-hop or framing header") {
		t.Errorf("notices = %q, want two naming Transfer-Encoding and X-Aperio-User", notices)
	}
	w := httptest.NewRecorder()
	rt.ServeHTTP(w, httptest.NewRequest("GET", "http://app.test/", nil))
	h := w.Header()
	if h.Get("X-Frame-Options") != "DENY" || h.Get("Cache-Control") != "public" || h.Get("Content-Type") != "" || h.Get("X-Aperio-User") != "" || h.Get("Transfer-Encoding") != "" {
		t.Errorf("answer's headers = %v; want the server's X-Frame-Options, the service's Cache-Control, no Content-Type", h)
	}
	// A new announcement without headers drops them.
	rt.reg.update(c, ann(svc("", "app.test")))
	w = httptest.NewRecorder()
	rt.ServeHTTP(w, httptest.NewRequest("GET", "http://app.test/", nil))
	if w.Header().Get("Cache-Control") != "" {
		t.Errorf("Cache-Control = %q after the service stopped announcing it", w.Header().Get("Cache-Control"))
	}
}

// TestRouteRuleTimeout: a route's timeout reaches the tunnel as the
// request's response timeout; other requests keep the server's.
func TestRouteRuleTimeout(t *testing.T) {
	rt, c := policyRouter(t, policy.Config{Routes: []policy.Route{{Path: "/slow", Policy: &policy.RoutePolicy{Timeout: 2 * time.Minute}}}})
	for _, path := range []string{"/slow/report", "/fast"} {
		w := httptest.NewRecorder()
		rt.ServeHTTP(w, httptest.NewRequest("GET", "http://app.test"+path, nil))
		if w.Code != 200 {
			t.Fatalf("GET %s = %d, want 200", path, w.Code)
		}
	}
	if d, ok := tunnel.ResponseTimeout(c.got[0].Context()); !ok || d != 2*time.Minute {
		t.Errorf("response timeout of /slow/report = %v, %v; want 2m from routes[0]", d, ok)
	}
	if d, ok := tunnel.ResponseTimeout(c.got[1].Context()); ok {
		t.Errorf("response timeout of /fast = %v, want none (the server's)", d)
	}
}
