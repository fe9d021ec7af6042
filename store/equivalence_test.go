package store_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/store/storetest"
)

// The equivalence check: one script of calls, run on a PostgreSQL store
// and on an SQLite store, returns the same thing, call by call, on both.
// The conformance suite says what each method must do; this says that the
// two engines do it alike where the suite does not look: orders and ties,
// lists holding PostgreSQL's and JSON's special characters, LIKE
// wildcards, times in another zone and below the microsecond, open and
// closed ranges, merged usage.
//
// The only values allowed to differ are the IDs the store generates at
// random (organizations, tokens, keys, scaling records, webhooks, signing
// keys): the script names each one as it is created, and the comparison
// reads every ID by its name. Times are not ignored: both stores run on
// fake clocks that the script moves alike. Audit IDs are not ignored
// either: both engines number entries from 1.

// TestEquivalence runs the script on both engines and compares every
// result.
func TestEquivalence(t *testing.T) {
	needPostgres(t)
	got := runScript(t, storetest.MigratedSQLite(t))
	want := runScript(t, storetest.MigratedPostgres(t))
	if diff := diffRuns(want, got); diff != "" {
		t.Errorf("SQLite's results differ from PostgreSQL's (-postgres +sqlite):\n%s", diff)
	}
}

// TestEquivalenceCoversEveryMethod fails when a method of *store.DB that
// reads or writes the database is missing from the script: a method added
// to the store must be added to the script too.
func TestEquivalenceCoversEveryMethod(t *testing.T) {
	exempt := map[string]string{
		"Backend":            "names the engine, which differs by definition",
		"CachedStmtsForTest": "a counter of this process's statement cache",
		"Close":              "no database call",
		"DroppedChanges":     "a counter of this process",
		"ExecForTest":        "raw SQL, written per engine by the tests",
		"Ping":               "returns no rows",
		"Subscribe":          "changes, not rows: the conformance suite compares them",
	}
	covered := map[string]bool{}
	for _, s := range equivalenceScript() {
		covered[s.method] = true
	}
	typ := reflect.TypeFor[*store.DB]()
	for i := range typ.NumMethod() {
		name := typ.Method(i).Name
		if exempt[name] == "" && !covered[name] {
			t.Errorf("DB.%s is not in equivalenceScript: add a call of it", name)
		}
	}
}

// TestEquivalenceCatchesDrift proves the comparison sensitive: an SQLite
// store whose dialect drifts from the real one, as a careless edit of
// dialect.go would make it, gives results that diffRuns tells apart from
// the real one's. It needs no PostgreSQL.
func TestEquivalenceCatchesDrift(t *testing.T) {
	want := runScript(t, storetest.MigratedSQLite(t))
	for _, drift := range store.DialectDriftsForTest() {
		t.Run(drift, func(t *testing.T) {
			t.Parallel()
			got := runScript(t, store.WithDialectDriftForTest(storetest.MigratedSQLite(t), drift))
			if diffRuns(want, got) == "" {
				t.Errorf("drift %q: results equal to the real dialect's, want a difference", drift)
			}
		})
	}
}

// step is one call of the script.
type step struct {
	method string // the DB method it calls
	call   func(ctx context.Context, e *env) (any, error)
}

// result is what one step returned: its value, and its error as the
// sentinel it wraps (driver messages differ between engines).
type result struct {
	Step  int
	Call  string
	Value any
	Err   string
}

// env is one engine's run of the script.
type env struct {
	db  *store.DB
	clk *clock
	ids map[string]string // script name -> the ID this store generated
}

// id returns the ID the store generated for name.
func (e *env) id(name string) string {
	id, ok := e.ids[name]
	if !ok {
		panic("equivalence script: no ID named " + name)
	}
	return id
}

// name records that the store generated id for name, and returns v.
func name[T any](e *env, n, id string, v T, err error) (any, error) {
	if err == nil {
		e.ids[n] = id
	}
	return v, err
}

// scriptRun is a whole run: the results in order and the names of the
// IDs it generated.
type scriptRun struct {
	results []result
	ids     map[string]string
}

func runScript(t *testing.T, cfg store.Config) scriptRun {
	t.Helper()
	clk := newClock()
	e := &env{db: openClock(t, cfg, clk), clk: clk, ids: map[string]string{}}
	var run scriptRun
	for i, s := range equivalenceScript() {
		v, err := s.call(t.Context(), e)
		run.results = append(run.results, result{Step: i, Call: s.method, Value: v, Err: errClass(err)})
	}
	run.ids = e.ids
	return run
}

// errClass is err as the sentinel it wraps, "" for nil.
func errClass(err error) string {
	for _, s := range []error{store.ErrNotFound, store.ErrConflict, store.ErrLimit, store.ErrUnavailable, store.ErrAuditChainBroken} {
		if errors.Is(err, s) {
			return s.Error()
		}
	}
	if err != nil {
		return "plain error"
	}
	return ""
}

// diffRuns compares two runs, reading every generated ID by its script
// name, wherever it appears: a field, a list element or a map key.
func diffRuns(want, got scriptRun) string {
	names := map[string]string{}
	for _, r := range []scriptRun{want, got} {
		for n, id := range r.ids {
			names[id] = "<" + n + ">" // random IDs: the two runs' never collide
		}
	}
	rename := func(s string) string {
		if n, ok := names[s]; ok {
			return n
		}
		return s
	}
	return cmp.Diff(want.results, got.results,
		cmp.Transformer("id", rename),
		cmp.Transformer("idKeys", func(m map[string]int64) map[string]int64 {
			out := make(map[string]int64, len(m))
			for k, v := range m {
				out[rename(k)] = v
			}
			return out
		}))
}

// sealFixed seals a key as tag and its generation: the same bytes on
// both engines, where sealAs names the random ID.
func sealFixed(tag string) store.SealFunc {
	return func(k store.SigningKey) ([]byte, error) {
		return []byte(tag + "|" + k.Purpose + "|" + strconv.FormatInt(k.Generation, 10)), nil
	}
}

// hostile are strings that PostgreSQL's array syntax or JSON would have to
// quote or escape, stored in lists on both engines.
var hostile = []string{"plain", "two words", "a,b", "{braced}", `"quoted"`, `back\slash`, "NULL", "null", "", "ünïcødé", "[1]", " lead"}

func equivalenceScript() []step {
	ignore := func(err error) (any, error) { return nil, err }
	at := func(e *env, d time.Duration) *time.Time { return new(e.clk.Now().Add(d)) }
	return []step{
		// Organizations.
		{"EnsureOrg", func(ctx context.Context, e *env) (any, error) {
			o, err := e.db.EnsureOrg(ctx, "acme")
			return name(e, "acme", o.ID, o, err)
		}},
		{"EnsureOrg", func(ctx context.Context, e *env) (any, error) { return e.db.EnsureOrg(ctx, "acme") }},
		{"CreateOrg", func(ctx context.Context, e *env) (any, error) {
			o, err := e.db.CreateOrg(ctx, "beta")
			return name(e, "beta", o.ID, o, err)
		}},
		{"CreateOrg", func(ctx context.Context, e *env) (any, error) { return e.db.CreateOrg(ctx, "beta") }},
		{"SetOrgLimits", func(ctx context.Context, e *env) (any, error) {
			return e.db.SetOrgLimits(ctx, e.id("beta"), store.OrgLimits{MonthlyMaxBytes: 1 << 40, MaxClients: 3, MaxTokens: 2, MaxAdminKeys: 1})
		}},
		{"SetOrgLimits", func(ctx context.Context, e *env) (any, error) {
			return e.db.SetOrgLimits(ctx, "org_missing", store.OrgLimits{})
		}},
		{"Org", func(ctx context.Context, e *env) (any, error) { return e.db.Org(ctx, e.id("beta")) }},
		{"Org", func(ctx context.Context, e *env) (any, error) { return e.db.Org(ctx, "org_missing") }},
		{"ListOrgs", func(ctx context.Context, e *env) (any, error) { return e.db.ListOrgs(ctx) }},

		// Tokens: three at one instant (the order falls to insertion),
		// lists of hostile strings, expiries below the microsecond.
		{"CreateToken", func(ctx context.Context, e *env) (any, error) {
			t, err := e.db.CreateToken(ctx, store.Token{OrgID: e.id("acme"), Name: "web", Prefix: "apr_w", Hash: hash("eq-web"),
				Hostnames: hostile, AllowedIPs: []string{"10.0.0.0/8", "::1/128"}, ExpiresAt: at(e, 36*time.Hour+time.Nanosecond),
				CreatedBy: "master", AllowCatchAll: true,
				Limits: store.TokenLimits{MaxRPS: 12.5, DailyMaxBytes: 1 << 30, MaxConnections: 4, Paths: []string{"/api", "/v1"},
					ClientAllowedIPs: []string{"192.0.2.0/24"}, AllowTCPPorts: []string{"7000-7010", "9000"}}})
			return name(e, "web", t.ID, t, err)
		}},
		{"CreateToken", func(ctx context.Context, e *env) (any, error) {
			t, err := e.db.CreateToken(ctx, store.Token{OrgID: e.id("acme"), Name: "api", Hash: hash("eq-api"), ExpiresAt: at(e, 12*time.Hour)})
			return name(e, "api", t.ID, t, err)
		}},
		{"CreateToken", func(ctx context.Context, e *env) (any, error) {
			t, err := e.db.CreateToken(ctx, store.Token{OrgID: e.id("beta"), Name: "b1", Hash: hash("eq-b1")})
			return name(e, "b1", t.ID, t, err)
		}},
		{"CreateToken", func(ctx context.Context, e *env) (any, error) {
			return e.db.CreateToken(ctx, store.Token{OrgID: e.id("beta"), Name: "dup", Hash: hash("eq-b1")})
		}},
		{"CreateToken", func(ctx context.Context, e *env) (any, error) {
			t, err := e.db.CreateToken(ctx, store.Token{OrgID: e.id("beta"), Name: "b2", Hash: hash("eq-b2")})
			return name(e, "b2", t.ID, t, err)
		}},
		{"CreateToken", func(ctx context.Context, e *env) (any, error) { // past beta's MaxTokens
			return e.db.CreateToken(ctx, store.Token{OrgID: e.id("beta"), Name: "b3", Hash: hash("eq-b3")})
		}},
		{"CreateToken", func(ctx context.Context, e *env) (any, error) {
			return e.db.CreateToken(ctx, store.Token{OrgID: "org_missing", Name: "x", Hash: hash("eq-x")})
		}},
		{"TokenByHash", func(ctx context.Context, e *env) (any, error) { return e.db.TokenByHash(ctx, hash("eq-web")) }},
		{"TokenByHash", func(ctx context.Context, e *env) (any, error) { return e.db.TokenByHash(ctx, hash("eq-none")) }},
		{"Token", func(ctx context.Context, e *env) (any, error) { return e.db.Token(ctx, e.id("beta"), e.id("web")) }},
		{"ListTokens", func(ctx context.Context, e *env) (any, error) { return e.db.ListTokens(ctx, "") }},
		{"ListTokens", func(ctx context.Context, e *env) (any, error) { return e.db.ListTokens(ctx, e.id("beta")) }},
		{"UpdateToken", func(ctx context.Context, e *env) (any, error) {
			ed := store.TokenEdit{Name: "api2", Hostnames: slices.Concat(hostile, []string{"x"}), AllowedIPs: hostile[2:5],
				ExpiresAt: at(e, 6*time.Hour), Limits: store.TokenLimits{Paths: []string{"/"}}}
			return e.db.UpdateToken(ctx, e.id("acme"), e.id("api"), ed)
		}},
		{"ClaimExpiryWarning", func(ctx context.Context, e *env) (any, error) {
			t, err := e.db.Token(ctx, "", e.id("api"))
			if err != nil {
				return nil, err
			}
			return e.db.ClaimExpiryWarning(ctx, t.ID, *t.ExpiresAt, store.ExpiryWarn1d)
		}},
		{"ClaimExpiryWarning", func(ctx context.Context, e *env) (any, error) {
			t, err := e.db.Token(ctx, "", e.id("api"))
			if err != nil {
				return nil, err
			}
			return e.db.ClaimExpiryWarning(ctx, t.ID, *t.ExpiresAt, store.ExpiryWarn1d)
		}},
		{"TokensExpiringBy", func(ctx context.Context, e *env) (any, error) {
			return e.db.TokensExpiringBy(ctx, e.clk.Now(), e.clk.Now().Add(48*time.Hour))
		}},
		{"RotateToken", func(ctx context.Context, e *env) (any, error) {
			return e.db.RotateToken(ctx, "", e.id("web"), hash("eq-web-2"), "apr_2", e.clk.Now().Add(time.Hour+time.Nanosecond))
		}},
		{"TokenByHash", func(ctx context.Context, e *env) (any, error) { return e.db.TokenByHash(ctx, hash("eq-web")) }},
		{"RevokeToken", func(ctx context.Context, e *env) (any, error) {
			return e.db.RevokeToken(ctx, e.id("beta"), e.id("b1"), e.clk.Advance(time.Minute))
		}},
		{"RevokeToken", func(ctx context.Context, e *env) (any, error) {
			return e.db.RevokeToken(ctx, "", e.id("b1"), e.clk.Advance(time.Minute))
		}},
		{"UpdateToken", func(ctx context.Context, e *env) (any, error) {
			return e.db.UpdateToken(ctx, "", e.id("b1"), store.TokenEdit{Name: "late"})
		}},

		// Admin keys and sessions.
		{"CreateAdminKey", func(ctx context.Context, e *env) (any, error) {
			k, err := e.db.CreateAdminKey(ctx, store.AdminKey{OrgID: e.id("acme"), Name: "ops", Role: "admin", Prefix: "apk_o",
				Hash: hash("eq-key"), CreatedBy: "master", ExpiresAt: at(e, time.Hour)})
			return name(e, "ops", k.ID, k, err)
		}},
		{"CreateAdminKey", func(ctx context.Context, e *env) (any, error) {
			k, err := e.db.CreateAdminKey(ctx, store.AdminKey{OrgID: e.id("beta"), Role: "viewer", Hash: hash("eq-key-b")})
			return name(e, "viewer", k.ID, k, err)
		}},
		{"CreateAdminKey", func(ctx context.Context, e *env) (any, error) { // past beta's MaxAdminKeys
			return e.db.CreateAdminKey(ctx, store.AdminKey{OrgID: e.id("beta"), Role: "viewer", Hash: hash("eq-key-c")})
		}},
		{"AdminKeyByHash", func(ctx context.Context, e *env) (any, error) { return e.db.AdminKeyByHash(ctx, hash("eq-key")) }},
		{"AdminKey", func(ctx context.Context, e *env) (any, error) { return e.db.AdminKey(ctx, e.id("beta"), e.id("ops")) }},
		{"ListAdminKeys", func(ctx context.Context, e *env) (any, error) { return e.db.ListAdminKeys(ctx, "") }},
		{"CreateAdminSession", func(ctx context.Context, e *env) (any, error) {
			return e.db.CreateAdminSession(ctx, store.AdminSession{Hash: hash("eq-s1"), KeyID: e.id("ops"), CSRF: "c1",
				ExpiresAt: e.clk.Now().Add(time.Hour), RemoteAddr: "192.0.2.1:5"}, 2)
		}},
		{"CreateAdminSession", func(ctx context.Context, e *env) (any, error) {
			return e.db.CreateAdminSession(ctx, store.AdminSession{Hash: hash("eq-s2"), KeyID: e.id("ops"), CSRF: "c2",
				ExpiresAt: e.clk.Now().Add(time.Minute)}, 2)
		}},
		{"CreateAdminSession", func(ctx context.Context, e *env) (any, error) { // the first falls out of the bound
			return e.db.CreateAdminSession(ctx, store.AdminSession{Hash: hash("eq-s3"), KeyID: e.id("ops"), CSRF: "c3",
				ExpiresAt: e.clk.Now().Add(2 * time.Hour)}, 2)
		}},
		{"CreateAdminSession", func(ctx context.Context, e *env) (any, error) {
			return e.db.CreateAdminSession(ctx, store.AdminSession{Hash: hash("eq-master"), Master: true, CSRF: "m",
				ExpiresAt: e.clk.Now().Add(time.Hour)}, 2)
		}},
		{"RevokeOIDCSessions", func(ctx context.Context, e *env) (any, error) {
			r, err := e.db.RevokeOIDCSessions(ctx, store.OIDCRevocation{Hostname: "eq.test", SessionID: "sid1", Subject: "jane", Email: "jane@eq.test", ExpiresAt: e.clk.Now().Add(time.Hour)})
			return name(e, "rev-logout", r.ID, r, err)
		}},
		{"RevokeOIDCSessions", func(ctx context.Context, e *env) (any, error) { // takes jane's logout in
			r, err := e.db.RevokeOIDCSessions(ctx, store.OIDCRevocation{Hostname: "eq.test", Email: "jane@eq.test", ExpiresAt: e.clk.Now().Add(30 * time.Minute)})
			return name(e, "rev-user", r.ID, r, err)
		}},
		{"RevokeOIDCSessions", func(ctx context.Context, e *env) (any, error) { // expired: refused
			return e.db.RevokeOIDCSessions(ctx, store.OIDCRevocation{Hostname: "eq.test", ExpiresAt: e.clk.Now()})
		}},
		{"OIDCRevocations", func(ctx context.Context, e *env) (any, error) { return e.db.OIDCRevocations(ctx, "", e.clk.Now()) }},
		{"OIDCRevocations", func(ctx context.Context, e *env) (any, error) {
			return e.db.OIDCRevocations(ctx, "eq.test", e.clk.Now().Add(2*time.Hour))
		}},
		{"AdminSessionByHash", func(ctx context.Context, e *env) (any, error) { return e.db.AdminSessionByHash(ctx, hash("eq-s1")) }},
		{"AdminSessionByHash", func(ctx context.Context, e *env) (any, error) { return e.db.AdminSessionByHash(ctx, hash("eq-s3")) }},
		{"DeleteExpiredAdminSessions", func(ctx context.Context, e *env) (any, error) {
			return e.db.DeleteExpiredAdminSessions(ctx, e.clk.Now().Add(30*time.Minute))
		}},
		{"DeleteAdminSession", func(ctx context.Context, e *env) (any, error) {
			return ignore(e.db.DeleteAdminSession(ctx, hash("eq-s2")))
		}},
		{"DeleteAdminKey", func(ctx context.Context, e *env) (any, error) {
			return ignore(e.db.DeleteAdminKey(ctx, e.id("acme"), e.id("viewer")))
		}},
		{"DeleteAdminKey", func(ctx context.Context, e *env) (any, error) {
			return ignore(e.db.DeleteAdminKey(ctx, "", e.id("ops")))
		}},
		{"AdminSessionByHash", func(ctx context.Context, e *env) (any, error) { return e.db.AdminSessionByHash(ctx, hash("eq-s3")) }},
		{"AdminSessionByHash", func(ctx context.Context, e *env) (any, error) {
			return e.db.AdminSessionByHash(ctx, hash("eq-master"))
		}},

		// Maintenance.
		{"SetMaintenance", func(ctx context.Context, e *env) (any, error) {
			return ignore(e.db.SetMaintenance(ctx, store.Maintenance{Hostname: "a.example.com", OrgID: e.id("acme"), By: "ops", Reason: "upgrade"}))
		}},
		{"SetMaintenance", func(ctx context.Context, e *env) (any, error) {
			e.clk.Advance(time.Second)
			return ignore(e.db.SetMaintenance(ctx, store.Maintenance{Hostname: "b.example.com", OrgID: e.id("beta"),
				ExpiresAt: at(e, time.Hour+time.Nanosecond)}))
		}},
		{"SetMaintenance", func(ctx context.Context, e *env) (any, error) {
			return ignore(e.db.SetMaintenance(ctx, store.Maintenance{Hostname: "a.example.com", OrgID: e.id("beta")}))
		}},
		{"ListMaintenance", func(ctx context.Context, e *env) (any, error) { return e.db.ListMaintenance(ctx) }},
		{"ClearMaintenance", func(ctx context.Context, e *env) (any, error) {
			return ignore(e.db.ClearMaintenance(ctx, e.id("beta"), "a.example.com"))
		}},
		{"ClearMaintenance", func(ctx context.Context, e *env) (any, error) {
			return ignore(e.db.ClearMaintenance(ctx, "", "b.example.com"))
		}},
		{"ListMaintenance", func(ctx context.Context, e *env) (any, error) { return e.db.ListMaintenance(ctx) }},

		// Hostname ownership.
		{"SetOrgHostnames", func(ctx context.Context, e *env) (any, error) {
			return e.db.SetOrgHostnames(ctx, e.id("acme"), []string{"*.acme.test", "acme.test", "WWW.Acme.Test"})
		}},
		{"SetOrgHostnames", func(ctx context.Context, e *env) (any, error) {
			return e.db.SetOrgHostnames(ctx, e.id("beta"), []string{"x.acme.test"})
		}},
		{"SetOrgHostnames", func(ctx context.Context, e *env) (any, error) {
			return e.db.SetOrgHostnames(ctx, e.id("beta"), []string{"beta.test", "*.beta.test"})
		}},
		{"ListOrgHostnames", func(ctx context.Context, e *env) (any, error) { return e.db.ListOrgHostnames(ctx, "") }},
		{"ListOrgHostnames", func(ctx context.Context, e *env) (any, error) { return e.db.ListOrgHostnames(ctx, e.id("beta")) }},
		{"SetOrgPorts", func(ctx context.Context, e *env) (any, error) {
			return e.db.SetOrgPorts(ctx, e.id("acme"), []string{"20050-20099", "2222", "20000-20049"})
		}},
		{"SetOrgPorts", func(ctx context.Context, e *env) (any, error) {
			return e.db.SetOrgPorts(ctx, e.id("beta"), []string{"20099-20100"})
		}},
		{"SetOrgPorts", func(ctx context.Context, e *env) (any, error) {
			return e.db.SetOrgPorts(ctx, e.id("beta"), []string{"2221", "30000-30010"})
		}},
		{"ListOrgPorts", func(ctx context.Context, e *env) (any, error) { return e.db.ListOrgPorts(ctx, "") }},
		{"ListOrgPorts", func(ctx context.Context, e *env) (any, error) { return e.db.ListOrgPorts(ctx, e.id("beta")) }},

		// Scaling records: armers with hostile names.
		{"DeclareScaling", func(ctx context.Context, e *env) (any, error) {
			r, changed, err := e.db.DeclareScaling(ctx, declaration(e.id("acme"), "app.acme.test", ""), hostile[3], true)
			_, err = name(e, "app", r.ID, r, err)
			return []any{r, changed}, err
		}},
		{"DeclareScaling", func(ctx context.Context, e *env) (any, error) {
			e.clk.Advance(time.Second)
			r, changed, err := e.db.DeclareScaling(ctx, declaration(e.id("acme"), "app.acme.test", ""), hostile[4], false)
			return []any{r, changed}, err
		}},
		{"DeclareScaling", func(ctx context.Context, e *env) (any, error) {
			d := declaration(e.id("acme"), "app.acme.test", "/api")
			d.Max, d.Cooldown = 2, 1500*time.Millisecond+time.Microsecond
			r, changed, err := e.db.DeclareScaling(ctx, d, hostile[2], true)
			_, err = name(e, "app-api", r.ID, r, err)
			return []any{r, changed}, err
		}},
		{"DeclareScaling", func(ctx context.Context, e *env) (any, error) {
			r, changed, err := e.db.DeclareScaling(ctx, declaration("org_missing", "x.test", ""), "tok", true)
			return []any{r, changed}, err
		}},
		{"ScalingRecord", func(ctx context.Context, e *env) (any, error) { return e.db.ScalingRecord(ctx, "", e.id("app")) }},
		{"ScalingRecordByBind", func(ctx context.Context, e *env) (any, error) {
			return e.db.ScalingRecordByBind(ctx, e.id("acme"), "app.acme.test", "/api")
		}},
		{"ListScalingRecords", func(ctx context.Context, e *env) (any, error) { return e.db.ListScalingRecords(ctx, "") }},
		{"AcquireScalingLease", func(ctx context.Context, e *env) (any, error) {
			l, r, ok, err := e.db.AcquireScalingLease(ctx, store.ScalingLease{RecordID: e.id("app"), Holder: "srv_a",
				Reason: "cold_start", Desired: 1, IdempotencyKey: "k1"}, time.Minute)
			return []any{l, r, ok}, err
		}},
		{"AcquireScalingLease", func(ctx context.Context, e *env) (any, error) {
			l, r, ok, err := e.db.AcquireScalingLease(ctx, store.ScalingLease{RecordID: e.id("app"), Holder: "srv_b",
				Reason: "cold_start", Desired: 1, IdempotencyKey: "k2"}, time.Minute)
			return []any{l, r, ok}, err
		}},
		{"RecordScalingCall", func(ctx context.Context, e *env) (any, error) {
			return e.db.RecordScalingCall(ctx, e.id("app"), store.ScalingCall{Reason: "cold_start", Status: 503, Err: "busy",
				ConsecutiveFailures: 1, NextCallAt: e.clk.Now().Add(30*time.Second + time.Nanosecond),
				PenaltyUntil: e.clk.Now().Add(time.Minute), Holder: "srv_a"})
		}},
		{"AcquireScalingLease", func(ctx context.Context, e *env) (any, error) {
			e.clk.Advance(2 * time.Minute)
			l, r, ok, err := e.db.AcquireScalingLease(ctx, store.ScalingLease{RecordID: e.id("app"), Holder: "srv_b",
				Reason: "scale_out", Current: 1, Desired: 2, IdempotencyKey: "k3"}, time.Minute)
			return []any{l, r, ok}, err
		}},
		{"Clock", func(ctx context.Context, e *env) (any, error) { return e.db.Clock(ctx) }},
		// The stale holder's outcome (generation 1) after srv_b's lease
		// (a later generation): refused, nothing stored.
		{"RecordScalingCall", func(ctx context.Context, e *env) (any, error) {
			return e.db.RecordScalingCall(ctx, e.id("app"), store.ScalingCall{Reason: "cold_start", Status: 409,
				ConsecutiveFailures: 2, NextCallIn: time.Hour, Holder: "srv_a", Generation: 1})
		}},
		// The holder's own, with waits relative to the store's clock.
		{"RecordScalingCall", func(ctx context.Context, e *env) (any, error) {
			return e.db.RecordScalingCall(ctx, e.id("app"), store.ScalingCall{Reason: "scale_out", Status: 202,
				NextCallIn: 90 * time.Second, PenaltyFor: 3 * time.Second, Holder: "srv_b", Generation: 2})
		}},
		// Budgeted leases: the shared bucket's first call, then a refusal
		// with the time of the next.
		{"AcquireScalingLease", func(ctx context.Context, e *env) (any, error) {
			e.clk.Advance(2 * time.Minute)
			l, r, ok, err := e.db.AcquireScalingLease(ctx, store.ScalingLease{RecordID: e.id("app"), Holder: "srv_c",
				Reason: "scale_in", Current: 2, Desired: 1, IdempotencyKey: "k4", CallsPerMinute: 3}, time.Minute)
			return []any{l, r, ok}, err
		}},
		{"AcquireScalingLease", func(ctx context.Context, e *env) (any, error) {
			l, r, ok, err := e.db.AcquireScalingLease(ctx, store.ScalingLease{RecordID: e.id("app"), Holder: "srv_c",
				Reason: "scale_in", Current: 2, Desired: 1, IdempotencyKey: "k5", CallsPerMinute: 3}, time.Minute)
			return []any{l, r, ok}, err
		}},
		{"ReleaseScalingArmer", func(ctx context.Context, e *env) (any, error) { return e.db.ReleaseScalingArmer(ctx, hostile[3]) }},
		{"ReleaseScalingArmer", func(ctx context.Context, e *env) (any, error) { return e.db.ReleaseScalingArmer(ctx, hostile[2]) }},
		{"ListScalingRecords", func(ctx context.Context, e *env) (any, error) { return e.db.ListScalingRecords(ctx, e.id("acme")) }},
		{"DeclareScaling", func(ctx context.Context, e *env) (any, error) {
			r, changed, err := e.db.DeclareScaling(ctx, declaration(e.id("beta"), "beta.test", ""), "tok_b", true)
			_, err = name(e, "beta-rec", r.ID, r, err)
			return []any{r, changed}, err
		}},
		{"DeleteStaleScalingRecords", func(ctx context.Context, e *env) (any, error) {
			return e.db.DeleteStaleScalingRecords(ctx, e.clk.Now().Add(-time.Minute))
		}},
		{"DeleteScalingRecord", func(ctx context.Context, e *env) (any, error) {
			return ignore(e.db.DeleteScalingRecord(ctx, e.id("acme"), e.id("beta-rec")))
		}},
		{"DeleteScalingRecord", func(ctx context.Context, e *env) (any, error) {
			return ignore(e.db.DeleteScalingRecord(ctx, "", e.id("beta-rec")))
		}},
		{"ListScalingRecords", func(ctx context.Context, e *env) (any, error) { return e.db.ListScalingRecords(ctx, "") }},

		// Webhooks and their deliveries: events with hostile names.
		{"CreateWebhook", func(ctx context.Context, e *env) (any, error) {
			w, err := e.db.CreateWebhook(ctx, store.Webhook{OrgID: e.id("acme"), URL: "https://hooks.test/a", Secret: "s",
				Events: slices.DeleteFunc(slices.Clone(hostile), func(s string) bool { return s == "" })})
			return name(e, "hook-a", w.ID, w, err)
		}},
		{"CreateWebhook", func(ctx context.Context, e *env) (any, error) {
			w, err := e.db.CreateWebhook(ctx, store.Webhook{OrgID: e.id("acme"), URL: "https://hooks.test/b", Format: "slack",
				Events: []string{"a", "b"}})
			return name(e, "hook-b", w.ID, w, err)
		}},
		{"WebhooksFor", func(ctx context.Context, e *env) (any, error) { return e.db.WebhooksFor(ctx, e.id("acme"), "a,b") }},
		{"WebhooksFor", func(ctx context.Context, e *env) (any, error) { return e.db.WebhooksFor(ctx, e.id("acme"), `"quoted"`) }},
		{"WebhooksFor", func(ctx context.Context, e *env) (any, error) { return e.db.WebhooksFor(ctx, e.id("acme"), "a") }},
		{"ListWebhooks", func(ctx context.Context, e *env) (any, error) { return e.db.ListWebhooks(ctx, "") }},
		{"RecordWebhookDelivery", func(ctx context.Context, e *env) (any, error) {
			return e.db.RecordWebhookDelivery(ctx, store.WebhookDelivery{ID: "d1", WebhookID: e.id("hook-a"), OrgID: e.id("acme"),
				Event: "a,b", Status: store.DeliveryPending, Attempts: 1, LastError: "refused", Body: []byte(`{"x":1}`)}, 2)
		}},
		{"RecordWebhookDelivery", func(ctx context.Context, e *env) (any, error) {
			e.clk.Advance(time.Second)
			return e.db.RecordWebhookDelivery(ctx, store.WebhookDelivery{ID: "d1", WebhookID: e.id("hook-a"), OrgID: e.id("acme"),
				Event: "a,b", Status: store.DeliveryDelivered, Attempts: 2, LastStatusCode: 204,
				ResponseTime: 1500*time.Microsecond + 3*time.Millisecond}, 2)
		}},
		{"RecordWebhookDelivery", func(ctx context.Context, e *env) (any, error) {
			return e.db.RecordWebhookDelivery(ctx, store.WebhookDelivery{ID: "d2", WebhookID: e.id("hook-a"), OrgID: e.id("acme"),
				Event: "plain", Status: store.DeliveryFailed}, 2)
		}},
		{"RecordWebhookDelivery", func(ctx context.Context, e *env) (any, error) {
			return e.db.RecordWebhookDelivery(ctx, store.WebhookDelivery{ID: "d3", WebhookID: e.id("hook-a"), OrgID: e.id("acme"),
				Event: "plain", Status: store.DeliveryDropped}, 2)
		}},
		{"RecordWebhookDelivery", func(ctx context.Context, e *env) (any, error) {
			return e.db.RecordWebhookDelivery(ctx, store.WebhookDelivery{ID: "d4", WebhookID: "whk_missing", OrgID: e.id("acme"),
				Event: "plain", Status: store.DeliveryPending}, 2)
		}},
		{"ListWebhookDeliveries", func(ctx context.Context, e *env) (any, error) {
			return e.db.ListWebhookDeliveries(ctx, e.id("acme"), e.id("hook-a"), 0)
		}},
		{"WebhookDelivery", func(ctx context.Context, e *env) (any, error) {
			return e.db.WebhookDelivery(ctx, "", e.id("hook-a"), "d1")
		}},
		{"WebhookDelivery", func(ctx context.Context, e *env) (any, error) {
			return e.db.WebhookDelivery(ctx, "", e.id("hook-a"), "d2")
		}},
		{"DeleteWebhook", func(ctx context.Context, e *env) (any, error) {
			return ignore(e.db.DeleteWebhook(ctx, e.id("beta"), e.id("hook-b")))
		}},
		{"DeleteWebhook", func(ctx context.Context, e *env) (any, error) {
			return ignore(e.db.DeleteWebhook(ctx, "", e.id("hook-b")))
		}},
		{"ListWebhooks", func(ctx context.Context, e *env) (any, error) { return e.db.ListWebhooks(ctx, e.id("acme")) }},

		// The audit log: literal organizations, so that the chain's
		// hashes, which cover them, are the same on both engines.
		{"AppendAudit", func(ctx context.Context, e *env) (any, error) {
			return e.db.AppendAudit(ctx, store.AuditEntry{OrgID: "org_a", Event: "token_minted", Actor: "master", Hostname: "a.test", Detail: "old name"})
		}},
		{"AppendAudit", func(ctx context.Context, e *env) (any, error) {
			return e.db.AppendAudit(ctx, store.AuditEntry{OrgID: "org_a", Event: "token_created", Actor: "key_1", Detail: "new\nname\x00"})
		}},
		{"AppendAudit", func(ctx context.Context, e *env) (any, error) { // at the same instant
			return e.db.AppendAudit(ctx, store.AuditEntry{OrgID: "org_b", Event: "login_failed", Actor: "anonymous"})
		}},
		{"AppendAudit", func(ctx context.Context, e *env) (any, error) {
			e.clk.Advance(time.Hour)
			return e.db.AppendAudit(ctx, store.AuditEntry{OrgID: "org_a", Event: "token_revoked", Actor: "key_1",
				At: e.clk.Now().Add(-time.Minute - time.Nanosecond)})
		}},
		{"ListAudit", func(ctx context.Context, e *env) (any, error) { return e.db.ListAudit(ctx, "", 0) }},
		{"ListAudit", func(ctx context.Context, e *env) (any, error) { return e.db.ListAudit(ctx, "org_a", 2) }},
		{"QueryAudit", func(ctx context.Context, e *env) (any, error) {
			return e.db.QueryAudit(ctx, store.AuditQuery{Event: "token_created"})
		}},
		{"QueryAudit", func(ctx context.Context, e *env) (any, error) {
			return e.db.QueryAudit(ctx, store.AuditQuery{OrgID: "org_a", Actor: "key_1", Since: e.clk.Now().Add(-30 * time.Minute)})
		}},
		{"QueryAudit", func(ctx context.Context, e *env) (any, error) {
			return e.db.QueryAudit(ctx, store.AuditQuery{Until: e.clk.Now().Add(-time.Minute - time.Nanosecond), Hostname: "a.test"})
		}},
		{"VerifyAudit", func(ctx context.Context, e *env) (any, error) { return e.db.VerifyAudit(ctx) }},

		// Signing keys.
		{"AddSigningKey", func(ctx context.Context, e *env) (any, error) {
			k, err := e.db.AddSigningKey(ctx, store.KeyPurposeShare, e.id("acme"), 1, false, sealFixed("share-1"))
			return name(e, "share-1", k.ID, k, err)
		}},
		{"AddSigningKey", func(ctx context.Context, e *env) (any, error) {
			e.clk.Advance(time.Second)
			k, err := e.db.AddSigningKey(ctx, store.KeyPurposeShare, e.id("acme"), 2, true, sealFixed("share-2"))
			return name(e, "share-2", k.ID, k, err)
		}},
		{"AddSigningKey", func(ctx context.Context, e *env) (any, error) {
			return e.db.AddSigningKey(ctx, store.KeyPurposeShare, e.id("acme"), 2, true, sealFixed("share-late"))
		}},
		{"AddSigningKey", func(ctx context.Context, e *env) (any, error) {
			k, err := e.db.AddSigningKey(ctx, store.KeyPurposeShare, "", 1, false, sealFixed("server"))
			return name(e, "server", k.ID, k, err)
		}},
		{"SigningKeys", func(ctx context.Context, e *env) (any, error) { return e.db.SigningKeys(ctx, store.KeyPurposeShare) }},

		// Usage: a flush naming one row twice, days either side of a
		// month's end. No day of an organization has two tokens: rows
		// are ordered by token ID, which is random.
		{"AddUsage", func(ctx context.Context, e *env) (any, error) {
			day := time.Date(2031, 3, 31, 23, 59, 59, 999, time.FixedZone("Y", -3600))
			return ignore(e.db.AddUsage(ctx, []store.UsageDelta{
				{Day: day, TokenID: e.id("web"), OrgID: e.id("acme"), Hostname: "a.test", Bytes: 100, Requests: 1},
				{Day: day.AddDate(0, 0, -2), TokenID: e.id("api"), OrgID: e.id("acme"), Hostname: "a.test", Bytes: 7, Requests: 1},
				{Day: day, TokenID: e.id("web"), OrgID: e.id("acme"), Hostname: "a.test", Bytes: 5, Requests: 2},
				{Day: day.AddDate(0, 0, -1), TokenID: e.id("web"), OrgID: e.id("acme"), Hostname: "b.test", Bytes: 1 << 40},
			}))
		}},
		{"AddUsage", func(ctx context.Context, e *env) (any, error) {
			return ignore(e.db.AddUsage(ctx, []store.UsageDelta{
				{Day: time.Date(2031, 3, 31, 1, 0, 0, 0, time.UTC), TokenID: e.id("web"), OrgID: e.id("acme"), Hostname: "a.test", Bytes: 1},
				{Day: time.Date(2031, 2, 28, 1, 0, 0, 0, time.UTC), TokenID: e.id("b2"), OrgID: e.id("beta"), Hostname: "beta.test", Bytes: 9},
			}))
		}},
		{"UsageTotals", func(ctx context.Context, e *env) (any, error) {
			tt, ot, err := e.db.UsageTotals(ctx, time.Date(2031, 4, 1, 0, 0, 0, 0, time.UTC), time.Date(2031, 3, 15, 0, 0, 0, 0, time.UTC),
				[]string{e.id("web"), e.id("api"), e.id("b2"), "tok_none"}, []string{e.id("acme"), e.id("beta")})
			return []any{tt, ot}, err
		}},
		{"QueryUsage", func(ctx context.Context, e *env) (any, error) { return e.db.QueryUsage(ctx, store.UsageQuery{}) }},
		{"QueryUsage", func(ctx context.Context, e *env) (any, error) {
			return e.db.QueryUsage(ctx, store.UsageQuery{OrgID: e.id("acme"), From: time.Date(2031, 4, 1, 12, 0, 0, 0, time.UTC)})
		}},
		{"QueryUsage", func(ctx context.Context, e *env) (any, error) {
			return e.db.QueryUsage(ctx, store.UsageQuery{To: time.Date(2031, 3, 31, 0, 0, 0, 0, time.UTC), Hostname: "b.test"})
		}},

		// Automatic TLS: keys with LIKE's wildcards in them.
		{"ACMEPut", func(ctx context.Context, e *env) (any, error) {
			return ignore(e.db.ACMEPut(ctx, "certs/a_b/x.crt", []byte("one")))
		}},
		{"ACMEPut", func(ctx context.Context, e *env) (any, error) {
			return ignore(e.db.ACMEPut(ctx, "certs/a%b/y.crt", []byte("two")))
		}},
		{"ACMEPut", func(ctx context.Context, e *env) (any, error) {
			e.clk.Advance(time.Millisecond)
			return ignore(e.db.ACMEPut(ctx, `certs/axb\z.crt`, []byte("three!")))
		}},
		{"ACMEGet", func(ctx context.Context, e *env) (any, error) { return e.db.ACMEGet(ctx, "certs/a%b/y.crt") }},
		{"ACMEGet", func(ctx context.Context, e *env) (any, error) { return e.db.ACMEGet(ctx, "certs/none") }},
		{"ACMEList", func(ctx context.Context, e *env) (any, error) { return e.db.ACMEList(ctx, "certs/a_b") }},
		{"ACMEList", func(ctx context.Context, e *env) (any, error) { return e.db.ACMEList(ctx, "") }},
		{"ACMEList", func(ctx context.Context, e *env) (any, error) { return e.db.ACMEList(ctx, "none") }},
		{"ACMELock", func(ctx context.Context, e *env) (any, error) {
			return e.db.ACMELock(ctx, "issue", "srv_a", time.Minute)
		}},
		{"ACMELock", func(ctx context.Context, e *env) (any, error) {
			return e.db.ACMELock(ctx, "issue", "srv_b", time.Minute)
		}},
		{"ACMEUnlock", func(ctx context.Context, e *env) (any, error) { return ignore(e.db.ACMEUnlock(ctx, "issue", "srv_a")) }},
		{"ACMELock", func(ctx context.Context, e *env) (any, error) {
			return e.db.ACMELock(ctx, "issue", "srv_b", time.Minute)
		}},
		{"ACMEDelete", func(ctx context.Context, e *env) (any, error) { return e.db.ACMEDelete(ctx, "certs/a_b") }},
		{"ACMEList", func(ctx context.Context, e *env) (any, error) { return e.db.ACMEList(ctx, "certs") }},
	}
}
