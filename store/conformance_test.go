package store_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/store/storetest"
)

// The conformance suite: one behaviour, proven on every backend. Backend
// specifics (outage, concurrent migrations, raw schema) live in
// sqlite_test.go and postgres_test.go.

// backend describes one backend to the suite.
type backend struct {
	// name is what DB.Backend reports.
	name string
	// fresh returns the Config of a new, empty database.
	fresh func(t testing.TB) store.Config
	// shared says whether changes made through one DB reach the
	// subscribers of another DB on the same database.
	shared bool
}

// waitFor bounds every wait for a change to arrive.
const waitFor = 30 * time.Second

// testStore runs the conformance suite against b.
func testStore(t *testing.T, b backend) {
	tests := []struct {
		name string
		run  func(t *testing.T, b backend)
	}{
		{"OpenMigratesOnce", testOpenMigratesOnce},
		{"Orgs", testOrgs},
		{"EnsureOrgConcurrent", testEnsureOrgConcurrent},
		{"TokenRoundTrip", testTokenRoundTrip},
		{"TokenErrors", testTokenErrors},
		{"TokenScopeAndOrder", testTokenScopeAndOrder},
		{"RevokeToken", testRevokeToken},
		{"AdminKeys", testAdminKeys},
		{"Maintenance", testMaintenance},
		{"Audit", testAudit},
		{"AuditLimits", testAuditLimits},
		{"AuditAppendOnly", testAuditAppendOnly},
		{"Subscribe", testSubscribe},
		{"SubscribeAcrossDBs", testSubscribeAcrossDBs},
		{"SubscribeEnds", testSubscribeEnds},
		{"SlowSubscriberNeverBlocksWriters", testSlowSubscriber},
		{"TwoDBsOneDatabase", testTwoDBs},
		{"ClosedIsUnavailable", testClosed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.run(t, b)
		})
	}
}

// clock is a settable fake clock.
type clock struct {
	mu  sync.Mutex // guards now
	now time.Time
}

func newClock() *clock {
	// Nanoseconds and a zone other than UTC, so that the store's
	// normalization (UTC, microseconds) is visible.
	return &clock{now: time.Date(2031, 3, 4, 5, 6, 7, 123456789, time.FixedZone("X", 5*3600))}
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// stored is t as the store keeps it.
func stored(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// openClock opens cfg with clk as the store's clock.
func openClock(t testing.TB, cfg store.Config, clk *clock) *store.DB {
	t.Helper()
	cfg.Now = clk.Now
	return storetest.Open(t, cfg)
}

func hash(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

func mustOrg(t testing.TB, db *store.DB, name string) store.Org {
	t.Helper()
	o, err := db.CreateOrg(context.Background(), name)
	if err != nil {
		t.Fatalf("CreateOrg(%q) = %v", name, err)
	}
	return o
}

func mustToken(t testing.TB, db *store.DB, in store.Token) store.Token {
	t.Helper()
	tok, err := db.CreateToken(context.Background(), in)
	if err != nil {
		t.Fatalf("CreateToken(%s) = %v", in.Name, err)
	}
	return tok
}

func mustKey(t testing.TB, db *store.DB, in store.AdminKey) store.AdminKey {
	t.Helper()
	k, err := db.CreateAdminKey(context.Background(), in)
	if err != nil {
		t.Fatalf("CreateAdminKey(%s) = %v", in.Name, err)
	}
	return k
}

// wantErr fails t unless err wraps want (nil: unless err is nil).
func wantErr(t testing.TB, call string, err, want error) {
	t.Helper()
	switch {
	case want == nil && err != nil:
		t.Errorf("%s = %v, want nil", call, err)
	case want != nil && !errors.Is(err, want):
		t.Errorf("%s = %v, want %v", call, err, want)
	}
}

// recv returns the next change on ch, failing t if none comes in time.
func recv(t testing.TB, ch <-chan store.Change) store.Change {
	t.Helper()
	timer := time.NewTimer(waitFor)
	defer timer.Stop()
	select {
	case c, ok := <-ch:
		if !ok {
			t.Fatal("subscription closed, want a change")
		}
		return c
	case <-timer.C:
		t.Fatalf("no change within %v", waitFor)
	}
	return store.Change{}
}

// wantChange fails t unless the next change on ch is want.
func wantChange(t testing.TB, ch <-chan store.Change, want store.Change) {
	t.Helper()
	if got := recv(t, ch); got != want {
		t.Errorf("next change = %+v, want %+v", got, want)
	}
}

// wantClosed fails t unless ch is closed in time (changes before the close
// are skipped).
func wantClosed(t testing.TB, ch <-chan store.Change) {
	t.Helper()
	timer := time.NewTimer(waitFor)
	defer timer.Stop()
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-timer.C:
			t.Fatalf("subscription still open after %v", waitFor)
		}
	}
}

func testOpenMigratesOnce(t *testing.T, b backend) {
	ctx := t.Context()
	cfg := b.fresh(t)
	db := storetest.Open(t, cfg)
	if got := db.Backend(); got != b.name {
		t.Errorf("Backend() = %q, want %q", got, b.name)
	}
	if err := db.Ping(ctx); err != nil {
		t.Errorf("Ping() = %v", err)
	}
	org := mustOrg(t, db, "acme")
	if err := db.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if err := db.Close(); err != nil {
		t.Errorf("second Close() = %v, want nil", err)
	}

	// Reopening finds the schema current and the data intact.
	for i := range 2 {
		db := storetest.Open(t, cfg)
		got, err := db.Org(ctx, org.ID)
		if err != nil {
			t.Fatalf("reopen %d: Org(%s) = %v", i, org.ID, err)
		}
		if diff := cmp.Diff(org, got); diff != "" {
			t.Errorf("reopen %d: Org(%s) mismatch (-want +got):\n%s", i, org.ID, diff)
		}
	}
}

func testOrgs(t *testing.T, b backend) {
	ctx := t.Context()
	clk := newClock()
	db := openClock(t, b.fresh(t), clk)

	def, err := db.EnsureOrg(ctx, "default")
	if err != nil {
		t.Fatalf("EnsureOrg(default) = %v", err)
	}
	if want := stored(clk.Now()); !def.CreatedAt.Equal(want) || def.CreatedAt.Location() != time.UTC {
		t.Errorf("EnsureOrg(default).CreatedAt = %v, want %v in UTC", def.CreatedAt, want)
	}
	if !strings.HasPrefix(def.ID, "org_") || def.Name != "default" {
		t.Errorf("EnsureOrg(default) = %+v, want ID org_… and Name default", def)
	}
	clk.Advance(time.Minute)
	again, err := db.EnsureOrg(ctx, "default")
	if err != nil {
		t.Fatalf("second EnsureOrg(default) = %v", err)
	}
	if diff := cmp.Diff(def, again); diff != "" {
		t.Errorf("second EnsureOrg(default) mismatch (-want +got):\n%s", diff)
	}

	clk.Advance(time.Minute)
	acme := mustOrg(t, db, "acme")
	clk.Advance(time.Minute)
	beta := mustOrg(t, db, "beta")

	_, err = db.CreateOrg(ctx, "acme")
	wantErr(t, "CreateOrg(acme) again", err, store.ErrConflict)
	_, err = db.CreateOrg(ctx, "default")
	wantErr(t, "CreateOrg(default) after EnsureOrg", err, store.ErrConflict)

	got, err := db.Org(ctx, acme.ID)
	if err != nil {
		t.Fatalf("Org(%s) = %v", acme.ID, err)
	}
	if diff := cmp.Diff(acme, got); diff != "" {
		t.Errorf("Org(acme) mismatch (-want +got):\n%s", diff)
	}
	_, err = db.Org(ctx, "org_missing")
	wantErr(t, "Org(org_missing)", err, store.ErrNotFound)

	orgs, err := db.ListOrgs(ctx)
	if err != nil {
		t.Fatalf("ListOrgs() = %v", err)
	}
	if diff := cmp.Diff([]store.Org{beta, acme, def}, orgs); diff != "" {
		t.Errorf("ListOrgs() mismatch, want newest first (-want +got):\n%s", diff)
	}
}

func testEnsureOrgConcurrent(t *testing.T, b backend) {
	ctx := t.Context()
	cfg := b.fresh(t)
	dbs := []*store.DB{storetest.Open(t, cfg), storetest.Open(t, cfg)}
	const callers = 8
	var wg sync.WaitGroup
	ids := make([]string, callers)
	errs := make([]error, callers)
	for i := range callers {
		wg.Go(func() {
			o, err := dbs[i%len(dbs)].EnsureOrg(ctx, "default")
			ids[i], errs[i] = o.ID, err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("EnsureOrg(default) caller %d = %v", i, err)
		}
	}
	if distinct := slices.Compact(slices.Clone(ids)); len(distinct) != 1 {
		t.Errorf("EnsureOrg(default) IDs = %v, want one ID", ids)
	}
	orgs, err := dbs[0].ListOrgs(ctx)
	if err != nil || len(orgs) != 1 {
		t.Errorf("ListOrgs() = %d orgs, %v; want 1, nil", len(orgs), err)
	}
}

func testTokenRoundTrip(t *testing.T, b backend) {
	ctx := t.Context()
	clk := newClock()
	db := openClock(t, b.fresh(t), clk)
	org := mustOrg(t, db, "acme")
	other := mustOrg(t, db, "other")

	expires := time.Date(2032, 1, 2, 3, 4, 5, 987654321, time.FixedZone("Y", -7*3600))
	in := store.Token{
		OrgID:      org.ID,
		Name:       "web",
		Prefix:     "apr_abcd",
		Hash:       hash("apr_abcdsecret"),
		Hostnames:  []string{"app.example.com", "*.example.com"},
		AllowedIPs: []string{"10.0.0.0/8", "2001:db8::/32"},
		ExpiresAt:  &expires,
		CreatedBy:  "master",
	}
	created := mustToken(t, db, in)
	want := in
	want.Hash = slices.Clone(in.Hash)
	want.Hostnames = slices.Clone(in.Hostnames)
	want.ID = created.ID
	want.ExpiresAt = new(stored(expires))
	want.CreatedAt = stored(clk.Now())
	if diff := cmp.Diff(want, created); diff != "" {
		t.Errorf("CreateToken() mismatch (-want +got):\n%s", diff)
	}
	if !strings.HasPrefix(created.ID, "tok_") {
		t.Errorf("CreateToken().ID = %q, want tok_…", created.ID)
	}
	// The store keeps its own copies.
	in.Hash[0] ^= 0xff
	in.Hostnames[0] = "changed.example.com"

	reads := []struct {
		name string
		read func() (store.Token, error)
	}{
		{"TokenByHash", func() (store.Token, error) { return db.TokenByHash(ctx, hash("apr_abcdsecret")) }},
		{"Token(org)", func() (store.Token, error) { return db.Token(ctx, org.ID, created.ID) }},
		{"Token(any org)", func() (store.Token, error) { return db.Token(ctx, "", created.ID) }},
	}
	for _, r := range reads {
		got, err := r.read()
		if err != nil {
			t.Errorf("%s = %v", r.name, err)
			continue
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s mismatch (-want +got):\n%s", r.name, diff)
		}
		if got.CreatedAt.Location() != time.UTC || got.ExpiresAt.Location() != time.UTC {
			t.Errorf("%s times in %v and %v, want UTC", r.name, got.CreatedAt.Location(), got.ExpiresAt.Location())
		}
		if got.CreatedAt.Nanosecond()%1000 != 0 || got.ExpiresAt.Nanosecond()%1000 != 0 {
			t.Errorf("%s times %v, %v: want whole microseconds", r.name, got.CreatedAt, got.ExpiresAt)
		}
	}
	_, err := db.Token(ctx, other.ID, created.ID)
	wantErr(t, "Token(other org)", err, store.ErrNotFound)

	// No lists and no expiry come back as empty lists and nil.
	bare := mustToken(t, db, store.Token{OrgID: org.ID, Hash: hash("bare")})
	got, err := db.Token(ctx, "", bare.ID)
	if err != nil {
		t.Fatalf("Token(bare) = %v", err)
	}
	for name, tok := range map[string]store.Token{"CreateToken(bare)": bare, "Token(bare)": got} {
		if tok.Hostnames == nil || tok.AllowedIPs == nil || len(tok.Hostnames)+len(tok.AllowedIPs) != 0 {
			t.Errorf("%s lists = %#v, %#v; want empty, not nil", name, tok.Hostnames, tok.AllowedIPs)
		}
		if tok.ExpiresAt != nil || tok.RevokedAt != nil {
			t.Errorf("%s ExpiresAt, RevokedAt = %v, %v; want nil", name, tok.ExpiresAt, tok.RevokedAt)
		}
	}
}

func testTokenErrors(t *testing.T, b backend) {
	ctx := t.Context()
	db := storetest.Open(t, b.fresh(t))
	org := mustOrg(t, db, "acme")
	mustToken(t, db, store.Token{OrgID: org.ID, Hash: hash("one")})

	tests := []struct {
		name string
		in   store.Token
		want error // nil: any error
	}{
		{"duplicate hash", store.Token{OrgID: org.ID, Hash: hash("one")}, store.ErrConflict},
		{"missing org", store.Token{OrgID: "org_missing", Hash: hash("two")}, store.ErrNotFound},
		{"no org", store.Token{Hash: hash("three")}, nil},
		{"short hash", store.Token{OrgID: org.ID, Hash: []byte("short")}, nil},
	}
	for _, tt := range tests {
		_, err := db.CreateToken(ctx, tt.in)
		switch {
		case err == nil:
			t.Errorf("CreateToken(%s) = nil, want an error", tt.name)
		case tt.want != nil && !errors.Is(err, tt.want):
			t.Errorf("CreateToken(%s) = %v, want %v", tt.name, err, tt.want)
		}
	}
	_, err := db.TokenByHash(ctx, hash("absent"))
	wantErr(t, "TokenByHash(absent)", err, store.ErrNotFound)
	_, err = db.Token(ctx, "", "tok_missing")
	wantErr(t, "Token(tok_missing)", err, store.ErrNotFound)
	toks, err := db.ListTokens(ctx, "")
	if err != nil || len(toks) != 1 {
		t.Errorf("ListTokens() after failed creates = %d tokens, %v; want 1, nil", len(toks), err)
	}
}

func testTokenScopeAndOrder(t *testing.T, b backend) {
	ctx := t.Context()
	clk := newClock()
	db := openClock(t, b.fresh(t), clk)
	a := mustOrg(t, db, "a")
	bo := mustOrg(t, db, "b")

	a1 := mustToken(t, db, store.Token{OrgID: a.ID, Name: "a1", Hash: hash("a1")})
	clk.Advance(time.Second)
	b1 := mustToken(t, db, store.Token{OrgID: bo.ID, Name: "b1", Hash: hash("b1")})
	clk.Advance(time.Second)
	// Same instant: creation order decides.
	a2 := mustToken(t, db, store.Token{OrgID: a.ID, Name: "a2", Hash: hash("a2")})
	a3 := mustToken(t, db, store.Token{OrgID: a.ID, Name: "a3", Hash: hash("a3")})

	tests := []struct {
		org  string
		want []store.Token
	}{
		{a.ID, []store.Token{a3, a2, a1}},
		{bo.ID, []store.Token{b1}},
		{"", []store.Token{a3, a2, b1, a1}},
		{"org_missing", []store.Token{}},
	}
	for _, tt := range tests {
		got, err := db.ListTokens(ctx, tt.org)
		if err != nil {
			t.Errorf("ListTokens(%q) = %v", tt.org, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("ListTokens(%q) mismatch, want newest first (-want +got):\n%s", tt.org, diff)
		}
	}
}

func testRevokeToken(t *testing.T, b backend) {
	ctx := t.Context()
	db := storetest.Open(t, b.fresh(t))
	org := mustOrg(t, db, "acme")
	other := mustOrg(t, db, "other")
	tok := mustToken(t, db, store.Token{OrgID: org.ID, Hash: hash("t")})

	_, err := db.RevokeToken(ctx, other.ID, tok.ID, time.Now())
	wantErr(t, "RevokeToken(other org)", err, store.ErrNotFound)
	_, err = db.RevokeToken(ctx, "", "tok_missing", time.Now())
	wantErr(t, "RevokeToken(tok_missing)", err, store.ErrNotFound)

	first := time.Date(2031, 5, 6, 7, 8, 9, 999999999, time.FixedZone("Z", 3600))
	got, err := db.RevokeToken(ctx, org.ID, tok.ID, first)
	if err != nil {
		t.Fatalf("RevokeToken() = %v", err)
	}
	want := tok
	want.RevokedAt = new(stored(first))
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("RevokeToken() mismatch (-want +got):\n%s", diff)
	}

	// A second revoke, in any scope, keeps the first time.
	again, err := db.RevokeToken(ctx, "", tok.ID, first.Add(time.Hour))
	if err != nil {
		t.Fatalf("second RevokeToken() = %v", err)
	}
	if diff := cmp.Diff(want, again); diff != "" {
		t.Errorf("second RevokeToken() mismatch (-want +got):\n%s", diff)
	}
	byHash, err := db.TokenByHash(ctx, hash("t"))
	if err != nil {
		t.Fatalf("TokenByHash() = %v", err)
	}
	if diff := cmp.Diff(want, byHash); diff != "" {
		t.Errorf("TokenByHash() after revoke mismatch (-want +got):\n%s", diff)
	}
}

func testAdminKeys(t *testing.T, b backend) {
	ctx := t.Context()
	clk := newClock()
	db := openClock(t, b.fresh(t), clk)
	a := mustOrg(t, db, "a")
	bo := mustOrg(t, db, "b")

	in := store.AdminKey{OrgID: a.ID, Name: "ci", Role: "operator", Prefix: "apk_1234", Hash: hash("k1"), CreatedBy: "master"}
	k1 := mustKey(t, db, in)
	want := in
	want.ID = k1.ID
	want.CreatedAt = stored(clk.Now())
	if diff := cmp.Diff(want, k1); diff != "" {
		t.Errorf("CreateAdminKey() mismatch (-want +got):\n%s", diff)
	}
	if !strings.HasPrefix(k1.ID, "key_") {
		t.Errorf("CreateAdminKey().ID = %q, want key_…", k1.ID)
	}
	clk.Advance(time.Second)
	k2 := mustKey(t, db, store.AdminKey{OrgID: bo.ID, Name: "ops", Role: "admin", Hash: hash("k2")})
	k3 := mustKey(t, db, store.AdminKey{OrgID: a.ID, Name: "view", Role: "viewer", Hash: hash("k3")})

	got, err := db.AdminKeyByHash(ctx, hash("k1"))
	if err != nil {
		t.Fatalf("AdminKeyByHash(k1) = %v", err)
	}
	if diff := cmp.Diff(k1, got); diff != "" {
		t.Errorf("AdminKeyByHash(k1) mismatch (-want +got):\n%s", diff)
	}
	_, err = db.AdminKeyByHash(ctx, hash("absent"))
	wantErr(t, "AdminKeyByHash(absent)", err, store.ErrNotFound)

	_, err = db.CreateAdminKey(ctx, store.AdminKey{OrgID: a.ID, Role: "viewer", Hash: hash("k1")})
	wantErr(t, "CreateAdminKey(duplicate hash)", err, store.ErrConflict)
	_, err = db.CreateAdminKey(ctx, store.AdminKey{OrgID: "org_missing", Role: "viewer", Hash: hash("k9")})
	wantErr(t, "CreateAdminKey(missing org)", err, store.ErrNotFound)
	if _, err := db.CreateAdminKey(ctx, store.AdminKey{OrgID: a.ID, Hash: hash("k8")}); err == nil {
		t.Error("CreateAdminKey(no role) = nil, want an error")
	}

	lists := []struct {
		org  string
		want []store.AdminKey
	}{
		{a.ID, []store.AdminKey{k3, k1}},
		{bo.ID, []store.AdminKey{k2}},
		{"", []store.AdminKey{k3, k2, k1}},
	}
	for _, tt := range lists {
		got, err := db.ListAdminKeys(ctx, tt.org)
		if err != nil {
			t.Errorf("ListAdminKeys(%q) = %v", tt.org, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("ListAdminKeys(%q) mismatch, want newest first (-want +got):\n%s", tt.org, diff)
		}
	}

	wantErr(t, "DeleteAdminKey(other org)", db.DeleteAdminKey(ctx, bo.ID, k1.ID), store.ErrNotFound)
	wantErr(t, "DeleteAdminKey(org)", db.DeleteAdminKey(ctx, a.ID, k1.ID), nil)
	wantErr(t, "DeleteAdminKey(again)", db.DeleteAdminKey(ctx, "", k1.ID), store.ErrNotFound)
	wantErr(t, "DeleteAdminKey(any org)", db.DeleteAdminKey(ctx, "", k2.ID), nil)
	_, err = db.AdminKeyByHash(ctx, hash("k1"))
	wantErr(t, "AdminKeyByHash(deleted)", err, store.ErrNotFound)
	left, err := db.ListAdminKeys(ctx, "")
	if err != nil {
		t.Fatalf("ListAdminKeys() = %v", err)
	}
	if diff := cmp.Diff([]store.AdminKey{k3}, left); diff != "" {
		t.Errorf("ListAdminKeys() after deletes mismatch (-want +got):\n%s", diff)
	}
}

func testMaintenance(t *testing.T, b backend) {
	ctx := t.Context()
	clk := newClock()
	db := openClock(t, b.fresh(t), clk)
	a := mustOrg(t, db, "a")
	bo := mustOrg(t, db, "b")

	list := func() []store.Maintenance {
		t.Helper()
		ms, err := db.ListMaintenance(ctx)
		if err != nil {
			t.Fatalf("ListMaintenance() = %v", err)
		}
		return ms
	}
	if got := list(); got == nil || len(got) != 0 {
		t.Errorf("ListMaintenance() on a new store = %#v, want empty", got)
	}

	// Zero Since means now.
	wantErr(t, "SetMaintenance(app)", db.SetMaintenance(ctx, store.Maintenance{Hostname: "app.example.com", OrgID: a.ID, By: "alice"}), nil)
	app := store.Maintenance{Hostname: "app.example.com", OrgID: a.ID, By: "alice", Since: stored(clk.Now())}
	since := time.Date(2031, 6, 7, 8, 9, 10, 111222333, time.FixedZone("W", -3600))
	wantErr(t, "SetMaintenance(api)", db.SetMaintenance(ctx, store.Maintenance{Hostname: "api.example.com", OrgID: bo.ID, By: "bob", Since: since}), nil)
	api := store.Maintenance{Hostname: "api.example.com", OrgID: bo.ID, By: "bob", Since: stored(since)}
	if diff := cmp.Diff([]store.Maintenance{api, app}, list()); diff != "" {
		t.Errorf("ListMaintenance() mismatch, want latest first (-want +got):\n%s", diff)
	}

	// Setting again is an upsert: one record, new By and Since.
	later := clk.Advance(time.Hour * 24 * 365)
	wantErr(t, "SetMaintenance(app) again", db.SetMaintenance(ctx, store.Maintenance{Hostname: "app.example.com", OrgID: a.ID, By: "carol"}), nil)
	app = store.Maintenance{Hostname: "app.example.com", OrgID: a.ID, By: "carol", Since: stored(later)}
	if diff := cmp.Diff([]store.Maintenance{app, api}, list()); diff != "" {
		t.Errorf("ListMaintenance() after upsert mismatch (-want +got):\n%s", diff)
	}

	// Another org cannot take or clear the hostname.
	err := db.SetMaintenance(ctx, store.Maintenance{Hostname: "app.example.com", OrgID: bo.ID, By: "mallory"})
	wantErr(t, "SetMaintenance(app, other org)", err, store.ErrConflict)
	err = db.SetMaintenance(ctx, store.Maintenance{Hostname: "new.example.com", OrgID: "org_missing"})
	wantErr(t, "SetMaintenance(missing org)", err, store.ErrNotFound)
	wantErr(t, "ClearMaintenance(app, other org)", db.ClearMaintenance(ctx, bo.ID, "app.example.com"), store.ErrNotFound)
	if diff := cmp.Diff([]store.Maintenance{app, api}, list()); diff != "" {
		t.Errorf("ListMaintenance() after refused calls mismatch (-want +got):\n%s", diff)
	}

	wantErr(t, "ClearMaintenance(app)", db.ClearMaintenance(ctx, a.ID, "app.example.com"), nil)
	wantErr(t, "ClearMaintenance(app) again", db.ClearMaintenance(ctx, a.ID, "app.example.com"), store.ErrNotFound)
	wantErr(t, "ClearMaintenance(api, any org)", db.ClearMaintenance(ctx, "", "api.example.com"), nil)
	wantErr(t, "ClearMaintenance(never set)", db.ClearMaintenance(ctx, "", "none.example.com"), store.ErrNotFound)
	if got := list(); len(got) != 0 {
		t.Errorf("ListMaintenance() after clearing = %+v, want empty", got)
	}
}

func testAudit(t *testing.T, b backend) {
	ctx := t.Context()
	clk := newClock()
	db := openClock(t, b.fresh(t), clk)
	a := mustOrg(t, db, "a")
	bo := mustOrg(t, db, "b")

	appendAudit := func(e store.AuditEntry) store.AuditEntry {
		t.Helper()
		got, err := db.AppendAudit(ctx, e)
		if err != nil {
			t.Fatalf("AppendAudit(%s) = %v", e.Event, err)
		}
		return got
	}
	e1 := appendAudit(store.AuditEntry{OrgID: a.ID, Event: "token_minted", Actor: "master", Hostname: "app.example.com", Detail: "tok_1"})
	want := store.AuditEntry{ID: e1.ID, At: stored(clk.Now()), OrgID: a.ID, Event: "token_minted", Actor: "master", Hostname: "app.example.com", Detail: "tok_1"}
	if diff := cmp.Diff(want, e1); diff != "" {
		t.Errorf("AppendAudit() mismatch (-want +got):\n%s", diff)
	}
	clk.Advance(time.Second)
	e2 := appendAudit(store.AuditEntry{Event: "login_failed", Actor: "203.0.113.7"})
	e3 := appendAudit(store.AuditEntry{OrgID: bo.ID, Event: "token_revoked"})
	// An explicit At is kept, even an earlier one; order follows At.
	early := appendAudit(store.AuditEntry{OrgID: a.ID, Event: "client_refused", At: time.Date(2030, 1, 1, 0, 0, 0, 1999, time.UTC)})
	if !early.At.Equal(time.Date(2030, 1, 1, 0, 0, 0, 1000, time.UTC)) {
		t.Errorf("AppendAudit(At set).At = %v, want 2030-01-01 00:00:00.000001", early.At)
	}
	if !(e1.ID < e2.ID && e2.ID < e3.ID && e3.ID < early.ID) {
		t.Errorf("audit IDs %d, %d, %d, %d: want increasing", e1.ID, e2.ID, e3.ID, early.ID)
	}
	if _, err := db.AppendAudit(ctx, store.AuditEntry{OrgID: a.ID}); err == nil {
		t.Error("AppendAudit(no event) = nil, want an error")
	}

	tests := []struct {
		org   string
		limit int
		want  []store.AuditEntry
	}{
		{"", 0, []store.AuditEntry{e3, e2, e1, early}},
		{a.ID, 0, []store.AuditEntry{e1, early}},
		{bo.ID, 10, []store.AuditEntry{e3}},
		{"", 2, []store.AuditEntry{e3, e2}},
		{"org_missing", 0, []store.AuditEntry{}},
	}
	for _, tt := range tests {
		got, err := db.ListAudit(ctx, tt.org, tt.limit)
		if err != nil {
			t.Errorf("ListAudit(%q, %d) = %v", tt.org, tt.limit, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("ListAudit(%q, %d) mismatch, want newest first (-want +got):\n%s", tt.org, tt.limit, diff)
		}
	}
}

func testAuditLimits(t *testing.T, b backend) {
	ctx := t.Context()
	db := storetest.Open(t, b.fresh(t))
	for i := range store.MaxAuditLimit + 1 {
		if _, err := db.AppendAudit(ctx, store.AuditEntry{Event: "e", Detail: fmt.Sprint(i)}); err != nil {
			t.Fatalf("AppendAudit(%d) = %v", i, err)
		}
	}
	tests := []struct{ limit, want int }{
		{0, store.DefaultAuditLimit},
		{-1, store.DefaultAuditLimit},
		{7, 7},
		{store.MaxAuditLimit + 1, store.MaxAuditLimit},
	}
	for _, tt := range tests {
		got, err := db.ListAudit(ctx, "", tt.limit)
		if err != nil || len(got) != tt.want {
			t.Errorf("ListAudit(%d) = %d entries, %v; want %d", tt.limit, len(got), err, tt.want)
			continue
		}
		if last := fmt.Sprint(store.MaxAuditLimit); got[0].Detail != last {
			t.Errorf("ListAudit(%d)[0].Detail = %q, want the newest, %q", tt.limit, got[0].Detail, last)
		}
	}
}

func testAuditAppendOnly(t *testing.T, b backend) {
	ctx := t.Context()
	db := storetest.Open(t, b.fresh(t))
	e, err := db.AppendAudit(ctx, store.AuditEntry{Event: "token_minted", Detail: "original"})
	if err != nil {
		t.Fatalf("AppendAudit() = %v", err)
	}
	for _, q := range []string{
		`UPDATE audit SET detail = 'forged'`,
		`UPDATE audit SET at = at WHERE id = ` + fmt.Sprint(e.ID),
		`DELETE FROM audit`,
		`DELETE FROM audit WHERE id = ` + fmt.Sprint(e.ID),
	} {
		if err := db.ExecForTest(ctx, q); err == nil {
			t.Errorf("raw %q = nil, want the database to refuse it", q)
		}
	}
	got, err := db.ListAudit(ctx, "", 0)
	if err != nil {
		t.Fatalf("ListAudit() = %v", err)
	}
	if diff := cmp.Diff([]store.AuditEntry{e}, got); diff != "" {
		t.Errorf("ListAudit() after refused writes mismatch (-want +got):\n%s", diff)
	}

	// And the API offers nothing but append and list.
	var methods []string
	typ := reflect.TypeFor[*store.DB]()
	for i := range typ.NumMethod() {
		if name := typ.Method(i).Name; strings.Contains(name, "Audit") {
			methods = append(methods, name)
		}
	}
	if want := []string{"AppendAudit", "ListAudit"}; !slices.Equal(methods, want) {
		t.Errorf("audit methods of *store.DB = %v, want %v", methods, want)
	}
}

func testSubscribe(t *testing.T, b backend) {
	ctx := t.Context()
	db := storetest.Open(t, b.fresh(t))
	org := mustOrg(t, db, "acme")
	tok := mustToken(t, db, store.Token{OrgID: org.ID, Hash: hash("t")})
	key := mustKey(t, db, store.AdminKey{OrgID: org.ID, Role: "admin", Hash: hash("k")})
	sub := db.Subscribe(ctx)

	if _, err := db.RevokeToken(ctx, "", tok.ID, time.Now()); err != nil {
		t.Fatalf("RevokeToken() = %v", err)
	}
	wantChange(t, sub, store.Change{Kind: store.ChangeTokenRevoked, ID: tok.ID, OrgID: org.ID})

	// Calls that change nothing announce nothing: the next change is
	// the key's.
	if _, err := db.RevokeToken(ctx, "", tok.ID, time.Now()); err != nil {
		t.Fatalf("second RevokeToken() = %v", err)
	}
	wantErr(t, "DeleteAdminKey(missing)", db.DeleteAdminKey(ctx, "", "key_missing"), store.ErrNotFound)
	wantErr(t, "ClearMaintenance(never set)", db.ClearMaintenance(ctx, "", "none.example.com"), store.ErrNotFound)
	wantErr(t, "DeleteAdminKey()", db.DeleteAdminKey(ctx, "", key.ID), nil)
	wantChange(t, sub, store.Change{Kind: store.ChangeAdminKeyDeleted, ID: key.ID, OrgID: org.ID})

	m := store.Maintenance{Hostname: "app.example.com", OrgID: org.ID, By: "alice"}
	wantErr(t, "SetMaintenance()", db.SetMaintenance(ctx, m), nil)
	wantChange(t, sub, store.Change{Kind: store.ChangeMaintenanceSet, OrgID: org.ID, Hostname: m.Hostname})
	wantErr(t, "ClearMaintenance()", db.ClearMaintenance(ctx, "", m.Hostname), nil)
	wantChange(t, sub, store.Change{Kind: store.ChangeMaintenanceCleared, OrgID: org.ID, Hostname: m.Hostname})

	// Every subscriber gets every change.
	sub2 := db.Subscribe(ctx)
	wantErr(t, "SetMaintenance() again", db.SetMaintenance(ctx, m), nil)
	want := store.Change{Kind: store.ChangeMaintenanceSet, OrgID: org.ID, Hostname: m.Hostname}
	wantChange(t, sub, want)
	wantChange(t, sub2, want)
}

func testSubscribeAcrossDBs(t *testing.T, b backend) {
	if !b.shared {
		t.Skipf("%s: one server owns the database file; changes reach the subscribers of the DB that made them only", b.name)
	}
	ctx := t.Context()
	cfg := b.fresh(t)
	db1 := storetest.Open(t, cfg)
	db2 := storetest.Open(t, cfg)
	org := mustOrg(t, db1, "acme")
	tok := mustToken(t, db1, store.Token{OrgID: org.ID, Hash: hash("t")})
	sub1 := db1.Subscribe(ctx)
	sub2 := db2.Subscribe(ctx)

	// A token minted on one server works on the other at once.
	if _, err := db2.TokenByHash(ctx, hash("t")); err != nil {
		t.Fatalf("db2.TokenByHash() = %v", err)
	}
	if _, err := db2.RevokeToken(ctx, org.ID, tok.ID, time.Now()); err != nil {
		t.Fatalf("db2.RevokeToken() = %v", err)
	}
	want := store.Change{Kind: store.ChangeTokenRevoked, ID: tok.ID, OrgID: org.ID}
	wantChange(t, sub1, want)
	wantChange(t, sub2, want)

	m := store.Maintenance{Hostname: "app.example.com", OrgID: org.ID}
	wantErr(t, "db1.SetMaintenance()", db1.SetMaintenance(ctx, m), nil)
	want = store.Change{Kind: store.ChangeMaintenanceSet, OrgID: org.ID, Hostname: m.Hostname}
	wantChange(t, sub1, want)
	wantChange(t, sub2, want)
}

func testSubscribeEnds(t *testing.T, b backend) {
	db := storetest.Open(t, b.fresh(t))
	ctx, cancel := context.WithCancel(t.Context())
	byCtx := db.Subscribe(ctx)
	byClose := db.Subscribe(t.Context())
	cancel()
	wantClosed(t, byCtx)
	if err := db.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	wantClosed(t, byClose)
	wantClosed(t, db.Subscribe(t.Context()))
}

func testSlowSubscriber(t *testing.T, b backend) {
	ctx := t.Context()
	db := storetest.Open(t, b.fresh(t))
	org := mustOrg(t, db, "acme")
	sub := db.Subscribe(ctx)

	// Nobody reads sub while far more changes than it can queue are
	// made: every write still completes.
	const n = 600
	wctx, cancel := context.WithTimeout(ctx, waitFor)
	defer cancel()
	for i := range n {
		m := store.Maintenance{Hostname: fmt.Sprintf("h%d.example.com", i), OrgID: org.ID}
		if err := db.SetMaintenance(wctx, m); err != nil {
			t.Fatalf("SetMaintenance(%d) with a stalled subscriber = %v", i, err)
		}
	}
	// The subscriber then catches up: the last change arrives, and every
	// change was either delivered or counted as dropped, with a resync in
	// place of the dropped ones.
	last := store.Change{Kind: store.ChangeMaintenanceSet, OrgID: org.ID, Hostname: fmt.Sprintf("h%d.example.com", n-1)}
	delivered, resyncs := 0, 0
	for {
		c := recv(t, sub)
		if c.Kind == store.ChangeResync {
			resyncs++
			continue
		}
		delivered++
		if c == last {
			break
		}
	}
	dropped := db.DroppedChanges()
	if uint64(delivered)+dropped != n {
		t.Errorf("delivered %d + dropped %d changes, want %d", delivered, dropped, n)
	}
	if (dropped > 0) != (resyncs > 0) {
		t.Errorf("dropped %d changes and sent %d resyncs: want a resync exactly when changes were dropped", dropped, resyncs)
	}
	if b.name == store.BackendSQLite && dropped == 0 {
		// SQLite publishes as it commits, so the stalled queue must
		// have overflowed.
		t.Errorf("dropped = 0 after %d changes to a stalled subscriber, want > 0", n)
	}
}

func testTwoDBs(t *testing.T, b backend) {
	ctx := t.Context()
	cfg := b.fresh(t)
	dbs := []*store.DB{storetest.Open(t, cfg), storetest.Open(t, cfg)}
	org := mustOrg(t, dbs[0], "acme")

	const perDB = 20
	var wg sync.WaitGroup
	errs := make(chan error, 2*perDB)
	for d, db := range dbs {
		wg.Go(func() {
			for i := range perDB {
				secret := fmt.Sprintf("db%d-%d", d, i)
				if _, err := db.CreateToken(ctx, store.Token{OrgID: org.ID, Name: secret, Hash: hash(secret)}); err != nil {
					errs <- fmt.Errorf("CreateToken(%s) = %w", secret, err)
				}
				if _, err := db.AppendAudit(ctx, store.AuditEntry{OrgID: org.ID, Event: "token_minted", Detail: secret}); err != nil {
					errs <- fmt.Errorf("AppendAudit(%s) = %w", secret, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for d, db := range dbs {
		toks, err := db.ListTokens(ctx, org.ID)
		if err != nil || len(toks) != 2*perDB {
			t.Errorf("db%d.ListTokens() = %d tokens, %v; want %d", d, len(toks), err, 2*perDB)
		}
	}
}

func testClosed(t *testing.T, b backend) {
	db := storetest.Open(t, b.fresh(t))
	f := seed(t, db)
	if err := db.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	for _, c := range calls(db, f) {
		if err := c.call(t.Context()); !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%s after Close = %v, want ErrUnavailable", c.name, err)
		}
	}
}

// fixtures are records every method of the store can be called on.
type fixtures struct {
	org   store.Org
	token store.Token
	key   store.AdminKey
	host  string
}

func seed(t testing.TB, db *store.DB) fixtures {
	t.Helper()
	org := mustOrg(t, db, "seed")
	f := fixtures{
		org:   org,
		token: mustToken(t, db, store.Token{OrgID: org.ID, Name: "seed", Hash: hash("seed-token")}),
		key:   mustKey(t, db, store.AdminKey{OrgID: org.ID, Role: "admin", Hash: hash("seed-key")}),
		host:  "seed.example.com",
	}
	if err := db.SetMaintenance(context.Background(), store.Maintenance{Hostname: f.host, OrgID: org.ID}); err != nil {
		t.Fatalf("SetMaintenance(seed) = %v", err)
	}
	return f
}

// call is one method of the store, ready to run.
type call struct {
	name string
	call func(ctx context.Context) error
}

// calls lists every method of the store that touches the database, with
// valid arguments.
func calls(db *store.DB, f fixtures) []call {
	ignore1 := func(_ any, err error) error { return err }
	return []call{
		{"Ping", func(ctx context.Context) error { return db.Ping(ctx) }},
		{"EnsureOrg", func(ctx context.Context) error { return ignore1(db.EnsureOrg(ctx, "default")) }},
		{"CreateOrg", func(ctx context.Context) error { return ignore1(db.CreateOrg(ctx, "fresh")) }},
		{"Org", func(ctx context.Context) error { return ignore1(db.Org(ctx, f.org.ID)) }},
		{"ListOrgs", func(ctx context.Context) error { return ignore1(db.ListOrgs(ctx)) }},
		{"CreateToken", func(ctx context.Context) error {
			return ignore1(db.CreateToken(ctx, store.Token{OrgID: f.org.ID, Hash: hash("call-token")}))
		}},
		{"TokenByHash", func(ctx context.Context) error { return ignore1(db.TokenByHash(ctx, f.token.Hash)) }},
		{"Token", func(ctx context.Context) error { return ignore1(db.Token(ctx, f.org.ID, f.token.ID)) }},
		{"ListTokens", func(ctx context.Context) error { return ignore1(db.ListTokens(ctx, "")) }},
		{"RevokeToken", func(ctx context.Context) error { return ignore1(db.RevokeToken(ctx, "", f.token.ID, time.Now())) }},
		{"CreateAdminKey", func(ctx context.Context) error {
			return ignore1(db.CreateAdminKey(ctx, store.AdminKey{OrgID: f.org.ID, Role: "viewer", Hash: hash("call-key")}))
		}},
		{"AdminKeyByHash", func(ctx context.Context) error { return ignore1(db.AdminKeyByHash(ctx, f.key.Hash)) }},
		{"ListAdminKeys", func(ctx context.Context) error { return ignore1(db.ListAdminKeys(ctx, "")) }},
		{"DeleteAdminKey", func(ctx context.Context) error { return db.DeleteAdminKey(ctx, "", f.key.ID) }},
		{"SetMaintenance", func(ctx context.Context) error {
			return db.SetMaintenance(ctx, store.Maintenance{Hostname: "call.example.com", OrgID: f.org.ID})
		}},
		{"ClearMaintenance", func(ctx context.Context) error { return db.ClearMaintenance(ctx, "", f.host) }},
		{"ListMaintenance", func(ctx context.Context) error { return ignore1(db.ListMaintenance(ctx)) }},
		{"AppendAudit", func(ctx context.Context) error {
			return ignore1(db.AppendAudit(ctx, store.AuditEntry{Event: "call"}))
		}},
		{"ListAudit", func(ctx context.Context) error { return ignore1(db.ListAudit(ctx, "", 0)) }},
	}
}
