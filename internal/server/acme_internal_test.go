package server

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/hostname"
	"github.com/aperio-dev/aperio/router"
)

// fakeBinds is the router as the ask check sees it: the patterns each
// connection binds, by organization.
type fakeBinds map[*fakeConn][]string

type fakeConn struct{ org string }

func (*fakeConn) ID() string                                              { return "c" }
func (*fakeConn) ConnectedAt() time.Time                                  { return time.Time{} }
func (*fakeConn) RoundTrip(*http.Request, string) (*http.Response, error) { return nil, nil }

func (f fakeBinds) BoundOrg(host string) (string, bool) {
	for c, ps := range f {
		for _, p := range ps {
			if hostname.Match(p, host) {
				return c.org, true
			}
		}
	}
	return "", false
}

func (f fakeBinds) BoundPatterns(conn router.Conn) (string, []string) {
	c := conn.(*fakeConn)
	return c.org, f[c]
}

// TestACMEAskGrace: a name is allowed while a client binds it (exactly or
// by a wildcard), for that client's organization, and for
// acme.on_demand_grace after the client stopped binding it (left, or
// announced without it); not after, nor ever with a grace of 0. Each
// change of a session's binds bumps the generation the negative cache
// checks; a heartbeat repeating them does not.
func TestACMEAskGrace(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	binds := fakeBinds{}
	a := newACMEAsk(nil, nil, binds, time.Hour)
	a.now = func() time.Time { return now }
	allowed := func(name string) (string, bool) {
		org, err := a.Allowed(context.Background(), name)
		return org, err == nil
	}
	c := &fakeConn{org: "org-a"}
	if _, ok := allowed("x.w.test"); ok {
		t.Fatal("a name nobody binds is allowed")
	}
	binds[c] = []string{"*.w.test", "app.test"}
	a.seen(c)
	g := a.Generation()
	a.seen(c) // a heartbeat repeating the same binds
	if a.Generation() != g {
		t.Error("a repeated announcement changed the generation")
	}
	for _, name := range []string{"x.w.test", "APP.test", "y.z.w.test"} {
		if org, ok := allowed(name); !ok || org != "org-a" {
			t.Errorf("Allowed(%s) while bound = %q, %v; want org-a", name, org, ok)
		}
	}
	// The client drops app.test from its announcement, then leaves.
	binds[c] = []string{"*.w.test"}
	a.seen(c)
	delete(binds, c)
	a.left(c)
	if a.Generation() == g {
		t.Error("binds changed, the generation did not")
	}
	now = now.Add(59 * time.Minute)
	for _, name := range []string{"app.test", "other.w.test"} {
		if org, ok := allowed(name); !ok || org != "org-a" {
			t.Errorf("Allowed(%s) within the grace = %q, %v; want org-a", name, org, ok)
		}
	}
	now = now.Add(time.Minute)
	for _, name := range []string{"app.test", "other.w.test"} {
		if _, ok := allowed(name); ok {
			t.Errorf("Allowed(%s) after the grace = true", name)
		}
	}
	// No grace: allowed only while bound.
	b := newACMEAsk(nil, nil, binds, 0)
	binds[c] = []string{"app.test"}
	b.seen(c)
	delete(binds, c)
	b.left(c)
	if _, err := b.Allowed(context.Background(), "app.test"); err == nil {
		t.Error("with acme.on_demand_grace 0, a name no longer bound is allowed")
	}
}
