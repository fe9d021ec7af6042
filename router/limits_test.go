package router

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aperio-dev/aperio/tunnel"
)

// gateConn is a client whose requests block until released, counting how
// many it holds at once.
type gateConn struct {
	fakeConn
	release  chan struct{}
	entered  chan string // the path of each request as it arrives
	inflight atomic.Int64
	peak     atomic.Int64
}

func newGateConn(id string, order int) *gateConn {
	return &gateConn{
		fakeConn: fakeConn{id: id, at: epoch.Add(time.Duration(order) * time.Second)},
		release:  make(chan struct{}),
		entered:  make(chan string, 1000),
	}
}

func (g *gateConn) RoundTrip(req *http.Request, service string) (*http.Response, error) {
	n := g.inflight.Add(1)
	for {
		p := g.peak.Load()
		if n <= p || g.peak.CompareAndSwap(p, n) {
			break
		}
	}
	g.entered <- req.URL.Path
	select {
	case <-g.release:
	case <-req.Context().Done():
		g.inflight.Add(-1)
		return nil, req.Context().Err()
	}
	g.inflight.Add(-1)
	body := g.id
	return &http.Response{StatusCode: 200, Header: http.Header{}, ContentLength: int64(len(body)), Body: io.NopCloser(strings.NewReader(body))}, nil
}

// limited announces one service for host with max_concurrent n.
func limited(n int, hosts ...string) *tunnel.Announcement {
	a := ann(svc("", hosts...))
	a.Services[0].MaxConcurrent = n
	return a
}

// serve runs one request in the background and returns its recorder.
type served struct {
	rec  *httptest.ResponseRecorder
	done chan struct{}
}

func serveAsync(rt *Router, host, path string) *served {
	s := &served{rec: httptest.NewRecorder(), done: make(chan struct{})}
	req := httptest.NewRequest("GET", path, nil)
	req.Host = host
	go func() {
		defer close(s.done)
		rt.ServeHTTP(s.rec, req)
	}()
	return s
}

func (s *served) wait(t *testing.T) *httptest.ResponseRecorder {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		t.Fatal("request did not finish within 10s")
	}
	return s.rec
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

func TestQueueDrainsInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newRouter(t, Config{GatewayTimeout: time.Minute})
		g := newGateConn("a", 1)
		rt.reg.update(g, limited(1, "app.test"))

		first := serveAsync(rt, "app.test", "/0")
		recv(t, g.entered, "first request")
		var waiting []*served
		for i := 1; i <= 5; i++ {
			waiting = append(waiting, serveAsync(rt, "app.test", fmt.Sprintf("/%d", i)))
			// Enqueue strictly one after another.
			p := rt.reg.table.Load().match("app.test", "/")
			waitQueued(t, p, i)
		}
		for i := 1; i <= 5; i++ {
			g.release <- struct{}{}
			if got, want := recv(t, g.entered, "next request"), fmt.Sprintf("/%d", i); got != want {
				t.Fatalf("request admitted after %d releases = %s, want %s (FIFO)", i, got, want)
			}
		}
		g.release <- struct{}{}
		first.wait(t)
		for _, w := range waiting {
			if rec := w.wait(t); rec.Code != 200 {
				t.Fatalf("queued request = %d, want 200", rec.Code)
			}
		}
		if p := g.peak.Load(); p != 1 {
			t.Fatalf("peak in flight on a max_concurrent 1 client = %d, want 1", p)
		}
	})
}

// waitQueued waits until every other goroutine of the test's bubble is
// blocked, then fails unless p holds exactly n waiters: a request that never
// reaches the queue fails the test instead of hanging it.
func waitQueued(t *testing.T, p *pool, n int) {
	t.Helper()
	synctest.Wait()
	if got := p.queued(); got != n {
		t.Fatalf("queued() once settled = %d, want %d", got, n)
	}
}

func TestLimitNeverExceededUnderBurst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newRouter(t, Config{GatewayTimeout: time.Minute})
		var conns []*gateConn
		for i := range 3 {
			g := newGateConn(fmt.Sprint("c", i), i)
			conns = append(conns, g)
			rt.reg.update(g, limited(2, "app.test"))
		}
		var reqs []*served
		for i := range 50 {
			reqs = append(reqs, serveAsync(rt, "app.test", fmt.Sprint("/", i)))
		}
		// Release every request one at a time, from whichever client has one.
		for done := 0; done < 50; {
			synctest.Wait()
			released := 0
			for _, g := range conns {
				if g.inflight.Load() > 0 {
					select {
					case g.release <- struct{}{}:
						released++
					default:
					}
				}
			}
			if released == 0 {
				t.Fatalf("after %d of 50 finished, no client holds a request to release", done)
			}
			done += released
		}
		for _, r := range reqs {
			if rec := r.wait(t); rec.Code != 200 {
				t.Fatalf("burst request = %d %q, want 200", rec.Code, rec.Body.String())
			}
		}
		for _, g := range conns {
			if p := g.peak.Load(); p > 2 {
				t.Fatalf("client %s peak in flight = %d, want at most its max_concurrent 2", g.id, p)
			}
		}
	})
}

func TestClientConcurrency429(t *testing.T) {
	rt := newRouter(t, Config{GatewayTimeout: 50 * time.Millisecond})
	g := newGateConn("a", 1)
	rt.reg.update(g, limited(1, "app.test"))
	first := serveAsync(rt, "app.test", "/hold")
	recv(t, g.entered, "first request")
	rec := serveAsync(rt, "app.test", "/late").wait(t)
	if rec.Code != 429 || rec.Header().Get("X-Aperio-Limit") != "client-concurrency; setting=max_concurrent" {
		t.Fatalf("request over the client limit = %d %q, want 429 client-concurrency", rec.Code, rec.Header().Get("X-Aperio-Limit"))
	}
	if got := rec.Header().Get("Retry-After"); got != "1" {
		t.Fatalf("client-concurrency 429 has Retry-After %q, want 1", got)
	}
	close(g.release)
	first.wait(t)
	if got := rt.Counters().rateLimitedForTest("client-concurrency"); got != 1 {
		t.Fatalf("Counters() 429s of client-concurrency = %d, want 1", got)
	}
}

func TestWaitingHoldsNoGlobalSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newRouter(t, Config{GatewayTimeout: time.Minute, MaxConcurrentRequests: 2})
		busy := newGateConn("busy", 1)
		rt.reg.update(busy, limited(1, "busy.test"))
		other := newGateConn("other", 2)
		rt.reg.update(other, limited(10, "other.test"))

		holding := serveAsync(rt, "busy.test", "/1") // takes a global slot
		recv(t, busy.entered, "first busy request")
		waiting := serveAsync(rt, "busy.test", "/2") // waits for busy's permit
		p := rt.reg.table.Load().match("busy.test", "/")
		waitQueued(t, p, 1)
		// The waiting request holds no slot, so this one gets the second.
		third := serveAsync(rt, "other.test", "/3")
		recv(t, other.entered, "request to the other host")
		// Now both slots are taken: a fourth is refused.
		rec := serveAsync(rt, "other.test", "/4").wait(t)
		if rec.Code != 429 || rec.Header().Get("X-Aperio-Limit") != "server-concurrency; setting=max_concurrent_requests" {
			t.Fatalf("request over max_concurrent_requests = %d %q, want 429 server-concurrency", rec.Code, rec.Header().Get("X-Aperio-Limit"))
		}
		close(other.release)
		third.wait(t)
		close(busy.release)
		holding.wait(t)
		if rec := waiting.wait(t); rec.Code != 200 {
			t.Fatalf("waiting request = %d, want 200 once a permit and a slot were free", rec.Code)
		}
	})
}

func TestIPLimit(t *testing.T) {
	rt := newRouter(t, Config{IPLimitMax: 2, IPLimitRefill: 0.001})
	rt.reg.update(newConn("a", 1), ann(svc("", "app.test")))
	codes := []int{}
	var last *httptest.ResponseRecorder
	for range 3 {
		req := httptest.NewRequest("GET", "/", nil)
		req.Host = "app.test"
		req.RemoteAddr = "198.51.100.9:1234"
		last = httptest.NewRecorder()
		rt.ServeHTTP(last, req)
		codes = append(codes, last.Code)
	}
	if fmt.Sprint(codes) != "[200 200 429]" {
		t.Fatalf("3 requests with ip_limit_max 2 = %v, want [200 200 429]", codes)
	}
	if last.Header().Get("X-Aperio-Limit") != "ip; setting=ip_limit_max" || last.Header().Get("Retry-After") != "1" {
		t.Fatalf("ip 429 headers = %v, want x-aperio-limit ip and Retry-After 1", last.Header())
	}
	// Another visitor has its own bucket.
	req := httptest.NewRequest("GET", "/", nil)
	req.Host = "app.test"
	req.RemoteAddr = "198.51.100.10:1234"
	rec := httptest.NewRecorder()
	rt.ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Fatalf("another visitor's first request = %d, want 200", rec.Code)
	}
	c := rt.Counters()
	for k, l := range c.RateLimited {
		want := int64(0)
		if l.Kind == "ip" {
			want = 1
		}
		if l.Kind != limitInfo[k].kind || l.N != want {
			t.Errorf("Counters().RateLimited[%d] = %+v, want {%s %d}", k, l, limitInfo[k].kind, want)
		}
	}
}

func TestStrategies(t *testing.T) {
	tests := []struct {
		strategy string
		want     string // ids of the members taking 4 held requests, in order
	}{
		{"round-robin", "b c a b"},
		{"least-inflight", "a b c a"},
		{"primary-standby", "a a b b"},
	}
	for _, tt := range tests {
		t.Run(tt.strategy, func(t *testing.T) {
			rt := newRouter(t, Config{Strategy: tt.strategy})
			var got []string
			for i, id := range []string{"a", "b", "c"} {
				rt.reg.update(newConn(id, i), limited(2, "app.test"))
			}
			p := rt.reg.table.Load().match("app.test", "/")
			for range 4 {
				s, _ := p.tryAcquire(rt.strategy, nil)
				got = append(got, s.conn.ID())
			}
			if strings.Join(got, " ") != tt.want {
				t.Fatalf("%s picks = %v, want %s", tt.strategy, got, tt.want)
			}
		})
	}
	if _, err := New(Config{Strategy: "random"}); err == nil {
		t.Fatal(`New(Strategy "random") = nil error, want an error`)
	}
}

func TestStandbyOnlyWithoutRoutablePrimary(t *testing.T) {
	rt := newRouter(t, Config{})
	primary := newConn("primary", 1)
	standby := newConn("standby", 2)
	rt.reg.update(primary, ann(svc("", "app.test")))
	sb := ann(svc("", "app.test"))
	sb.Services[0].Priority = 1
	rt.reg.update(standby, sb)

	for range 4 {
		if id := pickID(t, rt, "app.test"); id != "primary" {
			t.Fatalf("pick with a healthy primary = %s, want primary", id)
		}
	}
	sick := ann(svc("", "app.test"))
	sick.Services[0].Healthy = false
	rt.reg.update(primary, sick)
	if id := pickID(t, rt, "app.test"); id != "standby" {
		t.Fatalf("pick with the primary unhealthy = %s, want standby", id)
	}
	rt.reg.update(primary, ann(svc("", "app.test")))
	if id := pickID(t, rt, "app.test"); id != "primary" {
		t.Fatalf("pick after the primary recovered = %s, want primary (hand back)", id)
	}
}

// flakyConn fails its first failures requests as a vanished client.
type flakyConn struct {
	fakeConn
	mu       sync.Mutex
	failures int
}

func (f *flakyConn) RoundTrip(req *http.Request, service string) (*http.Response, error) {
	f.mu.Lock()
	fail := f.failures > 0
	if fail {
		f.failures--
	}
	f.mu.Unlock()
	if fail {
		return nil, fmt.Errorf("gone: %w", tunnel.ErrSessionClosed)
	}
	return f.fakeConn.RoundTrip(req, service)
}

func TestFailover(t *testing.T) {
	tests := []struct {
		name, policy, method string
		allMethods           bool
		want                 int
		wantBody             string
	}{
		{"fail answers 502", "fail", "GET", false, 502, "disconnected"},
		{"retry moves a GET", "retry", "GET", false, 200, "good/0"},
		{"retry keeps a POST", "retry", "POST", false, 502, "disconnected"},
		{"retry moves a POST when told", "retry", "POST", true, 200, "good/0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := newRouter(t, Config{Failover: tt.policy, FailoverAllMethods: tt.allMethods, FailoverMaxJumps: 2, FailoverWindow: time.Minute, GatewayTimeout: time.Second})
			bad := &flakyConn{fakeConn: fakeConn{id: "bad", at: epoch}, failures: 100}
			good := newConn("good", 5)
			rt.reg.update(bad, ann(svc("", "app.test")))
			rt.reg.update(good, ann(svc("", "app.test")))
			// Round-robin from a fresh cursor starts at the second member;
			// point it at the bad one first.
			rt.reg.table.Load().match("app.test", "/").next.Store(1)
			req := httptest.NewRequest(tt.method, "/", nil)
			req.Host = "app.test"
			rec := httptest.NewRecorder()
			rt.ServeHTTP(rec, req)
			if rec.Code != tt.want || !strings.Contains(rec.Body.String(), tt.wantBody) {
				t.Fatalf("%s %s with failover=%s = %d %q, want %d containing %q", tt.method, "/", tt.policy, rec.Code, rec.Body.String(), tt.want, tt.wantBody)
			}
		})
	}
}

func TestFailoverWaitsForSameInstance(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newRouter(t, Config{Failover: "wait", FailoverMaxJumps: 2, FailoverWindow: time.Minute, GatewayTimeout: time.Second, DownThreshold: time.Minute})
		first := &flakyConn{fakeConn: fakeConn{id: "s1", at: epoch}, failures: 1}
		a := ann(svc("", "app.test"))
		a.InstanceID = "proc-1"
		rt.reg.update(first, a)
		res := serveAsync(rt, "app.test", "/")
		// The request failed on s1 and now waits for proc-1 to come back.
		p := rt.reg.table.Load().match("app.test", "/")
		waitQueued(t, p, 1)
		rt.reg.detach(first)
		// Another instance does not take it...
		other := ann(svc("", "app.test"))
		other.InstanceID = "proc-2"
		rt.reg.update(newConn("s-other", 2), other)
		// ...the same instance on a new connection does.
		again := ann(svc("", "app.test"))
		again.InstanceID = "proc-1"
		rt.reg.update(newConn("s2", 3), again)
		rec := res.wait(t)
		if rec.Code != 200 || rec.Body.String() != "s2/0" {
			t.Fatalf("request after its client reconnected = %d %q, want 200 from s2", rec.Code, rec.Body.String())
		}
	})
}

func TestMaintenanceAndFallbacks(t *testing.T) {
	rt := newRouter(t, Config{Fallbacks: []Fallback{{Hostname: "gone.test", URL: "https://status.example.com/"}}})
	rt.reg.update(newConn("a", 1), ann(svc("", "app.test")))
	rt.reg.SetMaintenance([]Maintenance{{Hostname: "App.Test"}})
	req := httptest.NewRequest("GET", "/", nil)
	req.Host = "app.test"
	rec := httptest.NewRecorder()
	rt.ServeHTTP(rec, req)
	if rec.Code != 503 || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("request in maintenance = %d (Retry-After %q), want 503 with Retry-After", rec.Code, rec.Header().Get("Retry-After"))
	}
	rt.reg.SetMaintenance(nil)
	rec = httptest.NewRecorder()
	rt.ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Fatalf("request after maintenance = %d, want 200", rec.Code)
	}
	req = httptest.NewRequest("GET", "/page", nil)
	req.Host = "gone.test"
	rec = httptest.NewRecorder()
	rt.ServeHTTP(rec, req)
	if rec.Code != 302 || rec.Header().Get("Location") != "https://status.example.com/" {
		t.Fatalf("request for a hostname with a fallback = %d %q, want 302 to the fallback", rec.Code, rec.Header().Get("Location"))
	}
}

func TestRecentlyServedHostnameWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newRouter(t, Config{GatewayTimeout: time.Minute, DownThreshold: time.Minute})
		c := newConn("a", 1)
		rt.reg.update(c, ann(svc("", "app.test")))
		rt.reg.detach(c)
		res := serveAsync(rt, "app.test", "/")
		p := rt.reg.table.Load().match("app.test", "/")
		waitQueued(t, p, 1)
		rt.reg.update(newConn("b", 2), ann(svc("", "app.test")))
		if rec := res.wait(t); rec.Code != 200 || rec.Body.String() != "b/0" {
			t.Fatalf("request held for a returning client = %d %q, want 200 from b", rec.Code, rec.Body.String())
		}
	})

	// Past the threshold nobody waits: 502 at once. This half runs on the
	// real clock, which moves past the 1ns threshold between detach and
	// request; a bubble's clock would stand still.
	old := newRouter(t, Config{GatewayTimeout: time.Minute, DownThreshold: time.Nanosecond})
	c2 := newConn("a", 1)
	old.reg.update(c2, ann(svc("", "app.test")))
	old.reg.detach(c2)
	start := time.Now()
	rec := serveAsync(old, "app.test", "/").wait(t)
	if rec.Code != 502 || time.Since(start) > 5*time.Second {
		t.Fatalf("request for a hostname unserved past the threshold = %d after %v, want 502 at once", rec.Code, time.Since(start))
	}
}

// TestAnnouncedLimitResizesAtOnce: a client that announces a higher limit
// gets queued requests at once; one that announces a lower limit keeps its
// in-flight permits (nothing is dropped or failed) and gets no new request
// until it is below the new limit.
func TestAnnouncedLimitResizesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newRouter(t, Config{GatewayTimeout: time.Minute})
		g := newGateConn("a", 1)
		rt.reg.update(g, limited(2, "app.test"))
		p := func() *pool { return rt.reg.table.Load().match("app.test", "/") }

		var reqs []*served
		for i := range 5 {
			reqs = append(reqs, serveAsync(rt, "app.test", fmt.Sprint("/", i)))
		}
		recv(t, g.entered, "first request")
		recv(t, g.entered, "second request")
		waitQueued(t, p(), 3)

		rt.reg.update(g, limited(4, "app.test")) // raised: two waiters go at once
		recv(t, g.entered, "a waiter admitted by the raise")
		recv(t, g.entered, "another waiter admitted by the raise")
		if q, n := p().queued(), g.inflight.Load(); q != 1 || n != 4 {
			t.Fatalf("after raising to 4: queued %d, in flight %d; want 1 and 4", q, n)
		}

		rt.reg.update(g, limited(1, "app.test")) // lowered below what is in flight
		finished := func() int {
			n := 0
			for _, r := range reqs {
				select {
				case <-r.done:
					n++
				default:
				}
			}
			return n
		}
		for i := range 3 {
			g.release <- struct{}{}
			synctest.Wait()
			if got := finished(); got != i+1 {
				t.Fatalf("after %d releases, %d requests finished, want %d", i+1, got, i+1)
			}
		}
		if q := p().queued(); q != 1 {
			t.Fatalf("after lowering to 1 and 3 of 4 finishing: queued %d, want the waiter still queued", q)
		}
		g.release <- struct{}{} // the fourth finishes: in flight 1 → the waiter's turn
		recv(t, g.entered, "the waiter after the lowered limit has room")
		g.release <- struct{}{}
		for _, r := range reqs {
			if rec := r.wait(t); rec.Code != 200 {
				t.Fatalf("request = %d %q, want 200: a resize drops nothing", rec.Code, rec.Body.String())
			}
		}
		if pk := g.peak.Load(); pk != 4 {
			t.Fatalf("peak in flight = %d, want 4 (the raised limit, never more)", pk)
		}
	})
}

// TestCountersAllocatesNothing pins Counters' cost for the metrics
// callback: atomic loads into a value, no map.
func TestCountersAllocatesNothing(t *testing.T) {
	rt := newRouter(t, Config{})
	var c Counters
	if allocs := testing.AllocsPerRun(100, func() { c = rt.Counters() }); allocs != 0 {
		t.Fatalf("Counters() allocates %v times, want 0", allocs)
	}
	if c.RateLimited[limitIP].Kind != "ip" {
		t.Errorf("Counters().RateLimited[limitIP].Kind = %q, want ip", c.RateLimited[limitIP].Kind)
	}
}
