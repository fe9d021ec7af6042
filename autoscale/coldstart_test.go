package autoscale

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.opentelemetry.io/otel/trace"
)

// TestColdStartSingleFlight proves that a burst of 10,000 concurrent
// requests on an empty pool makes exactly one call and that every request
// shares the same flight.
func TestColdStartSingleFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, []Record{rec("app.example.com")})
		h.caller.hold = make(chan struct{})
		const burst = 10_000
		starts := make([]*Start, burst)
		errs := make([]error, burst)
		var wg sync.WaitGroup
		for i := range burst {
			wg.Go(func() {
				starts[i], errs[i] = h.c.ColdStart(context.Background(), testOrg, "app.example.com", "")
			})
		}
		wg.Wait()
		synctest.Wait()
		for i := range burst {
			if errs[i] != nil || starts[i] != starts[0] {
				t.Fatalf("ColdStart #%d = %p, %v, want the shared flight %p", i, starts[i], errs[i], starts[0])
			}
		}
		close(h.caller.hold)
		synctest.Wait()
		select {
		case <-starts[0].Done():
		default:
			t.Fatal("flight not done after the call was accepted")
		}
		if err := starts[0].Err(); err != nil {
			t.Errorf("Err() = %v, want nil", err)
		}
		// Later requests inside the cooldown join the accepted flight.
		advance(30 * time.Second)
		if s, err := h.c.ColdStart(context.Background(), testOrg, "app.example.com", ""); err != nil || s != starts[0] {
			t.Errorf("ColdStart within the cooldown = %p, %v, want the accepted flight", s, err)
		}
		synctest.Wait()
		expectCall(t, h, 1, 0, ReasonColdStart, 0, 1)
	})
}

// TestColdStartOneCallPerBudget proves that an accepted cold start covers
// the whole cold_start budget, not just the cooldown: a burst still
// arriving after the cooldown joins the same flight, and only a pool still
// empty after the budget asks again.
func TestColdStartOneCallPerBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := rec("app.example.com")
		r.Cooldown = time.Second
		r.ColdStart = 30 * time.Second
		h := newHarness(t, []Record{r})
		first, err := h.c.ColdStart(context.Background(), testOrg, "app.example.com", "")
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		advance(5 * time.Second) // past the cooldown, inside cold_start
		if s, err := h.c.ColdStart(context.Background(), testOrg, "app.example.com", ""); err != nil || s != first {
			t.Fatalf("ColdStart after the cooldown, inside cold_start = %p, %v, want the accepted flight %p", s, err, first)
		}
		synctest.Wait()
		expectCall(t, h, 1, 0, ReasonColdStart, 0, 1)
		advance(30 * time.Second) // the budget ran out and the pool is still empty
		if s, err := h.c.ColdStart(context.Background(), testOrg, "app.example.com", ""); err != nil || s == first {
			t.Fatalf("ColdStart after the budget = %p, %v, want a new flight", s, err)
		}
		synctest.Wait()
		if n := len(h.caller.made()); n != 2 {
			t.Fatalf("provider calls = %d, want 2 (one per cold_start budget)", n)
		}
	})
}

// TestColdStartFailureReleasesHeldRequestsAtOnce proves that a failed
// call closes Failed at once, with the reason in Err, and that requests
// arriving during the backoff get the failed flight rather than waiting.
func TestColdStartFailureReleasesHeldRequestsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, []Record{rec("app.example.com")})
		h.caller.answerAll(503)
		s, err := h.c.ColdStart(context.Background(), testOrg, "app.example.com", "")
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		select {
		case <-s.Failed():
		default:
			t.Fatal("Failed not closed after the call failed")
		}
		var ce *CallError
		if !errors.As(s.Err(), &ce) || ce.Status != 503 {
			t.Errorf("Err() = %v, want a CallError with status 503", s.Err())
		}
		advance(time.Minute)
		s2, err := h.c.ColdStart(context.Background(), testOrg, "app.example.com", "")
		if err != nil || s2 != s {
			t.Errorf("ColdStart during the backoff = %p, %v, want the failed flight", s2, err)
		}
		if n := len(h.caller.made()); n != 1 {
			t.Errorf("%d calls, want 1", n)
		}
	})
}

// TestColdStartRefusedWithoutArmedRecord proves that there is no cold
// start for a missing or a disarmed record.
func TestColdStartRefusedWithoutArmedRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, []Record{disarmedRecord("off.example.com")})
		ctx := context.Background()
		if _, err := h.c.ColdStart(ctx, testOrg, "none.example.com", ""); !errors.Is(err, ErrNoRecord) {
			t.Errorf("ColdStart(no record) error = %v, want ErrNoRecord", err)
		}
		if _, err := h.c.ColdStart(ctx, testOrg, "off.example.com", ""); !errors.Is(err, ErrDisarmed) {
			t.Errorf("ColdStart(disarmed) error = %v, want ErrDisarmed", err)
		}
		if _, err := h.c.ColdStart(ctx, "org_other", "off.example.com", ""); !errors.Is(err, ErrNoRecord) {
			t.Errorf("ColdStart(other org) error = %v, want ErrNoRecord", err)
		}
		synctest.Wait()
		if n := len(h.caller.made()); n != 0 {
			t.Errorf("%d calls, want none", n)
		}
	})
}

// TestColdStartSurvivesRestart proves that a record persisted by an
// earlier run, with no client left, is cold started: the router, knowing
// only the hostname, passes no organization.
func TestColdStartSurvivesRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := rec("app.example.com")
		r.Path = "/api"
		h := newHarness(t, []Record{r})
		if _, err := h.c.ColdStart(context.Background(), "", "app.example.com", "/api"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		calls := h.caller.made()
		if len(calls) != 1 || calls[0].Body.OrgID != testOrg || calls[0].Body.Path != "/api" || calls[0].Secret != r.Secret {
			t.Errorf("calls = %+v, want one for %s/api of %s with the secret", calls, r.Hostname, testOrg)
		}
	})
}

// longCalls lets held calls wait past the default call timeout, as long
// as a call may.
var longCalls = withConfig(func(c *Config) { c.CallTimeout = MaxCallTimeout })

// fillSlots starts MaxInFlight held cold starts on hosts busy-*, so that
// further decisions queue. The harness needs longCalls.
func fillSlots(t *testing.T, h *harness) {
	t.Helper()
	h.caller.hold = make(chan struct{})
	for i := range MaxInFlight {
		host := hostN("busy", i)
		h.store.put(rec(host))
	}
	h.c.refresh(context.Background())
	for i := range MaxInFlight {
		if _, err := h.c.ColdStart(context.Background(), testOrg, hostN("busy", i), ""); err != nil {
			t.Fatal(err)
		}
		advance(time.Millisecond) // the start budget refills a token every 100µs
	}
	if n := h.c.Metrics().InFlight; n != MaxInFlight {
		t.Fatalf("InFlight = %d, want %d", n, MaxInFlight)
	}
}

func hostN(prefix string, i int) string {
	return prefix + "-" + string(rune('a'+i%26)) + string(rune('a'+i/26)) + ".example.com"
}

// TestQueuedColdStartDroppedWhenPoolBecomesRoutable proves that a cold
// start still queued when an instance announces is not made, and its
// flight ends without failing.
func TestQueuedColdStartDroppedWhenPoolBecomesRoutable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, []Record{rec("app.example.com")}, longCalls)
		fillSlots(t, h)
		s, err := h.c.ColdStart(context.Background(), testOrg, "app.example.com", "")
		if err != nil {
			t.Fatal(err)
		}
		h.pool.steady("app.example.com", pool(1, 0))
		close(h.caller.hold)
		synctest.Wait()
		select {
		case <-s.Done():
		default:
			t.Fatal("flight not done")
		}
		if s.Err() != nil {
			t.Errorf("Err() = %v, want nil", s.Err())
		}
		for _, c := range h.caller.made() {
			if c.Body.Hostname == "app.example.com" {
				t.Errorf("cold start called for a routable pool: %+v", c)
			}
		}
		if m := h.c.Metrics(); m.Dropped != 1 {
			t.Errorf("Metrics().Dropped = %d, want 1", m.Dropped)
		}
	})
}

// TestQueuedDecisionReevaluatedWhenRecordDeleted proves that a queued call
// whose record is deleted meanwhile is not made, and its held requests are
// told why at once.
func TestQueuedDecisionReevaluatedWhenRecordDeleted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, []Record{rec("app.example.com")}, longCalls)
		fillSlots(t, h)
		s, err := h.c.ColdStart(context.Background(), testOrg, "app.example.com", "")
		if err != nil {
			t.Fatal(err)
		}
		r, _ := h.store.get("app.example.com")
		if err := h.c.Disarm(context.Background(), testOrg, r.ID); err != nil {
			t.Fatal(err)
		}
		close(h.caller.hold)
		synctest.Wait()
		if !errors.Is(s.Err(), ErrNoRecord) {
			t.Errorf("Err() = %v, want ErrNoRecord", s.Err())
		}
		if n := len(h.caller.made()); n != MaxInFlight {
			t.Errorf("%d calls, want only the %d already in flight", n, MaxInFlight)
		}
	})
}

// TestQueuedScaleOutReevaluatedWhenPoolChanges proves that a sampled
// decision still queued when the pool's instances change is dropped, and
// the sampler decides afresh.
func TestQueuedScaleOutReevaluatedWhenPoolChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, []Record{rec("app.example.com")}, longCalls)
		fillSlots(t, h)
		h.pool.steady("app.example.com", pool(2, 20))
		advance(16 * time.Second) // the decision (current 2) is queued at 16s
		if m := h.c.Metrics(); m.Queued != 1 {
			t.Fatalf("Queued = %d, want 1", m.Queued)
		}
		h.pool.steady("app.example.com", pool(3, 30)) // another instance came up
		close(h.caller.hold)
		synctest.Wait()
		if m := h.c.Metrics(); m.Dropped != 1 {
			t.Errorf("Dropped = %d, want 1", m.Dropped)
		}
		for _, c := range h.caller.made() {
			if c.Body.Hostname == "app.example.com" {
				t.Errorf("stale decision called: %+v", c.Body)
			}
		}
		// Still saturated: decided afresh after a whole window, current 3.
		advance(16 * time.Second)
		calls := h.caller.made()
		last := calls[len(calls)-1]
		if last.Body.Hostname != "app.example.com" || last.Body.Current != 3 || last.Body.Desired != 4 {
			t.Errorf("last call %+v, want app.example.com 3 → 4", last.Body)
		}
	})
}

// TestColdStartCallCarriesRequestSpan proves that the hook call of a cold
// start runs under the span context of the request that asked for it, so
// a tracing Caller's span joins that request's trace; a request joining
// the flight later does not change it.
func TestColdStartCallCarriesRequestSpan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, []Record{rec("app.example.com")})
		h.caller.hold = make(chan struct{})
		span := func(b byte) trace.SpanContext {
			return trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{b, 1}, SpanID: trace.SpanID{b, 2}, TraceFlags: trace.FlagsSampled})
		}
		first, second := span(1), span(2)
		if _, err := h.c.ColdStart(trace.ContextWithSpanContext(context.Background(), first), testOrg, "app.example.com", ""); err != nil {
			t.Fatalf("ColdStart() = %v", err)
		}
		if _, err := h.c.ColdStart(trace.ContextWithSpanContext(context.Background(), second), testOrg, "app.example.com", ""); err != nil {
			t.Fatalf("second ColdStart() = %v", err)
		}
		synctest.Wait()
		close(h.caller.hold)
		synctest.Wait()
		h.caller.mu.Lock()
		defer h.caller.mu.Unlock()
		if len(h.caller.calls) != 1 {
			t.Fatalf("calls = %d, want 1", len(h.caller.calls))
		}
		if got := h.caller.calls[0].span; !got.Equal(first) {
			t.Fatalf("call's span context = %v, want the first request's %v", got, first)
		}
	})
}

// TestPlanColdStart proves that PlanColdStart tells what ColdStart would do
// (call, join, refuse) and does none of it: no call, no flight.
func TestPlanColdStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := rec("app.example.com")
		r.Cooldown = 10 * time.Second
		r.ColdStart = 30 * time.Second
		disarmed := rec("off.example.com")
		disarmed.Disarmed = true
		h := newHarness(t, []Record{r, disarmed})
		h.caller.hold = make(chan struct{})

		for range 100 {
			if p := h.c.PlanColdStart(context.Background(), testOrg, "app.example.com", ""); p.Join || p.Err != nil {
				t.Fatalf("PlanColdStart(idle bind) = %+v, want a call (no join, no error)", p)
			}
		}
		synctest.Wait()
		if n := len(h.caller.made()); n != 0 {
			t.Fatalf("calls after planning = %d, want 0", n)
		}
		if p := h.c.PlanColdStart(context.Background(), testOrg, "off.example.com", ""); !errors.Is(p.Err, ErrDisarmed) {
			t.Errorf("PlanColdStart(disarmed) = %+v, want ErrDisarmed", p)
		}
		if p := h.c.PlanColdStart(context.Background(), testOrg, "nope.example.com", ""); !errors.Is(p.Err, ErrNoRecord) {
			t.Errorf("PlanColdStart(no record) = %+v, want ErrNoRecord", p)
		}

		// A start under way is joined, and stays joinable for cold_start
		// after it was accepted.
		if _, err := h.c.ColdStart(context.Background(), testOrg, "app.example.com", ""); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if p := h.c.PlanColdStart(context.Background(), testOrg, "app.example.com", ""); !p.Join || p.Err != nil {
			t.Errorf("PlanColdStart(call pending) = %+v, want join", p)
		}
		close(h.caller.hold)
		synctest.Wait()
		advance(20 * time.Second)
		if p := h.c.PlanColdStart(context.Background(), testOrg, "app.example.com", ""); !p.Join {
			t.Errorf("PlanColdStart(accepted 20s ago, cold_start 30s) = %+v, want join", p)
		}
		advance(15 * time.Second)
		if p := h.c.PlanColdStart(context.Background(), testOrg, "app.example.com", ""); p.Join || p.Err != nil {
			t.Errorf("PlanColdStart(past cold_start) = %+v, want a new call", p)
		}
		synctest.Wait()
		expectCall(t, h, 1, 0, ReasonColdStart, 0, 1)
	})
}

// TestPlanColdStartWaitsForRecords proves that PlanColdStart, like
// ColdStart, waits for Run's first load of the records instead of
// answering from an empty controller, and gives up when ctx ends.
func TestPlanColdStartWaitsForRecords(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newFakeStore()
		st.put(rec("app.example.com"))
		c, err := New(Config{Store: st, Pool: newFakePool(), Caller: &fakeCaller{}, Events: &fakeEvents{}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if p := c.PlanColdStart(ctx, testOrg, "app.example.com", ""); !errors.Is(p.Err, context.DeadlineExceeded) {
			t.Errorf("PlanColdStart(before Run, 1s) = %+v, want DeadlineExceeded", p)
		}
		plans := make(chan ColdStartPlan, 1)
		go func() { plans <- c.PlanColdStart(context.Background(), testOrg, "app.example.com", "") }()
		synctest.Wait()
		select {
		case p := <-plans:
			t.Fatalf("PlanColdStart answered %+v before the records were loaded", p)
		default:
		}
		runCtx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(runCtx) }()
		if p := <-plans; p.Join || p.Err != nil {
			t.Errorf("PlanColdStart after the load = %+v, want a call", p)
		}
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	})
}

// TestPlanColdStartCases runs planColdStart over each way a request on an
// empty pool is refused, joins a flight, or makes a call.
func TestPlanColdStartCases(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	armed := func(edit func(*Record)) *Record {
		r := rec("app.example.com")
		if edit != nil {
			edit(&r)
		}
		return &r
	}
	failing := armed(func(r *Record) { r.ConsecutiveFailures = 2 })
	plan := func(p ColdStartPlan, desired int, replace bool) coldStartPlan {
		return coldStartPlan{ColdStartPlan: p, desired: desired, replace: replace}
	}
	tests := []struct {
		name string
		in   coldStartIn
		want coldStartPlan
	}{
		{
			name: "no record refuses",
			in:   coldStartIn{now: now},
			want: plan(ColdStartPlan{Err: ErrNoRecord}, 0, false),
		},
		{
			name: "disarmed record refuses",
			in: coldStartIn{
				rec: armed(func(r *Record) { r.Disarmed, r.ConsecutiveFailures = true, MaxFailures }),
				now: now, nextAllowed: now.Add(time.Minute),
			},
			want: plan(ColdStartPlan{Err: ErrDisarmed, ConsecutiveFailures: MaxFailures, NextAllowed: now.Add(time.Minute)}, 0, false),
		},
		{
			name: "idle bind calls for one instance",
			in:   coldStartIn{rec: armed(nil), now: now},
			want: plan(ColdStartPlan{}, 1, false),
		},
		{
			name: "idle bind calls for min",
			in:   coldStartIn{rec: armed(func(r *Record) { r.Min = 3 }), now: now},
			want: plan(ColdStartPlan{}, 3, false),
		},
		{
			name: "pending flight is joined",
			in:   coldStartIn{rec: armed(nil), flight: flightState{exists: true, pending: true}, now: now},
			want: plan(ColdStartPlan{Join: true}, 0, false),
		},
		{
			name: "failed flight is joined inside its backoff",
			in: coldStartIn{
				rec: failing, flight: flightState{exists: true},
				nextAllowed: now.Add(time.Second), now: now,
			},
			want: plan(ColdStartPlan{Join: true, ConsecutiveFailures: 2, NextAllowed: now.Add(time.Second)}, 0, false),
		},
		{
			name: "failed flight past its backoff calls again",
			in:   coldStartIn{rec: failing, flight: flightState{exists: true}, nextAllowed: now, now: now},
			want: plan(ColdStartPlan{ConsecutiveFailures: 2}, 1, false),
		},
		{
			name: "accepted flight is joined for the cold start budget past the cooldown",
			in: coldStartIn{
				rec:    armed(func(r *Record) { r.ColdStart, r.Cooldown = 2*time.Minute, time.Minute }),
				flight: flightState{exists: true, acceptedAt: now.Add(-90 * time.Second)}, nextAllowed: now.Add(-30 * time.Second), now: now,
			},
			want: plan(ColdStartPlan{Join: true}, 0, false),
		},
		{
			name: "accepted flight past the budget and the cooldown calls again",
			in: coldStartIn{
				rec:    armed(func(r *Record) { r.ColdStart, r.Cooldown = time.Minute, time.Minute }),
				flight: flightState{exists: true, acceptedAt: now.Add(-time.Minute)}, nextAllowed: now, now: now,
			},
			want: plan(ColdStartPlan{}, 1, false),
		},
		{
			name: "cooldown of a sampled call without a flight still calls",
			in:   coldStartIn{rec: armed(nil), nextAllowed: now.Add(time.Second), now: now},
			want: plan(ColdStartPlan{NextAllowed: now.Add(time.Second)}, 1, false),
		},
		{
			name: "waiting sampled decision is replaced",
			in:   coldStartIn{rec: armed(nil), queued: true, now: now},
			want: plan(ColdStartPlan{}, 1, true),
		},
		{
			name: "waiting sampled decision is replaced even with the queue full",
			in:   coldStartIn{rec: armed(nil), queued: true, queueFull: true, now: now},
			want: plan(ColdStartPlan{}, 1, true),
		},
		{
			name: "full queue refuses",
			in:   coldStartIn{rec: armed(nil), queueFull: true, now: now},
			want: plan(ColdStartPlan{Err: ErrQueueFull}, 0, false),
		},
		{
			name: "full queue does not refuse a join",
			in:   coldStartIn{rec: armed(nil), flight: flightState{exists: true, pending: true}, queueFull: true, now: now},
			want: plan(ColdStartPlan{Join: true}, 0, false),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := planColdStart(tt.in)
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(coldStartPlan{}), cmpopts.EquateErrors()); diff != "" {
				t.Errorf("planColdStart(%s) = got, want want; diff (-want +got):\n%s", tt.name, diff)
			}
		})
	}
}

// TestColdStartNeverAsksAboveMax proves that the first call honours max:
// a block declared without max calls with a max of DefaultMax(min) and a
// desired no higher, and so does a record stored with max 0 before max
// had a default (read back from the store after a restart).
func TestColdStartNeverAsksAboveMax(t *testing.T) {
	tests := []struct {
		name             string
		min              int
		stored           bool // the record was stored with max 0, not declared now
		desired, ceiling int
	}{
		{"declared without max", 0, false, 1, 1},
		{"declared with min 3 without max", 3, false, 3, 3},
		{"stored with max 0", 0, true, 1, 1},
		{"stored with min 2 and max 0", 2, true, 2, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const host = "app.example.com"
				var recs []Record
				if tt.stored {
					r := rec(host)
					r.Min, r.Max = tt.min, 0
					recs = append(recs, r)
				}
				h := newHarness(t, recs)
				if !tt.stored {
					b := block(host)
					b.Min, b.Max = tt.min, 0
					if err := h.c.Declare(context.Background(), announce(host, "s1", b)); err != nil {
						t.Fatalf("Declare: %v", err)
					}
				}
				if _, err := h.c.ColdStart(context.Background(), testOrg, host, ""); err != nil {
					t.Fatalf("ColdStart: %v", err)
				}
				synctest.Wait()
				calls := h.caller.made()
				if len(calls) != 1 {
					t.Fatalf("%d calls, want 1", len(calls))
				}
				if b := calls[0].Body; b.Desired != tt.desired || b.Max != tt.ceiling || b.Min != tt.min || b.Desired > b.Max {
					t.Errorf("cold start body desired %d min %d max %d, want desired %d min %d max %d", b.Desired, b.Min, b.Max, tt.desired, tt.min, tt.ceiling)
				}
				vs, err := h.c.List(context.Background(), testOrg)
				if err != nil || len(vs) != 1 || vs[0].Max != tt.ceiling {
					t.Errorf("List() = %+v, %v, want one record with max %d", vs, err, tt.ceiling)
				}
			})
		})
	}
}
