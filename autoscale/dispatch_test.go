package autoscale

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// recAt is rec(host) whose hook is on provider host provider.
func recAt(host, provider string) Record {
	r := rec(host)
	r.URL = "https://" + provider + "/scale/" + host
	return r
}

// specCap is docs/autoscaling.md's "At most 8 calls are in flight".
const specCap = 8

// TestGlobalCapEightInFlight proves that 50 simultaneous decisions (50
// pools saturated at the same sample) never have more than eight calls in
// flight, and that none is dropped.
func TestGlobalCapEightInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var recs []Record
		for i := range 50 {
			recs = append(recs, rec(hostN("cap", i)))
		}
		h := newHarness(t, recs, longCalls)
		h.caller.hold = make(chan struct{})
		for i := range 50 {
			h.pool.steady(hostN("cap", i), pool(2, 20))
		}
		advance(16*time.Second + 500*time.Millisecond)
		if m := h.c.Metrics(); m.InFlight != specCap || m.Queued != 50-specCap {
			t.Fatalf("Metrics = %+v, want %d in flight and %d queued", m, specCap, 50-specCap)
		}
		// Let calls finish one by one; each frees one slot.
		for range 50 {
			h.caller.hold <- struct{}{}
			advance(time.Millisecond)
		}
		if n := len(h.caller.made()); n != 50 {
			t.Errorf("%d calls, want 50", n)
		}
		if p := h.caller.peakInFlight(); p != specCap {
			t.Errorf("peak in flight = %d, want exactly %d", p, specCap)
		}
		if m := h.c.Metrics(); m.Dropped != 0 || m.QueueRejected != 0 {
			t.Errorf("Metrics = %+v, want nothing dropped or refused", m)
		}
	})
}

// TestGlobalCapUnderConcurrentColdStarts proves the cap with 50 cold
// starts requested from 50 goroutines at once.
func TestGlobalCapUnderConcurrentColdStarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var recs []Record
		for i := range 50 {
			recs = append(recs, rec(hostN("cold", i)))
		}
		h := newHarness(t, recs, longCalls)
		h.caller.hold = make(chan struct{})
		var wg sync.WaitGroup
		for i := range 50 {
			wg.Go(func() {
				if _, err := h.c.ColdStart(context.Background(), testOrg, hostN("cold", i), ""); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		advance(time.Second)
		if p := h.caller.peakInFlight(); p != specCap {
			t.Errorf("peak in flight = %d, want %d", p, specCap)
		}
		close(h.caller.hold)
		advance(time.Second)
		if n := len(h.caller.made()); n != 50 {
			t.Errorf("%d calls, want 50", n)
		}
		if p := h.caller.peakInFlight(); p != specCap {
			t.Errorf("peak in flight = %d, want exactly %d", p, specCap)
		}
	})
}

// TestQueueIsFIFO proves that queued decisions start oldest first.
func TestQueueIsFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 20
		var recs []Record
		for i := range n {
			recs = append(recs, rec(hostN("fifo", i)))
		}
		h := newHarness(t, recs, longCalls)
		h.caller.hold = make(chan struct{})
		for i := range n {
			if _, err := h.c.ColdStart(context.Background(), testOrg, hostN("fifo", i), ""); err != nil {
				t.Fatal(err)
			}
		}
		advance(time.Millisecond)
		first := map[string]bool{}
		for _, c := range h.caller.made() {
			first[c.Body.Hostname] = true
		}
		for i := range MaxInFlight {
			if !first[hostN("fifo", i)] {
				t.Errorf("first %d calls %v lack the %dth oldest decision", MaxInFlight, first, i)
			}
		}
		for i := MaxInFlight; i < n; i++ {
			h.caller.hold <- struct{}{}
			advance(time.Millisecond)
			calls := h.caller.made()
			if got, want := calls[len(calls)-1].Body.Hostname, hostN("fifo", i); len(calls) != i+1 || got != want {
				t.Fatalf("call %d went to %s, want %s (oldest first)", len(calls), got, want)
			}
		}
		close(h.caller.hold)
	})
}

// TestQueueBoundRefusesLoudly proves that the queue is bounded and that a
// decision beyond the bound is refused with ErrQueueFull and counted, not
// dropped silently.
func TestQueueBoundRefusesLoudly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		recs := []Record{rec("q-1.example.com"), rec("q-2.example.com"), rec("q-3.example.com")}
		h := newHarness(t, recs, longCalls, withConfig(func(c *Config) { c.MaxQueued = 2 }))
		fillSlots(t, h)
		ctx := context.Background()
		for _, host := range []string{"q-1.example.com", "q-2.example.com"} {
			if _, err := h.c.ColdStart(ctx, testOrg, host, ""); err != nil {
				t.Fatalf("ColdStart(%s) error %v, want queued", host, err)
			}
		}
		if _, err := h.c.ColdStart(ctx, testOrg, "q-3.example.com", ""); !errors.Is(err, ErrQueueFull) {
			t.Errorf("ColdStart beyond the bound error = %v, want ErrQueueFull", err)
		}
		if m := h.c.Metrics(); m.QueueRejected != 1 || m.Queued != 2 {
			t.Errorf("Metrics = %+v, want 1 refused, 2 queued", m)
		}
		close(h.caller.hold)
		advance(time.Millisecond)
		if n := len(h.caller.made()); n != MaxInFlight+2 {
			t.Errorf("%d calls, want %d: every queued decision made", n, MaxInFlight+2)
		}
	})
}

// TestPenaltyGrowsOn429 proves the per-host 429 penalty's growth: 1s
// doubling with each consecutive 429, at most 5 minutes per penalty.
func TestPenaltyGrowsOn429(t *testing.T) {
	want := map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 9: 256 * time.Second, 10: 5 * time.Minute, 50: 5 * time.Minute}
	for strikes, w := range want {
		if got := penalty(strikes); got != w {
			t.Errorf("penalty(%d) = %v, want %v", strikes, got, w)
		}
	}
}

// TestPenaltyDefersHostAndClearsOnOtherAnswer proves that a 429 from a
// provider host defers every bind's next call to that host by the
// penalty, that consecutive 429s grow it, that other hosts are not
// affected, and that a later non-429 answer clears it (the next 429
// starts again at 1s).
func TestPenaltyDefersHostAndClearsOnOtherAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var recs []Record
		for i := range 5 {
			recs = append(recs, recAt(hostN("p", i), "busy.provider"))
		}
		recs = append(recs, recAt("other.example.com", "calm.provider"))
		h := newHarness(t, recs)
		h.caller.answer = func(_ int, c HookCall) (int, time.Duration, error) {
			switch c.Body.Hostname {
			case hostN("p", 0), hostN("p", 1), hostN("p", 3):
				return 429, 0, nil
			}
			return 200, 0, nil
		}
		ctx := context.Background()
		cold := func(host string) {
			t.Helper()
			if _, err := h.c.ColdStart(ctx, testOrg, host, ""); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
		}
		cold(hostN("p", 0)) // 429 at 0: penalty 1s
		cold(hostN("p", 1))
		cold("other.example.com") // another host: not deferred
		advance(500 * time.Millisecond)
		cold(hostN("p", 2))
		// p-1 at 1s (429 again: penalty 2s), p-2 at 3s (200: cleared).
		advance(5 * time.Second)
		cold(hostN("p", 3)) // at 5.5s, called at once: 429, penalty 1s again
		cold(hostN("p", 4)) // so called at 6.5s
		advance(5 * time.Second)
		got := map[string]time.Duration{}
		for _, c := range h.caller.made() {
			got[c.Body.Hostname] = h.at(c)
		}
		want := map[string]time.Duration{
			hostN("p", 0): 0, "other.example.com": 100 * time.Microsecond,
			hostN("p", 1): time.Second, hostN("p", 2): 3 * time.Second,
			hostN("p", 3): 5500 * time.Millisecond, hostN("p", 4): 6500 * time.Millisecond,
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("call times (-want +got):\n%s", diff)
		}
	})
}

// TestRetryAfterDefersHost proves that a Retry-After defers the provider
// host's next call by that much, trusted up to ten minutes.
func TestRetryAfterDefersHost(t *testing.T) {
	tests := []struct {
		retryAfter, want time.Duration
	}{
		{30 * time.Second, 30 * time.Second},
		{time.Hour, MaxRetryAfter},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.retryAfter), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, []Record{recAt("a.example.com", "ra.provider"), recAt("b.example.com", "ra.provider")})
				h.caller.answer = func(n int, c HookCall) (int, time.Duration, error) {
					if n == 0 {
						return 503, tt.retryAfter, nil
					}
					return 200, 0, nil
				}
				if _, err := h.c.ColdStart(context.Background(), testOrg, "a.example.com", ""); err != nil {
					t.Fatal(err)
				}
				synctest.Wait()
				if _, err := h.c.ColdStart(context.Background(), testOrg, "b.example.com", ""); err != nil {
					t.Fatal(err)
				}
				advance(tt.want - time.Millisecond)
				if n := len(h.caller.made()); n != 1 {
					t.Fatalf("%d calls before the Retry-After passed, want 1", n)
				}
				advance(time.Millisecond)
				calls := h.caller.made()
				if len(calls) != 2 || h.at(calls[1]) != tt.want {
					t.Errorf("calls at %v, want the second at %v", h.callTimes(), tt.want)
				}
			})
		})
	}
}

// TestDeferredCallsHoldNoSlot proves that decisions deferred by a host's
// Retry-After hold no call slot: eight of them waiting do not stop a call
// to another host.
func TestDeferredCallsHoldNoSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var recs []Record
		for i := range MaxInFlight + 1 {
			recs = append(recs, recAt(hostN("slow", i), "slow.provider"))
		}
		recs = append(recs, recAt("fast.example.com", "fast.provider"))
		h := newHarness(t, recs)
		h.caller.answer = func(n int, c HookCall) (int, time.Duration, error) {
			if n == 0 {
				return 503, 5 * time.Minute, nil
			}
			return 200, 0, nil
		}
		ctx := context.Background()
		for i := range MaxInFlight + 1 {
			if _, err := h.c.ColdStart(ctx, testOrg, hostN("slow", i), ""); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
		}
		if m := h.c.Metrics(); m.InFlight != 0 || m.Queued != MaxInFlight {
			t.Fatalf("Metrics = %+v, want nothing in flight and %d deferred", m, MaxInFlight)
		}
		if _, err := h.c.ColdStart(ctx, testOrg, "fast.example.com", ""); err != nil {
			t.Fatal(err)
		}
		advance(time.Millisecond)
		calls := h.caller.made()
		if last := calls[len(calls)-1]; len(calls) != 2 || last.Body.Hostname != "fast.example.com" {
			t.Errorf("calls %v, want the fast host called at once", h.callTimes())
		}
		advance(5 * time.Minute)
		if n := len(h.caller.made()); n != MaxInFlight+2 {
			t.Errorf("%d calls after the Retry-After, want %d: none dropped", n, MaxInFlight+2)
		}
	})
}

// TestTokenBucket proves the start budget: it starts with one token,
// refills capacity/60 tokens a second up to its capacity, and its capacity
// is at least one.
func TestTokenBucket(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	t.Run("starts with one token", func(t *testing.T) {
		b := newBucket(60, t0)
		if !b.take(t0) || b.take(t0) {
			t.Error("a fresh bucket of 60 gave other than exactly one token")
		}
	})
	t.Run("refills capacity/60 a second", func(t *testing.T) {
		b := newBucket(60, t0)
		b.take(t0)
		if w := b.wait(t0); w != time.Second {
			t.Errorf("wait = %v, want 1s", w)
		}
		if b.take(t0.Add(999 * time.Millisecond)) {
			t.Error("token before 1s")
		}
		if !b.take(t0.Add(time.Second)) {
			t.Error("no token at 1s")
		}
		fast := newBucket(6000, t0)
		fast.take(t0)
		if w := fast.wait(t0); w != 10*time.Millisecond {
			t.Errorf("wait(6000/min) = %v, want 10ms", w)
		}
	})
	t.Run("capped at capacity", func(t *testing.T) {
		b := newBucket(60, t0)
		later := t0.Add(time.Hour)
		for i := range 60 {
			if !b.take(later) {
				t.Fatalf("token %d of 60 missing after an idle hour", i+1)
			}
		}
		if b.take(later) {
			t.Error("61st token: the bucket holds more than its capacity")
		}
	})
	t.Run("capacity at least one", func(t *testing.T) {
		b := newBucket(0, t0)
		b.take(t0)
		if w := b.wait(t0); w != time.Minute {
			t.Errorf("wait(capacity 0) = %v, want 1m (capacity 1)", w)
		}
	})
}

// TestTokenBucketPacesCallStarts proves that the default budget (60 a
// minute, one token to start) spaces call starts a second apart, checked
// right before each start.
func TestTokenBucketPacesCallStarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		recs := []Record{recAt("a.example.com", "a.provider"), recAt("b.example.com", "b.provider"), recAt("c.example.com", "c.provider")}
		h := newHarness(t, recs, withConfig(func(c *Config) { c.MaxCallsPerMinute = 0 }))
		for _, r := range recs {
			if _, err := h.c.ColdStart(context.Background(), testOrg, r.Hostname, ""); err != nil {
				t.Fatal(err)
			}
		}
		advance(5 * time.Second)
		want := []time.Duration{0, time.Second, 2 * time.Second}
		if diff := cmp.Diff(want, h.callTimes()); diff != "" {
			t.Errorf("call times (-want +got):\n%s", diff)
		}
	})
}

// TestPlanRequeue runs planRequeue over each reason a queued decision is
// dropped, kept, or brought up to date before it takes a slot.
func TestPlanRequeue(t *testing.T) {
	armed := func(edit func(*Record)) *Record {
		r := rec("app.example.com")
		if edit != nil {
			edit(&r)
		}
		return &r
	}
	out := decision{reason: ReasonScaleOut, current: 2, desired: 3}
	in := decision{reason: ReasonScaleIn, current: 3, desired: 2}
	cold := decision{reason: ReasonColdStart, current: 0, desired: 1}
	tests := []struct {
		name string
		d    decision
		rec  *Record
		st   PoolStats
		want requeuePlan
	}{
		{"deleted record drops", out, nil, pool(2, 18), requeuePlan{drop: true, err: ErrNoRecord, why: "record deleted"}},
		{"disarmed record drops", cold, armed(func(r *Record) { r.Disarmed = true }), PoolStats{},
			requeuePlan{drop: true, err: ErrDisarmed, why: "record disarmed"}},
		{"scale-out on an unchanged pool is kept", out, armed(nil), pool(2, 18), requeuePlan{current: 2, desired: 3}},
		{"scale-in on an unchanged pool is kept", in, armed(nil), pool(3, 3), requeuePlan{current: 3, desired: 2}},
		{"scale-out on a pool that grew drops", out, armed(nil), pool(3, 27), requeuePlan{drop: true, why: "pool changed while queued"}},
		{"scale-in on a pool that shrank drops", in, armed(nil), pool(2, 2), requeuePlan{drop: true, why: "pool changed while queued"}},
		{"scale-out on an unmeasurable pool drops", out, armed(nil), PoolStats{Instances: 2, Routable: 2},
			requeuePlan{drop: true, why: "pool changed while queued"}},
		{"scale-out past a lowered max drops", out, armed(func(r *Record) { r.Max = 2 }), pool(2, 18),
			requeuePlan{drop: true, why: "nothing to ask within min and max"}},
		{"scale-in at a raised min drops", in, armed(func(r *Record) { r.Min = 3 }), pool(3, 3),
			requeuePlan{drop: true, why: "nothing to ask within min and max"}},
		{"scale-in above a lowered max asks for max", in, armed(func(r *Record) { r.Max = 1 }), pool(3, 3),
			requeuePlan{current: 3, desired: 1}},
		{"cold start on an empty pool is kept", cold, armed(nil), PoolStats{}, requeuePlan{current: 0, desired: 1}},
		{"cold start after min was raised asks for min", cold, armed(func(r *Record) { r.Min = 2 }), PoolStats{},
			requeuePlan{current: 0, desired: 2}},
		{"cold start on a pool with unroutable instances counts them", cold, armed(nil), PoolStats{Instances: 1},
			requeuePlan{current: 1, desired: 1}},
		{"cold start on a routable pool drops as a success", cold, armed(nil), pool(1, 0),
			requeuePlan{drop: true, why: "pool became routable"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := planRequeue(tt.d, tt.rec, tt.st)
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(requeuePlan{}), cmpopts.EquateErrors()); diff != "" {
				t.Errorf("planRequeue(%s) = got, want want; diff (-want +got):\n%s", tt.name, diff)
			}
		})
	}
}
