package server_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/outbound"
	"github.com/aperio-dev/aperio/internal/passhash"
	"github.com/aperio-dev/aperio/internal/visitor/policy"
)

// Hostnames of TestHostilePaths besides appHost.
const (
	staticHost = "static.test"
	fwdHost    = "fwd.test"
)

// pathsStack is a server and a real client serving, over one tunnel:
// appHost's "/" (public) and "/admin" (basic auth) binds to one backend
// that echoes the request target it received; staticHost, a serve:
// folder; fwdHost, forward auth whose service records X-Forwarded-Uri and
// admits everyone without naming a user. appHost has a rate-limited
// /login route and a /blocked route answering 403.
type pathsStack struct {
	st   *stack
	mu   sync.Mutex // guards uris
	uris []string   // X-Forwarded-Uri of each call to the auth service
}

func startPathsStack(t *testing.T) *pathsStack {
	t.Helper()
	ps := &pathsStack{}
	backend := startBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Backend", "echo")
		fmt.Fprintf(w, "target=%s forwarded-user=%q", r.RequestURI, r.Header.Values("X-Forwarded-User"))
	}))
	auth := startBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ps.mu.Lock()
		ps.uris = append(ps.uris, r.Header.Get("X-Forwarded-Uri"))
		ps.mu.Unlock()
		w.WriteHeader(http.StatusOK) // admits, names nobody (an Authelia bypass)
	}))
	dir := t.TempDir()
	for name, body := range map[string]string{"docs/page.txt": "page", ".env": "SECRET=1"} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hash, err := passhash.Hash("annpass")
	if err != nil {
		t.Fatal(err)
	}
	scfg := serverConfig(t)
	scfg.Outbound = outbound.Policy{AllowHTTP: true, AllowPrivate: true}
	scfg.Router.Policy = policy.Config{
		RateLimits: []policy.RateLimit{{Name: "login", Key: "ip", Rate: 0.0001, Burst: 1}},
		Routes: []policy.Route{
			{Host: appHost, Path: "/login", Policy: &policy.RoutePolicy{RateLimit: "login"}},
			{Host: appHost, Path: "/blocked", Respond: &policy.Respond{Status: http.StatusForbidden, Body: "blocked"}},
		},
	}
	srv := startServer(t, scfg, nil, nil)
	root := config.Service{Name: "root", Target: backend.URL, Hostnames: []string{appHost}, Public: true}
	admin := config.Service{Name: "admin", Target: backend.URL, Hostnames: []string{appHost}, Path: "/admin",
		Auth: &config.Auth{Basic: &config.BasicAuth{Users: map[string]string{"ann": hash}}}}
	static := config.Service{Name: "static", Serve: dir, Hostnames: []string{staticHost}, Public: true}
	fwd := config.Service{Name: "fwd", Target: backend.URL, Hostnames: []string{fwdHost},
		Auth: &config.Auth{Forward: &config.ForwardAuth{URL: auth.URL + "/verify", CopyHeaders: []string{"X-Forwarded-User"}}}}
	ag := startAgent(t, srv, agentConfig(srv, root, admin, static, fwd))
	visitor := newVisitor(t, srv)
	waitClients(t, visitor, srv, 1)
	for _, h := range []string{appHost, staticHost, fwdHost} {
		poll(t, waitFor, func() (bool, string) { return srv.gw.RoutedForTest(h), "no route for " + h + " published" })
	}
	ps.st = &stack{server: srv, agent: ag, visitor: visitor}
	return ps
}

// visit sends GET target (as written: no cleaning) to host over c.
func (ps *pathsStack) visit(t *testing.T, c *http.Client, host, target string, h http.Header) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	req := newRequest(t, ctx, ps.st.server, http.MethodGet, host, target, nil) // sent as written: Go's client cleans nothing
	for k, vv := range h {
		req.Header[k] = vv
	}
	resp, body := do(t, c, req)
	return resp.StatusCode, body
}

// TestHostilePaths is the hostile table of the path rule end to end, over
// HTTP/1.1 and HTTP/2 (#38 item 2, probe F2): every spelling of a guarded
// path meets its guard in each place a path is matched: the bind, a
// route's rate limit and fixed answer, a serve: folder, forward auth's
// X-Forwarded-Uri; and the backend receives the collapsed form.
func TestHostilePaths(t *testing.T) {
	t.Parallel()
	ps := startPathsStack(t)
	for proto, c := range visitorsH1H2(t, ps.st) {
		t.Run(proto, func(t *testing.T) {
			for _, p := range []string{"/admin", "//admin", "///admin/x", "/admin;x", "/admin;/x", "/./admin", "/%61dmin", "/x/../admin", "/admin//"} {
				if code, body := ps.visit(t, c, appHost, p, nil); code != http.StatusUnauthorized {
					t.Errorf("guard/path/bind: GET %s = %d %q, want 401 from the /admin bind", p, code, body)
				}
			}
			for _, p := range []string{"/admin/..;/x", "/x/%2e%2e;/admin", "/admin%2Fx", "/x/.;/admin"} {
				if code, body := ps.visit(t, c, appHost, p, nil); code != http.StatusBadRequest {
					t.Errorf("guard/path/bind: GET %s = %d %q, want 400", p, code, body)
				}
			}
			for p, want := range map[string]string{"//x//y": "target=/x/y ", "/app;jsessionid=AB12": "target=/app;jsessionid=AB12 "} {
				if code, body := ps.visit(t, c, appHost, p, nil); code != http.StatusOK || !strings.HasPrefix(body, want) {
					t.Errorf("guard/path/forwarded: GET %s = %d %q, want 200 %q", p, code, body, want)
				}
			}
			for _, p := range []string{"/blocked", "//blocked", "/blocked;x", "/%62locked"} {
				if code, _ := ps.visit(t, c, appHost, p, nil); code != http.StatusForbidden {
					t.Errorf("guard/path/route: GET %s = %d, want 403 (the /blocked route)", p, code)
				}
			}
			for _, p := range []string{"/login%2F", "/blocked%2fx"} {
				if code, _ := ps.visit(t, c, appHost, p, nil); code != http.StatusBadRequest {
					t.Errorf("guard/path/route: GET %s = %d, want 400", p, code)
				}
			}
			for p, want := range map[string]int{"//docs//page.txt": 200, "/docs/page.txt;jsessionid=1": 200, "/docs;v=1/page.txt": 200, "/docs/..;/.env": 400, "/docs/.;/.env": 400} {
				code, body := ps.visit(t, c, staticHost, p, nil)
				if code != want || want == 200 && body != "page" || strings.Contains(body, "SECRET") {
					t.Errorf("guard/path/static: GET %s = %d %q, want %d", p, code, body, want)
				}
			}
		})
	}
	// The rate limit's one token goes to the first /login, whatever the
	// protocol; every spelling after it is limited.
	h1 := ps.st.visitor
	if code, _ := ps.visit(t, h1, appHost, "/login", nil); code != http.StatusOK {
		t.Fatalf("first GET /login = %d, want 200", code)
	}
	for proto, c := range visitorsH1H2(t, ps.st) {
		for _, p := range []string{"/login", "//login", "/login;x", "/./login", "/%6cogin", "/login/"} {
			if code, _ := ps.visit(t, c, appHost, p, nil); code != http.StatusTooManyRequests {
				t.Errorf("guard/path/rate-limit: %s GET %s = %d, want 429", proto, p, code)
			}
		}
	}
	// Forward auth judges the path as the bind matched it, and the
	// backend never sees the visitor's copies of copy_headers (item 3).
	forged := http.Header{"X-Forwarded-User": {"root"}, "X_Forwarded_User": {"root"}}
	for proto, c := range visitorsH1H2(t, ps.st) {
		for p, want := range map[string]string{"//admin;x/y?q=1": "/admin/y?q=1", "/a%2Fb": "/a%2Fb"} {
			ps.mu.Lock()
			n := len(ps.uris)
			ps.mu.Unlock()
			code, body := ps.visit(t, c, fwdHost, p, forged)
			ps.mu.Lock()
			got := ps.uris[n:]
			ps.mu.Unlock()
			if code != http.StatusOK || len(got) != 1 || got[0] != want {
				t.Errorf("guard/path/forward: %s GET %s = %d, auth service saw X-Forwarded-Uri %q, want 200 and %q", proto, p, code, got, want)
			}
			if !strings.Contains(body, "forwarded-user=[]") {
				t.Errorf("guard/forward/copy-headers: %s GET %s: backend saw %q, want no X-Forwarded-User", proto, p, body)
			}
		}
	}
}
