package router

import (
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/tunnel"
)

// TestCrossOrgPoolRefused: a client of another organization never joins a
// pool, by exact hostname or by path under it, even with no ownership set.
func TestCrossOrgPoolRefused(t *testing.T) {
	rt := newRouter(t, Config{})
	victim := &orgConn{newConn("victim", 1), tunnel.Identity{TokenID: "tok_a", OrgID: "org_a"}}
	evil := &orgConn{newConn("evil", 2), tunnel.Identity{TokenID: "tok_b", OrgID: "org_b"}}
	if n := rt.reg.updateAs(victim, ann(svc("", "shop.test")), rights{allowed: []string{"shop.test"}, org: "org_a"}); len(n) != 0 {
		t.Fatalf("victim notices = %v, want none", n)
	}
	notices := rt.reg.updateAs(evil, ann(svc("", "shop.test")), rights{allowed: []string{"shop.test"}, org: "org_b"})
	if len(notices) != 1 || !strings.Contains(notices[0], "another organization") {
		t.Fatalf("notices of a cross-org join = %v, want one refusal", notices)
	}
	for range 4 {
		if got := pickID(t, rt, "shop.test"); got != "victim" {
			t.Fatalf("shop.test served by %q, want victim only", got)
		}
	}
}

// TestOwnershipBinds: the router's rule for each kind of organization, and
// a change of ownership re-judging the binds of connected clients.
func TestOwnershipBinds(t *testing.T) {
	rt := newRouter(t, Config{})
	rt.reg.SetOwnership(Ownership{
		Patterns:   map[string]string{"*.a.test": "org_a", "a.test": "org_a"},
		DefaultOrg: "org_def",
	})
	tests := []struct {
		name, org, host, path string
		ok                    bool
	}{
		{"owner exact", "org_a", "a.test", "", true},
		{"owner wildcard", "org_a", "*.x.a.test", "", true},
		{"owner outside", "org_a", "b.test", "", false},
		{"default unowned", "org_def", "free.test", "", true},
		{"default inside another org", "org_def", "x.a.test", "", false},
		{"default wildcard over another org", "org_def", "*.test", "", false},
		{"other org without patterns", "org_c", "free2.test", "", false},
		{"path bind inside another org", "org_c", "a.test", "/login", false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := &orgConn{newConn(tt.name, 10+i), tunnel.Identity{TokenID: "tok", OrgID: tt.org}}
			notices := rt.reg.updateAs(conn, ann(svc(tt.path, tt.host)), rights{allowed: []string{tt.host}, org: tt.org})
			if ok := len(notices) == 0; ok != tt.ok {
				t.Errorf("bind %s%s by %s: notices %v, want allowed=%v", tt.host, tt.path, tt.org, notices, tt.ok)
			}
		})
	}

	// Taking free.test away from the default organization drops its bind
	// at once and tells the client.
	def := &orgConn{newConn("def", 1), tunnel.Identity{OrgID: "org_def"}}
	rt.reg.update(def, ann(svc("", "late.test")))
	if got := pickID(t, rt, "late.test"); got != "def" {
		t.Fatalf("late.test served by %q before the change, want def", got)
	}
	rt.reg.SetOwnership(Ownership{Patterns: map[string]string{"late.test": "org_a"}, DefaultOrg: "org_def"})
	if got := pickID(t, rt, "late.test"); got != "" {
		t.Errorf("late.test served by %q after org_a took it, want nobody", got)
	}
	if n := rt.reg.update(def, ann(svc("", "late.test"))); len(n) != 1 || !strings.Contains(n[0], "owned by another organization") {
		t.Errorf("notices after the change = %v, want the refusal", n)
	}
}
