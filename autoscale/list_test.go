package autoscale

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aperio-dev/aperio/internal/outbound"
	"github.com/aperio-dev/aperio/store"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestListNeverExposesSecret proves that the watching API never returns
// the secret, only whether one is set, in the struct or in its JSON.
func TestListNeverExposesSecret(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		open := rec("open.example.com")
		open.Secret = ""
		h := newHarness(t, []Record{rec("app.example.com"), open})
		views, err := h.c.List(context.Background(), testOrg)
		if err != nil {
			t.Fatal(err)
		}
		if len(views) != 2 {
			t.Fatalf("List = %d views, want 2", len(views))
		}
		auth := map[string]bool{}
		for _, v := range views {
			auth[v.Hostname] = v.Authenticated
			js, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range []string{string(js), fmt.Sprintf("%+v", v), fmt.Sprintf("%#v", v)} {
				if strings.Contains(s, "s3cret") {
					t.Errorf("view of %s exposes the secret: %s", v.Hostname, s)
				}
			}
			if strings.Contains(string(js), `"secret"`) {
				t.Errorf("JSON of %s has a secret key: %s", v.Hostname, js)
			}
		}
		if want := map[string]bool{"app.example.com": true, "open.example.com": false}; !cmp.Equal(auth, want) {
			t.Errorf("authenticated = %v, want %v", auth, want)
		}
	})
}

// TestListShowsLivePoolAndBreaker proves that each record comes with its
// live pool (instances, capacity, inflight, utilization) and its breaker
// and last call, in the contract's JSON keys.
func TestListShowsLivePoolAndBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, []Record{rec("app.example.com"), rec("idle.example.com")})
		h.pool.steady("app.example.com", pool(2, 5))
		h.caller.answerAll(500)
		if _, err := h.c.ColdStart(context.Background(), testOrg, "idle.example.com", ""); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		views, err := h.c.List(context.Background(), "")
		if err != nil {
			t.Fatal(err)
		}
		byHost := map[string]View{}
		for _, v := range views {
			byHost[v.Hostname] = v
		}
		app := byHost["app.example.com"]
		if app.Instances != 2 || app.Capacity != 20 || app.Inflight != 5 || app.Utilization != 0.25 {
			t.Errorf("app pool = %d/%d/%d/%v, want 2 instances, capacity 20, inflight 5, utilization 0.25", app.Instances, app.Capacity, app.Inflight, app.Utilization)
		}
		idle := byHost["idle.example.com"]
		if idle.ConsecutiveFailures != 1 || idle.LastStatus != 500 || idle.LastReason != "cold_start" || idle.LastCallAt == nil || idle.Disarmed {
			t.Errorf("idle breaker = %+v, want one failure, last 500 cold_start", idle)
		}

		js, err := json.Marshal(idle)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(js, &m); err != nil {
			t.Fatal(err)
		}
		var keys []string
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		want := []string{"authenticated", "capacity", "cold_start", "conflict", "consecutive_failures", "cooldown", "disarmed",
			"hostname", "id", "inflight", "instances", "last_call_at", "last_error", "last_reason", "last_status", "max", "min",
			"next_call_at", "org_id",
			"path", "target_utilization", "updated_at", "url", "utilization", "window"}
		if diff := cmp.Diff(want, keys); diff != "" {
			t.Errorf("JSON keys (-want +got):\n%s", diff)
		}
		if m["utilization"] != nil || m["cold_start"] != "45s" || m["window"] != "15s" {
			t.Errorf("JSON utilization=%v cold_start=%v window=%v, want null 45s 15s", m["utilization"], m["cold_start"], m["window"])
		}
	})
}

// TestStoreDBIsAStore proves that the real store fills the Store seam as
// it is.
func TestStoreDBIsAStore(t *testing.T) {
	var s Store = (*store.DB)(nil)
	if _, ok := s.(changeSource); !ok {
		t.Error("*store.DB has no change feed for the controller")
	}
}

// TestNewValidatesConfig proves that a controller without its required
// seams, or with impossible limits, is refused at construction.
func TestNewValidatesConfig(t *testing.T) {
	_, err := New(Config{MaxCallsPerMinute: -1})
	if err == nil {
		t.Fatal("New(zero Config) error = nil")
	}
	for _, want := range []string{"no store", "no pool view", "no caller", "max calls per minute -1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("New error %q does not say %q", err, want)
		}
	}
}

// TestRunStopsCleanly proves that Run returns once ctx ends, with every
// goroutine it started joined (TestMain's leak check), fails the cold
// starts still pending with ErrClosed, and refuses a second Run.
func TestRunStopsCleanly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, pl := newFakeStore(), newFakePool()
		st.put(rec("app.example.com"))
		st.put(rec("queued.example.com"))
		caller := &fakeCaller{hold: make(chan struct{})}
		c, err := New(Config{Store: st, Pool: pl, Caller: caller})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- c.Run(ctx) }()
		synctest.Wait()
		if err := c.Run(ctx); err == nil {
			t.Error("second Run error = nil, want an error")
		}
		inFlight, err := c.ColdStart(ctx, testOrg, "app.example.com", "")
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		queued, err := c.ColdStart(ctx, testOrg, "queued.example.com", "") // waits for a token
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
		for name, s := range map[string]*Start{"in flight": inFlight, "queued": queued} {
			if !errors.Is(s.Err(), ErrClosed) {
				t.Errorf("%s flight Err() = %v, want ErrClosed", name, s.Err())
			}
		}
		if _, err := c.ColdStart(context.Background(), testOrg, "app.example.com", ""); !errors.Is(err, ErrClosed) {
			t.Errorf("ColdStart after Run error = %v, want ErrClosed", err)
		}
		if got := st.auditEvents(); len(got) != 0 {
			t.Errorf("audit after a cancelled call = %v, want nothing recorded", got)
		}
	})
}

// TestRecordCreatedElsewhereSeen proves that a record declared through
// another server is picked up: at once through the store's change feed,
// and at the latest on the periodic reload; and that a disarm elsewhere is
// seen too.
func TestRecordCreatedElsewhereSeen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := newFakeStore()
		fs.changes = make(chan store.Change)
		h := newHarness(t, nil, func(c *Config, _ *harness) { c.Store = feedStore{fs} })
		h.store = fs
		ctx := context.Background()

		// PlanColdStart reads only what the controller holds (a
		// ColdStart would read the record from the store: see
		// TestColdStartLearnsRecordFromStore).
		r := fs.put(rec("app.example.com"))
		if p := h.c.PlanColdStart(ctx, testOrg, "app.example.com", ""); !errors.Is(p.Err, ErrNoRecord) {
			t.Fatalf("PlanColdStart before the change error = %v, want ErrNoRecord", p.Err)
		}
		fs.publish(store.Change{Kind: store.ChangeScalingUpdated, ID: r.ID, OrgID: testOrg, Hostname: r.Hostname})
		synctest.Wait()
		if p := h.c.PlanColdStart(ctx, testOrg, "app.example.com", ""); p.Err != nil {
			t.Errorf("PlanColdStart after the change error = %v, want nil", p.Err)
		}
		if _, err := h.c.ColdStart(ctx, testOrg, "app.example.com", ""); err != nil {
			t.Errorf("ColdStart after the change error = %v, want nil", err)
		}

		// A disarm by another server (a known record: no change-driven
		// reload) is seen on the periodic reload.
		other := fs.put(rec("other.example.com"))
		advance(DefaultRefreshInterval)
		fs.mu.Lock()
		fs.recs[other.ID].Disarmed = true
		fs.mu.Unlock()
		advance(DefaultRefreshInterval)
		if _, err := h.c.ColdStart(ctx, testOrg, "other.example.com", ""); !errors.Is(err, ErrDisarmed) {
			t.Errorf("ColdStart after a disarm elsewhere error = %v, want ErrDisarmed", err)
		}
	})
}

// TestDisarmElsewhereSeenAtOnce proves that a breaker tripped on another
// server reaches this controller through the change feed, without waiting
// for the periodic reload.
func TestDisarmElsewhereSeenAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := newFakeStore()
		fs.changes = make(chan store.Change)
		r := fs.put(rec("app.example.com"))
		h := newHarness(t, nil, func(c *Config, _ *harness) { c.Store = feedStore{fs} })
		h.store = fs
		synctest.Wait()

		fs.mu.Lock()
		fs.recs[r.ID].Disarmed = true
		fs.mu.Unlock()
		fs.publish(store.Change{Kind: store.ChangeScalingDisarmed, ID: r.ID, OrgID: testOrg, Hostname: r.Hostname})
		synctest.Wait()
		if _, err := h.c.ColdStart(context.Background(), testOrg, "app.example.com", ""); !errors.Is(err, ErrDisarmed) {
			t.Errorf("ColdStart after a disarm elsewhere error = %v, want ErrDisarmed at once, before the %v reload", err, DefaultRefreshInterval)
		}
		if n := len(h.caller.made()); n != 0 {
			t.Errorf("hook calls = %d, want none for a record disarmed elsewhere", n)
		}
	})
}

// TestRearmElsewhereSeenAtOnce: a record this server holds disarmed,
// re-armed by a client of another server, is armed here as soon as the
// change arrives, not at the periodic reload.
func TestRearmElsewhereSeenAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := newFakeStore()
		fs.changes = make(chan store.Change)
		disarmed := rec("app.example.com")
		disarmed.Disarmed = true
		r := fs.put(disarmed)
		h := newHarness(t, nil, func(c *Config, _ *harness) { c.Store = feedStore{fs} })
		h.store = fs
		synctest.Wait()
		if _, err := h.c.ColdStart(context.Background(), testOrg, "app.example.com", ""); !errors.Is(err, ErrDisarmed) {
			t.Fatalf("ColdStart of a disarmed record error = %v, want ErrDisarmed", err)
		}

		fs.mu.Lock()
		fs.recs[r.ID].Disarmed = false
		fs.mu.Unlock()
		fs.publish(store.Change{Kind: store.ChangeScalingUpdated, ID: r.ID, OrgID: testOrg, Hostname: r.Hostname})
		synctest.Wait()
		if _, err := h.c.ColdStart(context.Background(), testOrg, "app.example.com", ""); err != nil {
			t.Errorf("ColdStart after a re-arm elsewhere error = %v, want a cold start at once, before the %v reload", err, DefaultRefreshInterval)
		}
	})
}

// TestPlanReload runs planReload over each way a listed record meets a
// bind the controller knows, written during the list or not.
func TestPlanReload(t *testing.T) {
	at := func(host string) Record {
		r := rec(host)
		r.ID = "scl_" + host
		return r
	}
	key := func(host string) bindKey { return bindKey{testOrg, host, ""} }
	const a, b = "a.example.com", "b.example.com"
	untouched := bindStatus{hasRecord: true, untouched: true}
	touched := bindStatus{hasRecord: true}
	tests := []struct {
		name   string
		listed []Record
		known  map[bindKey]bindStatus
		want   reloadPlan
	}{
		{
			name: "nothing listed, nothing known",
			want: reloadPlan{},
		},
		{
			name:   "record new to the controller is taken",
			listed: []Record{at(a)},
			want:   reloadPlan{apply: []Record{at(a)}},
		},
		{
			name:   "untouched record is taken as listed",
			listed: []Record{at(a)},
			known:  map[bindKey]bindStatus{key(a): untouched},
			want:   reloadPlan{apply: []Record{at(a)}},
		},
		{
			name:   "record written during the list is kept",
			listed: []Record{at(a)},
			known:  map[bindKey]bindStatus{key(a): touched},
			want:   reloadPlan{},
		},
		{
			name:   "untouched record missing from the list is cleared",
			known:  map[bindKey]bindStatus{key(a): untouched, key(b): untouched},
			listed: []Record{at(b)},
			want:   reloadPlan{apply: []Record{at(b)}, clear: []bindKey{key(a)}},
		},
		{
			name:  "record written during the list is kept though missing",
			known: map[bindKey]bindStatus{key(a): touched},
			want:  reloadPlan{},
		},
		{
			name:  "bind without a record has nothing to clear",
			known: map[bindKey]bindStatus{key(a): {untouched: true}},
			want:  reloadPlan{},
		},
		{
			name:   "bind without a record takes one declared elsewhere",
			listed: []Record{at(a)},
			known:  map[bindKey]bindStatus{key(a): {untouched: true}},
			want:   reloadPlan{apply: []Record{at(a)}},
		},
		{
			name:   "bind created since the list began is kept",
			listed: []Record{at(a)},
			known:  map[bindKey]bindStatus{key(a): {}},
			want:   reloadPlan{},
		},
		{
			name:   "second record for a new bind is not taken",
			listed: []Record{at(a), func() Record { r := at(a); r.ID = "scl_dup"; return r }()},
			want:   reloadPlan{apply: []Record{at(a)}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := planReload(tt.listed, tt.known)
			slices.SortFunc(got.clear, func(x, y bindKey) int { return strings.Compare(x.host, y.host) })
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(reloadPlan{}, bindKey{}), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("planReload(%s) = got, want want; diff (-want +got):\n%s", tt.name, diff)
			}
		})
	}
}

// TestListShowsLastCallError proves that the list says why the last call
// failed (here the outbound policy's refusal, a call with no response,
// which the status alone shows as 0), and stops saying it once a call
// succeeds.
func TestListShowsLastCallError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := rec("app.example.com")
		r.Cooldown = time.Second
		h := newHarness(t, []Record{r})
		refused := &outbound.RefusedError{URL: "http://10.0.0.1:80", Reason: "10.0.0.1 is private"}
		h.caller.answer = func(n int, _ HookCall) (int, time.Duration, error) {
			if n == 0 {
				return 0, 0, refused
			}
			return 200, 0, nil
		}
		lastError := func() View {
			t.Helper()
			vs, err := h.c.List(context.Background(), testOrg)
			if err != nil || len(vs) != 1 {
				t.Fatalf("List() = %+v, %v, want one record", vs, err)
			}
			return vs[0]
		}
		if _, err := h.c.ColdStart(context.Background(), testOrg, "app.example.com", ""); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if v := lastError(); v.LastStatus != 0 || !strings.Contains(v.LastError, "10.0.0.1 is private") {
			t.Errorf("after a refused call: last_status %d, last_error %q; want 0 and the fence's reason", v.LastStatus, v.LastError)
		}
		advance(time.Minute) // past the backoff
		if _, err := h.c.ColdStart(context.Background(), testOrg, "app.example.com", ""); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if v := lastError(); v.LastStatus != 200 || v.LastError != "" {
			t.Errorf("after an accepted call: last_status %d, last_error %q; want 200 and none", v.LastStatus, v.LastError)
		}
	})
}

// TestDeclareRefusesFencedURL proves that a hook URL the server's outbound
// policy refuses is refused at declaration, not at the first visitor: the
// client gets the policy's reason, no record is made, and the list shows
// the bind with the reason until a valid declaration replaces it or the
// session ends.
func TestDeclareRefusesFencedURL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		policy, err := outbound.New(outbound.Policy{})
		if err != nil {
			t.Fatal(err)
		}
		h := newHarness(t, nil, withConfig(func(c *Config) { c.Policy = policy }))
		const host = "app.example.com"
		list := func() []View {
			t.Helper()
			vs, err := h.c.List(context.Background(), testOrg)
			if err != nil {
				t.Fatal(err)
			}
			return vs
		}
		for _, tt := range []struct{ url, reason string }{
			{"http://hooks.example/scale", "http is not permitted, only https"},
			{"https://10.1.2.3/scale", "10.1.2.3 is private"},
			{"https://localhost/scale", "localhost is loopback"},
		} {
			b := block(host)
			b.URL = tt.url
			err := h.c.Declare(context.Background(), announce(host, "s1", b))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.reason) {
				t.Fatalf("Declare(url %s) = %v, want ErrInvalid with %q", tt.url, err, tt.reason)
			}
			if _, ok := h.store.get(host); ok {
				t.Fatalf("Declare(url %s) stored a record", tt.url)
			}
			vs := list()
			if len(vs) != 1 || vs[0].ID != "" || !vs[0].Disarmed || !strings.Contains(vs[0].Refused, tt.reason) || vs[0].URL != tt.url {
				t.Fatalf("List() after refusing %s = %+v, want one disarmed bind without ID, refused with %q", tt.url, vs, tt.reason)
			}
		}
		// The session ends: its refusal goes.
		h.c.Leave("s1")
		if vs := list(); len(vs) != 0 {
			t.Errorf("List() after the session left = %+v, want nothing", vs)
		}
		// Refused, then declared validly: the record, and no refusal.
		b := block(host)
		b.URL = "http://hooks.example/scale"
		if err := h.c.Declare(context.Background(), announce(host, "s2", b)); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Declare(http) = %v, want ErrInvalid", err)
		}
		if err := h.c.Declare(context.Background(), announce(host, "s2", block(host))); err != nil {
			t.Fatalf("Declare(https) = %v", err)
		}
		if vs := list(); len(vs) != 1 || vs[0].ID == "" || vs[0].Refused != "" {
			t.Errorf("List() after a valid declaration = %+v, want the record and no refusal", vs)
		}
	})
}

// TestRefusalsAreBounded proves that a client declaring invalid blocks for
// ever more hostnames cannot grow the controller's memory: past
// maxRefusals binds, refusals are still returned to the client but no
// longer remembered for the list, and the session's end forgets them all.
func TestRefusalsAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		bad := Declaration{URL: "ftp://hooks.example/"}
		for i := range maxRefusals + 50 {
			host := fmt.Sprintf("h%d.example.com", i)
			if err := h.c.Declare(context.Background(), announce(host, "flood", bad)); !errors.Is(err, ErrInvalid) {
				t.Fatalf("Declare(%s) = %v, want ErrInvalid", host, err)
			}
		}
		vs, err := h.c.List(context.Background(), testOrg)
		if err != nil {
			t.Fatal(err)
		}
		if len(vs) != maxRefusals {
			t.Errorf("List() after %d refused binds = %d views, want %d", maxRefusals+50, len(vs), maxRefusals)
		}
		h.c.Leave("flood")
		if vs, err := h.c.List(context.Background(), testOrg); err != nil || len(vs) != 0 {
			t.Errorf("List() after the session left = %d views, %v; want none", len(vs), err)
		}
	})
}
