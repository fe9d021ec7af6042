package autoscale

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
)

// block is a valid block for host with the default rules and max 10.
func block(host string) Declaration {
	return Declaration{URL: "https://hooks.example/" + host, Secret: "s3cret-" + host, Max: 10}
}

// announce is an announcement of b for host by session.
func announce(host, session string, b Declaration) SessionDeclaration {
	return SessionDeclaration{OrgID: testOrg, Hostname: host, Session: session, Armer: "tok_" + session, Block: b}
}

// TestNormalizeAppliesDefaults proves the documented defaults: min 0, max
// DefaultMax(0) = 1, cold_start 45s, target_utilization 0.8, window 15s,
// cooldown 60s.
func TestNormalizeAppliesDefaults(t *testing.T) {
	got, err := Normalize(Declaration{URL: "https://p.example/scale"})
	if err != nil {
		t.Fatalf("Normalize() error %v", err)
	}
	want := Declaration{URL: "https://p.example/scale", Min: 0, Max: 1, ColdStart: 45 * time.Second,
		TargetUtilization: 0.8, Window: 15 * time.Second, Cooldown: 60 * time.Second}
	if got != want {
		t.Errorf("Normalize() = %+v, want %+v", got, want)
	}
}

// TestNormalizeDefaultMax proves that a block without max gets the
// ceiling DefaultMax(min): min, and at least one, so that the cold start
// it asks for (max(1, min) instances) is never above it.
func TestNormalizeDefaultMax(t *testing.T) {
	for _, tt := range []struct{ min, max, want int }{
		{0, 0, 1},
		{1, 0, 1},
		{3, 0, 3},
		{3, 8, 8},
	} {
		got, err := Normalize(Declaration{URL: "https://p.example/scale", Min: tt.min, Max: tt.max})
		if err != nil {
			t.Fatalf("Normalize(min %d, max %d) error %v", tt.min, tt.max, err)
		}
		if got.Max != tt.want {
			t.Errorf("Normalize(min %d, max %d).Max = %d, want %d", tt.min, tt.max, got.Max, tt.want)
		}
	}
}

// TestNormalizeCapsColdStartAtFiveMinutes proves the cold_start cap.
func TestNormalizeCapsColdStartAtFiveMinutes(t *testing.T) {
	got, err := Normalize(Declaration{URL: "https://p.example/", ColdStart: time.Hour})
	if err != nil {
		t.Fatalf("Normalize() error %v", err)
	}
	if got.ColdStart != 5*time.Minute {
		t.Errorf("Normalize().ColdStart = %v, want 5m", got.ColdStart)
	}
}

// TestNormalizeRefusesInvalidBlocks proves the documented bounds: each
// broken rule is refused, errors.Is ErrInvalid, with a reason naming the
// field for the client's log.
func TestNormalizeRefusesInvalidBlocks(t *testing.T) {
	ok := Declaration{URL: "https://p.example/scale", Max: 4}
	tests := []struct {
		name   string
		edit   func(*Declaration)
		reason string
	}{
		{"no url", func(d *Declaration) { d.URL = "" }, "url is required"},
		{"relative url", func(d *Declaration) { d.URL = "/scale" }, "url must be https"},
		{"ftp url", func(d *Declaration) { d.URL = "ftp://p.example/" }, "url must be https"},
		{"url without host", func(d *Declaration) { d.URL = "https:///scale" }, "url has no host"},
		{"url with credentials", func(d *Declaration) { d.URL = "https://u:pw@p.example/" }, "must not carry credentials"},
		{"negative min", func(d *Declaration) { d.Min = -1 }, "min -1 is negative"},
		{"negative max", func(d *Declaration) { d.Max = -1 }, "max -1 is negative"},
		{"max below min", func(d *Declaration) { d.Min = 5 }, "max 4 is below min 5"},
		{"negative cold start", func(d *Declaration) { d.ColdStart = -time.Second }, "cold_start -1s is negative"},
		{"target above one", func(d *Declaration) { d.TargetUtilization = 1.01 }, "target_utilization 1.01 is not in (0,1]"},
		{"negative target", func(d *Declaration) { d.TargetUtilization = -0.5 }, "target_utilization -0.5 is not in (0,1]"},
		{"window below a second", func(d *Declaration) { d.Window = 999 * time.Millisecond }, "window 999ms is below 1s"},
		{"cooldown below a second", func(d *Declaration) { d.Cooldown = 10 * time.Millisecond }, "cooldown 10ms is below 1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := ok
			tt.edit(&d)
			_, err := Normalize(d)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Normalize(%+v) error = %v, want ErrInvalid", d, err)
			}
			if !strings.Contains(err.Error(), tt.reason) {
				t.Errorf("Normalize(%+v) error = %q, want it to say %q", d, err, tt.reason)
			}
		})
	}
	t.Run("target of exactly one", func(t *testing.T) {
		d := ok
		d.TargetUtilization = 1
		if _, err := Normalize(d); err != nil {
			t.Errorf("Normalize(target 1) error %v, want nil", err)
		}
	})
	t.Run("every problem at once", func(t *testing.T) {
		_, err := Normalize(Declaration{Min: -1, Window: time.Millisecond})
		var de *DeclarationError
		if !errors.As(err, &de) || len(de.Problems) != 3 {
			t.Errorf("Normalize() error = %v, want 3 problems (url, min, window)", err)
		}
	})
}

// TestInvalidDeclarationIsRefusedWithReason proves that Declare refuses an
// invalid block with text for the client, naming the hostname, and stores
// nothing; the secret never appears in it.
func TestInvalidDeclarationIsRefusedWithReason(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		b := block("app.example.com")
		b.TargetUtilization = 2
		err := h.c.Declare(context.Background(), announce("app.example.com", "sess_a", b))
		if !errors.Is(err, ErrInvalid) {
			t.Fatalf("Declare error = %v, want ErrInvalid", err)
		}
		const want = "autoscale: invalid scaling block for app.example.com: target_utilization 2 is not in (0,1]"
		if err.Error() != want {
			t.Errorf("Declare error = %q, want %q", err, want)
		}
		if _, ok := h.store.get("app.example.com"); ok {
			t.Error("an invalid block was stored")
		}
	})
}

// TestDeclarationPersistedAgainstHostname proves that a declaration is
// stored against its bind with the normalized block and its armer.
func TestDeclarationPersistedAgainstHostname(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		if err := h.c.Declare(context.Background(), announce("app.example.com", "sess_a", block("app.example.com"))); err != nil {
			t.Fatal(err)
		}
		r, ok := h.store.get("app.example.com")
		if !ok {
			t.Fatal("no record stored")
		}
		if r.URL != "https://hooks.example/app.example.com" || r.Max != 10 || r.Window != DefaultWindow || r.Cooldown != DefaultCooldown ||
			r.TargetUtilization != DefaultTargetUtilization || r.ColdStart != DefaultColdStart || r.Conflict {
			t.Errorf("stored %+v, want the block with defaults", r)
		}
		if diff := cmp.Diff([]string{"tok_sess_a"}, r.ArmedBy); diff != "" {
			t.Errorf("ArmedBy (-want +got):\n%s", diff)
		}
	})
}

// disarmedRecord is rec(host) with the breaker tripped.
func disarmedRecord(host string) Record {
	r := rec(host)
	r.URL, r.Secret, r.Max = block(host).URL, block(host).Secret, block(host).Max
	r.ColdStart, r.Window, r.Cooldown, r.TargetUtilization = DefaultColdStart, DefaultWindow, DefaultCooldown, DefaultTargetUtilization
	r.Disarmed, r.ConsecutiveFailures = true, MaxFailures
	return r
}

// TestNewSessionRearms proves that a new client session announcing the
// block re-arms a disarmed record (restarting a fixed client recovers).
func TestNewSessionRearms(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, []Record{disarmedRecord("app.example.com")})
		ctx := context.Background()
		if _, err := h.c.ColdStart(ctx, testOrg, "app.example.com", ""); !errors.Is(err, ErrDisarmed) {
			t.Fatalf("ColdStart before re-arm error = %v, want ErrDisarmed", err)
		}
		if err := h.c.Declare(ctx, announce("app.example.com", "sess_new", block("app.example.com"))); err != nil {
			t.Fatal(err)
		}
		if d := h.store.lastDeclare(t); !d.rearm {
			t.Error("DeclareScaling rearm = false for a new session, want true")
		}
		r, _ := h.store.get("app.example.com")
		if r.Disarmed || r.ConsecutiveFailures != 0 {
			t.Errorf("after a new session: Disarmed=%v ConsecutiveFailures=%d, want false 0", r.Disarmed, r.ConsecutiveFailures)
		}
		if _, err := h.c.ColdStart(ctx, testOrg, "app.example.com", ""); err != nil {
			t.Errorf("ColdStart after re-arm error = %v, want nil", err)
		}
	})
}

// TestUnchangedHeartbeatDoesNotRearm proves that heartbeats of a session
// already announced, with an unchanged block, leave the breaker alone.
func TestUnchangedHeartbeatDoesNotRearm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		ctx := context.Background()
		a := announce("app.example.com", "sess_a", block("app.example.com"))
		if err := h.c.Declare(ctx, a); err != nil {
			t.Fatal(err)
		}
		tripBreaker(t, h, "app.example.com")
		for range 3 {
			if err := h.c.Declare(ctx, a); err != nil {
				t.Fatal(err)
			}
			advance(10 * time.Second)
		}
		if d := h.store.lastDeclare(t); d.rearm {
			t.Error("DeclareScaling rearm = true for an unchanged heartbeat, want false")
		}
		if r, _ := h.store.get("app.example.com"); !r.Disarmed || r.ConsecutiveFailures != MaxFailures {
			t.Errorf("after heartbeats: Disarmed=%v ConsecutiveFailures=%d, want true %d", r.Disarmed, r.ConsecutiveFailures, MaxFailures)
		}
		if _, err := h.c.ColdStart(ctx, testOrg, "app.example.com", ""); !errors.Is(err, ErrDisarmed) {
			t.Errorf("ColdStart error = %v, want ErrDisarmed", err)
		}
	})
}

// tripBreaker makes MaxFailures cold start calls for host fail, so that
// its record is disarmed, and checks it is.
func tripBreaker(t *testing.T, h *harness, host string) {
	t.Helper()
	h.pool.steady(host, PoolStats{})
	h.caller.answerAll(500)
	for i := range MaxFailures {
		if i > 0 {
			advance(MaxBackoff)
		}
		if _, err := h.c.ColdStart(context.Background(), testOrg, host, ""); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
	}
	if r, _ := h.store.get(host); !r.Disarmed {
		t.Fatalf("record not disarmed after %d failures: %+v", MaxFailures, r)
	}
}

// TestChangedDeclarationRearms proves that editing the block re-arms it,
// even from a session already announced.
func TestChangedDeclarationRearms(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		ctx := context.Background()
		a := announce("app.example.com", "sess_a", block("app.example.com"))
		if err := h.c.Declare(ctx, a); err != nil {
			t.Fatal(err)
		}
		tripBreaker(t, h, "app.example.com")
		a.Block.Cooldown = 90 * time.Second
		if err := h.c.Declare(ctx, a); err != nil {
			t.Fatal(err)
		}
		if d := h.store.lastDeclare(t); !d.rearm {
			t.Error("DeclareScaling rearm = false for a changed block, want true")
		}
		r, _ := h.store.get("app.example.com")
		if r.Disarmed || r.ConsecutiveFailures != 0 || r.Cooldown != 90*time.Second {
			t.Errorf("after a changed block: Disarmed=%v ConsecutiveFailures=%d Cooldown=%v, want false 0 1m30s", r.Disarmed, r.ConsecutiveFailures, r.Cooldown)
		}
		h.caller.answerAll(200)
		if _, err := h.c.ColdStart(ctx, testOrg, "app.example.com", ""); err != nil {
			t.Errorf("ColdStart after re-arm error = %v, want nil", err)
		}
		// The backoff (15m) is forgotten; the cooldown (now 90s) since the
		// last call still holds.
		advance(90*time.Second - time.Millisecond)
		if n := len(h.caller.made()); n != MaxFailures {
			t.Errorf("%d calls within the cooldown, want %d", n, MaxFailures)
		}
		advance(time.Millisecond)
		if ts := h.callTimes(); len(ts) != MaxFailures+1 || ts[MaxFailures] != 4*MaxBackoff+90*time.Second {
			t.Errorf("calls at %v, want a sixth at %v", ts, 4*MaxBackoff+90*time.Second)
		}
	})
}

// TestSubMillisecondDurationsDoNotRearm proves that a block the store
// cannot keep exactly (durations finer than a millisecond) is still
// "unchanged" on the next heartbeat.
func TestSubMillisecondDurationsDoNotRearm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		ctx := context.Background()
		b := block("app.example.com")
		b.Window = 15*time.Second + 300*time.Microsecond
		a := announce("app.example.com", "sess_a", b)
		for range 2 {
			if err := h.c.Declare(ctx, a); err != nil {
				t.Fatal(err)
			}
		}
		// A heartbeat seen as a change would be written, re-arming.
		h.store.mu.Lock()
		n := len(h.store.declares)
		h.store.mu.Unlock()
		if d := h.store.lastDeclare(t); n != 1 || d.rearm && n > 1 {
			t.Errorf("store writes after two identical heartbeats = %d, want 1 (the second is no change)", n)
		}
	})
}

// TestUnchangedDeclarationWrittenOncePerRefresh: heartbeats repeating a
// stored declaration are not written again until DeclareRefresh has
// passed; a new session re-arming a record armed with no failures is
// skipped as well; a changed block, a new armer, or a record with
// failures is written at once.
func TestUnchangedDeclarationWrittenOncePerRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		ctx := context.Background()
		writes := func() int {
			h.store.mu.Lock()
			defer h.store.mu.Unlock()
			return len(h.store.declares)
		}
		b := block("app.example.com")
		declare := func(session, armer string, b Declaration) {
			t.Helper()
			a := announce("app.example.com", session, b)
			a.Armer = armer
			if err := h.c.Declare(ctx, a); err != nil {
				t.Fatal(err)
			}
		}
		declare("sess_a", "tok_a", b)
		if n := writes(); n != 1 {
			t.Fatalf("writes after the first declaration = %d, want 1", n)
		}
		for range 5 {
			advance(5 * time.Second)
			declare("sess_a", "tok_a", b)
		}
		declare("sess_b", "tok_a", b) // a new session, same armer and block
		if n := writes(); n != 1 {
			t.Fatalf("writes after unchanged heartbeats and a new session = %d, want 1", n)
		}
		h.c.Leave("sess_b")
		advance(DefaultDeclareRefresh)
		declare("sess_a", "tok_a", b)
		if n := writes(); n != 2 {
			t.Fatalf("writes after DefaultDeclareRefresh = %d, want 2 (UpdatedAt refreshed)", n)
		}
		declare("sess_a", "tok_b", b) // another armer
		if n := writes(); n != 3 {
			t.Fatalf("writes after a new armer = %d, want 3", n)
		}
		changed := b
		changed.Max++
		declare("sess_a", "tok_a", changed)
		if n := writes(); n != 4 {
			t.Fatalf("writes after a changed block = %d, want 4", n)
		}

		// One failed call: a new session's re-arm must reach the store.
		h.pool.steady("app.example.com", PoolStats{})
		h.caller.answerAll(503)
		if _, err := h.c.ColdStart(ctx, testOrg, "app.example.com", ""); err != nil {
			t.Fatal(err)
		}
		advance(time.Second)
		declare("sess_c", "tok_a", changed)
		if n, d := writes(), h.store.lastDeclare(t); n != 5 || !d.rearm {
			t.Fatalf("after a failure, a new session: writes = %d rearm %v, want 5 and a re-arm", n, d.rearm)
		}
	})
}

// TestConflictNewestWinsWithoutResettingCounters proves the conflict
// rule: two live sessions declaring different blocks, the newest
// session's block is stored and flagged, and neither the failure count nor
// the backoff is reset; the older session's heartbeats do not take it back.
func TestConflictNewestWinsWithoutResettingCounters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		ctx := context.Background()
		old := block("app.example.com")
		if err := h.c.Declare(ctx, announce("app.example.com", "sess_old", old)); err != nil {
			t.Fatal(err)
		}
		h.pool.steady("app.example.com", PoolStats{})
		h.caller.answerAll(503)
		if _, err := h.c.ColdStart(ctx, testOrg, "app.example.com", ""); err != nil {
			t.Fatal(err)
		}
		advance(time.Second)
		// One failure: backoff is cooldown×2 = 2m from t=0.

		newer := old
		newer.URL = "https://hooks.example/v2"
		if err := h.c.Declare(ctx, announce("app.example.com", "sess_new", newer)); err != nil {
			t.Fatal(err)
		}
		if err := h.c.Declare(ctx, announce("app.example.com", "sess_old", old)); err != nil {
			t.Fatal(err)
		}
		r, _ := h.store.get("app.example.com")
		if r.URL != newer.URL || !r.Conflict || r.ConsecutiveFailures != 1 {
			t.Errorf("after conflict: URL=%s Conflict=%v ConsecutiveFailures=%d, want %s true 1", r.URL, r.Conflict, r.ConsecutiveFailures, newer.URL)
		}
		if d := h.store.lastDeclare(t); d.rearm {
			t.Error("a conflicting declaration re-armed the record")
		}
		views, err := h.c.List(ctx, testOrg)
		if err != nil || len(views) != 1 || !views[0].Conflict {
			t.Errorf("List = %+v, %v, want one view flagged Conflict", views, err)
		}

		// The backoff still holds: no new call before 2m.
		h.caller.answerAll(200)
		advance(time.Minute)
		s, err := h.c.ColdStart(ctx, testOrg, "app.example.com", "")
		if err != nil {
			t.Fatal(err)
		}
		if s.Err() == nil {
			t.Error("ColdStart within the backoff = a fresh flight, want the failed one")
		}
		advance(time.Minute)
		if _, err := h.c.ColdStart(ctx, testOrg, "app.example.com", ""); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		calls := h.caller.made()
		if len(calls) != 2 || calls[1].URL != newer.URL || h.at(calls[1]) != 2*time.Minute+time.Second {
			t.Errorf("calls = %+v, want a second call to %s at 2m1s", h.callTimes(), newer.URL)
		}

		// The older session leaves: the conflict resolves on the next
		// heartbeat, which re-arms.
		h.c.Leave("sess_old")
		if err := h.c.Declare(ctx, announce("app.example.com", "sess_new", newer)); err != nil {
			t.Fatal(err)
		}
		if r, _ := h.store.get("app.example.com"); r.Conflict {
			t.Error("Conflict still set after the older session left")
		}
	})
}

// TestDisarmDeletesAndHeartbeatRecreates proves that the API's disarm
// removes the record and that a client still declaring it re-arms it on
// its next heartbeat.
func TestDisarmDeletesAndHeartbeatRecreates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		ctx := context.Background()
		a := announce("app.example.com", "sess_a", block("app.example.com"))
		if err := h.c.Declare(ctx, a); err != nil {
			t.Fatal(err)
		}
		r, _ := h.store.get("app.example.com")
		if err := h.c.Disarm(ctx, testOrg, r.ID); err != nil {
			t.Fatalf("Disarm error %v", err)
		}
		if _, ok := h.store.get("app.example.com"); ok {
			t.Fatal("record still stored after Disarm")
		}
		if _, err := h.c.ColdStart(ctx, testOrg, "app.example.com", ""); !errors.Is(err, ErrNoRecord) {
			t.Errorf("ColdStart after Disarm error = %v, want ErrNoRecord", err)
		}
		if err := h.c.Disarm(ctx, testOrg, r.ID); !errors.Is(err, ErrNoRecord) {
			t.Errorf("second Disarm error = %v, want ErrNoRecord", err)
		}
		if err := h.c.Declare(ctx, a); err != nil {
			t.Fatal(err)
		}
		if _, ok := h.store.get("app.example.com"); !ok {
			t.Fatal("heartbeat did not recreate the record")
		}
		if _, err := h.c.ColdStart(ctx, testOrg, "app.example.com", ""); err != nil {
			t.Errorf("ColdStart after re-declare error = %v, want nil", err)
		}
	})
}

// TestPlanDeclare runs planDeclare over each reason an announcement is
// stored, re-arms, logs, or is skipped.
func TestPlanDeclare(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	const host = "app.example.com"
	eff, err := Normalize(block(host))
	if err != nil {
		t.Fatalf("Normalize() error %v", err)
	}
	other := eff
	other.Max = 4
	// stored is the record holding eff, armed by tok_a, written a second
	// ago, with edit applied.
	stored := func(edit func(*Record)) *Record {
		r := Record{
			ID: "scl_1", OrgID: testOrg, Hostname: host,
			Scaling: Declaration{URL: eff.URL, Secret: eff.Secret, Min: eff.Min, Max: eff.Max, ColdStart: eff.ColdStart, Window: eff.Window, Cooldown: eff.Cooldown, TargetUtilization: eff.TargetUtilization},

			ArmedBy: []string{"tok_a"}, UpdatedAt: now.Add(-time.Second),
		}
		if edit != nil {
			edit(&r)
		}
		return &r
	}
	// write is the record a write of d stores, conflict flagged or not.
	write := func(d Declaration, conflict bool) Record {
		return Record{
			OrgID: testOrg, Hostname: host,
			Scaling: Declaration{URL: d.URL, Secret: d.Secret, Min: d.Min, Max: d.Max, ColdStart: d.ColdStart, Window: d.Window, Cooldown: d.Cooldown, TargetUtilization: d.TargetUtilization},

			Conflict: conflict,
		}
	}
	in := func(edit func(*declareIn)) declareIn {
		d := declareIn{
			key: bindKey{testOrg, host, ""}, armer: "tok_a", eff: eff,
			stored: stored(nil), now: now, refresh: DefaultDeclareRefresh,
		}
		edit(&d)
		return d
	}
	tests := []struct {
		name string
		in   declareIn
		want declarePlan
	}{
		{
			name: "first declaration creates and arms the record",
			in:   in(func(d *declareIn) { d.stored, d.newSession = nil, true }),
			want: declarePlan{write: true, rec: write(eff, false), rearm: true, note: noteArmed},
		},
		{
			name: "unchanged heartbeat is skipped",
			in:   in(func(*declareIn) {}),
			want: declarePlan{},
		},
		{
			name: "new session on an armed record without failures is skipped",
			in:   in(func(d *declareIn) { d.newSession = true }),
			want: declarePlan{},
		},
		{
			name: "unchanged heartbeat after the refresh moves the time",
			in:   in(func(d *declareIn) { d.now = now.Add(DefaultDeclareRefresh) }),
			want: declarePlan{write: true, rec: write(eff, false)},
		},
		{
			name: "new armer is added",
			in:   in(func(d *declareIn) { d.armer = "tok_b" }),
			want: declarePlan{write: true, rec: write(eff, false)},
		},
		{
			name: "changed declaration re-arms",
			in:   in(func(d *declareIn) { d.eff = other }),
			want: declarePlan{write: true, rec: write(other, false), rearm: true, note: noteChanged},
		},
		{
			name: "changed declaration of a disarmed record re-arms it",
			in: in(func(d *declareIn) {
				d.eff, d.stored = other, stored(func(r *Record) { r.Disarmed, r.ConsecutiveFailures = true, MaxFailures })
			}),
			want: declarePlan{write: true, rec: write(other, false), rearm: true, note: noteRearmed},
		},
		{
			name: "new session re-arms a disarmed record",
			in: in(func(d *declareIn) {
				d.newSession, d.stored = true, stored(func(r *Record) { r.Disarmed, r.ConsecutiveFailures = true, MaxFailures })
			}),
			want: declarePlan{write: true, rec: write(eff, false), rearm: true, note: noteRearmed},
		},
		{
			name: "heartbeat leaves a disarmed record disarmed",
			in: in(func(d *declareIn) {
				d.stored = stored(func(r *Record) { r.Disarmed, r.ConsecutiveFailures = true, MaxFailures })
			}),
			want: declarePlan{write: true, rec: write(eff, false)},
		},
		{
			name: "heartbeat leaves the failure count",
			in:   in(func(d *declareIn) { d.stored = stored(func(r *Record) { r.ConsecutiveFailures = 2 }) }),
			want: declarePlan{write: true, rec: write(eff, false)},
		},
		{
			name: "new session clears the failure count",
			in: in(func(d *declareIn) {
				d.newSession, d.stored = true, stored(func(r *Record) { r.ConsecutiveFailures = 2 })
			}),
			want: declarePlan{write: true, rec: write(eff, false), rearm: true},
		},
		{
			name: "conflicting new session stores the newest block without re-arming",
			in:   in(func(d *declareIn) { d.newSession, d.conflict, d.eff = true, true, other }),
			want: declarePlan{write: true, rec: write(other, true), rearm: false, note: noteConflict},
		},
		{
			name: "conflict on a new record is logged as a conflict",
			in:   in(func(d *declareIn) { d.stored, d.newSession, d.conflict = nil, true, true }),
			want: declarePlan{write: true, rec: write(eff, true), note: noteConflict},
		},
		{
			name: "heartbeat during a conflict is stored quietly",
			in: in(func(d *declareIn) {
				d.conflict, d.stored = true, stored(func(r *Record) { r.Conflict = true })
			}),
			want: declarePlan{write: true, rec: write(eff, true)},
		},
		{
			name: "resolved conflict re-arms",
			in:   in(func(d *declareIn) { d.stored = stored(func(r *Record) { r.Conflict = true }) }),
			want: declarePlan{write: true, rec: write(eff, false), rearm: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := planDeclare(tt.in)
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(declarePlan{})); diff != "" {
				t.Errorf("planDeclare(%s) = got, want want; diff (-want +got):\n%s", tt.name, diff)
			}
		})
	}
}

// TestDeclareNotes pins the log message and level of each note.
func TestDeclareNotes(t *testing.T) {
	tests := []struct {
		name  string
		note  declareNote
		msg   string
		level slog.Level
	}{
		{"none", noteNone, "", slog.LevelInfo},
		{"conflict", noteConflict, "scaling declaration conflict", slog.LevelWarn},
		{"armed", noteArmed, "scaling record armed", slog.LevelInfo},
		{"rearmed", noteRearmed, "scaling record re-armed", slog.LevelInfo},
		{"changed", noteChanged, "scaling declaration changed", slog.LevelInfo},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.note.String(); got != tt.msg {
				t.Errorf("declareNote(%d).String() = %q, want %q", tt.note, got, tt.msg)
			}
			if got := tt.note.level(); got != tt.level {
				t.Errorf("declareNote(%d).level() = %v, want %v", tt.note, got, tt.level)
			}
		})
	}
}
