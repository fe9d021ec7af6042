package store_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/store/storetest"
)

func testTokenLimits(t *testing.T, b backend) {
	ctx := t.Context()
	db := storetest.Open(t, b.fresh(t))
	org := mustOrg(t, db, "acme")
	limits := store.TokenLimits{MaxRPS: 2.5, DailyMaxBytes: 1 << 30, MaxConnections: 3,
		Paths: []string{"/api", "/static"}, ClientAllowedIPs: []string{"10.0.0.0/8"}, AllowTCPPorts: []string{"2222", "20000-20010"}}
	tok := mustToken(t, db, store.Token{OrgID: org.ID, Name: "web", Hash: hash("lim"), Hostnames: []string{"a.example.com"}, Limits: limits})
	if diff := cmp.Diff(limits, tok.Limits); diff != "" {
		t.Errorf("CreateToken().Limits mismatch (-want +got):\n%s", diff)
	}
	got, err := db.TokenByHash(ctx, hash("lim"))
	if err != nil || !cmp.Equal(limits, got.Limits) {
		t.Errorf("TokenByHash().Limits = %+v, %v; want %+v", got.Limits, err, limits)
	}

	sub := db.Subscribe(ctx)
	exp := time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC)
	e := store.EditOf(tok)
	e.Name = "web-2"
	e.Hostnames = []string{"b.example.com"}
	e.ExpiresAt = &exp
	e.Limits = store.TokenLimits{MaxRPS: 10, Paths: []string{"/v2"}, AllowTCPPorts: []string{"3000"}}
	up, err := db.UpdateToken(ctx, org.ID, tok.ID, e)
	if err != nil {
		t.Fatalf("UpdateToken() = %v", err)
	}
	want := store.TokenLimits{MaxRPS: 10, Paths: []string{"/v2"}, ClientAllowedIPs: []string{}, AllowTCPPorts: []string{"3000"}}
	if up.Name != "web-2" || !slices.Equal(up.Hostnames, []string{"b.example.com"}) || up.ExpiresAt == nil || !up.ExpiresAt.Equal(exp) || !cmp.Equal(want, up.Limits) {
		t.Errorf("UpdateToken() = %+v, want the edit applied", up)
	}
	if up.ID != tok.ID || !slices.Equal(up.Hash, tok.Hash) || !up.CreatedAt.Equal(tok.CreatedAt) {
		t.Errorf("UpdateToken() changed the identity: %+v, was %+v", up, tok)
	}
	wantChange(t, sub, store.Change{Kind: store.ChangeTokenUpdated, ID: tok.ID, OrgID: org.ID})

	other := mustOrg(t, db, "other")
	_, err = db.UpdateToken(ctx, other.ID, tok.ID, e)
	wantErr(t, "UpdateToken(other org)", err, store.ErrNotFound)
	if _, err := db.RevokeToken(ctx, "", tok.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	_, err = db.UpdateToken(ctx, "", tok.ID, e)
	wantErr(t, "UpdateToken(revoked)", err, store.ErrConflict)
}

func testTokenLimitsRefused(t *testing.T, b backend) {
	ctx := t.Context()
	db := storetest.Open(t, b.fresh(t))
	org := mustOrg(t, db, "acme")
	tok := mustToken(t, db, store.Token{OrgID: org.ID, Hash: hash("ok")})
	bad := []store.TokenLimits{
		{MaxRPS: -1},
		{MaxRPS: store.MaxTokenRPS + 1},
		{DailyMaxBytes: -5},
		{DailyMaxBytes: store.MaxLimitBytes + 1},
		{MaxConnections: -1},
		{Paths: make([]string, store.MaxTokenPaths+1)},
		{AllowTCPPorts: []string{"0"}},
		{AllowTCPPorts: []string{"70000"}},
		{AllowTCPPorts: []string{"30-20"}},
		{AllowTCPPorts: []string{"22; DROP TABLE tokens"}},
		{AllowTCPPorts: make([]string, 65)},
	}
	for i, l := range bad {
		if _, err := db.CreateToken(ctx, store.Token{OrgID: org.ID, Hash: hash(fmt.Sprint("bad", i)), Limits: l}); err == nil {
			t.Errorf("CreateToken(limits %+v) = nil error, want refused", l)
		}
		e := store.EditOf(tok)
		e.Limits = l
		if _, err := db.UpdateToken(ctx, "", tok.ID, e); err == nil {
			t.Errorf("UpdateToken(limits %+v) = nil error, want refused", l)
		}
	}
	for _, l := range []store.OrgLimits{{MaxClients: -1}, {MaxTokens: -1}, {MaxAdminKeys: store.MaxLimitCount + 1}, {MonthlyMaxBytes: -1}} {
		if _, err := db.SetOrgLimits(ctx, org.ID, l); err == nil {
			t.Errorf("SetOrgLimits(%+v) = nil error, want refused", l)
		}
	}
	_, err := db.SetOrgLimits(ctx, "org_nope", store.OrgLimits{MaxClients: 1})
	wantErr(t, "SetOrgLimits(unknown)", err, store.ErrNotFound)
}

func testRotateToken(t *testing.T, b backend) {
	ctx := t.Context()
	db := storetest.Open(t, b.fresh(t))
	org := mustOrg(t, db, "acme")
	tok := mustToken(t, db, store.Token{OrgID: org.ID, Prefix: "apr_one", Hash: hash("one")})
	grace := time.Date(2035, 5, 6, 7, 8, 9, 0, time.UTC)
	rot, err := db.RotateToken(ctx, org.ID, tok.ID, hash("two"), "apr_two", grace)
	if err != nil {
		t.Fatalf("RotateToken() = %v", err)
	}
	if rot.Generation != 1 || !slices.Equal(rot.Hash, hash("two")) || rot.Prefix != "apr_two" ||
		!slices.Equal(rot.PrevHash, hash("one")) || rot.PrevExpiresAt == nil || !rot.PrevExpiresAt.Equal(grace) {
		t.Errorf("RotateToken() = %+v, want generation 1, the new hash, the old one until %v", rot, grace)
	}
	for _, secret := range []string{"one", "two"} {
		got, err := db.TokenByHash(ctx, hash(secret))
		if err != nil || got.ID != tok.ID {
			t.Errorf("TokenByHash(%s) = %s, %v; want %s", secret, got.ID, err, tok.ID)
		}
	}
	if _, err := db.RotateToken(ctx, "", tok.ID, hash("three"), "apr_three", grace); err != nil {
		t.Fatal(err)
	}
	_, err = db.TokenByHash(ctx, hash("one"))
	wantErr(t, "TokenByHash(secret before the previous)", err, store.ErrNotFound)
	got, err := db.TokenByHash(ctx, hash("two"))
	if err != nil || got.Generation != 2 || !slices.Equal(got.PrevHash, hash("two")) {
		t.Errorf("TokenByHash(previous) = gen %d, %v; want generation 2 with two as PrevHash", got.Generation, err)
	}
	other := mustOrg(t, db, "other")
	_, err = db.RotateToken(ctx, other.ID, tok.ID, hash("x"), "apr_x", grace)
	wantErr(t, "RotateToken(other org)", err, store.ErrNotFound)
	mustToken(t, db, store.Token{OrgID: org.ID, Hash: hash("taken")})
	_, err = db.RotateToken(ctx, "", tok.ID, hash("taken"), "apr_t", grace)
	wantErr(t, "RotateToken(hash taken)", err, store.ErrConflict)
	if _, err := db.RevokeToken(ctx, "", tok.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	_, err = db.RotateToken(ctx, "", tok.ID, hash("four"), "apr_four", grace)
	wantErr(t, "RotateToken(revoked)", err, store.ErrConflict)
}

func testOrgCaps(t *testing.T, b backend) {
	ctx := t.Context()
	clk := newClock()
	db := openClock(t, b.fresh(t), clk)
	org := mustOrg(t, db, "acme")
	want := store.OrgLimits{MonthlyMaxBytes: 1 << 40, MaxClients: 4, MaxTokens: 2, MaxAdminKeys: 1}
	o, err := db.SetOrgLimits(ctx, org.ID, want)
	if err != nil || o.Limits != want {
		t.Fatalf("SetOrgLimits() = %+v, %v; want %+v", o.Limits, err, want)
	}
	if got, err := db.Org(ctx, org.ID); err != nil || got.Limits != want {
		t.Errorf("Org().Limits = %+v, %v; want %+v", got.Limits, err, want)
	}
	a := mustToken(t, db, store.Token{OrgID: org.ID, Hash: hash("a")})
	past := clk.Now().Add(-time.Hour)
	// An expired token does not count.
	mustToken(t, db, store.Token{OrgID: org.ID, Hash: hash("old"), ExpiresAt: &past})
	mustToken(t, db, store.Token{OrgID: org.ID, Hash: hash("b")})
	_, err = db.CreateToken(ctx, store.Token{OrgID: org.ID, Hash: hash("c")})
	wantErr(t, "CreateToken(beyond max_tokens)", err, store.ErrLimit)
	if _, err := db.RevokeToken(ctx, "", a.ID, clk.Now()); err != nil {
		t.Fatal(err)
	}
	mustToken(t, db, store.Token{OrgID: org.ID, Hash: hash("c")}) // a revoked token frees its place

	mustKey(t, db, store.AdminKey{OrgID: org.ID, Role: "admin", Hash: hash("k1")})
	_, err = db.CreateAdminKey(ctx, store.AdminKey{OrgID: org.ID, Role: "admin", Hash: hash("k2")})
	wantErr(t, "CreateAdminKey(beyond max_admin_keys)", err, store.ErrLimit)
	// Another organization is not limited by this one's caps.
	other := mustOrg(t, db, "other")
	mustKey(t, db, store.AdminKey{OrgID: other.ID, Role: "admin", Hash: hash("k3")})
	mustKey(t, db, store.AdminKey{OrgID: other.ID, Role: "admin", Hash: hash("k4")})
}

// testOrgCapsConcurrent mints tokens from two DBs at once against one
// cap: together they never exceed it.
func testOrgCapsConcurrent(t *testing.T, b backend) {
	ctx := t.Context()
	cfg := b.fresh(t)
	dbs := []*store.DB{storetest.Open(t, cfg), storetest.Open(t, cfg)}
	org := mustOrg(t, dbs[0], "acme")
	const capN = 5
	if _, err := dbs[0].SetOrgLimits(ctx, org.ID, store.OrgLimits{MaxTokens: capN}); err != nil {
		t.Fatal(err)
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		created int
	)
	for d, db := range dbs {
		for i := range 8 {
			wg.Go(func() {
				_, err := db.CreateToken(ctx, store.Token{OrgID: org.ID, Hash: hash(fmt.Sprintf("c%d-%d", d, i))})
				switch {
				case err == nil:
					mu.Lock()
					created++
					mu.Unlock()
				case !errors.Is(err, store.ErrLimit):
					t.Errorf("CreateToken() = %v, want nil or ErrLimit", err)
				}
			})
		}
	}
	wg.Wait()
	toks, err := dbs[1].ListTokens(ctx, org.ID)
	if created != capN || err != nil || len(toks) != capN {
		t.Errorf("created %d, stored %d (%v); want exactly %d", created, len(toks), err, capN)
	}
}

func testExpiryWarnings(t *testing.T, b backend) {
	ctx := t.Context()
	cfg := b.fresh(t)
	dbs := []*store.DB{storetest.Open(t, cfg), storetest.Open(t, cfg)}
	db := dbs[0]
	org := mustOrg(t, db, "acme")
	now := time.Date(2033, 1, 1, 0, 0, 0, 0, time.UTC)
	in5d, in30d, past := now.Add(5*24*time.Hour), now.Add(30*24*time.Hour), now.Add(-time.Hour)
	soon := mustToken(t, db, store.Token{OrgID: org.ID, Hash: hash("soon"), ExpiresAt: &in5d})
	mustToken(t, db, store.Token{OrgID: org.ID, Hash: hash("late"), ExpiresAt: &in30d})
	mustToken(t, db, store.Token{OrgID: org.ID, Hash: hash("gone"), ExpiresAt: &past})
	mustToken(t, db, store.Token{OrgID: org.ID, Hash: hash("never")})
	got, err := db.TokensExpiringBy(ctx, now, now.Add(7*24*time.Hour))
	if err != nil || len(got) != 1 || got[0].ID != soon.ID {
		t.Fatalf("TokensExpiringBy(7d) = %v, %v; want only %s", got, err, soon.ID)
	}
	// Every DB claims the 7-day warning at once: one wins.
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		wins int
	)
	for _, d := range dbs {
		for range 4 {
			wg.Go(func() {
				ok, err := d.ClaimExpiryWarning(ctx, soon.ID, in5d, store.ExpiryWarn7d)
				if err != nil {
					t.Errorf("ClaimExpiryWarning() = %v", err)
				}
				if ok {
					mu.Lock()
					wins++
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	if wins != 1 {
		t.Errorf("ClaimExpiryWarning(7d) won %d times, want 1", wins)
	}
	if ok, err := db.ClaimExpiryWarning(ctx, soon.ID, in5d, store.ExpiryWarn1d); !ok || err != nil {
		t.Errorf("ClaimExpiryWarning(1d) = %t, %v; want true (another bit)", ok, err)
	}
	// A claim for an expiry the token no longer has wins nothing.
	if ok, err := db.ClaimExpiryWarning(ctx, soon.ID, in30d, store.ExpiryWarn7d); ok || err != nil {
		t.Errorf("ClaimExpiryWarning(stale expiry) = %t, %v; want false", ok, err)
	}
	// A new expiry clears the marks.
	cur, err := db.Token(ctx, "", soon.ID)
	if err != nil || cur.ExpiryWarned != store.ExpiryWarn7d|store.ExpiryWarn1d {
		t.Fatalf("Token().ExpiryWarned = %d, %v; want both bits", cur.ExpiryWarned, err)
	}
	e := store.EditOf(cur)
	in6d := now.Add(6 * 24 * time.Hour)
	e.ExpiresAt = &in6d
	up, err := db.UpdateToken(ctx, "", soon.ID, e)
	if err != nil || up.ExpiryWarned != 0 {
		t.Errorf("UpdateToken(new expiry).ExpiryWarned = %d, %v; want 0", up.ExpiryWarned, err)
	}
	e.Name = "renamed" // same expiry: the marks stay
	if _, err := db.ClaimExpiryWarning(ctx, soon.ID, in6d, store.ExpiryWarn7d); err != nil {
		t.Fatal(err)
	}
	up, err = db.UpdateToken(ctx, "", soon.ID, e)
	if err != nil || up.ExpiryWarned != store.ExpiryWarn7d {
		t.Errorf("UpdateToken(same expiry).ExpiryWarned = %d, %v; want %d", up.ExpiryWarned, err, store.ExpiryWarn7d)
	}
	if _, err := db.ClaimExpiryWarning(ctx, soon.ID, in6d, 4); err == nil {
		t.Error("ClaimExpiryWarning(bit 4) = nil error, want refused")
	}
}

func testAdminKeyExpiry(t *testing.T, b backend) {
	ctx := t.Context()
	db := storetest.Open(t, b.fresh(t))
	org := mustOrg(t, db, "acme")
	exp := time.Date(2034, 2, 3, 4, 5, 6, 789123456, time.UTC)
	k := mustKey(t, db, store.AdminKey{OrgID: org.ID, Role: "viewer", Hash: hash("kexp"), ExpiresAt: &exp})
	got, err := db.AdminKeyByHash(ctx, hash("kexp"))
	if err != nil || got.ExpiresAt == nil || !got.ExpiresAt.Equal(stored(exp)) || got.ID != k.ID {
		t.Errorf("AdminKeyByHash().ExpiresAt = %v, %v; want %v", got.ExpiresAt, err, stored(exp))
	}
	plain := mustKey(t, db, store.AdminKey{OrgID: org.ID, Role: "viewer", Hash: hash("kplain")})
	if plain.ExpiresAt != nil {
		t.Errorf("CreateAdminKey(no expiry).ExpiresAt = %v, want nil", plain.ExpiresAt)
	}
}
