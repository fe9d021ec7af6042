package router

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/tunnel"
)

// TestAutoBind: a service with no hostname, announced with a token that
// lists exact hostnames, binds those and never the token's wildcards.
func TestAutoBind(t *testing.T) {
	rt := newRouter(t, Config{})
	conn := newConn("auto", 1)
	r := rights{allowed: []string{"a.test", "b.test", "*.w.test"}, org: "org_a"}
	if n := rt.reg.updateAs(conn, ann(svc("")), r); len(n) != 0 {
		t.Fatalf("auto-bind notices = %v, want none", n)
	}
	for _, host := range []string{"a.test", "b.test"} {
		if got := pickID(t, rt, host); got != "auto" {
			t.Errorf("%s served by %q, want auto", host, got)
		}
	}
	if got := pickID(t, rt, "x.w.test"); got != "" {
		t.Errorf("x.w.test served by %q, want nobody (auto-bind takes no wildcard)", got)
	}
	if err := rt.reg.attachRefusal("tok", r, ann(svc(""))); err != nil {
		t.Errorf("attachRefusal(auto-bind) = %v, want nil", err)
	}
}

// TestCatchAll: a catch-all serves only what no exact or wildcard bind
// matches, only where the server and the token allow it, and under
// ownership only its own organization's hostnames.
func TestCatchAll(t *testing.T) {
	rt := newRouter(t, Config{CatchAll: true})
	rt.reg.update(newConn("exact", 1), ann(svc("", "a.test")))
	rt.reg.update(newConn("wild", 2), ann(svc("", "*.w.test")))
	if n := rt.reg.update(newConn("any", 3), ann(svc(""))); len(n) != 0 {
		t.Fatalf("catch-all notices = %v, want none", n)
	}
	for host, want := range map[string]string{"a.test": "exact", "x.w.test": "wild", "other.test": "any", "w.test": "any"} {
		if got := pickID(t, rt, host); got != want {
			t.Errorf("%s served by %q, want %q", host, got, want)
		}
	}

	t.Run("token without allow_catch_all", func(t *testing.T) {
		conn := newConn("tok", 4)
		r := rights{allowed: []string{"*.w.test"}, org: "org_a"}
		n := rt.reg.updateAs(conn, ann(svc("")), r)
		if len(n) != 1 || !strings.Contains(n[0], "allow_catch_all") {
			t.Errorf("notices = %v, want one naming allow_catch_all", n)
		}
		if got := rt.reg.Binds(conn).Refused; !slices.Equal(got, []string{catchAllBind}) {
			t.Errorf("Binds().Refused = %v, want [%s]", got, catchAllBind)
		}
		if err := rt.reg.attachRefusal("tok", r, ann(svc(""))); err == nil {
			t.Error("attachRefusal(catch-all, no right) = nil, want a refusal")
		}
	})

	t.Run("require_hostname_bind", func(t *testing.T) {
		strict := newRouter(t, Config{})
		conn := newConn("any", 1)
		n := strict.reg.update(conn, ann(svc("")))
		if len(n) != 1 || !strings.Contains(n[0], "require_hostname_bind") {
			t.Errorf("notices = %v, want one naming require_hostname_bind", n)
		}
		if got := pickID(t, strict, "other.test"); got != "" {
			t.Errorf("other.test served by %q, want nobody", got)
		}
	})

	t.Run("ownership", func(t *testing.T) {
		rt := newRouter(t, Config{CatchAll: true})
		rt.reg.SetOwnership(Ownership{Patterns: map[string]string{"*.a.test": "org_a"}, DefaultOrg: "org_def"})
		rt.reg.updateAs(newConn("catch_a", 1), ann(svc("")), rights{master: true, catchAll: true, org: "org_a"})
		rt.reg.updateAs(newConn("catch_def", 2), ann(svc("")), rights{master: true, catchAll: true, org: "org_def"})
		for host, want := range map[string]string{"x.a.test": "catch_a", "free.test": "catch_def"} {
			if got := pickID(t, rt, host); got != want {
				t.Errorf("%s served by %q, want %q", host, got, want)
			}
		}
		// org_def takes a pattern: it now serves only inside it, and
		// unowned names have no catch-all.
		rt.reg.SetOwnership(Ownership{Patterns: map[string]string{"*.a.test": "org_a", "d.test": "org_def"}, DefaultOrg: "org_def"})
		for host, want := range map[string]string{"x.a.test": "catch_a", "d.test": "catch_def", "free.test": ""} {
			if got := pickID(t, rt, host); got != want {
				t.Errorf("after the change, %s served by %q, want %q", host, got, want)
			}
		}
	})
}

// TestPerBindRefusal: a hostname the token may not bind is dropped with a
// notice and listed as refused; the others serve; a session with no bind
// left is refused at attach, one with some is not.
func TestPerBindRefusal(t *testing.T) {
	rt := newRouter(t, Config{})
	conn := newConn("c", 1)
	r := rights{allowed: []string{"a.test"}, org: "org_a"}
	a := ann(svc("", "a.test", "b.test"))
	if err := rt.reg.attachRefusal("tok", r, a); err != nil {
		t.Fatalf("attachRefusal(one of two allowed) = %v, want nil", err)
	}
	n := rt.reg.updateAs(conn, a, r)
	if len(n) != 1 || !strings.Contains(n[0], "b.test") {
		t.Errorf("notices = %v, want one naming b.test", n)
	}
	if got := rt.reg.Binds(conn).Refused; !slices.Equal(got, []string{"b.test"}) {
		t.Errorf("Binds().Refused = %v, want [b.test]", got)
	}
	if got := pickID(t, rt, "a.test"); got != "c" {
		t.Errorf("a.test served by %q, want c", got)
	}
	if got := pickID(t, rt, "b.test"); got != "" {
		t.Errorf("b.test served by %q, want nobody", got)
	}
	// The announcement changes to allowed binds only: nothing refused.
	rt.reg.updateAs(conn, ann(svc("", "a.test")), r)
	if got := rt.reg.Binds(conn).Refused; len(got) != 0 {
		t.Errorf("Binds().Refused after the fix = %v, want none", got)
	}
	err := rt.reg.attachRefusal("tok", r, ann(svc("", "b.test"), svc("/x", "c.test")))
	if err == nil || !strings.Contains(err.Error(), "b.test") || !strings.Contains(err.Error(), "c.test") {
		t.Errorf("attachRefusal(nothing allowed) = %v, want a refusal naming b.test and c.test", err)
	}
}

// TestPerBindRefusalHostile: an announcement of a thousand refused
// hostnames and one allowed attaches, serves the allowed one, and its
// attach refusal (when none is allowed) stays short.
func TestPerBindRefusalHostile(t *testing.T) {
	rt := newRouter(t, Config{})
	hosts := make([]string, 1000)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("h%d.evil.test", i)
	}
	r := rights{allowed: []string{"ok.test"}, org: "org_a"}
	conn := newConn("c", 1)
	rt.reg.updateAs(conn, ann(svc("", append(slices.Clone(hosts), "ok.test")...)), r)
	if got := len(rt.reg.Binds(conn).Refused); got != len(hosts) {
		t.Errorf("len(Binds().Refused) = %d, want %d", got, len(hosts))
	}
	if got := pickID(t, rt, "ok.test"); got != "c" {
		t.Errorf("ok.test served by %q, want c", got)
	}
	err := rt.reg.attachRefusal("tok", r, ann(svc("", hosts...)))
	if err == nil || len(err.Error()) > 2048 || !strings.Contains(err.Error(), "and 995 more") {
		t.Errorf("attachRefusal(1000 refused) = %d bytes %v, want a short refusal ending in the count left out", len(fmt.Sprint(err)), err)
	}
}

// TestSetDisabled: a disabled client takes no new request while its
// in-flight ones finish; enabled, it serves again; unknown (and hostile)
// ids are ErrNoClient.
func TestSetDisabled(t *testing.T) {
	rt := newRouter(t, Config{})
	one, two := newConn("one", 1), newConn("two", 2)
	rt.reg.update(one, ann(svc("", "a.test")))
	rt.reg.update(two, ann(svc("", "a.test")))
	p := rt.reg.table.Load().match("a.test", "/")
	held, _ := p.tryAcquire(rt.strategy, nil)
	if held == nil {
		t.Fatal("no permit on a.test")
	}
	off, on := held.conn, Conn(two)
	if off == Conn(two) {
		on = one
	}
	if err := rt.reg.SetDisabled(off.ID(), true); err != nil {
		t.Fatalf("SetDisabled(%s) = %v", off.ID(), err)
	}
	for range 4 {
		if got := pickID(t, rt, "a.test"); got != on.ID() {
			t.Fatalf("a.test served by %q while %s is disabled, want %s", got, off.ID(), on.ID())
		}
	}
	// A heartbeat re-announcing keeps it disabled.
	rt.reg.update(off, ann(svc("", "a.test"), svc("/new", "a.test")))
	if got := pickID(t, rt, "a.test"); got != on.ID() {
		t.Errorf("a.test served by %q after %s re-announced, want %s", got, off.ID(), on.ID())
	}
	if !rt.reg.Binds(off).Disabled {
		t.Error("Binds().Disabled = false, want true")
	}
	held.release() // the in-flight request finishes
	if got := rt.reg.Inflight(off, "0"); got != 0 {
		t.Errorf("Inflight() = %d after release, want 0", got)
	}
	if err := rt.reg.SetDisabled(off.ID(), false); err != nil {
		t.Fatalf("SetDisabled(false) = %v", err)
	}
	seen := map[string]bool{}
	for range 4 {
		seen[pickID(t, rt, "a.test")] = true
	}
	if !seen[off.ID()] {
		t.Errorf("a.test served by %v after enable, want %s among them", seen, off.ID())
	}
	for _, id := range []string{"nobody", strings.Repeat("x", 300), ""} {
		if err := rt.reg.SetDisabled(id, true); !errors.Is(err, ErrNoClient) {
			t.Errorf("SetDisabled(%.20q) = %v, want ErrNoClient", id, err)
		}
	}
}

// TestAttachRefusalPermanence: a session refused because its token may not
// bind the hostname is refused for good (tunnel.RefusalHostname); one
// refused because another organization's clients hold the pool is not,
// since that passes once they leave.
func TestAttachRefusalPermanence(t *testing.T) {
	rt := newRouter(t, Config{})
	other := newConn("other", 1)
	rt.reg.updateAs(other, ann(svc("", "shared.test")), rights{allowed: []string{"shared.test"}, org: "org_b"})

	r := rights{allowed: []string{"shared.test", "mine.test"}, org: "org_a"}
	err := rt.reg.attachRefusal("tok", r, ann(svc("", "other.test")))
	if err == nil || tunnel.RefusalCode(err) != tunnel.RefusalHostname {
		t.Errorf("attachRefusal(hostname not the token's) = %v (code %q), want a permanent %q refusal", err, tunnel.RefusalCode(err), tunnel.RefusalHostname)
	}
	err = rt.reg.attachRefusal("tok", r, ann(svc("", "shared.test")))
	if err == nil || tunnel.RefusalCode(err) != "" {
		t.Errorf("attachRefusal(pool of another organization) = %v (code %q), want a refusal with no code", err, tunnel.RefusalCode(err))
	}
	// One bind refused for good and one for now: retrying may succeed.
	err = rt.reg.attachRefusal("tok", r, ann(svc("", "other.test"), svc("", "shared.test")))
	if err == nil || tunnel.RefusalCode(err) != "" {
		t.Errorf("attachRefusal(one of each) = %v (code %q), want a refusal with no code", err, tunnel.RefusalCode(err))
	}
}
