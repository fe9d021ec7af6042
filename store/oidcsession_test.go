package store_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/store"
)

// revocationBounds is held by a test while it has lowered the OIDC
// revocation bounds (store.SetRevocationBoundsForTest, package variables):
// TestSQLite and TestPostgres run at once, and each runs this test. The
// equivalence script reads the bounds too: its tests run alone.
var revocationBounds sync.Mutex

// testOIDCRevocations: revocations are stored, listed per hostname and
// announced; a user's logouts beyond the bound become one revocation of
// every session of that user, a hostname's beyond its bound one of every
// session of the hostname, and a wider revocation takes the narrower ones
// of its user or hostname in; none is ever narrowed. Expired ones go.
func testOIDCRevocations(t *testing.T, b backend) {
	revocationBounds.Lock()
	defer revocationBounds.Unlock()
	defer store.SetRevocationBoundsForTest(3, 6)()
	ctx := t.Context()
	clk := newClock()
	db := openClock(t, b.fresh(t), clk)
	sub := db.Subscribe(ctx)
	day := clk.Now().Add(24 * time.Hour)
	logout := func(host, sid, subject string) store.OIDCRevocation {
		t.Helper()
		r, err := db.RevokeOIDCSessions(ctx, store.OIDCRevocation{Hostname: host, SessionID: sid, Subject: subject, Email: subject + "@example.com", ExpiresAt: day})
		if err != nil {
			t.Fatalf("RevokeOIDCSessions(%s %s) = %v", host, sid, err)
		}
		return r
	}
	list := func(host string) []store.OIDCRevocation {
		t.Helper()
		rs, err := db.OIDCRevocations(ctx, host, clk.Now())
		if err != nil {
			t.Fatalf("OIDCRevocations(%q) = %v", host, err)
		}
		return rs
	}

	r := logout("a.test", "sid1", "jane")
	if r.ID == "" || r.SessionID != "sid1" || !r.RevokedAt.Equal(clk.Now().Truncate(time.Millisecond)) || !r.ExpiresAt.Equal(day.Truncate(time.Millisecond)) {
		t.Errorf("RevokeOIDCSessions() = %+v", r)
	}
	wantChange(t, sub, store.Change{Kind: store.ChangeOIDCRevoked, ID: r.ID, Hostname: "a.test"})
	if rs := list("a.test"); len(rs) != 1 || rs[0] != r {
		t.Errorf("OIDCRevocations(a.test) = %+v, want [%+v]", rs, r)
	}
	logout("b.test", "sid9", "jane")
	if n := len(list("")); n != 2 {
		t.Errorf("OIDCRevocations(\"\") holds %d, want 2", n)
	}

	// jane's third logout on a.test reaches the per-user bound (3): her
	// sessions there end as a whole, valid until the latest expiry.
	logout("a.test", "sid2", "jane")
	clk.Advance(time.Second)
	logout("a.test", "sid3", "jane")
	clk.Advance(time.Second)
	logout("a.test", "sidj", "joe")
	last := logout("a.test", "sid4", "jane")
	if last.SessionID != "" || last.Subject != "jane" {
		t.Errorf("jane's logout beyond the bound = %+v, want a revocation of every session of hers", last)
	}
	var janes, joes int
	for _, r := range list("a.test") {
		switch r.Subject {
		case "jane":
			janes++
		case "joe":
			joes++
		}
	}
	if janes != 1 || joes != 1 {
		t.Errorf("after the bound: %d rows of jane, %d of joe; want 1 and 1", janes, joes)
	}

	// An admin's revocation by email takes the user's rows in.
	logout("a.test", "sidj2", "joe")
	if _, err := db.RevokeOIDCSessions(ctx, store.OIDCRevocation{Hostname: "a.test", Email: "joe@example.com", ExpiresAt: day.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	for _, r := range list("a.test") {
		if r.Email == "joe@example.com" && r.SessionID != "" {
			t.Errorf("a session row of joe survived the revocation of all his sessions: %+v", r)
		}
	}

	// The hostname's bound (6): beyond it every session of a.test ends.
	for i := range 6 {
		logout("a.test", fmt.Sprint("u", i), fmt.Sprint("user", i))
	}
	rs := list("a.test")
	if len(rs) > 6 {
		t.Errorf("a.test holds %d revocations, bound 6", len(rs))
	}
	var all bool
	for _, r := range rs {
		all = all || r.SessionID == "" && r.Subject == "" && r.Email == ""
	}
	if !all {
		t.Errorf("after the hostname's bound: %+v, want a revocation of every session of a.test", rs)
	}
	if n := len(list("b.test")); n != 1 {
		t.Errorf("b.test holds %d revocations, want its 1 untouched", n)
	}

	// Expired revocations are not listed, and the next write drops them.
	clk.Advance(26 * time.Hour)
	if rs := list(""); len(rs) != 0 {
		t.Errorf("after every expiry: %+v, want none", rs)
	}

	// Hostile input.
	for _, tc := range []struct {
		name string
		r    store.OIDCRevocation
	}{
		{"no hostname", store.OIDCRevocation{Subject: "x", ExpiresAt: clk.Now().Add(time.Hour)}},
		{"long hostname", store.OIDCRevocation{Hostname: strings.Repeat("a", 254), ExpiresAt: clk.Now().Add(time.Hour)}},
		{"long session id", store.OIDCRevocation{Hostname: "a.test", SessionID: strings.Repeat("s", 65), Subject: "x", ExpiresAt: clk.Now().Add(time.Hour)}},
		{"long email", store.OIDCRevocation{Hostname: "a.test", Email: strings.Repeat("e", 256), ExpiresAt: clk.Now().Add(time.Hour)}},
		{"session without user", store.OIDCRevocation{Hostname: "a.test", SessionID: "s", ExpiresAt: clk.Now().Add(time.Hour)}},
		{"expired", store.OIDCRevocation{Hostname: "a.test", Subject: "x", ExpiresAt: clk.Now()}},
	} {
		if _, err := db.RevokeOIDCSessions(ctx, tc.r); err == nil {
			t.Errorf("RevokeOIDCSessions(%s) = nil, want an error", tc.name)
		}
	}
}
