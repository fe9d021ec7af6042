package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/autoscale"
	"github.com/aperio-dev/aperio/internal/control/admin"
	"github.com/aperio-dev/aperio/store"
)

// withController returns a fixture on f's store whose API has a real
// autoscale controller (never run: the API's routes need none) with cfg's
// caps, and the controller.
func (f *fixture) withController(tb testing.TB, cfg autoscale.Config) (*fixture, *autoscale.Controller) {
	tb.Helper()
	cfg.Store, cfg.Pool, cfg.Caller = f.db, fixedPool{}, refusingCaller{}
	ctl, err := autoscale.New(cfg)
	if err != nil {
		tb.Fatalf("autoscale.New: %v", err)
	}
	return f.withScaling(tb, ctl), ctl
}

// storedRecord returns the store's record of host (path "") in orgID.
func storedRecord(tb testing.TB, f *fixture, orgID, host string) (store.ScalingRecord, bool) {
	tb.Helper()
	r, err := f.db.ScalingRecordByBind(context.Background(), orgID, host, "")
	if err != nil {
		return store.ScalingRecord{}, false
	}
	return r, true
}

// TestCreateScaling proves POST /scaling end to end on a real controller
// and store: a new bind answers 201 with the record as GET /scaling/{id}
// shows it (the defaults of a client's block, never the secret), stored
// armed with the admin key as its armer and audited; declaring it again
// answers 200 with the same record, updated and re-armed.
func TestCreateScaling(t *testing.T) {
	f := newFixture(t)
	a := f.org(t, "a")
	f.own(t, a, "a.test", "*.a.test")
	key := f.key(t, a, admin.RoleAdmin)
	g, _ := f.withController(t, autoscale.Config{})

	status, body := g.call(t, "POST", "/scaling", key.Secret, `{"hostname":"App.a.test","url":"https://provider.example.com/scale","secret":"s3cret-value","max":3}`)
	if status != http.StatusCreated {
		t.Fatalf("POST /scaling = %d %s, want 201", status, body)
	}
	if strings.Contains(string(body), "s3cret-value") {
		t.Errorf("POST /scaling answer %s holds the secret", body)
	}
	var got admin.ScalingRecordDetail
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if got.ID == "" || got.Hostname != "app.a.test" || got.Path != "" || got.OrgID != a || !got.Authenticated || got.Min != 0 || got.Max != 3 ||
		got.ColdStart != "45s" || got.TargetUtilization != 0.8 || got.Window != "15s" || got.Cooldown != "1m0s" || got.Disarmed ||
		got.Decisions == nil || got.Series == nil {
		t.Errorf("POST /scaling = %+v, want app.a.test in a with the client defaults, armed", got)
	}
	var shown admin.ScalingRecordDetail
	g.expect(t, "GET", "/scaling/"+got.ID, key.Secret, "", http.StatusOK, &shown)
	if shown.ID != got.ID || shown.URL != got.URL || shown.Max != got.Max {
		t.Errorf("GET /scaling/%s = %+v, want what POST answered %+v", got.ID, shown, got)
	}
	rec, ok := storedRecord(t, f, a, "app.a.test")
	if !ok || rec.ID != got.ID || rec.Secret != "s3cret-value" || !slices.Equal(rec.ArmedBy, []string{"key:" + key.ID}) {
		t.Fatalf("stored record = %+v (found %t), want it armed by key:%s with the secret", rec, ok, key.ID)
	}
	es := f.audit(t)
	i := slices.IndexFunc(es, func(e admin.AuditEntry) bool { return e.Event == admin.EventScalingDeclaredByOperator })
	if i < 0 || es[i].Actor != "key:"+key.ID || es[i].Hostname != "app.a.test" || es[i].OrgID != a ||
		!strings.Contains(es[i].Detail, "created") || strings.Contains(es[i].Detail, "s3cret") || strings.Contains(es[i].Detail, "/scale") {
		t.Errorf("audit = %+v, want one %s by key:%s naming the origin only", es, admin.EventScalingDeclaredByOperator, key.ID)
	}

	// The breaker trips; declaring the bind again updates and re-arms it.
	if _, err := f.db.RecordScalingCall(context.Background(), rec.ID, store.ScalingCall{Reason: "cold_start", Status: 500, Err: "boom",
		ConsecutiveFailures: autoscale.MaxFailures, Disarmed: true}); err != nil {
		t.Fatalf("RecordScalingCall: %v", err)
	}
	var again admin.ScalingRecordDetail
	g.expect(t, "POST", "/scaling", masterToken, fmt.Sprintf(`{"hostname":"app.a.test","url":"https://provider.example.com/v2","org_id":%q,"cold_start":"1m","window":"30s"}`, a),
		http.StatusOK, &again)
	rec, _ = storedRecord(t, f, a, "app.a.test")
	if again.ID != got.ID || again.Disarmed || again.Authenticated || again.ColdStart != "1m0s" || again.Window != "30s" || again.Max != 1 ||
		rec.Disarmed || rec.ConsecutiveFailures != 0 || rec.URL != "https://provider.example.com/v2" ||
		!slices.Equal(rec.ArmedBy, []string{"key:" + key.ID, "master"}) {
		t.Errorf("POST /scaling again = %+v, stored %+v; want the same record updated, re-armed, armed by both", again, rec)
	}
}

// TestCreateScalingHostile proves that every malformed, oversized or
// out-of-bounds body is refused with 400 (413 for too big) naming the
// problem, before the controller is asked anything.
func TestCreateScalingHostile(t *testing.T) {
	f := newFixture(t)
	ok := `"hostname":"app.example.com","url":"https://provider.example.com/scale"`
	for _, tt := range []struct {
		name, body string
		status     int
		msg        string
	}{
		{"empty", "", 400, "empty"},
		{"not JSON", "{", 400, "malformed JSON"},
		{"array", "[]", 400, "expected a JSON object"},
		{"null", "null", 400, "null"},
		{"unknown field", `{` + ok + `,"secrets":"x"}`, 400, `unknown field "secrets"`},
		{"duplicate field", `{` + ok + `,"url":"https://other.example.com/"}`, 400, "duplicate field"},
		{"too big", `{` + ok + `,"secret":"` + strings.Repeat("s", 17<<10) + `"}`, 413, "larger than"},
		{"no hostname", `{"url":"https://provider.example.com/scale"}`, 400, "hostname is required"},
		{"bad hostname", `{"hostname":"bad host","url":"https://provider.example.com/scale"}`, 400, "hostname:"},
		{"IP hostname", `{"hostname":"10.0.0.1","url":"https://provider.example.com/scale"}`, 400, "hostname:"},
		{"long hostname", `{"hostname":"` + strings.Repeat("a", 254) + `","url":"https://provider.example.com/scale"}`, 400, "hostname is longer than 253"},
		{"relative path", `{` + ok + `,"path":"api"}`, 400, "path must start with '/'"},
		{"long path", `{` + ok + `,"path":"/` + strings.Repeat("p", 1024) + `"}`, 400, "path is longer than 1024"},
		{"bad path", `{` + ok + `,"path":"/a/%zz"}`, 400, "not a valid path prefix"},
		{"no url", `{"hostname":"app.example.com"}`, 400, "url is required"},
		{"long url", `{"hostname":"app.example.com","url":"https://p.example.com/` + strings.Repeat("u", 2048) + `"}`, 400, "url is longer than 2048"},
		{"http url", `{"hostname":"app.example.com","url":"http://provider.example.com/scale"}`, 400, "outbound policy"},
		{"private url", `{"hostname":"app.example.com","url":"https://10.1.2.3/scale"}`, 400, "outbound policy"},
		{"loopback url", `{"hostname":"app.example.com","url":"https://127.0.0.1/scale"}`, 400, "outbound policy"},
		{"url with credentials", `{"hostname":"app.example.com","url":"https://user:pw@provider.example.com/scale"}`, 400, "url"},
		{"long secret", `{` + ok + `,"secret":"` + strings.Repeat("s", 1025) + `"}`, 400, "secret is longer than 1024"},
		{"control in secret", `{` + ok + `,"secret":"a\nb"}`, 400, "control characters"},
		{"negative min", `{` + ok + `,"min":-1}`, 400, "min: -1"},
		{"huge max", `{` + ok + `,"max":100001}`, 400, "max: 100001"},
		{"min above max", `{` + ok + `,"min":3,"max":2}`, 400, "max 2 is below min 3"},
		{"string min", `{` + ok + `,"min":"1"}`, 400, `field "min"`},
		{"fractional max", `{` + ok + `,"max":1.5}`, 400, `field "max"`},
		{"utilization above 1", `{` + ok + `,"target_utilization":1.5}`, 400, "target_utilization"},
		{"negative utilization", `{` + ok + `,"target_utilization":-0.1}`, 400, "target_utilization"},
		{"utilization overflow", `{` + ok + `,"target_utilization":1e400}`, 400, "target_utilization"},
		{"NaN utilization", `{` + ok + `,"target_utilization":NaN}`, 400, "malformed JSON"},
		{"utilization string", `{` + ok + `,"target_utilization":"NaN"}`, 400, `field "target_utilization"`},
		{"bad duration", `{` + ok + `,"cold_start":"soon"}`, 400, "cold_start"},
		{"bare number duration", `{` + ok + `,"window":"15"}`, 400, "window"},
		{"negative duration", `{` + ok + `,"cooldown":"-1s"}`, 400, "cooldown: -1s is negative"},
		{"cold start over max", `{` + ok + `,"cold_start":"6m"}`, 400, "above the maximum of 5m0s"},
		{"window over a day", `{` + ok + `,"window":"25h"}`, 400, "above the maximum"},
		{"long duration", `{` + ok + `,"cooldown":"` + strings.Repeat("1", 40) + `s"}`, 400, "longer than 32"},
		{"org_id for a key", `{` + ok + `,"org_id":"org_x"}`, 400, "org_id may only be set with the master token"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cred := masterToken
			if tt.name == "org_id for a key" {
				cred = f.key(t, "", admin.RoleAdmin).Secret
			}
			f.expectError(t, "POST", "/scaling", cred, tt.body, tt.status, tt.msg)
		})
	}
	if n := len(f.scaling.armCalls()); n != 0 {
		t.Errorf("%d Arm calls for refused bodies, want none", n)
	}
}

// TestCreateScalingRules proves that the controller's rules answer 400 on
// a real controller, and its caps 409, without a record.
func TestCreateScalingRules(t *testing.T) {
	f := newFixture(t)
	g, _ := f.withController(t, autoscale.Config{MaxRecordsPerToken: 1, MaxRecordsPerOrg: 2})
	key := f.key(t, "", admin.RoleAdmin).Secret
	body := func(host, extra string) string {
		return fmt.Sprintf(`{"hostname":%q,"url":"https://provider.example.com/scale"%s}`, host, extra)
	}
	g.expectError(t, "POST", "/scaling", key, body("w.example.com", `,"window":"10ms"`), 400, "window 10ms is below 1s")
	g.expect(t, "POST", "/scaling", key, body("one.example.com", ""), http.StatusCreated, nil)
	g.expectError(t, "POST", "/scaling", key, body("two.example.com", ""), http.StatusConflict, "scaling_max_records_per_token 1")
	g.expect(t, "POST", "/scaling", masterToken, body("two.example.com", ""), http.StatusCreated, nil)
	g.expectError(t, "POST", "/scaling", masterToken, body("three.example.com", ""), http.StatusConflict, "scaling_max_records_per_org 2")
	for _, h := range []string{"w.example.com", "three.example.com"} {
		if _, err := f.db.ScalingRecordByBind(context.Background(), "", h, ""); err == nil {
			t.Errorf("a refused declaration of %s left a record", h)
		}
	}
}

// TestCreateScalingRoles proves the role: only admin keys (and logins)
// and the master token may arm a record, as only they create webhooks.
func TestCreateScalingRoles(t *testing.T) {
	f := newFixture(t)
	for _, tt := range []struct {
		role   string
		status int
	}{{admin.RoleViewer, 403}, {admin.RoleOperator, 403}, {admin.RoleAdmin, 201}} {
		key := f.key(t, "", tt.role).Secret
		status, body := f.call(t, "POST", "/scaling", key, fmt.Sprintf(`{"hostname":"%s.example.com","url":"https://provider.example.com/scale"}`, tt.role))
		if status != tt.status {
			t.Errorf("POST /scaling as %s = %d %s, want %d", tt.role, status, body, tt.status)
		}
	}
	f.expectError(t, "POST", "/scaling", "", `{"hostname":"x.example.com","url":"https://provider.example.com/scale"}`, 401, "")
	if n := len(f.scaling.armCalls()); n != 1 {
		t.Errorf("%d Arm calls, want the admin's alone", n)
	}
}

// TestCreateScalingCrossOrg proves that organization b's admin can neither
// arm a's hostname (403, however the hostname is spelled) nor touch a's
// record through POST /scaling, nor see it; a bind another organization
// armed answers 409; and with autoscaling off the route answers 404.
func TestCreateScalingCrossOrg(t *testing.T) {
	f := newFixture(t)
	a, b := f.org(t, "a"), f.org(t, "b")
	f.own(t, a, "a.test", "*.a.test")
	f.own(t, b, "b.test")
	aMinted := f.key(t, a, admin.RoleAdmin)
	aKey, bKey := aMinted.Secret, f.key(t, b, admin.RoleAdmin).Secret
	g, _ := f.withController(t, autoscale.Config{})
	var rec admin.ScalingRecordDetail
	g.expect(t, "POST", "/scaling", aKey, `{"hostname":"app.a.test","url":"https://provider.example.com/a"}`, http.StatusCreated, &rec)

	for _, host := range []string{"app.a.test", "APP.A.TEST", "other.a.test", "*.a.test", "nobody.example.com"} {
		g.expectError(t, "POST", "/scaling", bKey, fmt.Sprintf(`{"hostname":%q,"url":"https://evil.example.com/"}`, host), http.StatusForbidden, "not among the hostnames organization "+b+" owns")
	}
	g.expectError(t, "POST", "/scaling", bKey, fmt.Sprintf(`{"hostname":"app.a.test","url":"https://evil.example.com/","org_id":%q}`, a), http.StatusBadRequest, "org_id may only be set")
	got, _ := storedRecord(t, f, a, "app.a.test")
	if got.URL != "https://provider.example.com/a" || !slices.Equal(got.ArmedBy, []string{"key:" + aMinted.ID}) {
		t.Errorf("a's record after b's attempts = %+v, want it untouched", got)
	}
	if _, err := f.db.ScalingRecordByBind(context.Background(), b, "app.a.test", ""); err == nil {
		t.Error("b's attempt left a record of b's on app.a.test")
	}
	g.expectError(t, "GET", "/scaling/"+rec.ID, bKey, "", http.StatusNotFound, "not found")
	var listed []admin.ScalingRecord
	g.expect(t, "GET", "/scaling", bKey, "", http.StatusOK, &listed)
	if len(listed) != 0 {
		t.Errorf("GET /scaling as b = %+v, want nothing of a's", listed)
	}

	// The master token too may arm b's record only on b's hostnames.
	g.expect(t, "POST", "/scaling", masterToken, fmt.Sprintf(`{"hostname":"app.a.test","url":"https://provider.example.com/b","org_id":%q}`, b), http.StatusForbidden, nil)
	// A bind another organization armed (before ownership was assigned)
	// stays its own: 409.
	def := f.key(t, "", admin.RoleAdmin).Secret
	g.expect(t, "POST", "/scaling", def, `{"hostname":"legacy.example.com","url":"https://provider.example.com/d"}`, http.StatusCreated, nil)
	f.own(t, b, "b.test", "legacy.example.com")
	g.expectError(t, "POST", "/scaling", bKey, `{"hostname":"legacy.example.com","url":"https://provider.example.com/b"}`, http.StatusConflict, "armed by another organization")

	off := f.withScaling(t, nil)
	off.expectError(t, "POST", "/scaling", aKey, `{"hostname":"app.a.test","url":"https://provider.example.com/a"}`, http.StatusNotFound, "autoscaling is off")
}

// TestDeletedKeyReleasesItsRecords proves that deleting an admin key
// removes the records it alone armed with POST /scaling, and keeps those a
// client token armed too.
func TestDeletedKeyReleasesItsRecords(t *testing.T) {
	f := newFixture(t)
	g, _ := f.withController(t, autoscale.Config{})
	key := f.key(t, "", admin.RoleAdmin)
	var alone, shared admin.ScalingRecordDetail
	g.expect(t, "POST", "/scaling", key.Secret, `{"hostname":"alone.example.com","url":"https://provider.example.com/1"}`, http.StatusCreated, &alone)
	g.expect(t, "POST", "/scaling", key.Secret, `{"hostname":"shared.example.com","url":"https://provider.example.com/2"}`, http.StatusCreated, &shared)
	r, _ := storedRecord(t, f, shared.OrgID, "shared.example.com")
	if _, _, err := f.db.DeclareScaling(context.Background(), r, "tok_client", false); err != nil {
		t.Fatalf("DeclareScaling: %v", err)
	}
	g.expect(t, "DELETE", "/admin-keys/"+key.ID, masterToken, "", http.StatusNoContent, nil)
	if _, ok := storedRecord(t, f, alone.OrgID, "alone.example.com"); ok {
		t.Error("the record the deleted key alone armed is still stored")
	}
	r, ok := storedRecord(t, f, shared.OrgID, "shared.example.com")
	if !ok || !slices.Equal(r.ArmedBy, []string{"tok_client"}) {
		t.Errorf("shared record after the key's deletion = %+v (found %t), want it armed by tok_client alone", r, ok)
	}
}

// TestCreateScalingPathNormalized proves that the path prefix is stored in
// the normal form the router matches (empty segments collapsed,
// unreserved escapes decoded) and the hostname lowercased, so that the
// record names the pool a client's bind of the same prefix makes.
func TestCreateScalingPathNormalized(t *testing.T) {
	f := newFixture(t)
	var got admin.ScalingRecordDetail
	f.expect(t, "POST", "/scaling", masterToken, `{"hostname":"APP.example.com","path":"/api//v1/%7Euser","url":"https://provider.example.com/scale"}`, http.StatusCreated, &got)
	arms := f.scaling.armCalls()
	if len(arms) != 1 || arms[0].Hostname != "app.example.com" || arms[0].Path != "/api/v1/~user" || got.Path != "/api/v1/~user" {
		t.Errorf("Arm calls = %+v, answer path %q; want app.example.com /api/v1/~user", arms, got.Path)
	}
}
