package router

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/aperio-dev/aperio/tunnel"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeConn is a client that answers every request with its own name.
type fakeConn struct {
	id  string
	at  time.Time
	err error // returned by RoundTrip when set

	mu  sync.Mutex // guards got
	got []*http.Request
}

func (f *fakeConn) ID() string             { return f.id }
func (f *fakeConn) ConnectedAt() time.Time { return f.at }
func (f *fakeConn) RoundTrip(req *http.Request, service string) (*http.Response, error) {
	f.mu.Lock()
	f.got = append(f.got, req)
	f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	body := f.id + "/" + service
	return &http.Response{
		StatusCode:    200,
		Header:        http.Header{"Content-Type": {"text/plain"}},
		ContentLength: int64(len(body)),
		Body:          io.NopCloser(strings.NewReader(body)),
	}, nil
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newConn(id string, order int) *fakeConn {
	return &fakeConn{id: id, at: epoch.Add(time.Duration(order) * time.Second)}
}

// ann builds an announcement with one service per (hostnames, path) pair.
func ann(services ...tunnel.Service) *tunnel.Announcement {
	for i := range services {
		if services[i].ID == "" {
			services[i].ID = fmt.Sprint(i)
		}
		services[i].Healthy = true
	}
	return &tunnel.Announcement{Name: "t", Services: services}
}

func svc(path string, hosts ...string) tunnel.Service {
	return tunnel.Service{Hostnames: hosts, Path: path}
}

// newRouter returns a Router for tests; it fails the test on a bad config.
func newRouter(t testing.TB, cfg Config) *Router {
	t.Helper()
	rt, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// pickID takes and returns a permit on the next member of host's pool.
func pickID(t testing.TB, rt *Router, host string) string {
	t.Helper()
	p := rt.reg.table.Load().match(host, "/")
	if p == nil {
		return ""
	}
	s, _ := p.tryAcquire(rt.strategy, nil)
	if s == nil {
		return ""
	}
	s.release()
	return s.conn.ID()
}

func TestMatch(t *testing.T) {
	rt := newRouter(t, Config{})
	rt.reg.update(newConn("exact", 1), ann(svc("", "app.example.com")))
	rt.reg.update(newConn("api", 2), ann(svc("/api", "app.example.com")))
	rt.reg.update(newConn("apiv2", 3), ann(svc("/api/v2", "app.example.com")))
	rt.reg.update(newConn("wild", 4), ann(svc("", "*.example.com")))
	rt.reg.update(newConn("deepwild", 5), ann(svc("", "*.eu.example.com")))
	tests := []struct {
		host, path, want string
	}{
		{"app.example.com", "/", "exact"},
		{"app.example.com", "/api", "api"},
		{"app.example.com", "/api/users", "api"},
		{"app.example.com", "/apiary", "exact"}, // prefixes match whole segments
		{"app.example.com", "/api/v2/x", "apiv2"},
		{"other.example.com", "/", "wild"},
		{"a.b.example.com", "/", "wild"},
		{"x.eu.example.com", "/", "deepwild"}, // the longest wildcard wins
		{"example.com", "/", ""},              // a wildcard needs a label in front
		{"nope.test", "/", ""},
	}
	for _, tt := range tests {
		t.Run(tt.host+tt.path, func(t *testing.T) {
			p := rt.reg.table.Load().match(tt.host, tt.path)
			got := ""
			if p != nil {
				got = (*p.members.Load())[0].conn.ID()
			}
			if got != tt.want {
				t.Fatalf("match(%q, %q) = %q, want %q", tt.host, tt.path, got, tt.want)
			}
		})
	}
}

func TestRoundRobinSkipsUnroutable(t *testing.T) {
	rt := newRouter(t, Config{})
	a, b, c := newConn("a", 1), newConn("b", 2), newConn("c", 3)
	rt.reg.update(a, ann(svc("", "app.test")))
	rt.reg.update(b, ann(svc("", "app.test")))
	draining := ann(svc("", "app.test"))
	draining.Draining = true
	rt.reg.update(c, draining)

	counts := map[string]int{}
	for range 10 {
		counts[pickID(t, rt, "app.test")]++
	}
	if counts["a"] != 5 || counts["b"] != 5 || counts["c"] != 0 {
		t.Fatalf("10 picks = %v, want a:5 b:5 and none for draining c", counts)
	}

	unhealthy := ann(svc("", "app.test"))
	unhealthy.Services[0].Healthy = false
	rt.reg.update(a, unhealthy)
	rt.reg.update(b, unhealthy)
	if id := pickID(t, rt, "app.test"); id != "" {
		t.Fatalf("pick with every member unhealthy or draining = %s, want none", id)
	}
}

// TestServiceDrainingSkipped: a service announced draining on its own (a
// client's reload removing it) takes no new request while the client's
// other services and the other clients of its bind still do, and routes
// again once announced without the flag.
func TestServiceDrainingSkipped(t *testing.T) {
	rt := newRouter(t, Config{})
	a, b := newConn("a", 1), newConn("b", 2)
	both := ann(svc("", "app.test"), svc("", "other.test"))
	rt.reg.update(a, both)
	rt.reg.update(b, ann(svc("", "app.test")))
	removing := ann(svc("", "app.test"), svc("", "other.test"))
	removing.Services[0].Draining = true
	rt.reg.update(a, removing)
	for range 4 {
		if id := pickID(t, rt, "app.test"); id != "b" {
			t.Fatalf("pick for app.test with a's service draining = %q, want b", id)
		}
	}
	if id := pickID(t, rt, "other.test"); id != "a" {
		t.Fatalf("pick for other.test = %q, want a (its service is not draining)", id)
	}
	rt.reg.update(a, both)
	counts := map[string]int{}
	for range 4 {
		counts[pickID(t, rt, "app.test")]++
	}
	if counts["a"] != 2 || counts["b"] != 2 {
		t.Fatalf("4 picks after the flag cleared = %v, want a:2 b:2", counts)
	}
}

func TestUpdateIsIdempotent(t *testing.T) {
	rt := newRouter(t, Config{})
	c := newConn("a", 1)
	rt.reg.update(c, ann(svc("", "app.test")))
	before := rt.reg.table.Load()
	rt.reg.update(c, ann(svc("", "app.test")))
	if rt.reg.table.Load() != before {
		t.Fatal("an unchanged announcement rebuilt the table, want the same snapshot")
	}
	rt.reg.update(c, ann(svc("", "app.test", "www.app.test")))
	if rt.reg.table.Load() == before {
		t.Fatal("a changed announcement kept the old table, want a rebuild")
	}
	if rt.reg.table.Load().match("www.app.test", "/") == nil {
		t.Fatal("new hostname not routable after update")
	}
	rt.reg.detach(c)
	if pickID(t, rt, "app.test") != "" || rt.reg.ConnectedClients() != 0 {
		t.Fatal("detached client still routable")
	}
}

func TestServeHTTP(t *testing.T) {
	rt := newRouter(t, Config{MaxBodyBytes: 10})
	ok := newConn("ok", 1)
	rt.reg.update(ok, ann(svc("", "App.Test")))
	broken := newConn("broken", 2)
	broken.err = fmt.Errorf("wrapped: %w", tunnel.ErrSessionClosed)
	rt.reg.update(broken, ann(svc("", "broken.test")))
	slow := newConn("slow", 3)
	slow.err = tunnel.ErrResponseTimeout
	rt.reg.update(slow, ann(svc("", "slow.test")))

	tests := []struct {
		name, host, body string
		status           int
		contains         string
	}{
		{"routes by host, case-insensitive, port ignored", "app.test:8080", "", 200, "ok/0"},
		{"unknown host names it", "nobody.test", "", 502, "nobody.test"},
		{"client gone", "broken.test", "", 502, "disconnected"},
		{"response timeout", "slow.test", "", 504, "slow.test did not answer in time"},
		{"declared body too large", "app.test", "01234567890", 413, "request body too large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body io.Reader
			if tt.body != "" {
				body = strings.NewReader(tt.body)
			}
			req := httptest.NewRequest("POST", "/", body)
			req.Host = tt.host
			rec := httptest.NewRecorder()
			rt.ServeHTTP(rec, req)
			if rec.Code != tt.status || !strings.Contains(rec.Body.String(), tt.contains) {
				t.Fatalf("ServeHTTP(%s) = %d %q, want %d containing %q", tt.host, rec.Code, rec.Body.String(), tt.status, tt.contains)
			}
		})
	}
}

func TestOutboundHeaders(t *testing.T) {
	rt := newRouter(t, Config{})
	c := newConn("a", 1)
	rt.reg.update(c, ann(svc("", "app.test")))
	req := httptest.NewRequest("GET", "/x", nil)
	req.Host = "app.test"
	req.RemoteAddr = "203.0.113.7:5555"
	req.Header.Set("X-Forwarded-For", "198.51.100.1")
	req.Header.Set("Connection", "keep-alive, X-Hop")
	req.Header.Set("X-Hop", "secret")
	req.Header.Set("Keep-Alive", "timeout=5")
	req.Header.Set("TE", "trailers, deflate")
	req.Header.Set(tunnel.ServiceHeader, "spoofed")
	req.Header.Set("X-Aperio-User", "admin")
	req.Header.Set("X-Real-IP", "192.0.2.1")
	req.Header.Set("X-Forwarded-Proto", "https")
	rt.ServeHTTP(httptest.NewRecorder(), req)
	if len(c.got) != 1 {
		t.Fatalf("backend saw %d requests, want 1", len(c.got))
	}
	h := c.got[0].Header
	checks := []struct{ key, want string }{
		// No edge vouches for the peer: what it claims is dropped.
		{"X-Forwarded-For", "203.0.113.7"},
		{"X-Forwarded-Proto", "http"},
		{"X-Real-Ip", ""},
		{"X-Aperio-User", ""},
		{"X-Forwarded-Host", "app.test"},
		{"Connection", ""},
		{"X-Hop", ""},
		{"Keep-Alive", ""},
		{"Te", "trailers"},
		{tunnel.ServiceHeader, ""},
	}
	for _, ck := range checks {
		if got := h.Get(ck.key); got != ck.want {
			t.Errorf("outbound %s = %q, want %q", ck.key, got, ck.want)
		}
	}
	if c.got[0].Host != "app.test" {
		t.Errorf("outbound Host = %q, want app.test", c.got[0].Host)
	}
}

func TestMayBind(t *testing.T) {
	tests := []struct {
		patterns []string
		host     string
		want     bool
	}{
		{[]string{"app.example.com"}, "app.example.com", true},
		{[]string{"app.example.com"}, "APP.example.com", true},
		{[]string{"app.example.com"}, "www.app.example.com", false},
		{[]string{"*.example.com"}, "a.example.com", true},
		{[]string{"*.example.com"}, "a.b.example.com", true},
		{[]string{"*.example.com"}, "*.example.com", true},
		{[]string{"*.example.com"}, "*.b.example.com", true},
		{[]string{"*.example.com"}, "example.com", false},
		{[]string{"*.example.com"}, "*.com", false},
		{[]string{"*.example.com"}, "aexample.com", false},
		{nil, "a.example.com", false},
	}
	for _, tt := range tests {
		if got := mayBind(tt.patterns, tt.host); got != tt.want {
			t.Errorf("mayBind(%v, %q) = %v, want %v", tt.patterns, tt.host, got, tt.want)
		}
	}
}

func TestTokenScopes(t *testing.T) {
	rt := newRouter(t, Config{})
	allowed := []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}
	notices := rt.reg.updateAs(newConn("scoped", 1), ann(svc("", "app.test", "other.test")), rights{allowed: []string{"app.test"}, allowedIPs: allowed})
	if len(notices) != 1 || !strings.Contains(notices[0], "other.test") {
		t.Fatalf("notices for a hostname the token may not bind = %v, want one naming other.test", notices)
	}
	get := func(host, ip string) int {
		req := httptest.NewRequest("GET", "/", nil)
		req.Host = host
		req.RemoteAddr = ip + ":1234"
		rec := httptest.NewRecorder()
		rt.ServeHTTP(rec, req)
		return rec.Code
	}
	if code := get("other.test", "203.0.113.5"); code != 502 {
		t.Fatalf("GET other.test (not allowed for the token) = %d, want 502", code)
	}
	if code := get("app.test", "203.0.113.5"); code != 200 {
		t.Fatalf("GET app.test from an allowed visitor = %d, want 200", code)
	}
	if code := get("app.test", "198.51.100.1"); code != 502 {
		t.Fatalf("GET app.test from a visitor outside allowed_ips = %d, want 502 (as if no route)", code)
	}
}

func TestStatsCountOnlyRoutablePrimaries(t *testing.T) {
	rt := newRouter(t, Config{})
	add := func(id, instance string, limit, priority int, healthy, draining bool) *fakeConn {
		c := newConn(id, len(id))
		a := limited(limit, "app.test")
		a.InstanceID = instance
		a.Services[0].Priority = priority
		a.Services[0].Healthy = healthy
		a.Draining = draining
		rt.reg.update(c, a)
		return c
	}
	add("a", "i-a", 10, 0, true, false)
	add("b", "i-b", 10, 0, true, false)
	add("b2", "i-b", 5, 0, true, false) // a second connection of instance b
	add("standby", "i-s", 10, 1, true, false)
	add("sick", "i-x", 10, 0, false, false)
	add("leaving", "i-y", 10, 0, true, true)
	p := rt.reg.table.Load().match("app.test", "/")
	s, _ := p.tryAcquire(rt.strategy, nil)
	got := rt.reg.Stats("App.Test", "")
	want := PoolStats{Instances: 2, Capacity: 25, Inflight: 1, Routable: 4}
	if got != want {
		t.Fatalf("Stats() = %+v, want %+v (standby, unhealthy and draining are not capacity)", got, want)
	}
	s.release()
}
