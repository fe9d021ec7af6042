package router

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/tunnel"
)

// orgScaler records the organization of every cold start; each start
// fails at once, so a held request ends without waiting.
type orgScaler struct {
	mu   sync.Mutex // guards orgs
	orgs []string
}

func (s *orgScaler) ColdStart(ctx context.Context, org, host, path string) (ColdStart, error) {
	s.mu.Lock()
	s.orgs = append(s.orgs, org)
	s.mu.Unlock()
	return failedStart{}, nil
}

func (s *orgScaler) calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.orgs...)
}

// failedStart is a cold start whose call has already failed.
type failedStart struct{}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (failedStart) Failed() <-chan struct{} { return closedChan }

// unhealthy announces hosts with a service that cannot take requests: the
// pool has a member, and nobody routable.
func unhealthy(hosts ...string) *tunnel.Announcement {
	a := ann(svc("", hosts...))
	a.Services[0].Healthy = false
	return a
}

// TestArmedBindsKeyedByOrg: two organizations arm the same bind; only the
// organization whose clients serve the pool, or for an empty pool the
// record listed first, drives its cold start.
func TestArmedBindsKeyedByOrg(t *testing.T) {
	both := []ArmedBind{
		{OrgID: "org_a", Pattern: "app.test", ColdStart: time.Minute},
		{OrgID: "org_b", Pattern: "app.test", ColdStart: time.Minute},
	}
	tests := []struct {
		name   string
		binds  []ArmedBind
		member string // org of an unhealthy member; "" for none
		want   []string
	}{
		{name: "empty pool: first listed drives", binds: both, want: []string{"org_a"}},
		{name: "empty pool: a later duplicate of a key is ignored", binds: []ArmedBind{both[1], both[0], both[1]}, want: []string{"org_b"}},
		{name: "served by org_a", binds: both, member: "org_a", want: []string{"org_a"}},
		{name: "served by org_b although org_a is listed first", binds: both, member: "org_b", want: []string{"org_b"}},
		{name: "served by org_c without a record: no cold start", binds: both, member: "org_c", want: nil},
		{name: "served by org_a, armed only by org_b: no cold start", binds: both[1:], member: "org_a", want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := &orgScaler{}
			rt := newRouter(t, Config{Scaler: sc, GatewayTimeout: 10 * time.Millisecond})
			if tt.member != "" {
				member := &orgConn{newConn("c", 1), tunnel.Identity{TokenID: "tok_" + tt.member, OrgID: tt.member}}
				rt.reg.update(member, unhealthy("app.test"))
			}
			rt.reg.SetArmed(tt.binds)
			rec := serveAsync(rt, "app.test", "/").wait(t)
			got := sc.calls()
			if len(got) != len(tt.want) || (len(got) > 0 && got[0] != tt.want[0]) {
				t.Fatalf("cold starts = %v (status %d), want %v", got, rec.Code, tt.want)
			}
		})
	}
}

func TestArmedByAndBound(t *testing.T) {
	rt := newRouter(t, Config{})
	rt.reg.SetArmed([]ArmedBind{{OrgID: "org_a", Pattern: "App.Test", Path: "/api"}})
	if !rt.reg.ArmedBy("org_a", "app.test", "/api") || rt.reg.ArmedBy("org_b", "app.test", "/api") || !rt.reg.Armed("app.test", "/api") {
		t.Fatalf("ArmedBy(org_a), ArmedBy(org_b), Armed = %v, %v, %v, want true, false, true",
			rt.reg.ArmedBy("org_a", "app.test", "/api"), rt.reg.ArmedBy("org_b", "app.test", "/api"), rt.reg.Armed("app.test", "/api"))
	}
	c := newConn("c", 1)
	rt.reg.updateAs(c, ann(svc("", "app.test", "victim.test", "*.test")), rights{allowed: []string{"app.test"}})
	for _, tt := range []struct {
		host string
		want bool
	}{{"app.test", true}, {"APP.test", true}, {"victim.test", false}, {"*.test", false}} {
		if got := rt.reg.Bound(c, tt.host, ""); got != tt.want {
			t.Errorf("Bound(%s) = %v, want %v", tt.host, got, tt.want)
		}
	}
	if rt.reg.Bound(newConn("other", 2), "app.test", "") {
		t.Errorf("Bound(unknown conn) = true, want false")
	}
}

// TestExplainArmedByAnotherOrg: explain says why a pool armed only by an
// organization that does not serve it makes no cold start.
func TestExplainArmedByAnotherOrg(t *testing.T) {
	rt := newRouter(t, Config{Scaler: &planScaler{}, GatewayTimeout: time.Second})
	member := &orgConn{newConn("c", 1), tunnel.Identity{TokenID: "tok_a", OrgID: "org_a"}}
	rt.reg.update(member, unhealthy("app.test"))
	rt.reg.SetArmed([]ArmedBind{{OrgID: "org_b", Pattern: "app.test", ColdStart: time.Minute}})
	ex := rt.Explain(t.Context(), "app.test", "/", visitor)
	const want = "armed only by organizations whose clients do not serve the bind"
	found := false
	for _, s := range ex.Steps {
		found = found || s.Name == StepColdStart && s.Outcome == OutcomeSkip && s.Detail == want
	}
	if !found || slices.Contains(ex.OrgIDs, "org_b") {
		t.Fatalf("Explain() steps = %+v, orgs %v; want a skipped cold start %q, and org_b not an owner", ex.Steps, ex.OrgIDs, want)
	}
}
