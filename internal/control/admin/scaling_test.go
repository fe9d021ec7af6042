package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/aperio-dev/aperio/tunnel"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/aperio-dev/aperio/autoscale"
	"github.com/aperio-dev/aperio/internal/control/admin"
	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/store"
)

// scalingFields are the keys of a record in GET /scaling: the contract's
// list (§2), conflict and last_error (refused appears only on a refused
// declaration).
var scalingFields = []string{
	"id", "hostname", "path", "org_id", "url", "authenticated", "min", "max", "cold_start",
	"target_utilization", "window", "cooldown", "instances", "capacity", "inflight", "utilization",
	"disarmed", "conflict", "consecutive_failures", "last_call_at", "last_reason", "last_status",
	"last_error", "next_call_at", "updated_at",
}

// declaredAt is the time the fake's records were declared, plus minutes.
func declaredAt(minutes int) time.Time {
	return time.Date(2030, 1, 2, 3, 0, 0, 0, time.UTC).Add(time.Duration(minutes) * time.Minute)
}

// scalingView returns a record of orgID for hostname, declared minutes
// after declaredAt(0), with a busy pool and a failed last call.
func scalingView(id, orgID, hostname string, minutes int) autoscale.View {
	called := declaredAt(minutes).Add(30 * time.Second)
	return autoscale.View{
		ID: id, OrgID: orgID, Hostname: hostname, Path: "/api",
		URL: "https://provider.example/scale", Authenticated: true,
		Min: 1, Max: 8, ColdStart: 45 * time.Second, TargetUtilization: 0.8,
		Window: 15 * time.Second, Cooldown: time.Minute,
		Instances: 2, Capacity: 20, Inflight: 17, Utilization: 0.85,
		ConsecutiveFailures: 1, LastCallAt: &called, LastReason: "scale_out", LastStatus: 502,
		UpdatedAt: declaredAt(minutes),
	}
}

// listScaling calls GET /scaling with cred and returns the raw body and
// the records' IDs in order.
func (f *fixture) listScaling(tb testing.TB, cred string) ([]byte, []string) {
	tb.Helper()
	status, body := f.call(tb, "GET", "/scaling", cred, "")
	if status != http.StatusOK {
		tb.Fatalf("GET /scaling = %d %s, want 200", status, body)
	}
	var rows []struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body, &rows); err != nil {
		tb.Fatalf("GET /scaling: decode %s: %v", body, err)
	}
	ids := []string{}
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	return body, ids
}

func TestScalingList(t *testing.T) {
	f := newFixture(t)
	a, b := f.org(t, "a"), f.org(t, "b")
	viewerA, viewerB := f.key(t, a, admin.RoleViewer), f.key(t, b, admin.RoleViewer)
	unmeasured := scalingView("scl_a_cold", a, "cold.a.example.com", 0)
	unmeasured.Capacity, unmeasured.Inflight, unmeasured.Utilization, unmeasured.Instances = 0, 0, 0, 0
	unmeasured.LastCallAt, unmeasured.LastReason, unmeasured.LastStatus = nil, "", 0
	unmeasured.Authenticated, unmeasured.Path = false, ""
	// In no particular order: the API answers newest first.
	f.scaling.set(
		unmeasured,
		scalingView("scl_b", b, "b.example.com", 1),
		scalingView("scl_a_busy", a, "busy.a.example.com", 2),
	)

	tests := []struct {
		who, cred string
		want      []string
	}{
		{"viewer of a", viewerA.Secret, []string{"scl_a_busy", "scl_a_cold"}},
		{"viewer of b", viewerB.Secret, []string{"scl_b"}},
		{"master", masterToken, []string{"scl_a_busy", "scl_b", "scl_a_cold"}},
	}
	for _, tt := range tests {
		t.Run(tt.who, func(t *testing.T) {
			_, got := f.listScaling(t, tt.cred)
			if !slices.Equal(got, tt.want) {
				t.Errorf("GET /scaling as %s = %q, want %q", tt.who, got, tt.want)
			}
		})
	}

	t.Run("fields", func(t *testing.T) {
		body, _ := f.listScaling(t, viewerA.Secret)
		var rows []map[string]json.RawMessage
		if err := json.Unmarshal(body, &rows); err != nil {
			t.Fatal(err)
		}
		for _, row := range rows {
			if got, want := slices.Sorted(maps.Keys(row)), slices.Sorted(slices.Values(scalingFields)); !slices.Equal(got, want) {
				t.Errorf("GET /scaling record keys = %q, want %q", got, want)
			}
		}
		busy, cold := rows[0], rows[1]
		checks := []struct {
			what string
			got  json.RawMessage
			want string
		}{
			{"utilization", busy["utilization"], "0.85"},
			{"utilization with no capacity", cold["utilization"], "null"},
			{"cold_start", busy["cold_start"], `"45s"`},
			{"window", busy["window"], `"15s"`},
			{"cooldown", busy["cooldown"], `"1m0s"`},
			{"authenticated", busy["authenticated"], "true"},
			{"last_call_at", busy["last_call_at"], `"2030-01-02T03:02:30Z"`},
			{"last_call_at with no call", cold["last_call_at"], "null"},
			{"last_reason", busy["last_reason"], `"scale_out"`},
			{"last_status", busy["last_status"], "502"},
			{"org_id", busy["org_id"], fmt.Sprintf("%q", a)},
			{"updated_at", busy["updated_at"], `"2030-01-02T03:02:00Z"`},
		}
		for _, c := range checks {
			if string(c.got) != c.want {
				t.Errorf("GET /scaling: %s = %s, want %s", c.what, c.got, c.want)
			}
		}
	})

	t.Run("none", func(t *testing.T) {
		f.scaling.set()
		if status, body := f.call(t, "GET", "/scaling", viewerA.Secret, ""); status != http.StatusOK || string(body) != "[]\n" {
			t.Errorf("GET /scaling with no records = %d %q, want 200 []", status, body)
		}
	})
}

func TestScalingDisarm(t *testing.T) {
	f := newFixture(t)
	a, b := f.org(t, "a"), f.org(t, "b")
	keys := map[string]string{"master": masterToken}
	var actors []string
	for _, r := range admin.Roles() {
		k := f.key(t, a, r)
		keys[r] = k.Secret
		actors = append(actors, "key:"+k.ID)
	}
	opB := f.key(t, b, admin.RoleOperator)
	f.scaling.set(
		scalingView("scl_1", a, "one.a.example.com", 1),
		scalingView("scl_2", a, "two.a.example.com", 2),
		scalingView("scl_3", a, "three.a.example.com", 3),
		scalingView("scl_b", b, "b.example.com", 4),
	)

	t.Run("roles", func(t *testing.T) {
		f.expectError(t, "DELETE", "/scaling/scl_1", keys[admin.RoleViewer], "", http.StatusForbidden, "it needs role operator")
		f.expect(t, "DELETE", "/scaling/scl_1", keys[admin.RoleOperator], "", http.StatusNoContent, nil)
		f.expect(t, "DELETE", "/scaling/scl_2", keys[admin.RoleAdmin], "", http.StatusNoContent, nil)
		f.expect(t, "DELETE", "/scaling/scl_b", masterToken, "", http.StatusNoContent, nil)
		want := []string{a + "/scl_1", a + "/scl_2", b + "/scl_b"}
		if got := f.scaling.disarmCalls(); !slices.Equal(got, want) {
			t.Errorf("Disarm calls = %q, want %q (none for the viewer)", got, want)
		}
		if _, ids := f.listScaling(t, masterToken); !slices.Equal(ids, []string{"scl_3"}) {
			t.Errorf("GET /scaling after three disarms = %q, want scl_3 alone", ids)
		}
	})

	t.Run("unknown or another organization's record answers 404", func(t *testing.T) {
		before := len(f.scaling.disarmCalls())
		f.expectError(t, "DELETE", "/scaling/scl_nope", keys[admin.RoleOperator], "", http.StatusNotFound, `scaling record "scl_nope" not found`)
		f.expectError(t, "DELETE", "/scaling/scl_3", opB.Secret, "", http.StatusNotFound, `scaling record "scl_3" not found`)
		f.expectError(t, "DELETE", "/scaling/scl_1", masterToken, "", http.StatusNotFound, `scaling record "scl_1" not found`)
		if got := f.scaling.disarmCalls()[before:]; len(got) != 0 {
			t.Errorf("Disarm calls for unknown and foreign records = %q, want none", got)
		}
		if _, ids := f.listScaling(t, masterToken); !slices.Equal(ids, []string{"scl_3"}) {
			t.Errorf("GET /scaling after refused disarms = %q, want scl_3 still there", ids)
		}
	})

	t.Run("record gone between lookup and disarm", func(t *testing.T) {
		f.scaling.fail(nil, fmt.Errorf("autoscale: disarm scl_3: %w", autoscale.ErrNoRecord))
		t.Cleanup(func() { f.scaling.fail(nil, nil) })
		f.expectError(t, "DELETE", "/scaling/scl_3", keys[admin.RoleOperator], "", http.StatusNotFound, `scaling record "scl_3" not found`)
	})

	t.Run("audit", func(t *testing.T) {
		var got []string
		for _, e := range f.audit(t) {
			if e.Event == admin.EventScalingDisarmedByOperator {
				got = append(got, strings.Join([]string{e.Actor, e.OrgID, e.Hostname, e.Detail}, " | "))
			}
		}
		want := []string{
			"master | " + b + " | b.example.com | record scl_b path=\"/api\"",
			actors[2] + " | " + a + " | two.a.example.com | record scl_2 path=\"/api\"",
			actors[1] + " | " + a + " | one.a.example.com | record scl_1 path=\"/api\"",
		}
		if !slices.Equal(got, want) {
			t.Errorf("scaling_disarmed_by_operator entries =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
}

func TestScalingErrors(t *testing.T) {
	f := newFixture(t)
	f.scaling.set(scalingView("scl_1", "org_x", "app.example.com", 0))
	tests := []struct {
		name               string
		listErr, disarmErr error
		method, path       string
		status             int
		msg                string
		logLine            string
	}{
		{"list, store down", fmt.Errorf("autoscale: list: %w", store.ErrUnavailable), nil, "GET", "/scaling", 503, "store is unavailable", `msg="store unavailable"`},
		{"disarm lookup, store down", fmt.Errorf("autoscale: list: %w", store.ErrUnavailable), nil, "DELETE", "/scaling/scl_1", 503, "store is unavailable", `msg="store unavailable"`},
		{"disarm, store down", nil, fmt.Errorf("autoscale: disarm scl_1: %w", store.ErrUnavailable), "DELETE", "/scaling/scl_1", 503, "store is unavailable", `msg="store unavailable"`},
		{"list, other failure", errors.New("boom"), nil, "GET", "/scaling", 500, "internal error", `msg="admin request failed"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.scaling.fail(tt.listErr, tt.disarmErr)
			t.Cleanup(func() { f.scaling.fail(nil, nil) })
			before := strings.Count(f.logs.String(), tt.logLine)
			f.expectError(t, tt.method, tt.path, masterToken, "", tt.status, tt.msg)
			if after := strings.Count(f.logs.String(), tt.logLine); after != before+1 {
				t.Errorf("log lines %s after the call = %d, want %d", tt.logLine, after, before+1)
			}
		})
	}
	for _, e := range f.audit(t) {
		if e.Event == admin.EventScalingDisarmedByOperator {
			t.Errorf("audit holds %+v after failed disarms, want no scaling_disarmed_by_operator", e)
		}
	}
}

// TestScalingOff checks that a server without autoscaling (Config.Scaling
// nil) lists no records and finds none to disarm. The gateway, which holds
// a nil *autoscale.Controller then, passes nil: its
// TestScalingAPIWithScalingOff covers that side.
func TestScalingOff(t *testing.T) {
	g := newFixture(t).withScaling(t, nil)
	if status, body := g.call(t, "GET", "/scaling", masterToken, ""); status != http.StatusOK || string(body) != "[]\n" {
		t.Errorf("GET /scaling with scaling off = %d %q, want 200 []", status, body)
	}
	g.expectError(t, "DELETE", "/scaling/scl_1", masterToken, "", http.StatusNotFound, `scaling record "scl_1" not found`)
}

// fixedPool is an autoscale.PoolView reporting the same pool for every bind.
type fixedPool autoscale.PoolStats

func (p fixedPool) Pool(_, _, _ string) autoscale.PoolStats { return autoscale.PoolStats(p) }

// refusingCaller is an autoscale.Caller that fails every call; the tests
// that use it never make one.
type refusingCaller struct{}

func (refusingCaller) Call(context.Context, autoscale.HookCall) (int, time.Duration, error) {
	return 0, 0, errors.New("refusingCaller: no calls in this test")
}

// TestScalingWithController runs the routes against a real
// *autoscale.Controller on the fixture's SQLite store, with records whose
// secrets must never leave the server.
func TestScalingWithController(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	a, b := f.org(t, "a"), f.org(t, "b")
	opA, viewerB := f.key(t, a, admin.RoleOperator), f.key(t, b, admin.RoleViewer)
	secrets := map[string]string{a: "hook-secret-of-a-0123456789", b: "hook-secret-of-b-9876543210"}
	recs := map[string]store.ScalingRecord{}
	for _, org := range []string{a, b} {
		r, _, err := f.db.DeclareScaling(ctx, store.ScalingRecord{
			OrgID: org, Hostname: "app.example.com", Scaling: tunnel.Scaling{URL: "https://provider.example/scale", Secret: secrets[org], Min: 0, Max: 4, ColdStart: 45 * time.Second, Window: 15 * time.Second, Cooldown: time.Minute, TargetUtilization: 0.8},
		}, "master", true)
		if err != nil {
			t.Fatalf("DeclareScaling(%s): %v", org, err)
		}
		recs[org] = r
	}
	ctl, err := autoscale.New(autoscale.Config{
		Store:  f.db,
		Pool:   fixedPool{Instances: 1, Capacity: 10, Inflight: 4},
		Caller: refusingCaller{},
	})
	if err != nil {
		t.Fatalf("autoscale.New: %v", err)
	}
	g := f.withScaling(t, ctl)

	var bodies [][]byte
	for _, c := range []struct {
		who, cred string
		want      []string
	}{
		{"operator of a", opA.Secret, []string{recs[a].ID}},
		{"viewer of b", viewerB.Secret, []string{recs[b].ID}},
		{"master", masterToken, []string{recs[b].ID, recs[a].ID}},
	} {
		body, ids := g.listScaling(t, c.cred)
		if !slices.Equal(ids, c.want) {
			t.Errorf("GET /scaling as %s = %q, want %q", c.who, ids, c.want)
		}
		if !bytes.Contains(body, []byte(`"authenticated":true`)) || !bytes.Contains(body, []byte(`"utilization":0.4`)) {
			t.Errorf("GET /scaling as %s = %s, want authenticated and utilization 0.4", c.who, body)
		}
		bodies = append(bodies, body)
	}

	g.expectError(t, "DELETE", "/scaling/"+recs[b].ID, opA.Secret, "", http.StatusNotFound, "not found")
	g.expect(t, "DELETE", "/scaling/"+recs[a].ID, opA.Secret, "", http.StatusNoContent, nil)
	g.expectError(t, "DELETE", "/scaling/"+recs[a].ID, opA.Secret, "", http.StatusNotFound, "not found")
	left, err := f.db.ListScalingRecords(ctx, "")
	if err != nil || len(left) != 1 || left[0].ID != recs[b].ID {
		t.Errorf("store after disarming a's record = %+v, %v, want b's alone", left, err)
	}
	_, audit := g.call(t, "GET", "/audit?limit=1000", masterToken, "")
	if !bytes.Contains(audit, []byte(admin.EventScalingDisarmedByOperator)) {
		t.Errorf("audit = %s, want a scaling_disarmed_by_operator entry", audit)
	}
	bodies = append(bodies, audit)

	for _, s := range secrets {
		for _, body := range bodies {
			if bytes.Contains(body, []byte(s)) {
				t.Errorf("answer holds the secret %q: %s", s, body)
			}
		}
		if strings.Contains(f.logs.String(), s) {
			t.Errorf("log holds the secret %q", s)
		}
	}
}

// detailHistory is a history as the fake serves it for scl_a_busy.
func detailHistory() autoscale.History {
	u := 0.85
	return autoscale.History{
		Decisions: []apitype.ScalingDecision{
			{Seq: 2, RecordID: "scl_a_busy", Action: apitype.ScalingActionNone, Reason: "held by the cooldown",
				Samples: []float64{0.85, 0.9}, SampleCount: 2, Current: 2, Desired: 2, Outcome: apitype.ScalingOutcomeHeld, Repeats: 3},
			{Seq: 1, RecordID: "scl_a_busy", Action: apitype.ScalingActionScaleOut, Reason: "busy",
				Samples: []float64{0.9}, SampleCount: 16, Current: 1, Desired: 2, Outcome: apitype.ScalingOutcomeFailed, Status: 502, Error: "bad gateway"},
		},
		Series: []apitype.ScalingPoint{
			{At: declaredAt(2), Instances: 2, Capacity: 20, Inflight: 17, Utilization: &u},
			{At: declaredAt(3), Instances: 2},
		},
	}
}

// TestScalingDetail: GET /scaling/{id} answers the record exactly as the
// listing shows it, with its decisions newest first and its series oldest
// first, to every role of its organization; another organization's record
// is 404 as an unknown one is, and History is never asked for either.
func TestScalingDetail(t *testing.T) {
	f := newFixture(t)
	a, b := f.org(t, "a"), f.org(t, "b")
	keys := map[string]string{"master": masterToken}
	for _, r := range admin.Roles() {
		keys[r] = f.key(t, a, r).Secret
	}
	viewerB := f.key(t, b, admin.RoleViewer)
	quiet := scalingView("scl_a_quiet", a, "quiet.a.example.com", 1)
	f.scaling.set(scalingView("scl_a_busy", a, "busy.a.example.com", 2), quiet, scalingView("scl_b", b, "b.example.com", 3))
	f.scaling.setHistory("scl_a_busy", detailHistory())

	for who, cred := range keys {
		t.Run("as "+who, func(t *testing.T) {
			status, body := f.call(t, "GET", "/scaling/scl_a_busy", cred, "")
			if status != http.StatusOK {
				t.Fatalf("GET /scaling/scl_a_busy as %s = %d %s, want 200", who, status, body)
			}
			var got map[string]json.RawMessage
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			want := slices.Sorted(slices.Values(append(slices.Clone(scalingFields), "decisions", "series")))
			if keys := slices.Sorted(maps.Keys(got)); !slices.Equal(keys, want) {
				t.Errorf("GET /scaling/{id} keys = %q, want the listing's and decisions, series: %q", keys, want)
			}
			listed, _ := f.listScaling(t, masterToken)
			var rows []map[string]json.RawMessage
			if err := json.Unmarshal(listed, &rows); err != nil {
				t.Fatal(err)
			}
			for k, v := range rows[slices.IndexFunc(rows, func(r map[string]json.RawMessage) bool { return string(r["id"]) == `"scl_a_busy"` })] {
				if string(got[k]) != string(v) {
					t.Errorf("GET /scaling/{id} %s = %s, the listing says %s", k, got[k], v)
				}
			}
			var detail admin.ScalingRecordDetail
			if err := json.Unmarshal(body, &detail); err != nil {
				t.Fatal(err)
			}
			wantH := detailHistory()
			if diff := cmp.Diff(wantH.Decisions, detail.Decisions); diff != "" {
				t.Errorf("decisions (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(wantH.Series, detail.Series); diff != "" {
				t.Errorf("series (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("no history answers empty lists", func(t *testing.T) {
		status, body := f.call(t, "GET", "/scaling/scl_a_quiet", keys[admin.RoleViewer], "")
		if status != http.StatusOK || !bytes.Contains(body, []byte(`"decisions":[]`)) || !bytes.Contains(body, []byte(`"series":[]`)) {
			t.Errorf("GET /scaling/scl_a_quiet = %d %s, want 200 with [] decisions and series", status, body)
		}
	})

	t.Run("another organization's record is not found", func(t *testing.T) {
		_, before := f.scaling.calls()
		f.expectError(t, "GET", "/scaling/scl_b", keys[admin.RoleAdmin], "", http.StatusNotFound, `scaling record "scl_b" not found`)
		f.expectError(t, "GET", "/scaling/scl_a_busy", viewerB.Secret, "", http.StatusNotFound, `scaling record "scl_a_busy" not found`)
		f.expectError(t, "GET", "/scaling/scl_nope", keys[admin.RoleViewer], "", http.StatusNotFound, `scaling record "scl_nope" not found`)
		if _, after := f.scaling.calls(); len(after) != len(before) {
			t.Errorf("History calls for records the caller may not see: %q, want none", after[len(before):])
		}
	})

	t.Run("no credential", func(t *testing.T) {
		if status, _ := f.call(t, "GET", "/scaling/scl_a_busy", "", ""); status != http.StatusUnauthorized {
			t.Errorf("GET /scaling/scl_a_busy without a credential = %d, want 401", status)
		}
	})

	t.Run("scaling off", func(t *testing.T) {
		g := f.withScaling(t, nil)
		g.expectError(t, "GET", "/scaling/scl_a_busy", masterToken, "", http.StatusNotFound, `scaling record "scl_a_busy" not found`)
	})
}

// TestScalingDetailHostileID: an ID no record can have is refused with
// 400 before any lookup, so a huge one costs no store scan; the answer
// does not echo it.
func TestScalingDetailHostileID(t *testing.T) {
	f := newFixture(t)
	f.scaling.set(scalingView("scl_1", "org_x", "app.example.com", 0))
	huge := strings.Repeat("a", 64<<10)
	tests := []struct {
		name, id string
	}{
		{"huge", huge},
		{"one past the bound", strings.Repeat("s", 65)},
		{"escaped slash", "scl_1%2F..%2Fx"},
		{"quote", "scl_%22"},
		{"control character", "scl_%00"},
		{"unicode", "scl_%C3%A9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lists, hist := f.scaling.calls()
			status, body := f.call(t, "GET", "/scaling/"+tt.id, masterToken, "")
			if status != http.StatusBadRequest {
				t.Errorf("GET /scaling/%.40s = %d %.200s, want 400", tt.id, status, body)
			}
			if len(body) > 512 {
				t.Errorf("GET /scaling/%.40s answered %d bytes, want a short error that does not echo the ID", tt.id, len(body))
			}
			if l, h := f.scaling.calls(); l != lists || len(h) != len(hist) {
				t.Errorf("GET /scaling/%.40s called List %d and History %d times, want neither", tt.id, l-lists, len(h)-len(hist))
			}
		})
	}
	// The longest ID accepted is looked up, and simply not found.
	f.expectError(t, "GET", "/scaling/"+strings.Repeat("s", 64), masterToken, "", http.StatusNotFound, "not found")
}

// TestScalingDetailWithController serves GET /scaling/{id} from a real
// controller: a record it has not sampled yet answers empty lists.
func TestScalingDetailWithController(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	r, _, err := f.db.DeclareScaling(ctx, store.ScalingRecord{
		OrgID: f.org(t, "a"), Hostname: "app.example.com", Scaling: tunnel.Scaling{URL: "https://provider.example/scale", Min: 0, Max: 4, ColdStart: 45 * time.Second, Window: 15 * time.Second, Cooldown: time.Minute, TargetUtilization: 0.8},
	}, "master", true)
	if err != nil {
		t.Fatalf("DeclareScaling: %v", err)
	}
	ctl, err := autoscale.New(autoscale.Config{Store: f.db, Pool: fixedPool{Instances: 1, Capacity: 10, Inflight: 4}, Caller: refusingCaller{}})
	if err != nil {
		t.Fatalf("autoscale.New: %v", err)
	}
	g := f.withScaling(t, ctl)
	var got admin.ScalingRecordDetail
	g.expect(t, "GET", "/scaling/"+r.ID, masterToken, "", http.StatusOK, &got)
	if got.ID != r.ID || got.Utilization == nil || *got.Utilization != 0.4 || got.Decisions == nil || got.Series == nil ||
		len(got.Decisions) != 0 || len(got.Series) != 0 {
		t.Errorf("GET /scaling/%s = %+v, want the record at 0.4 with empty decisions and series", r.ID, got)
	}
}
