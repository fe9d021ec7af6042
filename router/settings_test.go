package router

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/visitor/access"
	"github.com/aperio-dev/aperio/internal/visitor/policy"
	"github.com/aperio-dev/aperio/tunnel"
)

// heldConn answers like fakeConn once release is closed, and tells
// entered when a request reached it.
type heldConn struct {
	*fakeConn
	entered chan struct{}
	release chan struct{}
}

func (h *heldConn) RoundTrip(req *http.Request, service string) (*http.Response, error) {
	h.entered <- struct{}{}
	<-h.release
	return h.fakeConn.RoundTrip(req, service)
}

func headerPolicy(value string) policy.Config {
	return policy.Config{Headers: []policy.HeaderRule{{Response: policy.HeaderOps{Set: map[string]string{"X-Config": value}}}}}
}

// TestReconfigureIsAtomicPerRequest: a request admitted before Reconfigure
// is answered on the old settings (its header rule), the next one on the
// new.
func TestReconfigureIsAtomicPerRequest(t *testing.T) {
	rt := newRouter(t, Config{Policy: headerPolicy("old")})
	c := &heldConn{fakeConn: newConn("a", 1), entered: make(chan struct{}, 1), release: make(chan struct{})}
	rt.reg.update(c, ann(svc("", "app.test")))

	var wg sync.WaitGroup
	first := httptest.NewRecorder()
	wg.Go(func() { rt.ServeHTTP(first, httptest.NewRequest("GET", "http://app.test/", nil)) })
	<-c.entered
	if err := rt.Reconfigure(Config{Policy: headerPolicy("new")}); err != nil {
		t.Fatal(err)
	}
	close(c.release)
	wg.Wait()
	if got := first.Header().Get("X-Config"); got != "old" {
		t.Errorf("in-flight request's X-Config = %q, want old (admitted before the reload)", got)
	}
	second := httptest.NewRecorder()
	wg.Go(func() { <-c.entered })
	rt.ServeHTTP(second, httptest.NewRequest("GET", "http://app.test/", nil))
	wg.Wait()
	if got := second.Header().Get("X-Config"); got != "new" {
		t.Errorf("next request's X-Config = %q, want new", got)
	}
}

func TestReconfigureLimitsAndFallbacks(t *testing.T) {
	rt := newRouter(t, Config{MaxBodyBytes: 4})
	rt.reg.update(newConn("a", 1), ann(svc("", "app.test")))
	post := func() int {
		w := httptest.NewRecorder()
		rt.ServeHTTP(w, httptest.NewRequest("POST", "http://app.test/", strings.NewReader("0123456789")))
		return w.Code
	}
	if code := post(); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("POST of 10 bytes under max_body_size 4 = %d, want 413", code)
	}
	nobody := func() *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		rt.ServeHTTP(w, httptest.NewRequest("GET", "http://gone.test/x", nil))
		return w
	}
	if code := nobody().Code; code != http.StatusBadGateway {
		t.Fatalf("GET of an unserved hostname = %d, want 502", code)
	}
	err := rt.Reconfigure(Config{MaxBodyBytes: 100, Fallbacks: []Fallback{{Hostname: "gone.test", URL: "https://elsewhere.test/"}}})
	if err != nil {
		t.Fatal(err)
	}
	if code := post(); code != http.StatusOK {
		t.Fatalf("POST of 10 bytes after max_body_size 100 = %d, want 200", code)
	}
	if w := nobody(); w.Code != http.StatusFound || w.Header().Get("Location") != "https://elsewhere.test/" {
		t.Fatalf("GET of an unserved hostname after adding a fallback = %d %q, want 302 to https://elsewhere.test/", w.Code, w.Header().Get("Location"))
	}
}

// TestReconfigureRefusedKeepsOld: a configuration that does not validate
// changes nothing; fields Reconfigure does not apply are ignored.
func TestReconfigureRefusedKeepsOld(t *testing.T) {
	rt := newRouter(t, Config{MaxBodyBytes: 4, Strategy: "round-robin"})
	rt.reg.update(newConn("a", 1), ann(svc("", "app.test")))
	if err := rt.Reconfigure(Config{MaxBodyBytes: -1}); err == nil {
		t.Fatal("Reconfigure(max_body_size -1) = nil, want an error")
	}
	if err := rt.Reconfigure(Config{Policy: policy.Config{Routes: []policy.Route{{Policy: &policy.RoutePolicy{RateLimit: "missing"}}}}}); err == nil {
		t.Fatal("Reconfigure(a route naming no rate limit) = nil, want an error")
	}
	if got := rt.cur.Load().cfg.MaxBodyBytes; got != 4 {
		t.Fatalf("max_body_size after refused reloads = %d, want 4", got)
	}
	if err := rt.Reconfigure(Config{MaxBodyBytes: 8, Strategy: "nonsense"}); err != nil {
		t.Fatalf("Reconfigure with a strategy it does not apply = %v, want nil", err)
	}
	if got := rt.cur.Load().cfg.Strategy; got != "round-robin" {
		t.Fatalf("lb_strategy after Reconfigure = %q, want round-robin (not applied live)", got)
	}
}

// TestReconfigureKeepsBuckets: a reload that leaves ip_limit_* as they
// were keeps the visitors' buckets (an emptied bucket stays empty).
func TestReconfigureKeepsBuckets(t *testing.T) {
	rt := newRouter(t, Config{IPLimitMax: 1, IPLimitRefill: 0.001})
	rt.reg.update(newConn("a", 1), ann(svc("", "app.test")))
	get := func() int {
		w := httptest.NewRecorder()
		rt.ServeHTTP(w, httptest.NewRequest("GET", "http://app.test/", nil))
		io.Copy(io.Discard, w.Result().Body)
		return w.Code
	}
	if code := get(); code != http.StatusOK {
		t.Fatalf("first GET = %d, want 200", code)
	}
	if err := rt.Reconfigure(Config{IPLimitMax: 1, IPLimitRefill: 0.001, GatewayTimeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	if code := get(); code != http.StatusTooManyRequests {
		t.Fatalf("second GET after a reload with the same ip_limit = %d, want 429 (bucket kept)", code)
	}
	if err := rt.Reconfigure(Config{}); err != nil {
		t.Fatal(err)
	}
	if code := get(); code != http.StatusOK {
		t.Fatalf("GET after ip_limit_max 0 = %d, want 200", code)
	}
}

// TestReconfigureDefaultAccessReachesAnnouncedBlocks: default_access
// applies live to a service whose announced access block leaves its
// openness to it (IP rules only), without the client announcing again; a
// public service and one with an auth method are not moved by it.
func TestReconfigureDefaultAccessReachesAnnouncedBlocks(t *testing.T) {
	rt := newRouter(t, Config{})
	ipOnly := svc("", "ips.test")
	ipOnly.Access = &tunnel.Access{AllowedIPs: []string{visitor.String() + "/32"}}
	public := svc("", "public.test")
	public.Access = &tunnel.Access{Public: true}
	bearer := svc("", "bearer.test")
	bearer.Access = &tunnel.Access{Auth: tunnel.Auth{Bearer: &tunnel.BearerAuth{Keys: map[string]string{"ci": testKeyDigest}}}}
	rt.reg.update(newConn("a", 1), ann(ipOnly, public, bearer))
	want := func(step string, codes map[string]int) {
		t.Helper()
		for host, code := range codes {
			if got := serveOnce(t, rt, "GET", host, "/", ""); got != code {
				t.Errorf("%s: GET %s = %d, want %d", step, host, got, code)
			}
		}
	}
	want("default_access allow", map[string]int{"ips.test": 200, "public.test": 200, "bearer.test": 401})
	if err := rt.Reconfigure(Config{Access: AccessConfig{Default: access.Deny}}); err != nil {
		t.Fatal(err)
	}
	// Closed by default_access: hidden, answered like no route (502).
	want("reloaded to deny", map[string]int{"ips.test": 502, "public.test": 200, "bearer.test": 401})
	if err := rt.Reconfigure(Config{}); err != nil {
		t.Fatal(err)
	}
	want("reloaded back to allow", map[string]int{"ips.test": 200, "public.test": 200, "bearer.test": 401})
}
