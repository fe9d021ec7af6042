package router

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aperio-dev/aperio/internal/visitor/stale"
	"github.com/aperio-dev/aperio/tunnel"
)

// planScaler is a Scaler that can also plan: it counts cold starts and
// answers plans as told.
type planScaler struct {
	calls atomic.Int64
	join  bool
	err   error
}

func (f *planScaler) ColdStart(context.Context, string, string, string) (ColdStart, error) {
	f.calls.Add(1)
	return f, nil
}

func (f *planScaler) Failed() <-chan struct{} { return nil }

func (f *planScaler) PlanColdStart(context.Context, string, string, string) (bool, string, error) {
	return f.join, "", f.err
}

// orgConn is a fakeConn with a token identity.
type orgConn struct {
	*fakeConn
	ident tunnel.Identity
}

func (c *orgConn) Identity() tunnel.Identity { return c.ident }

var visitor = netip.MustParseAddr("203.0.113.7")

// saturate takes every free permit of the pool serving host, and returns
// them on cleanup.
func saturate(t *testing.T, rt *Router, host string) {
	t.Helper()
	p := rt.reg.table.Load().match(host, "/")
	var taken []*service
	for {
		s, _ := p.tryAcquire(rt.strategy, nil)
		if s == nil {
			break
		}
		taken = append(taken, s)
	}
	if len(taken) == 0 {
		t.Fatalf("saturate(%s): no permit to take", host)
	}
	t.Cleanup(func() {
		for _, s := range taken {
			s.release()
		}
	})
}

func TestExplainVerdicts(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T) (*Router, string, string, netip.Addr)
		// verdict is a prefix of the verdict wanted.
		verdict string
		status  int
		// stop is the step that must decide (stop or wait).
		step, outcome string
		afterWait     string
	}{
		{
			name: "reserved prefix",
			setup: func(t *testing.T) (*Router, string, string, netip.Addr) {
				return newRouter(t, Config{}), "app.test", "/aperio/health", visitor
			},
			verdict: "answered by aperio-server itself", status: 0, step: StepReserved, outcome: OutcomeStop,
		},
		{
			name: "path climbing above root",
			setup: func(t *testing.T) (*Router, string, string, netip.Addr) {
				rt := newRouter(t, Config{})
				rt.reg.update(newConn("a", 1), ann(svc("/api", "app.test")))
				return rt, "app.test", "/api/%2e%2e/%2e%2e/etc", visitor
			},
			verdict: "refused with 400", status: 400, step: StepReserved, outcome: OutcomeStop,
		},
		{
			name: "dot segments leave the bind",
			setup: func(t *testing.T) (*Router, string, string, netip.Addr) {
				rt := newRouter(t, Config{})
				rt.reg.update(newConn("a", 1), ann(svc("/api", "app.test")))
				return rt, "app.test", "/api/%2e%2e/admin", visitor
			},
			verdict: "502 no client", status: 502, step: StepFallback, outcome: OutcomeSkip,
		},
		{
			name: "ip limited",
			setup: func(t *testing.T) (*Router, string, string, netip.Addr) {
				rt := newRouter(t, Config{IPLimitMax: 1, IPLimitRefill: 0.001})
				rt.reg.update(newConn("a", 1), ann(svc("", "app.test")))
				rt.cur.Load().ips.allow(visitor, time.Now()) // the visitor spent its one token
				return rt, "app.test", "/", visitor
			},
			verdict: "429 ip", status: 429, step: StepIPLimit, outcome: OutcomeStop,
		},
		{
			name: "maintenance",
			setup: func(t *testing.T) (*Router, string, string, netip.Addr) {
				rt := newRouter(t, Config{})
				rt.reg.update(newConn("a", 1), ann(svc("", "app.test")))
				rt.reg.SetMaintenance([]Maintenance{{Hostname: "APP.test"}})
				return rt, "app.test", "/", visitor
			},
			verdict: "503 maintenance", status: 503, step: StepMaintenance, outcome: OutcomeStop,
		},
		{
			name: "unknown host",
			setup: func(t *testing.T) (*Router, string, string, netip.Addr) {
				rt := newRouter(t, Config{})
				rt.reg.update(newConn("a", 1), ann(svc("", "app.test")))
				return rt, "nope.test", "/", visitor
			},
			verdict: "502 no client", status: 502, step: StepFallback, outcome: OutcomeSkip,
		},
		{
			name: "fallback redirect",
			setup: func(t *testing.T) (*Router, string, string, netip.Addr) {
				return newRouter(t, Config{Fallbacks: []Fallback{{Hostname: "gone.test", URL: "https://status.example.com/"}}}), "gone.test", "/", visitor
			},
			verdict: "302 fallback redirect to https://status.example.com/", status: 302, step: StepFallback, outcome: OutcomeStop,
		},
		{
			name: "allowed_ips refuses the visitor",
			setup: func(t *testing.T) (*Router, string, string, netip.Addr) {
				rt := newRouter(t, Config{})
				rt.reg.updateAs(newConn("a", 1), ann(svc("", "app.test")), rights{allowed: []string{"app.test"}, allowedIPs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
				return rt, "app.test", "/", visitor
			},
			verdict: "502 no client", status: 502, step: StepFallback, outcome: OutcomeSkip,
		},
		{
			name: "free permit: dispatch",
			setup: func(t *testing.T) (*Router, string, string, netip.Addr) {
				rt := newRouter(t, Config{GatewayTimeout: time.Second})
				rt.reg.update(newConn("a", 1), limited(2, "app.test"))
				return rt, "app.test", "/", visitor
			},
			verdict: "dispatch to client t (a)", status: 0, step: StepGlobal, outcome: OutcomePass,
		},
		{
			name: "free permit but the server is full",
			setup: func(t *testing.T) (*Router, string, string, netip.Addr) {
				rt := newRouter(t, Config{MaxConcurrentRequests: 1})
				rt.reg.update(newConn("a", 1), limited(2, "app.test"))
				rt.limits.takeGlobal(rt.cfg.MaxConcurrentRequests)
				t.Cleanup(rt.limits.releaseGlobal)
				return rt, "app.test", "/", visitor
			},
			verdict: "429 server-concurrency", status: 429, step: StepGlobal, outcome: OutcomeStop,
		},
		{
			name: "saturated pool: queue",
			setup: func(t *testing.T) (*Router, string, string, netip.Addr) {
				rt := newRouter(t, Config{GatewayTimeout: time.Minute})
				rt.reg.update(newConn("a", 1), limited(1, "app.test"))
				saturate(t, rt, "app.test")
				return rt, "app.test", "/", visitor
			},
			verdict: "queue behind 0", status: 0, step: StepPermit, outcome: OutcomeWait,
			afterWait: "429 client-concurrency",
		},
		{
			name: "saturated pool, no waiting",
			setup: func(t *testing.T) (*Router, string, string, netip.Addr) {
				rt := newRouter(t, Config{})
				rt.reg.update(newConn("a", 1), limited(1, "app.test"))
				saturate(t, rt, "app.test")
				return rt, "app.test", "/", visitor
			},
			verdict: "429 client-concurrency", status: 429, step: StepPermit, outcome: OutcomeStop,
		},
		{
			name: "no clients, armed: cold start",
			setup: func(t *testing.T) (*Router, string, string, netip.Addr) {
				rt := newRouter(t, Config{Scaler: &planScaler{}, GatewayTimeout: time.Second, MaxHeld: 3})
				rt.reg.SetArmed([]ArmedBind{{OrgID: "org_a", Pattern: "app.test", ColdStart: 45 * time.Second}})
				return rt, "app.test", "/", visitor
			},
			verdict: "cold start: would call provider", status: 0, step: StepColdStart, outcome: OutcomeWait,
			afterWait: "504 after cold_start (45s)",
		},
		{
			name: "no clients, armed, start under way: join",
			setup: func(t *testing.T) (*Router, string, string, netip.Addr) {
				rt := newRouter(t, Config{Scaler: &planScaler{join: true}, MaxHeld: 3,
					Fallbacks: []Fallback{{Hostname: "app.test", URL: "https://status.example.com/"}}})
				rt.reg.SetArmed([]ArmedBind{{OrgID: "org_a", Pattern: "app.test", ColdStart: 45 * time.Second}})
				return rt, "app.test", "/", visitor
			},
			verdict: "cold start: would join", status: 0, step: StepColdStart, outcome: OutcomeWait,
			afterWait: "302 fallback redirect to https://status.example.com/ after cold_start (45s)",
		},
		{
			name: "no clients, armed but disarmed: the usual wait",
			setup: func(t *testing.T) (*Router, string, string, netip.Addr) {
				rt := newRouter(t, Config{Scaler: &planScaler{err: errors.New("autoscale: scaling record disarmed")}, GatewayTimeout: 10 * time.Second})
				rt.reg.SetArmed([]ArmedBind{{OrgID: "org_a", Pattern: "app.test", ColdStart: 45 * time.Second}})
				return rt, "app.test", "/", visitor
			},
			verdict: "wait for a client behind 0", status: 0, step: StepPermit, outcome: OutcomeWait,
			afterWait: "504 after gateway_timeout (10s)",
		},
		{
			name: "armed, visitor refused by the armers' allowed_ips",
			setup: func(t *testing.T) (*Router, string, string, netip.Addr) {
				rt := newRouter(t, Config{Scaler: &planScaler{}})
				rt.reg.SetArmed([]ArmedBind{{OrgID: "org_a", Pattern: "app.test", ColdStart: time.Minute, AllowedIPs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}})
				return rt, "app.test", "/", visitor
			},
			verdict: "502 no client", status: 502, step: StepFallback, outcome: OutcomeSkip,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt, host, path, ip := tt.setup(t)
			ex := rt.Explain(t.Context(), host, path, ip)
			if !strings.HasPrefix(ex.Verdict, tt.verdict) || ex.Status != tt.status {
				t.Fatalf("Explain(%s%s) = %q, status %d; want %q…, %d\nsteps: %+v", host, path, ex.Verdict, ex.Status, tt.verdict, tt.status, ex.Steps)
			}
			last := ex.Steps[len(ex.Steps)-1]
			if last.Name != tt.step || last.Outcome != tt.outcome {
				t.Errorf("Explain(%s%s) last step = %s %s (%s), want %s %s", host, path, last.Name, last.Outcome, last.Detail, tt.step, tt.outcome)
			}
			if ex.AfterWait != tt.afterWait && !strings.HasPrefix(ex.AfterWait, tt.afterWait+" ") {
				t.Errorf("Explain(%s%s).AfterWait = %q, want %q", host, path, ex.AfterWait, tt.afterWait)
			}
		})
	}
}

// TestExplainQueueLength: explain counts the requests already queued.
func TestExplainQueueLength(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newRouter(t, Config{GatewayTimeout: time.Minute})
		rt.reg.update(newConn("a", 1), limited(1, "app.test"))
		p := rt.reg.table.Load().match("app.test", "/")
		s, _ := p.tryAcquire(rt.strategy, nil)
		queued := []*served{serveAsync(rt, "app.test", "/1"), serveAsync(rt, "app.test", "/2")}
		waitQueued(t, p, 2)
		ex := rt.Explain(t.Context(), "app.test", "/", visitor)
		if ex.Verdict != "queue behind 2" {
			t.Errorf("Explain() with 2 queued = %q, want queue behind 2", ex.Verdict)
		}
		s.release() // the permit passes down the queue: both are served
		for _, q := range queued {
			if rec := q.wait(t); rec.Code != 200 {
				t.Errorf("queued request = %d, want 200", rec.Code)
			}
		}
	})
}

// TestExplainClientsAndOwners: the pool's clients with their figures, and
// the organization that owns the bind (a pool never mixes organizations:
// see TestCrossOrgPoolRefused).
func TestExplainClientsAndOwners(t *testing.T) {
	rt := newRouter(t, Config{Strategy: "primary-standby"})
	a := &orgConn{newConn("a", 1), tunnel.Identity{TokenID: "tok_a", OrgID: "org_a"}}
	b := &orgConn{newConn("b", 2), tunnel.Identity{TokenID: "tok_b", OrgID: "org_a"}}
	master := newConn("m", 3)
	rt.reg.updateAs(a, limited(1, "app.test"), rights{allowed: []string{"app.test"}, org: "org_a"})
	standby := limited(0, "app.test")
	standby.Services[0].Priority = 1
	rt.reg.updateAs(b, standby, rights{allowed: []string{"app.test"}, allowedIPs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, org: "org_a"})
	down := ann(svc("", "app.test"))
	down.Services[0].Healthy = false
	rt.reg.update(master, down)

	ex := rt.Explain(t.Context(), "app.test", "/", visitor)
	if got, want := strings.Join(ex.OrgIDs, ","), "org_a"; got != want {
		t.Errorf("OrgIDs = %s, want %s", got, want)
	}
	byID := map[string]ExplainClient{}
	for _, c := range ex.Clients {
		byID[c.ID] = c
	}
	want := map[string]ExplainClient{
		"a": {ID: "a", Name: "t", OrgID: "org_a", Service: "0", Tier: "primary", Healthy: true, Limit: 1, Routable: true, Candidate: true, Admits: true, Free: true, ForwardedPath: "/"},
		"b": {ID: "b", Name: "t", OrgID: "org_a", Service: "0", Tier: "standby", Priority: 1, Healthy: true, Routable: true, Admits: false, Free: true, ForwardedPath: "/"},
		"m": {ID: "m", Name: "t", Service: "0", Tier: "primary", Healthy: false, Admits: true, Free: true, ForwardedPath: "/"},
	}
	for id, w := range want {
		if byID[id] != w {
			t.Errorf("client %s = %+v, want %+v", id, byID[id], w)
		}
	}
	if ex.Verdict != "dispatch to client t (a)" {
		t.Errorf("Verdict = %q, want dispatch to client t (a)", ex.Verdict)
	}
}

// TestExplainChangesNothing: explaining takes no permit, token, slot or
// place in a queue, starts no cold start, leaves the round-robin cursor
// and the cache's counters alone.
func TestExplainChangesNothing(t *testing.T) {
	cache, err := stale.New(stale.Config{MaxBytes: 1 << 20, MaxStale: time.Hour, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	sc := &planScaler{}
	rt := newRouter(t, Config{IPLimitMax: 1, IPLimitRefill: 0.001, GatewayTimeout: time.Second,
		MaxConcurrentRequests: 5, Scaler: sc, Cache: cache, MaxHeld: 2,
		Fallbacks: []Fallback{{Hostname: "cold.test", URL: "https://status.example.com/"}}})
	rt.reg.update(newConn("a", 1), limited(1, "app.test"))
	rt.reg.update(newConn("b", 2), limited(1, "app.test"))
	rt.reg.SetArmed([]ArmedBind{{OrgID: "org", Pattern: "cold.test", ColdStart: time.Minute}})
	p := rt.reg.table.Load().match("app.test", "/")

	type snapshot struct {
		counters Counters
		queued   int64
		next     uint64
		calls    int64
		cache    stale.Stats
	}
	snap := func() snapshot {
		return snapshot{counters: rt.Counters(), queued: int64(rt.reg.Queued()),
			next: p.next.Load(), calls: sc.calls.Load(), cache: cache.Stats()}
	}
	before := snap()
	for range 50 {
		for _, host := range []string{"app.test", "cold.test", "nope.test"} {
			rt.Explain(t.Context(), host, "/", visitor)
		}
	}
	after := snap()
	if before.counters != after.counters || before.queued != after.queued || before.next != after.next ||
		before.calls != after.calls || before.cache != after.cache {
		t.Errorf("after 150 explains: %+v, want as before %+v", after, before)
	}
	for _, s := range *p.members.Load() {
		if n := s.inflight.Load(); n != 0 {
			t.Errorf("client %s holds %d permits after explaining, want 0", s.conn.ID(), n)
		}
	}
	// The visitor's one token is still there: a real request passes.
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Host, req.RemoteAddr = "app.test", visitor.String()+":1234"
	rec := httptest.NewRecorder()
	rt.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Errorf("request after explaining = %d, want 200: explain spent the visitor's token", rec.Code)
	}
}

func FuzzExplain(f *testing.F) {
	for _, s := range []string{"app.test", "APP.test:8080", "", "*.test", "[::1]", "a..b"} {
		f.Add(s, "/", "203.0.113.7")
	}
	f.Add("app.test", "/aperio/x", "::ffff:10.0.0.1")
	f.Add("app.test", "", "not-an-ip")
	rt, err := New(Config{IPLimitMax: 1, IPLimitRefill: 1, GatewayTimeout: time.Second})
	if err != nil {
		f.Fatal(err)
	}
	rt.reg.update(newConn("a", 1), limited(1, "app.test", "*.test"))
	f.Fuzz(func(t *testing.T, host, path, ip string) {
		addr, _ := netip.ParseAddr(ip) // an invalid ip means "none given"
		ex := rt.Explain(t.Context(), host, path, addr)
		if ex.Verdict == "" || len(ex.Steps) == 0 {
			t.Errorf("Explain(%q, %q, %q) = %+v, want a verdict and steps", host, path, ip, ex)
		}
	})
}

// TestExplainPredictsThePick: for every strategy, the client explain names
// is the one the next real request reaches.
func TestExplainPredictsThePick(t *testing.T) {
	for _, strategy := range []string{"round-robin", "least-inflight", "primary-standby"} {
		t.Run(strategy, func(t *testing.T) {
			rt := newRouter(t, Config{Strategy: strategy})
			for i, id := range []string{"a", "b", "c"} {
				a := limited(5, "app.test")
				a.Name = id
				rt.reg.update(newConn(id, i), a)
			}
			for i := range 7 {
				ex := rt.Explain(t.Context(), "app.test", "/", visitor)
				req := httptest.NewRequest(http.MethodGet, "/", nil)
				req.Host = "app.test"
				rec := httptest.NewRecorder()
				rt.ServeHTTP(rec, req)
				got, _, _ := strings.Cut(rec.Body.String(), "/")
				if want := "dispatch to client " + got + " (" + got + ")"; ex.Verdict != want {
					t.Fatalf("request %d: explain said %q, the request went to %s", i, ex.Verdict, got)
				}
			}
		})
	}
}

// TestExplainDuringTraffic runs explains beside requests and client
// changes, for the race detector.
func TestExplainDuringTraffic(t *testing.T) {
	rt := newRouter(t, Config{GatewayTimeout: time.Second, IPLimitMax: 1000, IPLimitRefill: 1000})
	rt.reg.update(newConn("a", 1), limited(2, "app.test"))
	done := make(chan struct{})
	var reqs []*served
	go func() {
		defer close(done)
		for i := range 50 {
			c := newConn(fmt.Sprint("x", i), 10+i)
			rt.reg.update(c, limited(1, "app.test"))
			rt.reg.detach(c)
		}
	}()
	for range 50 {
		reqs = append(reqs, serveAsync(rt, "app.test", "/"))
		if ex := rt.Explain(t.Context(), "app.test", "/", visitor); ex.Verdict == "" {
			t.Fatal("Explain() gave no verdict")
		}
	}
	<-done
	for _, r := range reqs {
		if rec := r.wait(t); rec.Code != http.StatusOK {
			t.Errorf("request during explains = %d, want 200", rec.Code)
		}
	}
}

// TestExplainForwardedPath: explain shows, per client, the path its
// backend would receive: without the bind's prefix for a client that
// trims it, whole for one that does not.
func TestExplainForwardedPath(t *testing.T) {
	rt := newRouter(t, Config{})
	trim := svc("/api", "app.test")
	trim.TrimBind = true
	rt.reg.update(newConn("a", 1), ann(trim))
	rt.reg.update(newConn("b", 2), ann(svc("/api", "app.test")))
	tests := []struct{ path, a, b string }{
		{"/api/users", "/users", "/api/users"},
		{"/api", "/", "/api"},
		{"/api/x%2Fy", "/x%2Fy", "/api/x%2Fy"},
	}
	for _, tc := range tests {
		ex := rt.Explain(t.Context(), "app.test", tc.path, visitor)
		got := map[string]string{}
		for _, c := range ex.Clients {
			got[c.ID] = c.ForwardedPath
		}
		if got["a"] != tc.a || got["b"] != tc.b {
			t.Errorf("Explain(%s) forwarded paths = a %q, b %q; want a %q, b %q", tc.path, got["a"], got["b"], tc.a, tc.b)
		}
	}
}
