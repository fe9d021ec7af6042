package router

import (
	"slices"
	"testing"
)

// TestBoundOrg: a name is bound while a live client binds it, exactly or
// under a wildcard, for that client's organization; a catch-all bind, a
// disabled client and a client gone bind nothing.
func TestBoundOrg(t *testing.T) {
	rt := newRouter(t, Config{CatchAll: true})
	a := newConn("a", 1)
	rt.reg.updateAs(a, ann(svc("", "app.test"), svc("/api", "*.w.test")), rights{master: true, org: "org_a"})
	catch := newConn("catch", 2)
	rt.reg.updateAs(catch, ann(svc("")), rights{master: true, catchAll: true, org: "org_c"})
	for _, tc := range []struct {
		host, org string
		ok        bool
	}{
		{"app.test", "org_a", true},
		{"APP.test:443", "org_a", true},
		{"x.w.test", "org_a", true},
		{"x.y.w.test", "org_a", true},
		{"w.test", "", false},
		{"random.test", "", false}, // the catch-all serves it, but names no hostname
	} {
		if org, ok := rt.reg.BoundOrg(tc.host); org != tc.org || ok != tc.ok {
			t.Errorf("BoundOrg(%q) = %q, %v; want %q, %v", tc.host, org, ok, tc.org, tc.ok)
		}
	}
	org, patterns := rt.reg.BoundPatterns(a)
	slices.Sort(patterns)
	if org != "org_a" || !slices.Equal(patterns, []string{"*.w.test", "app.test"}) {
		t.Errorf("BoundPatterns(a) = %q, %v", org, patterns)
	}
	if _, patterns := rt.reg.BoundPatterns(catch); len(patterns) != 0 {
		t.Errorf("BoundPatterns(catch-all) = %v, want none", patterns)
	}
	if err := rt.reg.SetDisabled("a", true); err != nil {
		t.Fatal(err)
	}
	if _, ok := rt.reg.BoundOrg("app.test"); ok {
		t.Error("a disabled client's name is bound")
	}
	rt.reg.SetDisabled("a", false)
	rt.reg.detach(a)
	if _, ok := rt.reg.BoundOrg("app.test"); ok {
		t.Error("a name is bound after its client left")
	}
	if _, patterns := rt.reg.BoundPatterns(a); patterns != nil {
		t.Errorf("BoundPatterns(gone) = %v", patterns)
	}
}
