package router

import (
	"context"
	"net/http/httptest"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// fakeScaler counts cold starts; its starts fail when told.
type fakeScaler struct {
	calls  atomic.Int64
	mu     sync.Mutex // guards failed
	failed chan struct{}
}

func newFakeScaler() *fakeScaler { return &fakeScaler{failed: make(chan struct{})} }

func (f *fakeScaler) ColdStart(ctx context.Context, org, host, path string) (ColdStart, error) {
	f.calls.Add(1)
	return f, nil
}

func (f *fakeScaler) Failed() <-chan struct{} { return f.failed }

func armedRouter(t *testing.T, sc *fakeScaler, allowed ...netip.Prefix) *Router {
	t.Helper()
	rt := newRouter(t, Config{Scaler: sc, GatewayTimeout: 10 * time.Millisecond, MaxHeld: 3})
	rt.reg.SetArmed([]ArmedBind{{OrgID: "org", Pattern: "app.test", ColdStart: time.Minute, AllowedIPs: allowed}})
	return rt
}

func TestColdStartHoldsUntilAClientAnnounces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sc := newFakeScaler()
		rt := armedRouter(t, sc)
		var held []*served
		for range 3 {
			held = append(held, serveAsync(rt, "app.test", "/"))
		}
		p := rt.reg.table.Load().match("app.test", "/")
		waitQueued(t, p, 3)
		// The bound on held requests: the fourth is refused at once.
		if rec := serveAsync(rt, "app.test", "/").wait(t); rec.Code != 503 || rec.Header().Get("Retry-After") == "" {
			t.Fatalf("request beyond scaling_max_held = %d, want 503 with Retry-After", rec.Code)
		}
		// A new instance with max_concurrent 1 announces: it takes the held
		// requests one at a time, never more than its limit.
		g := newGateConn("new", 1)
		rt.reg.update(g, limited(1, "app.test"))
		for range 3 {
			recv(t, g.entered, "a held request reaching the new instance")
			if n := g.inflight.Load(); n > 1 {
				t.Fatalf("new instance has %d in flight, want at most its limit 1", n)
			}
			g.release <- struct{}{}
		}
		for _, h := range held {
			if rec := h.wait(t); rec.Code != 200 {
				t.Fatalf("held request = %d, want 200", rec.Code)
			}
		}
		if n := sc.calls.Load(); n < 1 {
			t.Fatalf("cold start calls = %d, want at least 1", n)
		}
	})
}

func TestColdStartFailureReleasesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sc := newFakeScaler()
		rt := armedRouter(t, sc)
		res := serveAsync(rt, "app.test", "/")
		p := rt.reg.table.Load().match("app.test", "/")
		waitQueued(t, p, 1)
		start := time.Now()
		close(sc.failed)
		rec := res.wait(t)
		if rec.Code != 504 || time.Since(start) > 5*time.Second {
			t.Fatalf("held request after a failed cold start = %d after %v, want 504 at once (cold_start is 1m)", rec.Code, time.Since(start))
		}
	})
}

func TestNoColdStartForRefusedVisitor(t *testing.T) {
	sc := newFakeScaler()
	rt := armedRouter(t, sc, netip.MustParsePrefix("203.0.113.0/24"))
	req := httptest.NewRequest("GET", "/", nil)
	req.Host = "app.test"
	req.RemoteAddr = "198.51.100.7:5000"
	rec := httptest.NewRecorder()
	rt.ServeHTTP(rec, req)
	if rec.Code != 502 || sc.calls.Load() != 0 {
		t.Fatalf("visitor outside allowed_ips on an armed empty bind = %d with %d cold starts, want 502 and none", rec.Code, sc.calls.Load())
	}
}

func TestNoColdStartInMaintenance(t *testing.T) {
	sc := newFakeScaler()
	rt := armedRouter(t, sc)
	rt.reg.SetMaintenance([]Maintenance{{Hostname: "app.test"}})
	rec := serveAsync(rt, "app.test", "/").wait(t)
	if rec.Code != 503 || sc.calls.Load() != 0 {
		t.Fatalf("armed bind in maintenance = %d with %d cold starts, want 503 and none", rec.Code, sc.calls.Load())
	}
}

func TestDisarmedBindIsNotHeld(t *testing.T) {
	sc := newFakeScaler()
	rt := armedRouter(t, sc)
	rt.reg.SetArmed(nil)
	rec := serveAsync(rt, "app.test", "/").wait(t)
	if rec.Code != 502 || sc.calls.Load() != 0 {
		t.Fatalf("request for a disarmed bind nobody serves = %d with %d cold starts, want 502 and none", rec.Code, sc.calls.Load())
	}
}

func TestMaxHeldAboveTheQueueBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sc := newFakeScaler()
		rt := newRouter(t, Config{Scaler: sc, GatewayTimeout: 10 * time.Millisecond, MaxHeld: maxWaiters + 100})
		rt.reg.SetArmed([]ArmedBind{{OrgID: "org", Pattern: "app.test", ColdStart: time.Minute}})
		const n = maxWaiters + 50 // more than an ordinary queue takes
		var held []*served
		for range n {
			held = append(held, serveAsync(rt, "app.test", "/"))
		}
		p := rt.reg.table.Load().match("app.test", "/")
		waitQueued(t, p, n)
		rt.reg.update(newConn("new", 1), limited(0, "app.test"))
		for _, h := range held {
			if rec := h.wait(t); rec.Code != 200 {
				t.Fatalf("one of %d held requests = %d, want 200 (scaling_max_held %d)", n, rec.Code, maxWaiters+100)
			}
		}
	})
}
