package store_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"github.com/aperio-dev/aperio/tunnel"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
	// fresh returns the Config of a new database, with no rows and the
	// schema current (storetest's Migrated*: a copy of one database
	// migrated once).
	fresh func(t testing.TB) store.Config
	// empty, if set, returns the Config of a new database without even the
	// schema, for the tests of migrating one; nil means fresh's are.
	empty func(t testing.TB) store.Config
	// shared says whether changes made through one DB reach the
	// subscribers of another DB on the same database.
	shared bool
	// dropAuditGuards is the raw SQL that removes the triggers keeping
	// the audit log append-only, as someone with write access to the
	// database could, so that tamper tests can change rows.
	dropAuditGuards []string
	// blob renders bytes as a literal of the dialect.
	blob func([]byte) string
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
		{"TokenLimits", testTokenLimits},
		{"TokenLimitsRefused", testTokenLimitsRefused},
		{"RotateToken", testRotateToken},
		{"OrgCaps", testOrgCaps},
		{"OrgCapsConcurrent", testOrgCapsConcurrent},
		{"ExpiryWarnings", testExpiryWarnings},
		{"AdminKeyExpiry", testAdminKeyExpiry},
		{"AdminKeys", testAdminKeys},
		{"AdminSessions", testAdminSessions},
		{"AdminSessionsBound", testAdminSessionsBound},
		{"AdminSessionsExpiry", testAdminSessionsExpiry},
		{"OIDCRevocations", testOIDCRevocations},
		{"Maintenance", testMaintenance},
		{"Audit", testAudit},
		{"AuditLimits", testAuditLimits},
		{"AuditQuery", testAuditQuery},
		{"AuditAppendOnly", testAuditAppendOnly},
		{"Webhooks", testWebhooks},
		{"WebhooksFor", testWebhooksFor},
		{"WebhookDeliveries", testWebhookDeliveries},
		{"WebhookDeliveriesBound", testWebhookDeliveriesBound},
		{"WebhookDeliveriesHostile", testWebhookDeliveriesHostile},
		{"AuditChain", testAuditChain},
		{"AuditChainTampered", testAuditChainTampered},
		{"AuditChainConcurrent", testAuditChainConcurrent},
		{"AuditChainBackfill", testAuditChainBackfill},
		{"ScalingDeclare", testScalingDeclare},
		{"ScalingRearm", testScalingRearm},
		{"ScalingCall", testScalingCall},
		{"ScalingCallState", testScalingCallState},
		{"ScalingLease", testScalingLease},
		{"ScalingLeaseHostile", testScalingLeaseHostile},
		{"ScalingLeaseConcurrent", testScalingLeaseConcurrent},
		{"ScalingLeaseKeyLifetime", testScalingLeaseKeyLifetime},
		{"ScalingLeaseGeneration", testScalingLeaseGeneration},
		{"ScalingBudget", testScalingBudget},
		{"ScalingDatabaseClock", testScalingDatabaseClock},
		{"ScalingScopeAndOrder", testScalingScopeAndOrder},
		{"ScalingRelease", testScalingRelease},
		{"ScalingTTL", testScalingTTL},
		{"ScalingChanges", testScalingChanges},
		{"ScalingChangesAcrossDBs", testScalingChangesAcrossDBs},
		{"ScalingDeclareConcurrent", testScalingDeclareConcurrent},
		{"Subscribe", testSubscribe},
		{"SubscribeAcrossDBs", testSubscribeAcrossDBs},
		{"SubscribeEnds", testSubscribeEnds},
		{"SlowSubscriberNeverBlocksWriters", testSlowSubscriber},
		{"TwoDBsOneDatabase", testTwoDBs},
		{"ClosedIsUnavailable", testClosed},
		{"OrgHostnames", testOrgHostnames},
		{"OrgHostnamesConcurrent", testOrgHostnamesConcurrent},
		{"OrgPorts", testOrgPorts},
		{"OrgPortsConcurrent", testOrgPortsConcurrent},
		{"SigningKeys", testSigningKeys},
		{"SigningKeysHostile", testSigningKeysHostile},
		{"SigningKeysConcurrent", testSigningKeysConcurrent},
		{"Usage", testUsage},
		{"ACME", testACME},
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

// emptyDB returns the Config of a new database without a schema.
func (b backend) emptyDB(t testing.TB) store.Config {
	if b.empty != nil {
		return b.empty(t)
	}
	return b.fresh(t)
}

func testOpenMigratesOnce(t *testing.T, b backend) {
	ctx := t.Context()
	cfg := b.emptyDB(t)
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
		// A field added by a later migration reads back as written.
		AllowCatchAll: true,
	}
	created := mustToken(t, db, in)
	want := in
	want.Hash = slices.Clone(in.Hash)
	want.Hostnames = slices.Clone(in.Hostnames)
	want.ID = created.ID
	want.ExpiresAt = new(stored(expires))
	want.CreatedAt = stored(clk.Now())
	want.Limits = store.TokenLimits{Paths: []string{}, ClientAllowedIPs: []string{}, AllowTCPPorts: []string{}}
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
		if tok.AllowCatchAll {
			t.Errorf("%s AllowCatchAll = true, want false (the default)", name)
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

	// Reason and end round-trip; setting again without them drops them.
	ends := time.Date(2031, 6, 8, 8, 9, 10, 999888777, time.FixedZone("E", 7200))
	wildcard := store.Maintenance{Hostname: "*.example.com", OrgID: a.ID, By: "alice", Since: later, Reason: "db upgrade", ExpiresAt: &ends}
	wantErr(t, "SetMaintenance(wildcard, reason, end)", db.SetMaintenance(ctx, wildcard), nil)
	storedEnd := stored(ends)
	wildcard.Since, wildcard.ExpiresAt = stored(later), &storedEnd
	if got := list(); len(got) != 3 || !cmp.Equal(got[1], wildcard) && !cmp.Equal(got[0], wildcard) {
		t.Errorf("ListMaintenance() = %+v, want %+v among them", got, wildcard)
	}
	wantErr(t, "SetMaintenance(wildcard) without reason", db.SetMaintenance(ctx, store.Maintenance{Hostname: "*.example.com", OrgID: a.ID, By: "alice", Since: later}), nil)
	for _, m := range list() {
		if m.Hostname == "*.example.com" && (m.Reason != "" || m.ExpiresAt != nil) {
			t.Errorf("wildcard set again without reason and end = %+v, want neither", m)
		}
	}
	wantErr(t, "ClearMaintenance(wildcard)", db.ClearMaintenance(ctx, a.ID, "*.example.com"), nil)

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
	e1 := appendAudit(store.AuditEntry{OrgID: a.ID, Event: "token_minted", Actor: "master", Hostname: "app.example.com", Detail: "tok_1",
		Seq: 99, Hash: []byte("ignored")})
	want := store.AuditEntry{ID: e1.ID, Seq: 1, PrevHash: make([]byte, sha256.Size), At: stored(clk.Now()), OrgID: a.ID, Event: "token_minted", Actor: "master", Hostname: "app.example.com", Detail: "tok_1"}
	want.Hash = store.AuditHash(want.PrevHash, want)
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

func testAuditQuery(t *testing.T, b backend) {
	ctx := t.Context()
	db := storetest.Open(t, b.fresh(t))
	a := mustOrg(t, db, "a")
	t0 := time.Date(2031, 5, 1, 12, 0, 0, 0, time.UTC)
	add := func(min int, e store.AuditEntry) store.AuditEntry {
		t.Helper()
		e.At = t0.Add(time.Duration(min) * time.Minute)
		got, err := db.AppendAudit(ctx, e)
		if err != nil {
			t.Fatalf("AppendAudit(%s) = %v", e.Event, err)
		}
		return got
	}
	e1 := add(0, store.AuditEntry{OrgID: a.ID, Event: "token_minted", Actor: "master", Hostname: "app.example.com"})
	e2 := add(1, store.AuditEntry{OrgID: a.ID, Event: "token_revoked", Actor: "key:k1", Hostname: "app.example.com"})
	e3 := add(2, store.AuditEntry{Event: "token_minted", Actor: "key:k1", Hostname: "other.example.com"})
	e4 := add(3, store.AuditEntry{OrgID: a.ID, Event: "maintenance_set", Actor: "master"})
	e5 := add(4, store.AuditEntry{OrgID: a.ID, Event: "token_created", Actor: "master"})
	tests := []struct {
		name string
		q    store.AuditQuery
		want []store.AuditEntry
	}{
		{"none", store.AuditQuery{}, []store.AuditEntry{e5, e4, e3, e2, e1}},
		{"event", store.AuditQuery{Event: "token_revoked"}, []store.AuditEntry{e2}},
		// token_minted was renamed token_created: the new name finds the
		// stored old one, the old name only itself.
		{"renamed event", store.AuditQuery{Event: "token_created"}, []store.AuditEntry{e5, e3, e1}},
		{"old name", store.AuditQuery{Event: "token_minted"}, []store.AuditEntry{e3, e1}},
		{"actor", store.AuditQuery{Actor: "key:k1"}, []store.AuditEntry{e3, e2}},
		{"hostname exact", store.AuditQuery{Hostname: "app.example.com"}, []store.AuditEntry{e2, e1}},
		{"hostname no prefix match", store.AuditQuery{Hostname: "example.com"}, []store.AuditEntry{}},
		{"since inclusive", store.AuditQuery{Since: e2.At}, []store.AuditEntry{e5, e4, e3, e2}},
		{"until exclusive", store.AuditQuery{Until: e2.At}, []store.AuditEntry{e1}},
		{"window", store.AuditQuery{Since: e2.At, Until: e4.At}, []store.AuditEntry{e3, e2}},
		{"org and event", store.AuditQuery{OrgID: a.ID, Event: "token_minted"}, []store.AuditEntry{e1}},
		{"all filters", store.AuditQuery{OrgID: a.ID, Event: "token_revoked", Actor: "key:k1", Hostname: "app.example.com", Since: t0, Until: t0.Add(time.Hour)}, []store.AuditEntry{e2}},
		{"limit", store.AuditQuery{Actor: "master", Limit: 1}, []store.AuditEntry{e5}},
		{"like is not a pattern", store.AuditQuery{Event: "token%"}, []store.AuditEntry{}},
		{"empty window", store.AuditQuery{Since: e4.At, Until: e1.At}, []store.AuditEntry{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := db.QueryAudit(ctx, tt.q)
			if err != nil {
				t.Fatalf("QueryAudit(%+v) = %v", tt.q, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("QueryAudit(%+v) mismatch (-want +got):\n%s", tt.q, diff)
			}
		})
	}
	if _, err := db.QueryAudit(ctx, store.AuditQuery{Hostname: strings.Repeat("h", store.MaxAuditQueryField+1)}); err == nil {
		t.Error("QueryAudit(huge hostname) = nil error, want a refusal")
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
	if want := []string{"AppendAudit", "ListAudit", "QueryAudit", "VerifyAudit"}; !slices.Equal(methods, want) {
		t.Errorf("audit methods of *store.DB = %v, want %v", methods, want)
	}
}

// appendN appends n entries with distinct details and returns them in order.
func appendN(t testing.TB, db *store.DB, n int) []store.AuditEntry {
	t.Helper()
	var es []store.AuditEntry
	for i := range n {
		e, err := db.AppendAudit(t.Context(), store.AuditEntry{Event: "token_minted", Actor: "master", Hostname: "app.example.com", Detail: fmt.Sprint("tok_", i)})
		if err != nil {
			t.Fatalf("AppendAudit(%d) = %v", i, err)
		}
		es = append(es, e)
	}
	return es
}

func testAuditChain(t *testing.T, b backend) {
	ctx := t.Context()
	db := storetest.Open(t, b.fresh(t))
	if n, err := db.VerifyAudit(ctx); n != 0 || err != nil {
		t.Errorf("VerifyAudit(empty log) = %d, %v; want 0, nil", n, err)
	}
	es := appendN(t, db, 5)
	prev := make([]byte, sha256.Size)
	for i, e := range es {
		if e.Seq != int64(i+1) || !slices.Equal(e.PrevHash, prev) || !slices.Equal(e.Hash, store.AuditHash(prev, e)) {
			t.Errorf("entry %d: seq %d, prev_hash %x, hash %x; want seq %d chained after %x", i, e.Seq, e.PrevHash, e.Hash, i+1, prev)
		}
		prev = e.Hash
	}
	if n, err := db.VerifyAudit(ctx); n != 5 || err != nil {
		t.Errorf("VerifyAudit() = %d, %v; want 5, nil", n, err)
	}
	// The hash covers every content field: changing any one changes it.
	base := es[2]
	for name, change := range map[string]func(*store.AuditEntry){
		"seq":      func(e *store.AuditEntry) { e.Seq++ },
		"at":       func(e *store.AuditEntry) { e.At = e.At.Add(time.Microsecond) },
		"org_id":   func(e *store.AuditEntry) { e.OrgID = "org_x" },
		"event":    func(e *store.AuditEntry) { e.Event = "token_revoked" },
		"actor":    func(e *store.AuditEntry) { e.Actor = "key_x" },
		"hostname": func(e *store.AuditEntry) { e.Hostname = "other.example.com" },
		"detail":   func(e *store.AuditEntry) { e.Detail += "x" },
		// Moving bytes between adjacent fields keeps the concatenation
		// but not the length-prefixed encoding.
		"field boundary": func(e *store.AuditEntry) { e.Actor, e.Hostname = e.Actor+"a", strings.TrimPrefix("a"+e.Hostname, "a") },
	} {
		e := base
		change(&e)
		if slices.Equal(store.AuditHash(e.PrevHash, e), base.Hash) {
			t.Errorf("AuditHash with %s changed = the original hash, want a different one", name)
		}
	}
}

func testAuditChainTampered(t *testing.T, b backend) {
	tests := []struct {
		name string
		// tamper returns the raw SQL to run, given the entries.
		tamper []string
		// broken is the index of the entry VerifyAudit must name.
		broken int
		reason string
	}{
		{"detail changed", []string{`UPDATE audit SET detail = 'forged' WHERE seq = 3`}, 2, "hash does not match"},
		{"event changed", []string{`UPDATE audit SET event = 'nothing' WHERE seq = 1`}, 0, "hash does not match"},
		{"row deleted", []string{`DELETE FROM audit WHERE seq = 3`}, 3, "entry seq 3 missing"},
		{"two rows deleted", []string{`DELETE FROM audit WHERE seq IN (2, 3)`}, 3, "entry seq 2-3 missing"},
		{"hash overwritten", []string{`UPDATE audit SET detail = 'forged', hash = prev_hash WHERE seq = 2`}, 1, "hash does not match"},
		{"row replaced by a consistent forgery", nil, 3, "prev_hash"},
		{"tail deleted", []string{`DELETE FROM audit WHERE seq = 5`}, 3, "head records seq 5"},
		{"row inserted around the store", []string{`INSERT INTO audit (at, org_id, event, actor, hostname, detail) VALUES ('2031-01-01T00:00:00.000000Z', '', 'forged', 'x', '', '')`}, -1, "no chain columns"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			db := storetest.Open(t, b.fresh(t))
			es := appendN(t, db, 5)
			for _, q := range b.dropAuditGuards {
				if err := db.ExecForTest(ctx, q); err != nil {
					t.Fatalf("raw %q = %v", q, err)
				}
			}
			queries := tt.tamper
			if queries == nil {
				// Rewrite entry seq 3 and give it the right hash for its
				// new content: only the next link shows it.
				forged := es[2]
				forged.Detail = "forged"
				h := store.AuditHash(forged.PrevHash, forged)
				queries = []string{fmt.Sprintf(`UPDATE audit SET detail = 'forged', hash = %s WHERE seq = 3`, b.blob(h))}
			}
			for _, q := range queries {
				if err := db.ExecForTest(ctx, q); err != nil {
					t.Fatalf("raw %q = %v", q, err)
				}
			}
			_, err := db.VerifyAudit(ctx)
			var ce *store.AuditChainError
			if !errors.As(err, &ce) || !errors.Is(err, store.ErrAuditChainBroken) {
				t.Fatalf("VerifyAudit() after tampering = %v, want an *AuditChainError", err)
			}
			if tt.broken >= 0 && (ce.Entry.ID != es[tt.broken].ID || ce.Entry.Seq != es[tt.broken].Seq) {
				t.Errorf("VerifyAudit() names entry id %d seq %d, want id %d seq %d (%v)", ce.Entry.ID, ce.Entry.Seq, es[tt.broken].ID, es[tt.broken].Seq, err)
			}
			if tt.broken < 0 && ce.Entry.Event != "forged" {
				t.Errorf("VerifyAudit() names entry %+v, want the inserted one (%v)", ce.Entry, err)
			}
			if !strings.Contains(ce.Reason, tt.reason) {
				t.Errorf("VerifyAudit() reason = %q, want it to contain %q", ce.Reason, tt.reason)
			}
		})
	}
}

func testAuditChainConcurrent(t *testing.T, b backend) {
	ctx := t.Context()
	cfg := b.fresh(t)
	dbs := []*store.DB{storetest.Open(t, cfg), storetest.Open(t, cfg)}
	const perWorker, workers = 15, 3
	var wg sync.WaitGroup
	errs := make(chan error, len(dbs)*workers*perWorker)
	for d, db := range dbs {
		for w := range workers {
			wg.Go(func() {
				for i := range perWorker {
					if _, err := db.AppendAudit(ctx, store.AuditEntry{Event: "login_failed", Detail: fmt.Sprintf("db%d-w%d-%d", d, w, i)}); err != nil {
						errs <- err
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	want := int64(len(dbs) * workers * perWorker)
	for d, db := range dbs {
		if n, err := db.VerifyAudit(ctx); n != want || err != nil {
			t.Errorf("db%d.VerifyAudit() after concurrent appends = %d, %v; want %d, nil", d, n, err, want)
		}
	}
}

// testAuditChainBackfill: entries without chain columns written before
// migration 0004 are chained, oldest first, by the first open after the
// upgrade, once, even with two servers opening at once (PostgreSQL); later
// opens chain nothing.
func testAuditChainBackfill(t *testing.T, b backend) {
	ctx := t.Context()
	cfg := b.emptyDB(t)
	legacy := legacyStore(t, cfg, 3)
	for i := range 3 {
		q := fmt.Sprintf(`INSERT INTO audit (at, org_id, event, actor, hostname, detail) VALUES ('2020-01-01T00:00:0%d.000000Z', '', 'legacy', 'master', '', 'old %d')`, i, i)
		if _, err := legacy.ExecContext(ctx, q); err != nil {
			t.Fatalf("raw %q = %v", q, err)
		}
	}
	var (
		wg     sync.WaitGroup
		reopen [2]*store.DB
		errs   [2]error
	)
	for i := range reopen {
		if !b.shared { // SQLite: one server owns the file, and opens it in turn
			reopen[i], errs[i] = store.Open(ctx, cfg)
			continue
		}
		wg.Go(func() { reopen[i], errs[i] = store.Open(ctx, cfg) })
	}
	wg.Wait()
	for i, d := range reopen {
		if errs[i] != nil {
			t.Fatalf("Open #%d = %v", i, errs[i])
		}
		t.Cleanup(func() {
			if err := d.Close(); err != nil {
				t.Errorf("Close() = %v", err)
			}
		})
	}
	db := reopen[0]
	if n, err := db.VerifyAudit(ctx); n != 3 || err != nil {
		t.Fatalf("VerifyAudit() after the upgrade = %d, %v; want 3, nil", n, err)
	}
	got, err := db.ListAudit(ctx, "", 0)
	if err != nil {
		t.Fatalf("ListAudit() = %v", err)
	}
	var seqs []string
	for _, e := range got {
		seqs = append(seqs, fmt.Sprintf("%s=%d", e.Detail, e.Seq))
	}
	slices.Sort(seqs)
	if want := []string{"old 0=1", "old 1=2", "old 2=3"}; !slices.Equal(seqs, want) {
		t.Errorf("backfilled seqs = %v, want %v (oldest first)", seqs, want)
	}
	// Appends continue the chain.
	appendN(t, db, 1)
	if n, err := db.VerifyAudit(ctx); n != 4 || err != nil {
		t.Errorf("VerifyAudit() after one more append = %d, %v; want 4, nil", n, err)
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
	org     store.Org
	token   store.Token
	key     store.AdminKey
	host    string
	scaling store.ScalingRecord
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
	if _, err := db.CreateAdminSession(context.Background(), store.AdminSession{Hash: hash("seed-session"), KeyID: f.key.ID,
		CSRF: "c", ExpiresAt: time.Now().Add(time.Hour)}, 32); err != nil {
		t.Fatalf("CreateAdminSession(seed) = %v", err)
	}
	f.scaling, _ = mustDeclare(t, db, declaration(org.ID, f.host, ""), f.token.ID, true)
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
		{"UpdateToken", func(ctx context.Context) error {
			return ignore1(db.UpdateToken(ctx, "", f.token.ID, store.EditOf(f.token)))
		}},
		{"RotateToken", func(ctx context.Context) error {
			return ignore1(db.RotateToken(ctx, "", f.token.ID, hash("call-rotated"), "apr_c", time.Now()))
		}},
		{"TokensExpiringBy", func(ctx context.Context) error { return ignore1(db.TokensExpiringBy(ctx, time.Now(), time.Now())) }},
		{"ClaimExpiryWarning", func(ctx context.Context) error {
			return ignore1(db.ClaimExpiryWarning(ctx, f.token.ID, time.Now(), store.ExpiryWarn7d))
		}},
		{"SetOrgLimits", func(ctx context.Context) error { return ignore1(db.SetOrgLimits(ctx, f.org.ID, store.OrgLimits{})) }},
		{"CreateAdminKey", func(ctx context.Context) error {
			return ignore1(db.CreateAdminKey(ctx, store.AdminKey{OrgID: f.org.ID, Role: "viewer", Hash: hash("call-key")}))
		}},
		{"AdminKeyByHash", func(ctx context.Context) error { return ignore1(db.AdminKeyByHash(ctx, f.key.Hash)) }},
		{"ListAdminKeys", func(ctx context.Context) error { return ignore1(db.ListAdminKeys(ctx, "")) }},
		{"AdminKey", func(ctx context.Context) error { return ignore1(db.AdminKey(ctx, "", f.key.ID)) }},
		{"CreateAdminSession", func(ctx context.Context) error {
			return ignore1(db.CreateAdminSession(ctx, store.AdminSession{Hash: hash("call-session"), KeyID: f.key.ID,
				CSRF: "c", ExpiresAt: time.Now().Add(time.Hour)}, 32))
		}},
		{"AdminSessionByHash", func(ctx context.Context) error { return ignore1(db.AdminSessionByHash(ctx, hash("seed-session"))) }},
		{"DeleteAdminSession", func(ctx context.Context) error { return db.DeleteAdminSession(ctx, hash("seed-session")) }},
		{"DeleteExpiredAdminSessions", func(ctx context.Context) error {
			return ignore1(db.DeleteExpiredAdminSessions(ctx, time.Now()))
		}},
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
		{"DeclareScaling", func(ctx context.Context) error {
			_, _, err := db.DeclareScaling(ctx, declaration(f.org.ID, "call.example.com", ""), "tok_call", true)
			return err
		}},
		{"ScalingRecord", func(ctx context.Context) error { return ignore1(db.ScalingRecord(ctx, f.org.ID, f.scaling.ID)) }},
		{"ScalingRecordByBind", func(ctx context.Context) error {
			return ignore1(db.ScalingRecordByBind(ctx, f.org.ID, f.scaling.Hostname, f.scaling.Path))
		}},
		{"ListScalingRecords", func(ctx context.Context) error { return ignore1(db.ListScalingRecords(ctx, "")) }},
		{"RecordScalingCall", func(ctx context.Context) error {
			return ignore1(db.RecordScalingCall(ctx, f.scaling.ID, store.ScalingCall{At: time.Now(), Reason: "cold_start", Status: 200}))
		}},
		{"AcquireScalingLease", func(ctx context.Context) error {
			_, _, _, err := db.AcquireScalingLease(ctx, store.ScalingLease{RecordID: f.scaling.ID, Holder: "srv_call",
				Reason: "cold_start", Desired: 1, IdempotencyKey: "key_call"}, time.Second)
			return err
		}},
		{"ReleaseScalingArmer", func(ctx context.Context) error { return ignore1(db.ReleaseScalingArmer(ctx, "tok_call")) }},
		{"DeleteStaleScalingRecords", func(ctx context.Context) error {
			return ignore1(db.DeleteStaleScalingRecords(ctx, time.Time{}))
		}},
		{"DeleteScalingRecord", func(ctx context.Context) error { return db.DeleteScalingRecord(ctx, "", f.scaling.ID) }},
		{"CreateWebhook", func(ctx context.Context) error {
			return ignore1(db.CreateWebhook(ctx, store.Webhook{OrgID: f.org.ID, URL: "https://hooks.example.com/", Events: []string{"scaling_failed"}}))
		}},
		{"ListWebhooks", func(ctx context.Context) error { return ignore1(db.ListWebhooks(ctx, "")) }},
		{"WebhooksFor", func(ctx context.Context) error { return ignore1(db.WebhooksFor(ctx, f.org.ID, "scaling_failed")) }},
		{"DeleteWebhook", func(ctx context.Context) error { return db.DeleteWebhook(ctx, "", "whk_seed") }},
		{"RecordWebhookDelivery", func(ctx context.Context) error {
			return ignore1(db.RecordWebhookDelivery(ctx, store.WebhookDelivery{ID: "d1", WebhookID: "whk_seed", OrgID: f.org.ID,
				Event: "ping", Status: store.DeliveryPending}, 0))
		}},
		{"ListWebhookDeliveries", func(ctx context.Context) error { return ignore1(db.ListWebhookDeliveries(ctx, "", "whk_seed", 0)) }},
		{"WebhookDelivery", func(ctx context.Context) error { return ignore1(db.WebhookDelivery(ctx, "", "whk_seed", "d1")) }},
	}
}

// declaration is a valid scaling declaration for a bind.
func declaration(orgID, hostname, path string) store.ScalingRecord {
	return store.ScalingRecord{
		OrgID:    orgID,
		Hostname: hostname,
		Path:     path,
		Scaling:  tunnel.Scaling{URL: "https://api.provider.example/apps/web/scale", Secret: "s3cret", Min: 0, Max: 8, ColdStart: 45 * time.Second, Window: 15 * time.Second, Cooldown: time.Minute, TargetUtilization: 0.8},
	}
}

// declared is d as DeclareScaling stores it for a new record.
func declared(d store.ScalingRecord, id string, at time.Time, armedBy ...string) store.ScalingRecord {
	d.ID = id
	d.ArmedBy = armedBy
	d.CreatedAt = stored(at)
	d.UpdatedAt = stored(at)
	return d
}

func mustDeclare(t testing.TB, db *store.DB, d store.ScalingRecord, armer string, rearm bool) (store.ScalingRecord, bool) {
	t.Helper()
	rec, changed, err := db.DeclareScaling(context.Background(), d, armer, rearm)
	if err != nil {
		t.Fatalf("DeclareScaling(%s%s, %s, %v) = %v", d.Hostname, d.Path, armer, rearm, err)
	}
	return rec, changed
}

// wantScaling fails t unless every read of want's record returns want.
func wantScaling(t testing.TB, db *store.DB, want store.ScalingRecord) {
	t.Helper()
	ctx := context.Background()
	reads := []struct {
		name string
		read func() (store.ScalingRecord, error)
	}{
		{"ScalingRecord(org)", func() (store.ScalingRecord, error) { return db.ScalingRecord(ctx, want.OrgID, want.ID) }},
		{"ScalingRecord(any org)", func() (store.ScalingRecord, error) { return db.ScalingRecord(ctx, "", want.ID) }},
		{"ScalingRecordByBind(org)", func() (store.ScalingRecord, error) {
			return db.ScalingRecordByBind(ctx, want.OrgID, want.Hostname, want.Path)
		}},
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
		if got.CreatedAt.Location() != time.UTC || got.UpdatedAt.Location() != time.UTC ||
			(got.LastCallAt != nil && got.LastCallAt.Location() != time.UTC) {
			t.Errorf("%s times not in UTC: %+v", r.name, got)
		}
	}
}

func testScalingDeclare(t *testing.T, b backend) {
	ctx := t.Context()
	clk := newClock()
	db := openClock(t, b.fresh(t), clk)
	org := mustOrg(t, db, "acme")
	base := declaration(org.ID, "app.example.com", "")

	// Sub-millisecond parts are dropped; the fields the store owns are
	// ignored.
	in := base
	in.ColdStart += 999 * time.Microsecond
	in.Window += 1500 * time.Nanosecond
	in.ID = "scl_forged"
	in.ArmedBy = []string{"tok_forged"}
	in.Disarmed = true
	in.ConsecutiveFailures = 3
	in.LastCallAt = new(time.Now())
	in.LastReason = "scale_out"
	in.LastStatus = 500
	in.CreatedAt = time.Now()
	in.UpdatedAt = time.Now()
	rec, changed := mustDeclare(t, db, in, "tok_a", false)
	want := declared(base, rec.ID, clk.Now(), "tok_a")
	if diff := cmp.Diff(want, rec); diff != "" {
		t.Errorf("DeclareScaling(new) mismatch (-want +got):\n%s", diff)
	}
	if !changed {
		t.Error("DeclareScaling(new) changed = false, want true")
	}
	if !strings.HasPrefix(rec.ID, "scl_") {
		t.Errorf("DeclareScaling(new).ID = %q, want scl_…", rec.ID)
	}
	wantScaling(t, db, want)

	// A refresh by another armer adds it and moves UpdatedAt, nothing
	// else; the same armer again is not added twice.
	clk.Advance(time.Minute)
	rec, changed = mustDeclare(t, db, base, "tok_b", false)
	want.ArmedBy = []string{"tok_a", "tok_b"}
	want.UpdatedAt = stored(clk.Now())
	if diff := cmp.Diff(want, rec); diff != "" || changed {
		t.Errorf("DeclareScaling(refresh, tok_b) = changed %v, want false; mismatch (-want +got):\n%s", changed, diff)
	}
	clk.Advance(time.Minute)
	rec, changed = mustDeclare(t, db, base, "tok_a", false)
	want.UpdatedAt = stored(clk.Now())
	if diff := cmp.Diff(want, rec); diff != "" || changed {
		t.Errorf("DeclareScaling(refresh, tok_a again) = changed %v, want false; mismatch (-want +got):\n%s", changed, diff)
	}
	wantScaling(t, db, want)

	// Each declaration field is a change; declaring it twice is not.
	edits := []struct {
		name string
		edit func(r *store.ScalingRecord)
	}{
		{"url", func(r *store.ScalingRecord) { r.URL = "https://other.example/scale" }},
		{"secret", func(r *store.ScalingRecord) { r.Secret = "rotated" }},
		{"no secret", func(r *store.ScalingRecord) { r.Secret = "" }},
		{"min", func(r *store.ScalingRecord) { r.Min = 1 }},
		{"max", func(r *store.ScalingRecord) { r.Max = 0 }},
		{"cold start", func(r *store.ScalingRecord) { r.ColdStart = 5 * time.Minute }},
		{"window", func(r *store.ScalingRecord) { r.Window = time.Second }},
		{"cooldown", func(r *store.ScalingRecord) { r.Cooldown = 90 * time.Second }},
		{"target utilization", func(r *store.ScalingRecord) { r.TargetUtilization = 0.55 }},
		{"back to base", func(*store.ScalingRecord) {}},
	}
	for _, e := range edits {
		d := base
		e.edit(&d)
		clk.Advance(time.Second)
		rec, changed := mustDeclare(t, db, d, "tok_a", false)
		want = declared(d, want.ID, want.CreatedAt, "tok_a", "tok_b")
		want.UpdatedAt = stored(clk.Now())
		if diff := cmp.Diff(want, rec); diff != "" || !changed {
			t.Errorf("DeclareScaling(%s) = changed %v, want true; mismatch (-want +got):\n%s", e.name, changed, diff)
		}
		wantScaling(t, db, want)
		if _, changed := mustDeclare(t, db, d, "tok_a", false); changed {
			t.Errorf("DeclareScaling(%s) again = changed true, want false", e.name)
		}
		want.UpdatedAt = stored(clk.Now())
	}

	// Below the millisecond is no change; Conflict is stored but is the
	// caller's verdict, not a change of declaration.
	d := base
	d.Cooldown += 999 * time.Microsecond
	if rec, changed := mustDeclare(t, db, d, "tok_a", false); changed || rec.Cooldown != base.Cooldown {
		t.Errorf("DeclareScaling(cooldown +999µs) = changed %v, Cooldown %v; want false, %v", changed, rec.Cooldown, base.Cooldown)
	}
	d = base
	d.Conflict = true
	if rec, changed := mustDeclare(t, db, d, "tok_b", false); changed || !rec.Conflict {
		t.Errorf("DeclareScaling(conflict) = changed %v, Conflict %v; want false, true", changed, rec.Conflict)
	}
	if got, err := db.ScalingRecord(ctx, "", want.ID); err != nil || !got.Conflict {
		t.Errorf("ScalingRecord() after a conflict = Conflict %v, %v; want true", got.Conflict, err)
	}
	if rec, changed := mustDeclare(t, db, base, "tok_b", false); changed || rec.Conflict {
		t.Errorf("DeclareScaling(no conflict) = changed %v, Conflict %v; want false, false", changed, rec.Conflict)
	}

	// The path is part of the bind.
	api, changed := mustDeclare(t, db, declaration(org.ID, "app.example.com", "/api"), "tok_a", false)
	if api.ID == want.ID || !changed || api.Path != "/api" {
		t.Errorf("DeclareScaling(/api) = %s, changed %v, path %q; want a new record", api.ID, changed, api.Path)
	}

	refused := []struct {
		name  string
		edit  func(r *store.ScalingRecord)
		armer string
		want  error // nil: any error
	}{
		{"no org", func(r *store.ScalingRecord) { r.OrgID = "" }, "tok_a", nil},
		{"no hostname", func(r *store.ScalingRecord) { r.Hostname = "" }, "tok_a", nil},
		{"no url", func(r *store.ScalingRecord) { r.URL = "" }, "tok_a", nil},
		{"no armer", func(*store.ScalingRecord) {}, "", nil},
		{"NaN utilization", func(r *store.ScalingRecord) { r.TargetUtilization = math.NaN() }, "tok_a", nil},
		{"infinite utilization", func(r *store.ScalingRecord) { r.TargetUtilization = math.Inf(1) }, "tok_a", nil},
		{"missing org", func(r *store.ScalingRecord) { r.OrgID = "org_missing" }, "tok_a", store.ErrNotFound},
	}
	for _, tt := range refused {
		d := declaration(org.ID, "refused.example.com", "")
		tt.edit(&d)
		_, _, err := db.DeclareScaling(ctx, d, tt.armer, true)
		switch {
		case err == nil:
			t.Errorf("DeclareScaling(%s) = nil, want an error", tt.name)
		case tt.want != nil && !errors.Is(err, tt.want):
			t.Errorf("DeclareScaling(%s) = %v, want %v", tt.name, err, tt.want)
		}
	}
	rs, err := db.ListScalingRecords(ctx, "")
	if err != nil || len(rs) != 2 {
		t.Errorf("ListScalingRecords() after refused declarations = %d records, %v; want 2", len(rs), err)
	}
}

func testScalingRearm(t *testing.T, b backend) {
	ctx := t.Context()
	clk := newClock()
	db := openClock(t, b.fresh(t), clk)
	org := mustOrg(t, db, "acme")
	base := declaration(org.ID, "app.example.com", "")
	rec, _ := mustDeclare(t, db, base, "tok_a", true)

	at := clk.Advance(time.Minute)
	tripped, err := db.RecordScalingCall(ctx, rec.ID, store.ScalingCall{At: at, Reason: "cold_start", Status: 502, ConsecutiveFailures: 5, Disarmed: true})
	if err != nil {
		t.Fatalf("RecordScalingCall(trip) = %v", err)
	}
	if !tripped.Disarmed || tripped.ConsecutiveFailures != 5 {
		t.Fatalf("RecordScalingCall(trip) = Disarmed %v, failures %d; want true, 5", tripped.Disarmed, tripped.ConsecutiveFailures)
	}

	// A heartbeat that does not re-arm leaves the breaker alone, even
	// with a changed declaration (the caller decides).
	for _, d := range []store.ScalingRecord{base, func() store.ScalingRecord { d := base; d.Max = 3; return d }()} {
		clk.Advance(time.Second)
		got, _ := mustDeclare(t, db, d, "tok_a", false)
		want := tripped
		want.Max = d.Max
		want.UpdatedAt = stored(clk.Now())
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("DeclareScaling(max %d, rearm false) mismatch, want the breaker kept (-want +got):\n%s", d.Max, diff)
		}
		wantScaling(t, db, want)
	}

	// Re-arming clears the breaker, keeps the last call, and holds the
	// next call to the cooldown since it.
	clk.Advance(time.Second)
	got, changed := mustDeclare(t, db, base, "tok_a", true)
	want := tripped
	want.Disarmed = false
	want.ConsecutiveFailures = 0
	want.NextCallAt = new(tripped.LastCallAt.Add(base.Cooldown))
	want.UpdatedAt = stored(clk.Now())
	if diff := cmp.Diff(want, got); diff != "" || !changed {
		t.Errorf("DeclareScaling(rearm) = changed %v, want true (max 3 → 8); mismatch (-want +got):\n%s", changed, diff)
	}
	wantScaling(t, db, want)
}

func testScalingCall(t *testing.T, b backend) {
	ctx := t.Context()
	clk := newClock()
	db := openClock(t, b.fresh(t), clk)
	org := mustOrg(t, db, "acme")
	rec, _ := mustDeclare(t, db, declaration(org.ID, "app.example.com", ""), "tok_a", true)
	if rec.LastCallAt != nil || rec.LastReason != "" || rec.LastStatus != 0 || rec.ConsecutiveFailures != 0 || rec.Disarmed {
		t.Errorf("DeclareScaling(new) = %+v, want no call and an armed breaker", rec)
	}
	wantScaling(t, db, rec) // a nil LastCallAt round-trips

	clk.Advance(time.Hour)
	at := time.Date(2031, 3, 4, 6, 0, 0, 123456789, time.FixedZone("V", -2*3600))
	got, err := db.RecordScalingCall(ctx, rec.ID, store.ScalingCall{At: at, Reason: "scale_out", Status: 202})
	if err != nil {
		t.Fatalf("RecordScalingCall() = %v", err)
	}
	want := rec
	want.LastCallAt = new(stored(at))
	want.LastReason = "scale_out"
	want.LastStatus = 202
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("RecordScalingCall() mismatch, want UpdatedAt unchanged (-want +got):\n%s", diff)
	}
	wantScaling(t, db, want)

	// A transport failure at a zero time: status 0, now.
	clk.Advance(time.Minute)
	got, err = db.RecordScalingCall(ctx, rec.ID, store.ScalingCall{At: time.Time{}, Reason: "scale_in", Status: 0, ConsecutiveFailures: 1})
	if err != nil {
		t.Fatalf("RecordScalingCall(transport failure) = %v", err)
	}
	want.LastCallAt = new(stored(clk.Now()))
	want.LastReason = "scale_in"
	want.LastStatus = 0
	want.ConsecutiveFailures = 1
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("RecordScalingCall(transport failure) mismatch (-want +got):\n%s", diff)
	}
	wantScaling(t, db, want)

	_, err = db.RecordScalingCall(ctx, "scl_missing", store.ScalingCall{At: at, Reason: "cold_start", Status: 200})
	wantErr(t, "RecordScalingCall(scl_missing)", err, store.ErrNotFound)
}

// testScalingCallState: the call state a restarted server must honour
// (cooldown or backoff end, the provider's penalty, the failure's reason)
// round-trips on every read, a success clears it, and a declaration
// leaves it alone.
func testScalingCallState(t *testing.T, b backend) {
	ctx := t.Context()
	clk := newClock()
	db := openClock(t, b.fresh(t), clk)
	org := mustOrg(t, db, "acme")
	rec, _ := mustDeclare(t, db, declaration(org.ID, "app.example.com", ""), "tok_a", true)
	if rec.NextCallAt != nil || rec.PenaltyUntil != nil || rec.LastError != "" {
		t.Errorf("DeclareScaling(new) = %+v, want no call state", rec)
	}

	at := clk.Advance(time.Minute)
	long := strings.Repeat("é", store.MaxScalingErrorBytes) // two bytes a rune: cut in the middle of none
	got, err := db.RecordScalingCall(ctx, rec.ID, store.ScalingCall{At: at, Reason: "cold_start", Status: 429,
		Err: long, ConsecutiveFailures: 1, NextCallAt: at.Add(2 * time.Minute), PenaltyUntil: at.Add(time.Second)})
	if err != nil {
		t.Fatalf("RecordScalingCall(429) = %v", err)
	}
	want := rec
	want.LastCallAt, want.LastReason, want.LastStatus, want.ConsecutiveFailures = new(stored(at)), "cold_start", 429, 1
	want.LastError = long[:store.MaxScalingErrorBytes]
	want.NextCallAt, want.PenaltyUntil = new(stored(at.Add(2*time.Minute))), new(stored(at.Add(time.Second)))
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("RecordScalingCall(429) mismatch (-want +got):\n%s", diff)
	}
	wantScaling(t, db, want)
	if list, err := db.ListScalingRecords(ctx, ""); err != nil || len(list) != 1 || !cmp.Equal(list[0], want) {
		t.Errorf("ListScalingRecords() = %+v, %v; want the call state", list, err)
	}

	// A heartbeat keeps the call state; a re-arm forgets the backoff but
	// not the cooldown since the last call (a minute, as declared).
	clk.Advance(time.Second)
	redeclared, _ := mustDeclare(t, db, declaration(org.ID, "app.example.com", ""), "tok_a", false)
	if !cmp.Equal(redeclared.NextCallAt, want.NextCallAt) || !cmp.Equal(redeclared.PenaltyUntil, want.PenaltyUntil) ||
		redeclared.LastError != want.LastError || !cmp.Equal(redeclared.LastCallAt, want.LastCallAt) {
		t.Errorf("DeclareScaling(heartbeat) = %+v, want the call state kept", redeclared)
	}
	rearmed, _ := mustDeclare(t, db, declaration(org.ID, "app.example.com", ""), "tok_a", true)
	if want := new(stored(at.Add(time.Minute))); !cmp.Equal(rearmed.NextCallAt, want) || !cmp.Equal(rearmed.PenaltyUntil, redeclared.PenaltyUntil) {
		t.Errorf("DeclareScaling(rearm) = next call %v, penalty %v; want %v, kept", rearmed.NextCallAt, rearmed.PenaltyUntil, *want)
	}
	wantScaling(t, db, rearmed)

	// A success clears the error and the penalty.
	at = clk.Advance(time.Minute)
	got, err = db.RecordScalingCall(ctx, rec.ID, store.ScalingCall{At: at, Reason: "cold_start", Status: 200,
		NextCallAt: at.Add(time.Minute)})
	if err != nil {
		t.Fatalf("RecordScalingCall(200) = %v", err)
	}
	if got.LastError != "" || got.PenaltyUntil != nil || !cmp.Equal(got.NextCallAt, new(stored(at.Add(time.Minute)))) {
		t.Errorf("RecordScalingCall(200) = error %q, penalty %v, next %v; want none, none, %v", got.LastError, got.PenaltyUntil, got.NextCallAt, stored(at.Add(time.Minute)))
	}
}

// lease is a lease request for rec's cold start by holder.
func lease(rec store.ScalingRecord, holder, key string) store.ScalingLease {
	return store.ScalingLease{RecordID: rec.ID, Holder: holder, Reason: "cold_start", Current: 0, Desired: 1, IdempotencyKey: key}
}

// testScalingLease: one holder at a time; another holder takes over only
// once the lease expired, keeping the decision's key; the call's outcome
// releases the lease and its cooldown refuses every holder until it ends.
func testScalingLease(t *testing.T, b backend) {
	ctx := t.Context()
	clk := newClock()
	db := openClock(t, b.fresh(t), clk)
	org := mustOrg(t, db, "acme")
	rec, _ := mustDeclare(t, db, declaration(org.ID, "app.example.com", ""), "tok_a", true)
	acquire := func(l store.ScalingLease, ttl time.Duration) (store.ScalingLease, store.ScalingRecord, bool) {
		t.Helper()
		got, r, ok, err := db.AcquireScalingLease(ctx, l, ttl)
		if err != nil {
			t.Fatalf("AcquireScalingLease(%s) = %v", l.Holder, err)
		}
		return got, r, ok
	}

	now := clk.Now()
	a, r, ok := acquire(lease(rec, "srv_a", "key_a"), 15*time.Second)
	want := lease(rec, "srv_a", "key_a")
	want.AcquiredAt, want.ExpiresAt = stored(now), stored(now).Add(15*time.Second)
	want.Generation = 1
	if !ok || !cmp.Equal(a, want) || r.ID != rec.ID {
		t.Fatalf("AcquireScalingLease(a) = %+v, %v; want %+v, taken", a, ok, want)
	}
	// Another holder, even for another decision, is refused while it lasts.
	clk.Advance(14 * time.Second)
	other := lease(rec, "srv_b", "key_b")
	other.Reason, other.Current, other.Desired = "scale_out", 1, 2
	if held, _, ok := acquire(other, 15*time.Second); ok || !cmp.Equal(held, a) {
		t.Errorf("AcquireScalingLease(b, live lease) = %+v, %v; want refused, naming a's lease", held, ok)
	}
	// a itself may take it again (a retry of its own).
	if again, _, ok := acquire(lease(rec, "srv_a", "key_a2"), 15*time.Second); !ok || again.IdempotencyKey != "key_a" {
		t.Errorf("AcquireScalingLease(a again) = %+v, %v; want taken with the decision's key key_a", again, ok)
	}
	// Once expired, b takes over the same decision with a's key.
	clk.Advance(15 * time.Second)
	b1, _, ok := acquire(lease(rec, "srv_b", "key_b"), 15*time.Second)
	if !ok || b1.Holder != "srv_b" || b1.IdempotencyKey != "key_a" {
		t.Errorf("AcquireScalingLease(b, expired) = %+v, %v; want taken by srv_b with key_a", b1, ok)
	}
	// The outcome releases b's lease (and only a lease of b's) and starts
	// the cooldown, which refuses everyone, b included.
	at := clk.Advance(time.Second)
	if _, err := db.RecordScalingCall(ctx, rec.ID, store.ScalingCall{At: at, Reason: "cold_start", Status: 200,
		NextCallAt: at.Add(time.Minute), Holder: "srv_b"}); err != nil {
		t.Fatalf("RecordScalingCall(b) = %v", err)
	}
	for _, h := range []string{"srv_a", "srv_b", "srv_c"} {
		if held, r, ok := acquire(lease(rec, h, "key_"+h), 15*time.Second); ok || held != (store.ScalingLease{}) ||
			r.NextCallAt == nil || !r.NextCallAt.Equal(stored(at.Add(time.Minute))) {
			t.Errorf("AcquireScalingLease(%s, cooldown) = %+v, %v, next call %v; want refused by the cooldown", h, held, ok, r.NextCallAt)
		}
	}
	// After the cooldown, a new decision: a fresh key, the lease free.
	clk.Advance(time.Minute)
	c, _, ok := acquire(lease(rec, "srv_c", "key_c"), 15*time.Second)
	if !ok || c.IdempotencyKey != "key_c" {
		t.Errorf("AcquireScalingLease(c, after cooldown) = %+v, %v; want taken with key_c", c, ok)
	}
	// A penalty refuses too; a disarmed record always.
	at = clk.Now()
	if _, err := db.RecordScalingCall(ctx, rec.ID, store.ScalingCall{At: at, Reason: "cold_start", Status: 429,
		ConsecutiveFailures: 5, Disarmed: true, PenaltyUntil: at.Add(time.Second), Holder: "srv_c"}); err != nil {
		t.Fatalf("RecordScalingCall(c) = %v", err)
	}
	clk.Advance(time.Hour)
	if _, _, ok := acquire(lease(rec, "srv_d", "key_d"), 15*time.Second); ok {
		t.Error("AcquireScalingLease(disarmed) = taken, want refused")
	}
	_, _, _, err := db.AcquireScalingLease(ctx, lease(store.ScalingRecord{ID: "scl_missing"}, "srv_a", "k"), time.Second)
	wantErr(t, "AcquireScalingLease(scl_missing)", err, store.ErrNotFound)
	// The lease goes with its record.
	if err := db.DeleteScalingRecord(ctx, "", rec.ID); err != nil {
		t.Fatalf("DeleteScalingRecord() = %v", err)
	}
}

// testScalingLeaseHostile: bad input is refused whole; a holder that
// never releases blocks no one past its expiry; a lease written by a
// server whose clock ran far ahead blocks no one at all.
func testScalingLeaseHostile(t *testing.T, b backend) {
	ctx := t.Context()
	clk := newClock()
	cfg := b.fresh(t)
	db := openClock(t, cfg, clk)
	org := mustOrg(t, db, "acme")
	rec, _ := mustDeclare(t, db, declaration(org.ID, "app.example.com", ""), "tok_a", true)

	for _, tt := range []struct {
		name string
		l    store.ScalingLease
		ttl  time.Duration
	}{
		{"no holder", lease(rec, "", "k"), time.Second},
		{"no key", lease(rec, "srv_a", ""), time.Second},
		{"no record", lease(store.ScalingRecord{}, "srv_a", "k"), time.Second},
		{"zero ttl", lease(rec, "srv_a", "k"), 0},
		{"negative ttl", lease(rec, "srv_a", "k"), -time.Second},
		{"ttl beyond the bound", lease(rec, "srv_a", "k"), store.MaxScalingLeaseTTL + time.Nanosecond},
	} {
		if _, _, ok, err := db.AcquireScalingLease(ctx, tt.l, tt.ttl); err == nil || ok {
			t.Errorf("AcquireScalingLease(%s) = %v, %v; want refused with an error", tt.name, ok, err)
		}
	}

	// A holder that never releases: the lease blocks until its expiry,
	// not a moment after.
	if _, _, ok, err := db.AcquireScalingLease(ctx, lease(rec, "srv_dead", "key_dead"), store.MaxScalingLeaseTTL); err != nil || !ok {
		t.Fatalf("AcquireScalingLease(dead) = %v, %v", ok, err)
	}
	clk.Advance(store.MaxScalingLeaseTTL - time.Microsecond)
	if _, _, ok, _ := db.AcquireScalingLease(ctx, lease(rec, "srv_b", "key_b"), time.Second); ok {
		t.Error("AcquireScalingLease(before expiry) = taken, want refused")
	}
	clk.Advance(time.Microsecond)
	if got, _, ok, err := db.AcquireScalingLease(ctx, lease(rec, "srv_b", "key_b"), time.Second); err != nil || !ok || got.IdempotencyKey != "key_dead" {
		t.Errorf("AcquireScalingLease(at expiry) = %+v, %v, %v; want taken with the dead holder's key", got, ok, err)
	}

	// A lease from a clock a day ahead, as that server wrote it.
	skewed := newClock()
	skewed.Advance(clk.Now().Sub(skewed.Now()) + 24*time.Hour)
	ahead := openClock(t, cfg, skewed)
	if _, _, ok, err := ahead.AcquireScalingLease(ctx, lease(rec, "srv_skewed", "key_skewed"), time.Second); err != nil || !ok {
		// srv_b's lease expired long ago by the skewed clock.
		t.Fatalf("AcquireScalingLease(skewed) = %v, %v", ok, err)
	}
	if got, _, ok, err := db.AcquireScalingLease(ctx, lease(rec, "srv_c", "key_c"), time.Second); err != nil || !ok || got.Holder != "srv_c" {
		t.Errorf("AcquireScalingLease(after a lease a day ahead) = %+v, %v, %v; want taken at once", got, ok, err)
	}
}

// testScalingLeaseConcurrent: holders racing for one record's lease get
// exactly one lease between them.
func testScalingLeaseConcurrent(t *testing.T, b backend) {
	ctx := t.Context()
	cfg := b.fresh(t)
	db1 := storetest.Open(t, cfg)
	db2 := storetest.Open(t, cfg)
	org := mustOrg(t, db1, "acme")
	rec, _ := mustDeclare(t, db1, declaration(org.ID, "app.example.com", ""), "tok_a", true)
	const holders = 8
	var (
		wg    sync.WaitGroup
		taken atomic.Int32
		errs  = make(chan error, holders)
	)
	for i := range holders {
		db := db1
		if i%2 == 1 {
			db = db2
		}
		wg.Go(func() {
			_, _, ok, err := db.AcquireScalingLease(ctx, lease(rec, fmt.Sprintf("srv_%d", i), fmt.Sprintf("key_%d", i)), time.Minute)
			if err != nil {
				errs <- err
				return
			}
			if ok {
				taken.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("AcquireScalingLease() = %v", err)
	}
	if n := taken.Load(); n != 1 {
		t.Errorf("%d holders took the lease, want exactly 1", n)
	}
}

func testScalingScopeAndOrder(t *testing.T, b backend) {
	ctx := t.Context()
	clk := newClock()
	db := openClock(t, b.fresh(t), clk)
	a := mustOrg(t, db, "a")
	bo := mustOrg(t, db, "b")

	a1, _ := mustDeclare(t, db, declaration(a.ID, "one.example.com", ""), "tok_a", true)
	clk.Advance(time.Second)
	// The same bind in another organization is another record.
	b1, _ := mustDeclare(t, db, declaration(bo.ID, "one.example.com", ""), "tok_b", true)
	clk.Advance(time.Second)
	// Same instant: creation order decides.
	a2, _ := mustDeclare(t, db, declaration(a.ID, "two.example.com", "/api"), "tok_a", true)
	a3, _ := mustDeclare(t, db, declaration(a.ID, "two.example.com", ""), "tok_a", true)

	lists := func(step string, tests []struct {
		org  string
		want []store.ScalingRecord
	}) {
		t.Helper()
		for _, tt := range tests {
			got, err := db.ListScalingRecords(ctx, tt.org)
			if err != nil {
				t.Errorf("%s: ListScalingRecords(%q) = %v", step, tt.org, err)
				continue
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("%s: ListScalingRecords(%q) mismatch, want newest declaration first (-want +got):\n%s", step, tt.org, diff)
			}
		}
	}
	lists("created", []struct {
		org  string
		want []store.ScalingRecord
	}{
		{a.ID, []store.ScalingRecord{a3, a2, a1}},
		{bo.ID, []store.ScalingRecord{b1}},
		{"", []store.ScalingRecord{a3, a2, b1, a1}},
		{"org_missing", []store.ScalingRecord{}},
	})

	// A refresh moves a record first.
	clk.Advance(time.Second)
	a1, _ = mustDeclare(t, db, declaration(a.ID, "one.example.com", ""), "tok_a", false)
	lists("refreshed", []struct {
		org  string
		want []store.ScalingRecord
	}{
		{a.ID, []store.ScalingRecord{a1, a3, a2}},
		{"", []store.ScalingRecord{a1, a3, a2, b1}},
	})

	_, err := db.ScalingRecord(ctx, bo.ID, a1.ID)
	wantErr(t, "ScalingRecord(other org)", err, store.ErrNotFound)
	_, err = db.ScalingRecord(ctx, "", "scl_missing")
	wantErr(t, "ScalingRecord(scl_missing)", err, store.ErrNotFound)

	binds := []struct {
		org, hostname, path string
		want                store.ScalingRecord // zero: ErrNotFound
	}{
		{a.ID, "one.example.com", "", a1},
		{bo.ID, "one.example.com", "", b1},
		{"", "one.example.com", "", a1}, // any org: the newest declaration
		{a.ID, "two.example.com", "/api", a2},
		{"", "two.example.com", "", a3},
		{a.ID, "two.example.com", "/other", store.ScalingRecord{}},
		{bo.ID, "two.example.com", "", store.ScalingRecord{}},
		{"", "three.example.com", "", store.ScalingRecord{}},
	}
	for _, tt := range binds {
		got, err := db.ScalingRecordByBind(ctx, tt.org, tt.hostname, tt.path)
		if tt.want.ID == "" {
			wantErr(t, fmt.Sprintf("ScalingRecordByBind(%q, %s%s)", tt.org, tt.hostname, tt.path), err, store.ErrNotFound)
			continue
		}
		if err != nil {
			t.Errorf("ScalingRecordByBind(%q, %s%s) = %v", tt.org, tt.hostname, tt.path, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("ScalingRecordByBind(%q, %s%s) mismatch (-want +got):\n%s", tt.org, tt.hostname, tt.path, diff)
		}
	}

	wantErr(t, "DeleteScalingRecord(other org)", db.DeleteScalingRecord(ctx, bo.ID, a1.ID), store.ErrNotFound)
	wantErr(t, "DeleteScalingRecord(org)", db.DeleteScalingRecord(ctx, a.ID, a1.ID), nil)
	wantErr(t, "DeleteScalingRecord(again)", db.DeleteScalingRecord(ctx, "", a1.ID), store.ErrNotFound)
	wantErr(t, "DeleteScalingRecord(any org)", db.DeleteScalingRecord(ctx, "", b1.ID), nil)
	_, err = db.ScalingRecordByBind(ctx, "", "one.example.com", "")
	wantErr(t, "ScalingRecordByBind(deleted)", err, store.ErrNotFound)
	lists("deleted", []struct {
		org  string
		want []store.ScalingRecord
	}{
		{"", []store.ScalingRecord{a3, a2}},
	})

	// Declaring a deleted bind again creates a new record.
	again, changed := mustDeclare(t, db, declaration(a.ID, "one.example.com", ""), "tok_a", false)
	if again.ID == a1.ID || !changed || !again.CreatedAt.Equal(stored(clk.Now())) {
		t.Errorf("DeclareScaling(deleted bind) = %s, changed %v, created %v; want a new record", again.ID, changed, again.CreatedAt)
	}
}

func testScalingRelease(t *testing.T, b backend) {
	ctx := t.Context()
	clk := newClock()
	db := openClock(t, b.fresh(t), clk)
	org := mustOrg(t, db, "acme")

	onlyA, _ := mustDeclare(t, db, declaration(org.ID, "a.example.com", ""), "tok_a", true)
	both, _ := mustDeclare(t, db, declaration(org.ID, "ab.example.com", ""), "tok_a", true)
	both, _ = mustDeclare(t, db, declaration(org.ID, "ab.example.com", ""), "tok_b", false)
	onlyB, _ := mustDeclare(t, db, declaration(org.ID, "b.example.com", ""), "tok_b", true)
	master, _ := mustDeclare(t, db, declaration(org.ID, "m.example.com", ""), "master", true)
	clk.Advance(time.Hour)

	release := func(armer string, want ...string) {
		t.Helper()
		if want == nil {
			want = []string{}
		}
		slices.Sort(want)
		got, err := db.ReleaseScalingArmer(ctx, armer)
		if err != nil {
			t.Fatalf("ReleaseScalingArmer(%s) = %v", armer, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("ReleaseScalingArmer(%s) mismatch, want the deleted IDs sorted (-want +got):\n%s", armer, diff)
		}
	}

	// Only the record tok_a alone armed goes; the shared one loses tok_a
	// and keeps its UpdatedAt.
	release("tok_a", onlyA.ID)
	_, err := db.ScalingRecord(ctx, "", onlyA.ID)
	wantErr(t, "ScalingRecord(released)", err, store.ErrNotFound)
	both.ArmedBy = []string{"tok_b"}
	wantScaling(t, db, both)
	wantScaling(t, db, onlyB)
	release("tok_a")
	release("tok_unknown")

	release("tok_b", both.ID, onlyB.ID)
	got, err := db.ListScalingRecords(ctx, "")
	if err != nil {
		t.Fatalf("ListScalingRecords() = %v", err)
	}
	if diff := cmp.Diff([]store.ScalingRecord{master}, got); diff != "" {
		t.Errorf("ListScalingRecords() after releases mismatch (-want +got):\n%s", diff)
	}
	if _, err := db.ReleaseScalingArmer(ctx, ""); err == nil {
		t.Error(`ReleaseScalingArmer("") = nil, want an error`)
	}
}

func testScalingTTL(t *testing.T, b backend) {
	ctx := t.Context()
	clk := newClock()
	db := openClock(t, b.fresh(t), clk)
	a := mustOrg(t, db, "a")
	bo := mustOrg(t, db, "b")

	t0 := clk.Now()
	old, _ := mustDeclare(t, db, declaration(a.ID, "old.example.com", ""), "tok_a", true)
	mustDeclare(t, db, declaration(bo.ID, "refreshed.example.com", ""), "tok_b", true)
	t1 := clk.Advance(time.Hour)
	mid, _ := mustDeclare(t, db, declaration(bo.ID, "mid.example.com", ""), "tok_b", true)
	clk.Advance(time.Hour)
	refreshed, _ := mustDeclare(t, db, declaration(bo.ID, "refreshed.example.com", ""), "tok_b", false)
	fresh, _ := mustDeclare(t, db, declaration(a.ID, "fresh.example.com", ""), "tok_a", true)
	// A recorded call is no re-announcement: it does not keep a record.
	if _, err := db.RecordScalingCall(ctx, old.ID, store.ScalingCall{At: clk.Now(), Reason: "cold_start", Status: 200}); err != nil {
		t.Fatalf("RecordScalingCall(old) = %v", err)
	}

	sweep := func(cutoff time.Time, want ...string) {
		t.Helper()
		if want == nil {
			want = []string{}
		}
		slices.Sort(want)
		got, err := db.DeleteStaleScalingRecords(ctx, cutoff)
		if err != nil {
			t.Fatalf("DeleteStaleScalingRecords(%v) = %v", cutoff, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("DeleteStaleScalingRecords(%v) mismatch, want the deleted IDs sorted (-want +got):\n%s", cutoff, diff)
		}
	}
	sweep(t0.Add(-time.Hour))
	// Strictly before: a record declared at the cutoff stays, one
	// declared a nanosecond before it goes.
	sweep(stored(t1), old.ID)
	sweep(stored(t1))
	sweep(stored(t1).Add(time.Nanosecond), mid.ID)
	_, err := db.ScalingRecord(ctx, "", mid.ID)
	wantErr(t, "ScalingRecord(swept)", err, store.ErrNotFound)

	got, err := db.ListScalingRecords(ctx, "")
	if err != nil {
		t.Fatalf("ListScalingRecords() = %v", err)
	}
	if diff := cmp.Diff([]store.ScalingRecord{fresh, refreshed}, got); diff != "" {
		t.Errorf("ListScalingRecords() after sweeps mismatch (-want +got):\n%s", diff)
	}
	sweep(clk.Advance(time.Second), fresh.ID, refreshed.ID)
}

// scalingChange is the change that names r.
func scalingChange(kind string, r store.ScalingRecord) store.Change {
	return store.Change{Kind: kind, ID: r.ID, OrgID: r.OrgID, Hostname: r.Hostname}
}

// byID orders records by ID, the order multi-record calls announce them in.
func byID(rs ...store.ScalingRecord) []store.ScalingRecord {
	slices.SortFunc(rs, func(x, y store.ScalingRecord) int { return strings.Compare(x.ID, y.ID) })
	return rs
}

func testScalingChanges(t *testing.T, b backend) {
	ctx := t.Context()
	clk := newClock()
	db := openClock(t, b.fresh(t), clk)
	org := mustOrg(t, db, "acme")
	sub := db.Subscribe(ctx)
	updated := func(r store.ScalingRecord) store.Change { return scalingChange(store.ChangeScalingUpdated, r) }
	deleted := func(r store.ScalingRecord) store.Change { return scalingChange(store.ChangeScalingDeleted, r) }

	app, _ := mustDeclare(t, db, declaration(org.ID, "app.example.com", ""), "tok_a", true)
	wantChange(t, sub, updated(app))
	mustDeclare(t, db, declaration(org.ID, "app.example.com", ""), "tok_a", false) // an unchanged heartbeat
	wantChange(t, sub, updated(app))
	if _, err := db.RecordScalingCall(ctx, app.ID, store.ScalingCall{At: time.Time{}, Reason: "cold_start", Status: 200}); err != nil {
		t.Fatalf("RecordScalingCall() = %v", err)
	}
	wantChange(t, sub, scalingChange(store.ChangeScalingCalled, app))

	// Calls that change nothing announce nothing: the next change is
	// api's.
	_, _, err := db.DeclareScaling(ctx, declaration(org.ID, "app.example.com", ""), "", true)
	if err == nil {
		t.Error(`DeclareScaling(armer "") = nil, want an error`)
	}
	_, err = db.RecordScalingCall(ctx, "scl_missing", store.ScalingCall{At: time.Time{}, Reason: "cold_start", Status: 200})
	wantErr(t, "RecordScalingCall(scl_missing)", err, store.ErrNotFound)
	wantErr(t, "DeleteScalingRecord(scl_missing)", db.DeleteScalingRecord(ctx, "", "scl_missing"), store.ErrNotFound)
	if ids, err := db.ReleaseScalingArmer(ctx, "tok_unknown"); err != nil || len(ids) != 0 {
		t.Errorf("ReleaseScalingArmer(tok_unknown) = %v, %v; want none", ids, err)
	}
	if ids, err := db.DeleteStaleScalingRecords(ctx, time.Time{}); err != nil || len(ids) != 0 {
		t.Errorf("DeleteStaleScalingRecords(zero) = %v, %v; want none", ids, err)
	}
	api, _ := mustDeclare(t, db, declaration(org.ID, "api.example.com", ""), "tok_a", true)
	wantChange(t, sub, updated(api))
	mustDeclare(t, db, declaration(org.ID, "api.example.com", ""), "tok_b", false)
	wantChange(t, sub, updated(api))
	web, _ := mustDeclare(t, db, declaration(org.ID, "web.example.com", ""), "tok_c", true)
	wantChange(t, sub, updated(web))

	// Release: app goes, api loses tok_a, in ID order.
	if _, err := db.ReleaseScalingArmer(ctx, "tok_a"); err != nil {
		t.Fatalf("ReleaseScalingArmer(tok_a) = %v", err)
	}
	for _, r := range byID(app, api) {
		want := updated(r)
		if r.ID == app.ID {
			want = deleted(r)
		}
		wantChange(t, sub, want)
	}

	wantErr(t, "DeleteScalingRecord(api)", db.DeleteScalingRecord(ctx, org.ID, api.ID), nil)
	wantChange(t, sub, deleted(api))

	clk.Advance(time.Hour)
	if _, err := db.DeleteStaleScalingRecords(ctx, clk.Now()); err != nil {
		t.Fatalf("DeleteStaleScalingRecords() = %v", err)
	}
	wantChange(t, sub, deleted(web))
}

func testScalingChangesAcrossDBs(t *testing.T, b backend) {
	if !b.shared {
		t.Skipf("%s: one server owns the database file; changes reach the subscribers of the DB that made them only", b.name)
	}
	ctx := t.Context()
	cfg := b.fresh(t)
	db1 := storetest.Open(t, cfg)
	db2 := storetest.Open(t, cfg)
	org := mustOrg(t, db1, "acme")
	sub1 := db1.Subscribe(ctx)
	sub2 := db2.Subscribe(ctx)
	both := func(want store.Change) {
		t.Helper()
		wantChange(t, sub1, want)
		wantChange(t, sub2, want)
	}

	// Declared on one server, seen on the other at once.
	app, _ := mustDeclare(t, db2, declaration(org.ID, "app.example.com", ""), "tok_a", true)
	both(scalingChange(store.ChangeScalingUpdated, app))
	wantScaling(t, db1, app)

	// A breaker tripped on one is seen by all.
	tripped, err := db1.RecordScalingCall(ctx, app.ID, store.ScalingCall{At: time.Now(), Reason: "cold_start", Status: 500, ConsecutiveFailures: 5, Disarmed: true})
	if err != nil {
		t.Fatalf("db1.RecordScalingCall() = %v", err)
	}
	both(scalingChange(store.ChangeScalingDisarmed, app))
	wantScaling(t, db2, tripped)

	api, _ := mustDeclare(t, db1, declaration(org.ID, "api.example.com", ""), "tok_b", true)
	both(scalingChange(store.ChangeScalingUpdated, api))
	wantErr(t, "db2.DeleteScalingRecord(app)", db2.DeleteScalingRecord(ctx, org.ID, app.ID), nil)
	both(scalingChange(store.ChangeScalingDeleted, app))
	if _, err := db2.ReleaseScalingArmer(ctx, "tok_b"); err != nil {
		t.Fatalf("db2.ReleaseScalingArmer() = %v", err)
	}
	both(scalingChange(store.ChangeScalingDeleted, api))

	web, _ := mustDeclare(t, db2, declaration(org.ID, "web.example.com", ""), "tok_c", true)
	both(scalingChange(store.ChangeScalingUpdated, web))
	if _, err := db1.DeleteStaleScalingRecords(ctx, web.UpdatedAt.Add(time.Microsecond)); err != nil {
		t.Fatalf("db1.DeleteStaleScalingRecords() = %v", err)
	}
	both(scalingChange(store.ChangeScalingDeleted, web))
}

func testScalingDeclareConcurrent(t *testing.T, b backend) {
	ctx := t.Context()
	cfg := b.fresh(t)
	dbs := []*store.DB{storetest.Open(t, cfg), storetest.Open(t, cfg)}
	org := mustOrg(t, dbs[0], "acme")
	// Two binds: one nobody has declared yet, so that the declarers race
	// to create it, and one armed by "old" alone, released while the
	// others declare it. Whichever way they interleave, no declaration is
	// lost.
	binds := []store.ScalingRecord{
		declaration(org.ID, "new.example.com", ""),
		declaration(org.ID, "old.example.com", ""),
	}
	mustDeclare(t, dbs[0], binds[1], "old", true)

	const declarers = 16
	var (
		wg     sync.WaitGroup
		start  = make(chan struct{})
		errs   = make(chan error, declarers*len(binds)+1)
		armers []string
	)
	for i := range declarers {
		armer := fmt.Sprintf("tok_%02d", i)
		armers = append(armers, armer)
		for _, d := range binds {
			wg.Go(func() {
				<-start
				if _, _, err := dbs[i%len(dbs)].DeclareScaling(ctx, d, armer, i%2 == 0); err != nil {
					errs <- fmt.Errorf("db%d.DeclareScaling(%s, %s) = %w", i%len(dbs), d.Hostname, armer, err)
				}
			})
		}
	}
	wg.Go(func() {
		<-start
		if _, err := dbs[1].ReleaseScalingArmer(ctx, "old"); err != nil {
			errs <- fmt.Errorf("db1.ReleaseScalingArmer(old) = %w", err)
		}
	})
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	for i, db := range dbs {
		rs, err := db.ListScalingRecords(ctx, "")
		if err != nil {
			t.Fatalf("db%d.ListScalingRecords() = %v", i, err)
		}
		if len(rs) != len(binds) {
			t.Fatalf("db%d.ListScalingRecords() = %d records, want %d", i, len(rs), len(binds))
		}
		for _, r := range rs {
			got := slices.Sorted(slices.Values(r.ArmedBy))
			if diff := cmp.Diff(armers, got); diff != "" {
				t.Errorf("db%d: %s ArmedBy mismatch, want every declarer once and not old (-want +got):\n%s", i, r.Hostname, diff)
			}
		}
	}
}

// testScalingLeaseKeyLifetime (issue #42 item 1): a lease row left by a
// holder that stopped mid-call hands its Idempotency-Key to a takeover
// within one lease lifetime of its expiry, and to nothing later: a
// decision of the same shape an hour on is a new decision, with its own
// key.
func testScalingLeaseKeyLifetime(t *testing.T, b backend) {
	ctx := t.Context()
	for _, tt := range []struct {
		name    string
		after   time.Duration // from the dead lease's expiry
		wantKey string
	}{
		{"takeover at expiry", 0, "key_dead"},
		{"takeover within the lifetime", 14 * time.Second, "key_dead"},
		{"one lifetime after expiry", 15 * time.Second, "key_new"},
		{"an hour later", time.Hour, "key_new"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			db := openClock(t, b.fresh(t), clk)
			org := mustOrg(t, db, "acme")
			rec, _ := mustDeclare(t, db, declaration(org.ID, "app.example.com", ""), "tok_a", true)
			if _, _, ok, err := db.AcquireScalingLease(ctx, lease(rec, "srv_dead", "key_dead"), 15*time.Second); err != nil || !ok {
				t.Fatalf("AcquireScalingLease(dead) = %v, %v", ok, err)
			}
			// srv_dead never records an outcome: its row stays.
			clk.Advance(15*time.Second + tt.after)
			got, _, ok, err := db.AcquireScalingLease(ctx, lease(rec, "srv_new", "key_new"), 15*time.Second)
			if err != nil || !ok || got.IdempotencyKey != tt.wantKey {
				t.Errorf("AcquireScalingLease(new, %v after expiry) = key %q, %v, %v; want key %q", tt.after, got.IdempotencyKey, ok, err, tt.wantKey)
			}
		})
	}
}

// testScalingLeaseGeneration (issue #42 item 3): every lease taken gets a
// higher generation than any before it, for any record, a record deleted
// and declared again included; the outcome of a call made under a lease
// since taken over is refused and stores nothing, while the current
// holder's is stored.
func testScalingLeaseGeneration(t *testing.T, b backend) {
	ctx := t.Context()
	clk := newClock()
	db := openClock(t, b.fresh(t), clk)
	org := mustOrg(t, db, "acme")
	rec, _ := mustDeclare(t, db, declaration(org.ID, "app.example.com", ""), "tok_a", true)
	other, _ := mustDeclare(t, db, declaration(org.ID, "api.example.com", ""), "tok_a", true)
	take := func(r store.ScalingRecord, holder string) store.ScalingLease {
		t.Helper()
		l, _, ok, err := db.AcquireScalingLease(ctx, lease(r, holder, "key_"+holder), 15*time.Second)
		if err != nil || !ok {
			t.Fatalf("AcquireScalingLease(%s) = %v, %v", holder, ok, err)
		}
		return l
	}
	stalled := take(rec, "srv_a")
	o := take(other, "srv_o")
	clk.Advance(16 * time.Second)
	successor := take(rec, "srv_b")
	if !(stalled.Generation > 0 && o.Generation > stalled.Generation && successor.Generation > o.Generation) {
		t.Fatalf("generations a %d, other record %d, b %d; want rising", stalled.Generation, o.Generation, successor.Generation)
	}
	// The stalled holder's outcome comes after b took over: refused.
	_, err := db.RecordScalingCall(ctx, rec.ID, store.ScalingCall{Reason: "cold_start", Status: 503, ConsecutiveFailures: 1,
		NextCallIn: time.Hour, Holder: "srv_a", Generation: stalled.Generation})
	wantErr(t, "RecordScalingCall(stalled generation)", err, store.ErrConflict)
	if got, err := db.ScalingRecord(ctx, "", rec.ID); err != nil || got.LastCallAt != nil || got.ConsecutiveFailures != 0 || got.NextCallAt != nil {
		t.Errorf("record after a refused stale outcome = %+v, %v; want no call recorded", got, err)
	}
	if l, ok := leaseHolder(t, db, rec); !ok || l != "srv_b" {
		t.Errorf("lease after a refused stale outcome held by %q, %v; want srv_b's, untouched", l, ok)
	}
	// b's own outcome is stored and releases its lease.
	if _, err := db.RecordScalingCall(ctx, rec.ID, store.ScalingCall{Reason: "cold_start", Status: 202,
		NextCallIn: time.Minute, Holder: "srv_b", Generation: successor.Generation}); err != nil {
		t.Fatalf("RecordScalingCall(current generation) = %v", err)
	}
	// A record deleted and declared again goes on rising.
	if err := db.DeleteScalingRecord(ctx, "", rec.ID); err != nil {
		t.Fatal(err)
	}
	again, _ := mustDeclare(t, db, declaration(org.ID, "app.example.com", ""), "tok_a", true)
	if l := take(again, "srv_c"); l.Generation <= successor.Generation {
		t.Errorf("generation after delete and declare = %d, want above %d", l.Generation, successor.Generation)
	}
	_, err = db.RecordScalingCall(ctx, other.ID, store.ScalingCall{Reason: "cold_start", Status: 200, Generation: -1})
	if err == nil {
		t.Error("RecordScalingCall(negative generation) = nil, want an error")
	}
}

// leaseHolder reports who holds rec's lease, by taking a look as a
// holder that must be refused (a zero TTL is refused before any read, so
// this asks for the shortest one and expects a refusal).
func leaseHolder(t *testing.T, db *store.DB, rec store.ScalingRecord) (string, bool) {
	t.Helper()
	held, _, ok, err := db.AcquireScalingLease(t.Context(), lease(rec, "srv_probe", "key_probe"), time.Microsecond)
	if err != nil || ok {
		t.Fatalf("AcquireScalingLease(probe) = %v, %v; want refused", ok, err)
	}
	return held.Holder, held.Holder != ""
}

// testScalingBudget (issue #42 item 4): the calls-per-minute budget is
// kept in the store and shared by every DB on the database: it starts
// with one call, a lease taken on one DB spends it for the other, a
// refusal says when the next call is there, and it refills at
// CallsPerMinute/60 a second up to CallsPerMinute.
func testScalingBudget(t *testing.T, b backend) {
	ctx := t.Context()
	clk := newClock()
	cfg := b.fresh(t)
	one := openClock(t, cfg, clk)
	two := openClock(t, cfg, clk)
	org := mustOrg(t, one, "acme")
	var recs []store.ScalingRecord
	for _, h := range []string{"a.example.com", "b.example.com", "c.example.com", "d.example.com"} {
		r, _ := mustDeclare(t, one, declaration(org.ID, h, ""), "tok_a", true)
		recs = append(recs, r)
	}
	budgeted := func(db *store.DB, r store.ScalingRecord, holder string) (store.ScalingLease, bool) {
		t.Helper()
		l := lease(r, holder, "key_"+holder)
		l.CallsPerMinute = 2
		got, _, ok, err := db.AcquireScalingLease(ctx, l, 15*time.Second)
		if err != nil {
			t.Fatalf("AcquireScalingLease(%s) = %v", holder, err)
		}
		return got, ok
	}
	if _, ok := budgeted(one, recs[0], "srv_1"); !ok {
		t.Fatal("first lease refused; want the budget's first call")
	}
	now := clk.Now()
	got, ok := budgeted(two, recs[1], "srv_2")
	if ok || got.Holder != "" || !got.RetryAt.Equal(stored(now).Add(30*time.Second)) {
		t.Fatalf("lease on the other DB with the budget spent = %+v, %v; want refused until %v", got, ok, stored(now).Add(30*time.Second))
	}
	// A lease without a budget is not held back, and spends nothing.
	if _, _, ok, err := two.AcquireScalingLease(ctx, lease(recs[3], "srv_x", "key_x"), 15*time.Second); err != nil || !ok {
		t.Errorf("AcquireScalingLease(no budget) = %v, %v; want taken", ok, err)
	}
	clk.Advance(30 * time.Second)
	if _, ok := budgeted(two, recs[1], "srv_2"); !ok {
		t.Error("lease 30 s later refused; want the refilled call")
	}
	if _, ok := budgeted(one, recs[2], "srv_1"); ok {
		t.Error("second lease inside the same 30 s taken; want refused")
	}
	// A long pause refills to the budget's size, two calls, not more.
	clk.Advance(time.Hour)
	for i, r := range []store.ScalingRecord{recs[2], recs[0]} {
		if _, ok := budgeted(one, r, fmt.Sprintf("srv_refill%d", i)); !ok {
			t.Errorf("lease %d after an hour refused; want the full budget of 2", i)
		}
	}
	if _, ok := budgeted(two, recs[1], "srv_3"); ok {
		t.Error("third lease after an hour taken; want the budget of 2 spent")
	}
	bad := lease(recs[3], "srv_bad", "key_bad")
	bad.CallsPerMinute = -1
	if _, _, _, err := one.AcquireScalingLease(ctx, bad, time.Second); err == nil {
		t.Error("AcquireScalingLease(negative budget) = nil, want an error")
	}
}

// testScalingDatabaseClock (issue #42 item 2): without Config.Now, the
// scaling times are the database's clock, read in the transaction that
// decides, not the server process's: a database whose clock says 2040
// stamps leases, calls and cooldowns in 2040, and Clock reports it.
func testScalingDatabaseClock(t *testing.T, b backend) {
	ctx := t.Context()
	dbNow := time.Date(2040, 1, 2, 3, 4, 5, 678000000, time.UTC)
	cfg := store.WithDatabaseClockForTest(b.fresh(t), dbNow)
	db := storetest.Open(t, cfg)
	org := mustOrg(t, db, "acme")
	rec, _ := mustDeclare(t, db, declaration(org.ID, "app.example.com", ""), "tok_a", true)
	if got, err := db.Clock(ctx); err != nil || !got.Equal(dbNow) {
		t.Errorf("Clock() = %v, %v; want the database's %v", got, err, dbNow)
	}
	l, _, ok, err := db.AcquireScalingLease(ctx, lease(rec, "srv_a", "key_a"), 15*time.Second)
	if err != nil || !ok || !l.AcquiredAt.Equal(dbNow) || !l.ExpiresAt.Equal(dbNow.Add(15*time.Second)) {
		t.Fatalf("AcquireScalingLease() = %+v, %v, %v; want acquired at the database's %v", l, ok, err, dbNow)
	}
	got, err := db.RecordScalingCall(ctx, rec.ID, store.ScalingCall{Reason: "cold_start", Status: 429,
		NextCallIn: time.Minute, PenaltyFor: 2 * time.Minute, Holder: "srv_a", Generation: l.Generation})
	if err != nil {
		t.Fatalf("RecordScalingCall() = %v", err)
	}
	if got.LastCallAt == nil || !got.LastCallAt.Equal(dbNow) || got.NextCallAt == nil || !got.NextCallAt.Equal(dbNow.Add(time.Minute)) ||
		got.PenaltyUntil == nil || !got.PenaltyUntil.Equal(dbNow.Add(2*time.Minute)) {
		t.Errorf("RecordScalingCall() = last %v, next %v, penalty %v; want %v, +1m, +2m", got.LastCallAt, got.NextCallAt, got.PenaltyUntil, dbNow)
	}
	// The real database clock, unreplaced, is close to this process's
	// (same host here): it reads, and in the right layout.
	real := storetest.Open(t, b.fresh(t))
	if got, err := real.Clock(ctx); err != nil || got.Sub(time.Now()).Abs() > time.Minute {
		t.Errorf("Clock() of an unreplaced database = %v, %v; want about %v", got, err, time.Now())
	}
}
