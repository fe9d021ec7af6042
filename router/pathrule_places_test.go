package router

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/visitor/access"
	"github.com/aperio-dev/aperio/internal/visitor/policy"
	"github.com/aperio-dev/aperio/tunnel"
)

// placesRouter serves app.test (an open "/" bind, a bearer-gated "/admin"
// bind), docs.test (bearer-gated, opened by share links), a rate-limited
// /login route and a /blocked route answering 403 on app.test. It returns
// the router, the "/" bind's client, and a share link for docs.test/docs.
func placesRouter(t *testing.T) (*Router, *fakeConn, string) {
	t.Helper()
	keys, err := access.NewKeyring(access.KeyringConfig{Keys: map[string][]byte{"k1": []byte(strings.Repeat("s", 32))}, Current: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := keys.Mint("docs.test", "/docs", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pc := policy.Config{
		RateLimits: []policy.RateLimit{{Name: "login", Key: "ip", Rate: 0.0001, Burst: 1}},
		Routes: []policy.Route{
			{Host: "app.test", Path: "/login", Policy: &policy.RoutePolicy{RateLimit: "login"}},
			{Host: "app.test", Path: "/blocked", Respond: &policy.Respond{Status: http.StatusForbidden, Body: "blocked"}},
		},
	}
	rt := newRouter(t, Config{Policy: pc, Access: AccessConfig{Shares: keys}})
	bearer := &tunnel.Access{Auth: tunnel.Auth{Bearer: &tunnel.BearerAuth{Keys: map[string]string{"ci": testKeyDigest}}}}
	root := svc("", "app.test")
	root.Access = &tunnel.Access{Public: true}
	rootConn := newConn("root", 1)
	rt.reg.update(rootConn, ann(root))
	admin := svc("/admin", "app.test")
	admin.Access = bearer
	rt.reg.update(newConn("admin", 2), ann(admin))
	docs := svc("", "docs.test")
	docs.Access = bearer
	rt.reg.update(newConn("docs", 3), ann(docs))
	return rt, rootConn, tok
}

// TestPathRuleEverywhere is the hostile table of the path rule (#38
// item 2, probe F2): each spelling of a guarded path meets the same
// guard in every place a path is matched: the bind, a route rule's rate
// limit and fixed answer, a share link's scope; and the backend receives
// the collapsed form with its parameters.
func TestPathRuleEverywhere(t *testing.T) {
	rt, rootConn, tok := placesRouter(t)
	get := func(host, target string, h http.Header) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "http://"+host+target, nil)
		for k, vv := range h {
			req.Header[k] = vv
		}
		w := httptest.NewRecorder()
		rt.ServeHTTP(w, req)
		return w
	}
	t.Run("bind", func(t *testing.T) {
		for _, p := range []string{"/admin", "//admin", "///admin/x", "/admin;x", "/admin;/x", "/./admin", "/%61dmin", "/x/../admin", "/;x/admin", "/admin//"} {
			if w := get("app.test", p, nil); w.Code != http.StatusUnauthorized {
				t.Errorf("GET app.test%s = %d %q, want 401 from the /admin bind's gate", p, w.Code, w.Body.String())
			}
		}
		for _, p := range []string{"/admin/..;/x", "/admin/.;/x", "/x/%2e%2e;/admin", "/;x/../admin", "/admin%2Fx"} {
			if w := get("app.test", p, nil); w.Code != http.StatusBadRequest {
				t.Errorf("GET app.test%s = %d %q, want 400", p, w.Code, w.Body.String())
			}
		}
	})
	t.Run("backend receives", func(t *testing.T) {
		for _, c := range []struct{ target, want string }{
			{"//x//y/", "/x/y/"},
			{"/app;jsessionid=AB12?q=1", "/app;jsessionid=AB12?q=1"},
			{"/a;x/../b", "/b"},
			{"/%61/b", "/a/b"},
		} {
			n := len(rootConn.got)
			if w := get("app.test", c.target, nil); w.Code != http.StatusOK || len(rootConn.got) != n+1 {
				t.Fatalf("GET app.test%s = %d, want 200 from the / bind", c.target, w.Code)
			}
			if got := rootConn.got[n].URL.RequestURI(); got != c.want {
				t.Errorf("GET app.test%s: backend received %s, want %s", c.target, got, c.want)
			}
		}
	})
	t.Run("route rule", func(t *testing.T) {
		if w := get("app.test", "/login", nil); w.Code != http.StatusOK {
			t.Fatalf("first GET /login = %d, want 200 (the bucket's one token)", w.Code)
		}
		for _, p := range []string{"/login", "//login", "/login;x", "/./login", "/%6cogin", "/login/", "/login;/x", "/x/../login"} {
			if w := get("app.test", p, nil); w.Code != http.StatusTooManyRequests {
				t.Errorf("GET app.test%s = %d, want 429 (the /login route's rate limit)", p, w.Code)
			}
		}
		for _, p := range []string{"/blocked", "//blocked", "/blocked;x", "/%62locked/y"} {
			if w := get("app.test", p, nil); w.Code != http.StatusForbidden {
				t.Errorf("GET app.test%s = %d, want 403 (the /blocked route's answer)", p, w.Code)
			}
		}
		for _, p := range []string{"/login%2F", "/login%2Fx", "/blocked%2f"} {
			if w := get("app.test", p, nil); w.Code != http.StatusBadRequest {
				t.Errorf("GET app.test%s = %d, want 400 (nginx reads the route's path in it)", p, w.Code)
			}
		}
	})
	t.Run("share link", func(t *testing.T) {
		cookie := http.Header{"Cookie": {access.CookieShare + "=" + tok}}
		for _, p := range []string{"/docs", "/docs/a", "//docs/a", "/docs//a", "/docs/a;jsessionid=1", "/x/../docs/a"} {
			if w := get("docs.test", p, cookie); w.Code != http.StatusOK {
				t.Errorf("GET docs.test%s with the /docs link = %d %q, want 200", p, w.Code, w.Body.String())
			}
		}
		for _, p := range []string{"/admin", "/docsx", "/docs;x/a", "/docs;/a", "/DOCS/a", "/docs%2Fa"} {
			if w := get("docs.test", p, cookie); w.Code != http.StatusUnauthorized {
				t.Errorf("GET docs.test%s with the /docs link = %d, want 401 (outside the link)", p, w.Code)
			}
		}
		for _, p := range []string{"/docs/..;/admin", "/docs/.;/admin", "/docs/%2e%2e%3B/admin"} {
			if w := get("docs.test", p, cookie); w.Code != http.StatusBadRequest {
				t.Errorf("GET docs.test%s with the /docs link = %d, want 400", p, w.Code)
			}
		}
	})
}

// TestExplainPathRule: explain applies the path rule as the proxy does
// and says how it read the path.
func TestExplainPathRule(t *testing.T) {
	rt, _, _ := placesRouter(t)
	for _, c := range []struct {
		path, bind string
		status     int
		step, text string
	}{
		{"//admin", "app.test/admin", 0, StepReserved, "matched as /admin"},
		{"/admin;x", "app.test/admin", 0, StepReserved, "the backend receives /admin;x, matched as /admin"},
		{"/admin/..;/x", "", http.StatusBadRequest, StepReserved, "with a ;parameter"},
		{"/login%2F", "", http.StatusBadRequest, StepRouteRule, "reads it as /login/"},
		{"/admin%2Fx", "", http.StatusBadRequest, StepRoute, "names bind app.test/admin"},
	} {
		ex := rt.explain(context.Background(), explainQuery{host: "app.test", path: c.path})
		i := slices.IndexFunc(ex.Steps, func(s ExplainStep) bool { return s.Name == c.step && strings.Contains(s.Detail, c.text) })
		if ex.Bind != c.bind || (c.status != 0 && ex.Status != c.status) || i < 0 {
			t.Errorf("explain %s: bind %q status %d steps %+v; want bind %q, status %d, a %s step saying %q", c.path, ex.Bind, ex.Status, ex.Steps, c.bind, c.status, c.step, c.text)
		}
	}
}
