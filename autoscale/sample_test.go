package autoscale

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

// utilization scripts a pool of n instances (max_concurrent 10 each) whose
// utilization at each elapsed second is u(second).
func utilization(n int, u func(sec int) float64) func(time.Duration) PoolStats {
	return func(el time.Duration) PoolStats {
		return pool(n, int(u(int(el/time.Second))*float64(10*n)+0.5))
	}
}

// expectNoCall advances d and fails if any call was made.
func expectNoCall(t *testing.T, h *harness, d time.Duration) {
	t.Helper()
	advance(d)
	if ts := h.callTimes(); len(ts) != 0 {
		t.Fatalf("calls at %v, want none within %v", ts, d)
	}
}

// expectCall fails unless exactly n calls were made, the last one at
// elapsed time at with body (reason, current, desired).
func expectCall(t *testing.T, h *harness, n int, at time.Duration, reason Reason, current, desired int) {
	t.Helper()
	calls := h.caller.made()
	if len(calls) != n {
		t.Fatalf("%d calls at %v, want %d", len(calls), h.callTimes(), n)
	}
	c := calls[n-1]
	if got := h.at(c); got != at {
		t.Errorf("call %d at %v, want %v", n, got, at)
	}
	if b := c.Body; b.Reason != reason || b.Current != current || b.Desired != desired {
		t.Errorf("call %d body = %s current %d desired %d, want %s %d %d", n, b.Reason, b.Current, b.Desired, reason, current, desired)
	}
}

// TestScaleOutAfterWholeWindow proves that utilization at or above target
// for the whole window scales out by one: samples from 1s, window 15s, the
// call at 16s and not before.
func TestScaleOutAfterWholeWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, []Record{rec("app.example.com")})
		h.pool.steady("app.example.com", pool(2, 16)) // exactly at the 0.8 target
		expectNoCall(t, h, 15*time.Second+500*time.Millisecond)
		advance(time.Second)
		expectCall(t, h, 1, 16*time.Second, ReasonScaleOut, 2, 3)
	})
}

// TestScaleOutNeedsEverySampleInWindow proves that one sample below
// target inside the window restarts it.
func TestScaleOutNeedsEverySampleInWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, []Record{rec("app.example.com")})
		h.pool.set("app.example.com", utilization(2, func(s int) float64 {
			if s == 14 {
				return 0.75
			}
			return 1
		}))
		expectNoCall(t, h, 29*time.Second+500*time.Millisecond)
		advance(time.Second)
		expectCall(t, h, 1, 30*time.Second, ReasonScaleOut, 2, 3)
	})
}

// TestSingleSpikeDoesNotScaleOut proves that a single saturated sample,
// however high, never qualifies.
func TestSingleSpikeDoesNotScaleOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, []Record{rec("app.example.com")})
		h.pool.set("app.example.com", utilization(2, func(s int) float64 {
			if s%20 == 5 {
				return 1
			}
			return 0.5
		}))
		expectNoCall(t, h, 30*time.Minute)
	})
}

// TestScaleInAfterExactlyFourQuietWindows proves that utilization below
// half the target for four windows scales in by one: samples from 1s,
// window 15s, the call at 61s and not before.
func TestScaleInAfterExactlyFourQuietWindows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, []Record{rec("app.example.com")})
		h.pool.steady("app.example.com", pool(3, 11)) // 0.37, below 0.4
		expectNoCall(t, h, 60*time.Second+500*time.Millisecond)
		advance(time.Second)
		expectCall(t, h, 1, 61*time.Second, ReasonScaleIn, 3, 2)
	})
}

// TestBusySampleResetsIdleClock proves that one sample at or above half
// the target restarts the four idle windows.
func TestBusySampleResetsIdleClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, []Record{rec("app.example.com")})
		h.pool.set("app.example.com", utilization(3, func(s int) float64 {
			if s == 30 {
				return 0.5
			}
			return 0
		}))
		expectNoCall(t, h, 90*time.Second+500*time.Millisecond)
		advance(time.Second)
		expectCall(t, h, 1, 91*time.Second, ReasonScaleIn, 3, 2)
	})
}

// TestHysteresisNeverOscillates proves the gap between the two thresholds:
// a pool hovering at its target, or flipping between busy and idle on
// alternate samples, is never scaled out nor in.
func TestHysteresisNeverOscillates(t *testing.T) {
	tests := []struct {
		name    string
		a, b    float64
		decided bool
	}{
		{"hovering at target", 0.8, 0.75, false},
		{"busy and idle on alternate samples", 0.9, 0.1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, []Record{rec("app.example.com")})
				h.pool.set("app.example.com", utilization(4, func(s int) float64 {
					if s%2 == 0 {
						return tt.a
					}
					return tt.b
				}))
				expectNoCall(t, h, time.Hour)
			})
		})
	}
}

// TestScaleInSkippedAtMinOrOneInstance proves that an idle pool already
// at min, or at one instance, is left alone.
func TestScaleInSkippedAtMinOrOneInstance(t *testing.T) {
	tests := []struct {
		name      string
		min       int
		instances int
	}{
		{"at min", 2, 2},
		{"at one instance with min 0", 0, 1},
		{"below min", 3, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := rec("app.example.com")
				r.Min = tt.min
				h := newHarness(t, []Record{r})
				h.pool.steady("app.example.com", pool(tt.instances, 0))
				expectNoCall(t, h, time.Hour)
			})
		})
	}
}

// TestDesiredBounds proves the bounds of desired: scale-out never above
// max (max 0: cold starts only), scale-in one below current but never
// below min or one and never above max, cold start one or min.
func TestDesiredBounds(t *testing.T) {
	r := func(min, max int) *Record { return &Record{Scaling: Declaration{Min: min, Max: max}} }
	type result struct {
		desired int
		ok      bool
	}
	tests := []struct {
		name    string
		f       func(int, *Record) (int, bool)
		current int
		rec     *Record
		want    result
	}{
		{"scale out by one", scaleOutDesired, 2, r(0, 10), result{3, true}},
		{"scale out up to max", scaleOutDesired, 9, r(0, 10), result{10, true}},
		{"scale out at max", scaleOutDesired, 10, r(0, 10), result{0, false}},
		{"scale out above max", scaleOutDesired, 12, r(0, 10), result{0, false}},
		{"scale out with max 0", scaleOutDesired, 1, r(0, 0), result{0, false}},
		{"scale in by one", scaleInDesired, 3, r(0, 10), result{2, true}},
		{"scale in down to min", scaleInDesired, 3, r(2, 10), result{2, true}},
		{"scale in at min", scaleInDesired, 2, r(2, 10), result{0, false}},
		{"scale in at one", scaleInDesired, 1, r(0, 10), result{0, false}},
		{"scale in never to zero", scaleInDesired, 2, r(0, 10), result{1, true}},
		{"scale in above max", scaleInDesired, 12, r(0, 10), result{10, true}},
		{"scale in with max 0", scaleInDesired, 3, r(0, 0), result{0, false}},
		{"cold start", func(int, *Record) (int, bool) { return coldStartDesired(r(0, 8)), true }, 0, nil, result{1, true}},
		{"cold start to min", func(int, *Record) (int, bool) { return coldStartDesired(r(3, 8)), true }, 0, nil, result{3, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, ok := tt.f(tt.current, tt.rec)
			if got := (result{d, ok}); got != tt.want {
				t.Errorf("desired(current %d, %+v) = %+v, want %+v", tt.current, tt.rec, got, tt.want)
			}
		})
	}
}

// TestNeverAskAboveMax proves that a saturated pool at max is not scaled
// out, and one below it is asked for at most max.
func TestNeverAskAboveMax(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := rec("app.example.com")
		r.Max = 4
		h := newHarness(t, []Record{r})
		h.pool.steady("app.example.com", pool(4, 40))
		expectNoCall(t, h, 10*time.Minute)
		h.pool.steady("app.example.com", pool(3, 30))
		advance(20 * time.Second)
		calls := h.caller.made()
		if len(calls) != 1 || calls[0].Body.Desired != 4 {
			t.Fatalf("calls = %+v, want one asking for 4", calls)
		}
	})
}

// TestMaxZeroMeansColdStartsOnly proves that with max 0 a saturated or
// idle pool is never scaled, while a cold start still calls.
func TestMaxZeroMeansColdStartsOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := rec("app.example.com")
		r.Max = 0
		h := newHarness(t, []Record{r})
		h.pool.steady("app.example.com", pool(3, 30))
		expectNoCall(t, h, 10*time.Minute)
		h.pool.steady("app.example.com", PoolStats{})
		if _, err := h.c.ColdStart(context.Background(), testOrg, "app.example.com", ""); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		expectCall(t, h, 1, 10*time.Minute, ReasonColdStart, 0, 1)
	})
}

// TestStandbyDrainingUnhealthyAreNotCapacity proves that only the figures
// the router counts as capacity (routable primary-tier instances) make
// utilization and "current": extra routable clients (standby, which the
// router excludes from Instances and Capacity) do not mask saturation
// and are not counted in current.
func TestStandbyDrainingUnhealthyAreNotCapacity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, []Record{rec("app.example.com")})
		// Two primaries saturated; three standby clients also routable.
		h.pool.steady("app.example.com", PoolStats{Instances: 2, Capacity: 20, Inflight: 20, Routable: 5})
		advance(16*time.Second + 500*time.Millisecond)
		expectCall(t, h, 1, 16*time.Second, ReasonScaleOut, 2, 3)
	})
}

// TestNoMaxConcurrentNoScaleOutButColdStartWorks proves that a pool with
// no measurable capacity is never scaled out, while an empty one is still
// cold started.
func TestNoMaxConcurrentNoScaleOutButColdStartWorks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, []Record{rec("app.example.com")})
		h.pool.steady("app.example.com", PoolStats{Instances: 3, Capacity: 0, Inflight: 50, Routable: 3})
		expectNoCall(t, h, 10*time.Minute)
		h.pool.steady("app.example.com", PoolStats{})
		if _, err := h.c.ColdStart(context.Background(), testOrg, "app.example.com", ""); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		expectCall(t, h, 1, 10*time.Minute, ReasonColdStart, 0, 1)
	})
}

// TestDecisionRecordsReasonAndSamples proves that a decision's reason and
// the utilization samples that caused it reach the audit log and the
// event.
func TestDecisionRecordsReasonAndSamples(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, []Record{rec("app.example.com")})
		cycle := []float64{0.8, 0.9, 1}
		h.pool.set("app.example.com", utilization(2, func(s int) float64 { return cycle[s%3] }))
		advance(16*time.Second + 500*time.Millisecond)
		expectCall(t, h, 1, 16*time.Second, ReasonScaleOut, 2, 3)

		var want []float64
		for s := 1; s <= 16; s++ {
			want = append(want, cycle[s%3])
		}
		evs := h.events.all()
		if len(evs) != 1 || evs[0].Type != EventRequested || evs[0].Reason != string(ReasonScaleOut) {
			t.Fatalf("events = %+v, want one scaling_requested for scale_out", evs)
		}
		if diff := cmp.Diff(want, evs[0].Utilization); diff != "" {
			t.Errorf("event utilization (-want +got):\n%s", diff)
		}
		es := h.store.auditEntries()
		if len(es) != 1 || es[0].Event != EventRequested || es[0].Hostname != "app.example.com" || es[0].OrgID != testOrg {
			t.Fatalf("audit = %+v, want one scaling_requested entry", es)
		}
		var got auditDetail
		if err := json.Unmarshal([]byte(es[0].Detail), &got); err != nil {
			t.Fatalf("audit detail %q is not JSON: %v", es[0].Detail, err)
		}
		lo, hi := 0.8, 1.0
		wantDetail := auditDetail{
			Reason: ReasonScaleOut, Current: 2, Desired: 3, Min: 0, Max: 10, Target: 0.8, Window: "15s",
			Samples: 16, MinUtilization: &lo, MaxUtilization: &hi, Utilization: want,
			Status: 200, IdempotencyKey: evs[0].IdempotencyKey,
		}
		if diff := cmp.Diff(wantDetail, got); diff != "" {
			t.Errorf("audit detail mismatch (-want +got):\n%s", diff)
		}
	})
}

// TestAuditDetailBounded proves that a decision's audit detail stays small
// however long the stretch of samples and however long the call's error.
func TestAuditDetailBounded(t *testing.T) {
	var r run
	start := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 10 * MaxRecordedSamples {
		r.add(start.Add(time.Duration(i)*time.Second), 0.1+float64(i%7)/10)
	}
	o := outcome{
		rec:    rec("app.example.com"),
		d:      decision{reason: ReasonScaleIn, current: 4, desired: 3, key: "k", samples: r.samples()},
		status: 500,
		err:    errors.New(strings.Repeat("é", 1000)),
	}
	detail := o.detail()
	var got auditDetail
	if err := json.Unmarshal([]byte(detail), &got); err != nil {
		t.Fatalf("detail %q is not JSON: %v", detail, err)
	}
	if len(detail) > 2048 {
		t.Errorf("len(detail) = %d, want at most 2048", len(detail))
	}
	if got.Samples != 10*MaxRecordedSamples || len(got.Utilization) != MaxRecordedSamples {
		t.Errorf("detail samples = %d with %d listed, want %d with %d", got.Samples, len(got.Utilization), 10*MaxRecordedSamples, MaxRecordedSamples)
	}
	if !utf8.ValidString(got.Error) || len(got.Error) > maxAuditErrBytes+len("…") {
		t.Errorf("detail error is %d bytes (valid UTF-8: %v), want at most %d", len(got.Error), utf8.ValidString(got.Error), maxAuditErrBytes+len("…"))
	}
}

// stretchView is what a run holds that a decision can see: when it began,
// how many samples, and what it would record.
type stretchView struct {
	Since  time.Time
	N      int
	Min    float64
	Max    float64
	Recent []float64
}

func viewOf(r run) stretchView {
	if r.n == 0 {
		return stretchView{}
	}
	s := r.samples()
	return stretchView{Since: r.since, N: s.n, Min: s.min, Max: s.max, Recent: s.recent}
}

// planView is a samplePlan as the tests compare it.
type planView struct {
	Busy, Idle stretchView
	Call       *callView
	Hold       string
	HoldBusy   bool
}

// callView is a sampledCall as the tests compare it.
type callView struct {
	Reason           Reason
	Current, Desired int
	Samples          stretchView
}

func viewOfPlan(p samplePlan) planView {
	v := planView{Busy: viewOf(p.busy), Idle: viewOf(p.idle), Hold: p.hold, HoldBusy: p.holdBusy}
	if c := p.call; c != nil {
		v.Call = &callView{Reason: c.reason, Current: c.current, Desired: c.desired,
			Samples: stretchView{N: c.samples.n, Min: c.samples.min, Max: c.samples.max, Recent: c.samples.recent}}
	}
	return v
}

// TestPlanSample runs planSample over each way a sample can change a
// bind's stretches and each reason it makes, or withholds, a decision.
func TestPlanSample(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	sec := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }
	// stretch is a run of samples us, one a second from t0.
	stretch := func(us ...float64) run {
		var r run
		for i, u := range us {
			r.add(sec(i), u)
		}
		return r
	}
	repeat := func(u float64, n int) []float64 {
		us := make([]float64, n)
		for i := range us {
			us[i] = u
		}
		return us
	}
	view := func(since time.Time, us ...float64) stretchView {
		return viewOf(func() run {
			var r run
			for i, u := range us {
				r.add(since.Add(time.Duration(i)*time.Second), u)
			}
			return r
		}())
	}
	armed := func(edit func(*Record)) *Record {
		r := rec("app.example.com")
		if edit != nil {
			edit(&r)
		}
		return &r
	}
	busy15 := stretch(repeat(0.9, 15)...) // samples at 0s..14s
	idle60 := stretch(repeat(0.1, 60)...) // samples at 0s..59s
	// scaledOut is busy15 with a sample at 15s that makes a scale-out due.
	scaledOut := planView{
		Busy: view(t0, repeat(0.9, 16)...),
		Call: &callView{Reason: ReasonScaleOut, Current: 2, Desired: 3, Samples: stretchView{N: 16, Min: 0.9, Max: 0.9, Recent: repeat(0.9, 16)}},
	}
	tests := []struct {
		name string
		in   sampleIn
		want planView
	}{
		{
			name: "no record leaves the stretches",
			in:   sampleIn{busy: stretch(0.9), stats: pool(2, 20), now: sec(1)},
			want: planView{Busy: view(t0, 0.9)},
		},
		{
			name: "disarmed record leaves the stretches",
			in:   sampleIn{rec: armed(func(r *Record) { r.Disarmed = true }), idle: stretch(0.1), stats: pool(2, 20), now: sec(1)},
			want: planView{Idle: view(t0, 0.1)},
		},
		{
			name: "max 0 leaves the stretches",
			in:   sampleIn{rec: armed(func(r *Record) { r.Max = 0 }), busy: busy15, stats: pool(2, 20), now: sec(15)},
			want: planView{Busy: view(t0, repeat(0.9, 15)...)},
		},
		{
			name: "no capacity breaks both stretches",
			in:   sampleIn{rec: armed(nil), busy: busy15, idle: stretch(0.1), stats: PoolStats{Instances: 2}, now: sec(15)},
			want: planView{},
		},
		{
			name: "at target extends busy and breaks idle",
			in:   sampleIn{rec: armed(nil), busy: stretch(0.9), idle: stretch(0.1), stats: pool(2, 16), now: sec(1)},
			want: planView{Busy: view(t0, 0.9, 0.8)},
		},
		{
			name: "below half the target extends idle and breaks busy",
			in:   sampleIn{rec: armed(nil), busy: stretch(0.9), idle: stretch(0.1), stats: pool(2, 2), now: sec(1)},
			want: planView{Idle: view(t0, 0.1, 0.1)},
		},
		{
			name: "between half and target breaks both",
			in:   sampleIn{rec: armed(nil), busy: stretch(0.9), idle: stretch(0.1), stats: pool(2, 10), now: sec(1)},
			want: planView{},
		},
		{
			name: "first busy sample starts the stretch",
			in:   sampleIn{rec: armed(nil), stats: pool(2, 20), now: sec(3)},
			want: planView{Busy: view(sec(3), 1)},
		},
		{
			name: "busy short of the window makes no call",
			in:   sampleIn{rec: armed(nil), busy: stretch(repeat(0.9, 14)...), stats: pool(2, 18), now: sec(14)},
			want: planView{Busy: view(t0, append(repeat(0.9, 14), 0.9)...)},
		},
		{
			name: "busy for the whole window scales out by one",
			in:   sampleIn{rec: armed(nil), busy: busy15, stats: pool(2, 18), now: sec(15)},
			want: scaledOut,
		},
		{
			name: "busy for the whole window at max makes no call, held at max",
			in:   sampleIn{rec: armed(func(r *Record) { r.Max = 2 }), busy: busy15, stats: pool(2, 18), now: sec(15)},
			want: planView{Busy: view(t0, repeat(0.9, 16)...), Hold: whyOutAtMax, HoldBusy: true},
		},
		{
			name: "busy for the whole window while a decision is pending makes no call",
			in:   sampleIn{rec: armed(nil), busy: busy15, pending: true, stats: pool(2, 18), now: sec(15)},
			want: planView{Busy: view(t0, repeat(0.9, 16)...)},
		},
		{
			name: "busy for the whole window inside the cooldown makes no call, held by the cooldown",
			in:   sampleIn{rec: armed(nil), busy: busy15, nextAllowed: sec(16), stats: pool(2, 18), now: sec(15)},
			want: planView{Busy: view(t0, repeat(0.9, 16)...), Hold: whyOutCooldown, HoldBusy: true},
		},
		{
			name: "busy for the whole window inside the backoff is held by the backoff",
			in: sampleIn{rec: armed(func(r *Record) { r.ConsecutiveFailures = 2 }), busy: busy15, nextAllowed: sec(16),
				stats: pool(2, 18), now: sec(15)},
			want: planView{Busy: view(t0, repeat(0.9, 16)...), Hold: whyOutBackoff, HoldBusy: true},
		},
		{
			name: "idle for four windows inside the cooldown is held by the cooldown",
			in:   sampleIn{rec: armed(nil), idle: idle60, nextAllowed: sec(61), stats: pool(3, 3), now: sec(60)},
			want: planView{Idle: view(t0, repeat(0.1, 61)...), Hold: whyInCooldown},
		},
		{
			name: "busy short of the window inside the cooldown holds nothing",
			in:   sampleIn{rec: armed(nil), busy: stretch(0.9), nextAllowed: sec(16), stats: pool(2, 18), now: sec(1)},
			want: planView{Busy: view(t0, 0.9, 0.9)},
		},
		{
			name: "busy for the whole window as the cooldown ends scales out",
			in:   sampleIn{rec: armed(nil), busy: busy15, nextAllowed: sec(15), stats: pool(2, 18), now: sec(15)},
			want: scaledOut,
		},
		{
			name: "idle for four windows scales in by one",
			in:   sampleIn{rec: armed(nil), idle: idle60, stats: pool(3, 3), now: sec(60)},
			want: planView{
				Idle: view(t0, repeat(0.1, 61)...),
				Call: &callView{Reason: ReasonScaleIn, Current: 3, Desired: 2, Samples: stretchView{N: 61, Min: 0.1, Max: 0.1, Recent: repeat(0.1, 61)}},
			},
		},
		{
			name: "idle short of four windows makes no call",
			in:   sampleIn{rec: armed(nil), idle: stretch(repeat(0.1, 59)...), stats: pool(3, 3), now: sec(59)},
			want: planView{Idle: view(t0, repeat(0.1, 60)...)},
		},
		{
			name: "idle for four windows at min makes no call",
			in:   sampleIn{rec: armed(func(r *Record) { r.Min = 3 }), idle: idle60, stats: pool(3, 3), now: sec(60)},
			want: planView{Idle: view(t0, repeat(0.1, 61)...)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := viewOfPlan(planSample(tt.in))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("planSample(%s) = got, want want; diff (-want +got):\n%s", tt.name, diff)
			}
		})
	}
}
