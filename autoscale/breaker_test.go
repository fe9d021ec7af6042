package autoscale

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestCooldownBetweenCalls proves that after an accepted call the bind
// waits cooldown before the next, even while the pool stays saturated,
// and is called again as soon as the cooldown ends.
func TestCooldownBetweenCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, []Record{rec("app.example.com")})
		h.pool.steady("app.example.com", pool(2, 20))
		advance(3*time.Minute + 500*time.Millisecond)
		want := []time.Duration{16 * time.Second, 76 * time.Second, 136 * time.Second}
		if diff := cmp.Diff(want, h.callTimes()); diff != "" {
			t.Errorf("call times (-want +got):\n%s", diff)
		}
	})
}

// TestFailedCallBacksOffDoubling proves that the nth consecutive failure
// waits cooldown × 2^n before the next call.
func TestFailedCallBacksOffDoubling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := rec("app.example.com")
		r.Cooldown = 20 * time.Second
		h := newHarness(t, []Record{r})
		h.caller.answerAll(500)
		h.pool.steady("app.example.com", pool(2, 20))
		advance(10 * time.Minute)
		// First call at 16s; then waits of 40s, 80s, 160s, 320s.
		want := []time.Duration{16 * time.Second, 56 * time.Second, 136 * time.Second, 296 * time.Second, 616 * time.Second}
		if diff := cmp.Diff(want[:4], h.callTimes()); diff != "" {
			t.Errorf("call times (-want +got):\n%s", diff)
		}
		advance(30 * time.Second)
		if diff := cmp.Diff(want, h.callTimes()); diff != "" {
			t.Errorf("call times (-want +got):\n%s", diff)
		}
	})
}

// TestBackoffCappedAtFifteenMinutes proves the backoff's cap, in the
// controller and in the formula.
func TestBackoffCappedAtFifteenMinutes(t *testing.T) {
	tests := []struct {
		cooldown time.Duration
		failures int
		want     time.Duration
	}{
		{time.Minute, 0, time.Minute},
		{time.Minute, 1, 2 * time.Minute},
		{time.Minute, 3, 8 * time.Minute},
		{time.Minute, 4, 15 * time.Minute},
		{time.Minute, 40, 15 * time.Minute},
		{20 * time.Minute, 0, 20 * time.Minute},
		{20 * time.Minute, 1, 20 * time.Minute}, // never shorter than the cooldown
	}
	for _, tt := range tests {
		if got := backoff(tt.cooldown, tt.failures); got != tt.want {
			t.Errorf("backoff(%v, %d) = %v, want %v", tt.cooldown, tt.failures, got, tt.want)
		}
	}
	synctest.Test(t, func(t *testing.T) {
		r := rec("app.example.com")
		r.Cooldown = 5 * time.Minute
		h := newHarness(t, []Record{r})
		h.caller.answerAll(502)
		h.pool.steady("app.example.com", pool(2, 20))
		advance(50 * time.Minute)
		ts := h.callTimes()
		var gaps []time.Duration
		for i := 1; i < len(ts); i++ {
			gaps = append(gaps, ts[i]-ts[i-1])
		}
		want := []time.Duration{10 * time.Minute, 15 * time.Minute, 15 * time.Minute}
		if diff := cmp.Diff(want, gaps); diff != "" {
			t.Errorf("gaps between failed calls (-want +got):\n%s", diff)
		}
	})
}

// TestFiveConsecutiveFailuresDisarm proves the breaker: the fifth failure
// in a row disarms the record in the store, writes scaling_disarmed to the
// audit log, emits it, and no call follows; a cold start is refused.
func TestFiveConsecutiveFailuresDisarm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, []Record{rec("app.example.com")})
		h.caller.answerAll(500)
		h.pool.steady("app.example.com", pool(2, 20))
		advance(2 * time.Hour)
		if n := len(h.caller.made()); n != MaxFailures {
			t.Fatalf("%d calls, want %d", n, MaxFailures)
		}
		r, _ := h.store.get("app.example.com")
		if !r.Disarmed || r.ConsecutiveFailures != MaxFailures || r.LastStatus != 500 || r.LastReason != "scale_out" {
			t.Errorf("stored record %+v, want disarmed after %d failures, last 500 scale_out", r, MaxFailures)
		}
		wantAudit := []string{EventFailed, EventFailed, EventFailed, EventFailed, EventFailed, EventDisarmed}
		if diff := cmp.Diff(wantAudit, h.store.auditEvents()); diff != "" {
			t.Errorf("audit events (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(wantAudit, h.events.types()); diff != "" {
			t.Errorf("emitted events (-want +got):\n%s", diff)
		}
		if _, err := h.c.ColdStart(context.Background(), testOrg, "app.example.com", ""); !errors.Is(err, ErrDisarmed) {
			t.Errorf("ColdStart error = %v, want ErrDisarmed", err)
		}
		if m := h.c.Metrics(); m.Disarms != 1 || m.Failures != MaxFailures {
			t.Errorf("Metrics = %+v, want 1 disarm, %d failures", m, MaxFailures)
		}
	})
}

// TestSuccessResetsFailureCount proves that failures must be consecutive.
func TestSuccessResetsFailureCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, []Record{rec("app.example.com")})
		h.caller.answer = func(n int, _ HookCall) (int, time.Duration, error) {
			if n == 3 {
				return 202, 0, nil
			}
			return 500, 0, nil
		}
		h.pool.steady("app.example.com", pool(2, 20))
		advance(2 * time.Hour)
		if n := len(h.caller.made()); n != 4+MaxFailures {
			t.Errorf("%d calls, want %d (three failures, a success, then %d failures)", n, 4+MaxFailures, MaxFailures)
		}
	})
}

// TestCallerErrorsAndTimeoutsAreFailures proves that a call with no
// answer (a fence refusal, a transport error, or no answer within the
// call timeout) fails like a non-2xx one, with status 0.
func TestCallerErrorsAndTimeoutsAreFailures(t *testing.T) {
	errRefused := errors.New("fence: refused: private address")
	tests := []struct {
		name string
		hold bool
		err  error
		want error
	}{
		{"fence refusal", false, errRefused, errRefused},
		{"timeout", true, nil, context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, []Record{rec("app.example.com")})
				if tt.hold {
					h.caller.hold = make(chan struct{})
				} else {
					h.caller.answer = func(int, HookCall) (int, time.Duration, error) { return 0, 0, tt.err }
				}
				s, err := h.c.ColdStart(context.Background(), testOrg, "app.example.com", "")
				if err != nil {
					t.Fatal(err)
				}
				advance(DefaultCallTimeout)
				var ce *CallError
				if !errors.As(s.Err(), &ce) || ce.Status != 0 || !errors.Is(s.Err(), tt.want) {
					t.Errorf("Err() = %v, want a CallError wrapping %v", s.Err(), tt.want)
				}
				if got := h.store.auditEvents(); !slices.Equal(got, []string{EventFailed}) {
					t.Errorf("audit = %v, want [scaling_failed]", got)
				}
				if r, _ := h.store.get("app.example.com"); r.ConsecutiveFailures != 1 || r.LastStatus != 0 {
					t.Errorf("record ConsecutiveFailures=%d LastStatus=%d, want 1 0", r.ConsecutiveFailures, r.LastStatus)
				}
			})
		})
	}
}

// TestEveryCallAudited proves that each call is audited and emitted:
// scaling_requested on success, scaling_failed otherwise, with reason,
// current, desired and status.
func TestEveryCallAudited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, []Record{rec("ok.example.com"), rec("bad.example.com")})
		h.caller.answer = func(_ int, c HookCall) (int, time.Duration, error) {
			if c.Body.Hostname == "bad.example.com" {
				return 404, 0, nil
			}
			return 204, 0, nil
		}
		for _, host := range []string{"ok.example.com", "bad.example.com"} {
			if _, err := h.c.ColdStart(context.Background(), testOrg, host, ""); err != nil {
				t.Fatal(err)
			}
			advance(time.Millisecond) // past the start budget's next token
		}
		es := h.store.auditEntries()
		if len(es) != 2 {
			t.Fatalf("audit = %+v, want 2 entries", es)
		}
		for i, want := range []struct{ event, host, status string }{
			{EventRequested, "ok.example.com", `"status":204`},
			{EventFailed, "bad.example.com", `"status":404`},
		} {
			e := es[i]
			if e.Event != want.event || e.Hostname != want.host || e.Actor != auditActor ||
				!strings.Contains(e.Detail, `{"reason":"cold_start","current":0,"desired":1,`) || !strings.Contains(e.Detail, want.status) {
				t.Errorf("audit[%d] = %+v, want %s for %s with %s", i, e, want.event, want.host, want.status)
			}
			if strings.Contains(e.Detail, "s3cret") {
				t.Errorf("audit[%d] leaks the secret: %q", i, e.Detail)
			}
		}
		if diff := cmp.Diff([]string{EventRequested, EventFailed}, h.events.types()); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
	})
}

// TestIdempotencyKeyStablePerDecision proves that a retry of a failed
// decision reuses its Idempotency-Key, and a new decision (after a
// success, or with other figures) gets a new one.
func TestIdempotencyKeyStablePerDecision(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, []Record{rec("app.example.com")})
		h.caller.answer = func(n int, _ HookCall) (int, time.Duration, error) {
			if n < 2 {
				return 503, 0, nil
			}
			return 200, 0, nil
		}
		h.pool.steady("app.example.com", pool(2, 20))
		advance(16*time.Second + 2*time.Minute + 4*time.Minute + time.Minute + 500*time.Millisecond)
		// 16s fails; 2m16s retries and fails; 6m16s retries and succeeds;
		// 7m16s is a new decision, same figures.
		calls := h.caller.made()
		if len(calls) != 4 {
			t.Fatalf("call times %v, want 4 calls", h.callTimes())
		}
		k := func(i int) string { return calls[i].IdempotencyKey }
		if k(0) == "" || k(0) != k(1) || k(1) != k(2) {
			t.Errorf("retries of one decision used keys %q %q %q, want one key", k(0), k(1), k(2))
		}
		if k(3) == k(2) {
			t.Errorf("a new decision after a success reused key %q", k(3))
		}
		// Other figures are another decision.
		h.caller.answerAll(500)
		h.pool.steady("app.example.com", pool(3, 30))
		advance(2 * time.Minute)
		h.pool.steady("app.example.com", pool(4, 40))
		advance(3 * time.Minute)
		calls = h.caller.made()
		if len(calls) != 6 || calls[4].Body.Current != 3 || calls[5].Body.Current != 4 || calls[4].IdempotencyKey == calls[5].IdempotencyKey {
			t.Errorf("calls %v: want a failed 3→4 then a 4→5 with another key", calls[4:])
		}
	})
}

// TestPlanOutcome runs planOutcome over each kind of answer, on a record
// that is there, failing, disarmed, or gone.
func TestPlanOutcome(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	errDial := errors.New("dial refused")
	key := bindKey{testOrg, "app.example.com", ""}
	d := decision{reason: ReasonScaleOut, current: 2, desired: 3, key: "k1"}
	body := HookBody{Reason: ReasonScaleOut, Hostname: key.host, OrgID: key.org, Current: 2, Desired: 3, Min: 1, Max: 10}
	armed := func(edit func(*Record)) *Record {
		r := rec(key.host)
		r.ID, r.Min, r.ArmedBy = "scl_1", 1, []string{"tok_a"}
		if edit != nil {
			edit(&r)
		}
		return &r
	}
	// after is the record armed(edit) once a call with status has
	// ended at now.
	after := func(status int, edit func(*Record)) Record {
		r := *armed(edit)
		at := now
		r.LastCallAt, r.LastReason, r.LastStatus = &at, string(ReasonScaleOut), status
		return r
	}
	in := func(edit func(*outcomeIn)) outcomeIn {
		o := outcomeIn{
			rec: armed(nil), key: key, recordID: "scl_1", body: body, d: d,
			cooldown: time.Minute, status: 202, now: now,
		}
		edit(&o)
		return o
	}
	failed := func(rec Record, status int, err error, disarmed, persist bool) outcome {
		return outcome{at: now, rec: rec, d: d, status: status, err: &CallError{Status: status, Err: err}, disarmed: disarmed, persist: persist}
	}
	// failedOnce is the plan of a first failure, answered status with
	// err, on the armed record.
	failedOnce := func(status int, err error) outcomePlan {
		return outcomePlan{
			outcome:     failed(after(status, func(r *Record) { r.ConsecutiveFailures = 1 }), status, err, false, true),
			nextAllowed: now.Add(2 * time.Minute),
			retry:       &d,
		}
	}
	tests := []struct {
		name string
		in   outcomeIn
		want outcomePlan
	}{
		{
			name: "accepted call clears the failures and waits the cooldown",
			in:   in(func(o *outcomeIn) { o.rec = armed(func(r *Record) { r.ConsecutiveFailures = 3 }) }),
			want: outcomePlan{
				outcome:     outcome{at: now, rec: after(202, nil), d: d, status: 202, persist: true},
				ok:          true,
				nextAllowed: now.Add(time.Minute),
			},
		},
		{
			name: "error answer counts a failure and backs off",
			in:   in(func(o *outcomeIn) { o.status = 500 }),
			want: failedOnce(500, nil),
		},
		{
			name: "redirect is a failure",
			in:   in(func(o *outcomeIn) { o.status = 302 }),
			want: failedOnce(302, nil),
		},
		{
			name: "transport error is a failure without a status",
			in:   in(func(o *outcomeIn) { o.status, o.err = 0, errDial }),
			want: failedOnce(0, errDial),
		},
		{
			name: "fifth failure in a row disarms",
			in: in(func(o *outcomeIn) {
				o.status, o.rec = 503, armed(func(r *Record) { r.ConsecutiveFailures = MaxFailures - 1 })
			}),
			want: outcomePlan{
				outcome: failed(after(503, func(r *Record) { r.ConsecutiveFailures, r.Disarmed = MaxFailures, true }),
					503, nil, true, true),
				nextAllowed: now.Add(backoff(time.Minute, MaxFailures)),
				retry:       &d,
			},
		},
		{
			name: "failure of a disarmed record does not disarm it again",
			in: in(func(o *outcomeIn) {
				o.status, o.rec = 503, armed(func(r *Record) { r.ConsecutiveFailures, r.Disarmed = MaxFailures, true })
			}),
			want: outcomePlan{
				outcome: failed(after(503, func(r *Record) { r.ConsecutiveFailures, r.Disarmed = MaxFailures+1, true }),
					503, nil, false, true),
				nextAllowed: now.Add(MaxBackoff),
				retry:       &d,
			},
		},
		{
			name: "backoff stops at its cap",
			in: in(func(o *outcomeIn) {
				o.status, o.rec = 500, armed(func(r *Record) { r.ConsecutiveFailures = 3 })
				o.cooldown = 5 * time.Minute
			}),
			want: outcomePlan{
				outcome:     failed(after(500, func(r *Record) { r.ConsecutiveFailures = 4 }), 500, nil, false, true),
				nextAllowed: now.Add(MaxBackoff),
				retry:       &d,
			},
		},
		{
			name: "accepted call on a deleted record keeps nothing",
			in:   in(func(o *outcomeIn) { o.rec = nil }),
			want: outcomePlan{
				outcome: outcome{at: now, d: d, status: 202,
					rec: Record{ID: "scl_1", OrgID: key.org, Hostname: key.host, Scaling: Declaration{Min: 1, Max: 10}}},
				ok:          true,
				nextAllowed: now.Add(time.Minute),
			},
		},
		{
			name: "failed call on a record declared again counts one failure on the call's record",
			in: in(func(o *outcomeIn) {
				o.status, o.rec = 500, armed(func(r *Record) { r.ID, r.ConsecutiveFailures = "scl_2", 3 })
			}),
			want: outcomePlan{
				outcome: failed(Record{ID: "scl_1", OrgID: key.org, Hostname: key.host, Scaling: Declaration{Min: 1, Max: 10}, ConsecutiveFailures: 1},
					500, nil, false, false),
				nextAllowed: now.Add(2 * time.Minute),
				retry:       &d,
			},
		},
	}
	opts := cmp.Options{
		cmp.AllowUnexported(outcomePlan{}, outcome{}, decision{}, samples{}),
		// The wrapped error is compared by identity: a sentinel.
		cmp.Comparer(func(a, b *CallError) bool {
			return a == b || a != nil && b != nil && a.Status == b.Status && a.Err == b.Err
		}),
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := planOutcome(tt.in)
			if diff := cmp.Diff(tt.want, got, opts); diff != "" {
				t.Errorf("planOutcome(%s) = got, want want; diff (-want +got):\n%s", tt.name, diff)
			}
		})
	}
}
