package autoscale

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// decisionLog collects what Config.OnDecision is told.
type decisionLog struct {
	mu   sync.Mutex // guards list
	list []apitype.ScalingDecision
}

func (l *decisionLog) add(d apitype.ScalingDecision) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.list = append(l.list, d)
}

// outcomes returns "action/outcome" of each decision told, in order.
func (l *decisionLog) outcomes() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, d := range l.list {
		out = append(out, d.Action+"/"+d.Outcome)
	}
	return out
}

// repeatF returns n copies of u.
func repeatF(u float64, n int) []float64 {
	us := make([]float64, n)
	for i := range us {
		us[i] = u
	}
	return us
}

// TestHistoryScaleOut drives a pool above its target for a window and
// checks that the scale-out is recorded with the samples behind it, its
// outcome and the pool's series, that the cooldown after it is one held
// decision however many samples it holds, and that OnDecision is told of
// each decision once per change.
func TestHistoryScaleOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &decisionLog{}
		h := newHarness(t, []Record{rec("app.example.com")}, withConfig(func(c *Config) { c.OnDecision = log.add }))
		id := h.store.recIDForTest("app.example.com")
		h.pool.steady("app.example.com", pool(2, 18)) // 0.9, above the 0.8 target
		advance(16*time.Second + 500*time.Millisecond)
		expectCall(t, h, 1, 16*time.Second, ReasonScaleOut, 2, 3)

		got := h.c.History(id)
		if len(got.Decisions) != 1 {
			t.Fatalf("History(%s).Decisions = %+v, want the scale-out alone", id, got.Decisions)
		}
		d := got.Decisions[0]
		if d.Action != apitype.ScalingActionScaleOut || d.Reason != whyScaleOut || d.Current != 2 || d.Desired != 3 {
			t.Errorf("decision = %s %q %d→%d, want scale_out %q 2→3", d.Action, d.Reason, d.Current, d.Desired, whyScaleOut)
		}
		if d.Outcome != apitype.ScalingOutcomeAccepted || d.Status != 200 || d.Error != "" {
			t.Errorf("decision outcome = %s %d %q, want accepted 200", d.Outcome, d.Status, d.Error)
		}
		// Samples at 1s..16s: sixteen of them, all 0.9.
		if d.SampleCount != 16 || !slices.Equal(d.Samples, repeatF(0.9, 16)) {
			t.Errorf("decision samples = %d %v, want 16 of 0.9", d.SampleCount, d.Samples)
		}
		if d.RecordID != id || d.OrgID != testOrg || d.Hostname != "app.example.com" || d.Seq == 0 {
			t.Errorf("decision names %s %s %s seq %d, want %s %s app.example.com and a seq", d.RecordID, d.OrgID, d.Hostname, d.Seq, id, testOrg)
		}
		if at := d.At.Sub(h.start); at != 16*time.Second {
			t.Errorf("decision at %v, want 16s", at)
		}
		if len(got.Series) != 16 {
			t.Fatalf("History(%s).Series has %d points, want 16 (one a second)", id, len(got.Series))
		}
		for i, p := range got.Series {
			if p.Instances != 2 || p.Capacity != 20 || p.Inflight != 18 || p.Utilization == nil || *p.Utilization != 0.9 {
				t.Errorf("point %d = %+v, want 2 instances, 18/20, utilization 0.9", i, p)
			}
			if want := h.start.Add(time.Duration(i+1) * time.Second); !p.At.Equal(want) {
				t.Errorf("point %d at %v, want %v (oldest first)", i, p.At.Sub(h.start), want.Sub(h.start))
			}
		}

		// The pool stays saturated through the 60s cooldown: after a
		// window, every sample is held, and all are one decision.
		advance(30 * time.Second)
		got = h.c.History(id)
		if len(got.Decisions) != 2 {
			t.Fatalf("after 30s of cooldown, decisions = %+v, want a held one and the scale-out", got.Decisions)
		}
		held := got.Decisions[0]
		if held.Action != apitype.ScalingActionNone || held.Outcome != apitype.ScalingOutcomeHeld || held.Reason != whyOutCooldown {
			t.Errorf("newest decision = %s/%s %q, want none/held %q", held.Action, held.Outcome, held.Reason, whyOutCooldown)
		}
		// The new stretch starts at 17s and lasts a window at 32s; 33s..46s repeat it.
		if held.Repeats != 14 || held.At.Sub(h.start) != 32*time.Second || held.UpdatedAt.Sub(h.start) != 46*time.Second {
			t.Errorf("held decision: %d repeats, at %v, updated %v; want 14, 32s, 46s", held.Repeats, held.At.Sub(h.start), held.UpdatedAt.Sub(h.start))
		}
		if held.SampleCount != 30 || len(held.Samples) != HistorySamples {
			t.Errorf("held decision samples = %d counted, %d kept; want 30, %d", held.SampleCount, len(held.Samples), HistorySamples)
		}
		if got.Decisions[1].Seq != d.Seq || got.Decisions[0].Seq <= d.Seq {
			t.Errorf("decision seqs = %d, %d; want newest first, the scale-out still %d", got.Decisions[0].Seq, got.Decisions[1].Seq, d.Seq)
		}
		want := []string{"scale_out/pending", "scale_out/accepted", "none/held"}
		if got := log.outcomes(); !slices.Equal(got, want) {
			t.Errorf("OnDecision was told %q, want %q", got, want)
		}
	})
}

// TestHistoryBounded drives 50 decisions and more than HistoryPoints
// samples, and sees only the latest HistoryDecisions and HistoryPoints.
func TestHistoryBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := rec("app.example.com")
		r.Max, r.Window, r.Cooldown = 1000, time.Second, time.Second
		h := newHarness(t, []Record{r})
		id := h.store.recIDForTest("app.example.com")
		h.pool.steady("app.example.com", pool(2, 18))
		// A call every 2s: a window of two samples, then the cooldown.
		advance(200*time.Second + 500*time.Millisecond)
		calls := h.caller.made()
		if len(calls) < 50 {
			t.Fatalf("%d calls, want at least 50", len(calls))
		}
		got := h.c.History(id)
		if len(got.Decisions) != HistoryDecisions {
			t.Fatalf("after %d decisions, History keeps %d, want %d", len(calls), len(got.Decisions), HistoryDecisions)
		}
		for i, d := range got.Decisions {
			if d.Action != apitype.ScalingActionScaleOut || d.Outcome != apitype.ScalingOutcomeAccepted {
				t.Errorf("decision %d = %s/%s, want scale_out/accepted", i, d.Action, d.Outcome)
			}
			if i > 0 && d.Seq != got.Decisions[i-1].Seq-1 {
				t.Errorf("decision %d seq %d after %d, want newest first and consecutive", i, d.Seq, got.Decisions[i-1].Seq)
			}
		}
		if last := calls[len(calls)-1].at; !got.Decisions[0].At.Equal(last) {
			t.Errorf("newest decision at %v, want the last call's %v", got.Decisions[0].At.Sub(h.start), last.Sub(h.start))
		}
		if len(got.Series) != HistoryPoints {
			t.Fatalf("after 200 samples, the series has %d points, want %d", len(got.Series), HistoryPoints)
		}
		if first, last := got.Series[0].At.Sub(h.start), got.Series[HistoryPoints-1].At.Sub(h.start); first != 81*time.Second || last != 200*time.Second {
			t.Errorf("series spans %v..%v, want the latest 81s..200s", first, last)
		}
	})
}

// TestHistoryColdStartAndFailure records a cold start whose call fails,
// with its status and error, and drops the history with its record.
func TestHistoryColdStartAndFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, []Record{rec("app.example.com")})
		id := h.store.recIDForTest("app.example.com")
		h.caller.answerAll(503)
		s, err := h.c.ColdStart(context.Background(), testOrg, "app.example.com", "")
		if err != nil {
			t.Fatalf("ColdStart: %v", err)
		}
		synctest.Wait()
		<-s.Failed()
		got := h.c.History(id)
		if len(got.Decisions) != 1 {
			t.Fatalf("History.Decisions = %+v, want the cold start", got.Decisions)
		}
		d := got.Decisions[0]
		if d.Action != apitype.ScalingActionColdStart || d.Reason != whyColdStart || d.Current != 0 || d.Desired != 1 {
			t.Errorf("decision = %s %q %d→%d, want cold_start %q 0→1", d.Action, d.Reason, d.Current, d.Desired, whyColdStart)
		}
		if d.Outcome != apitype.ScalingOutcomeFailed || d.Status != 503 || d.Error == "" {
			t.Errorf("decision outcome = %s %d %q, want failed 503 with an error", d.Outcome, d.Status, d.Error)
		}
		if d.Samples == nil || len(d.Samples) != 0 || d.SampleCount != 0 {
			t.Errorf("cold start samples = %#v (%d), want empty, not nil", d.Samples, d.SampleCount)
		}

		if err := h.c.Disarm(context.Background(), "", id); err != nil {
			t.Fatalf("Disarm: %v", err)
		}
		if got := h.c.History(id); len(got.Decisions) != 0 || len(got.Series) != 0 || got.Decisions == nil || got.Series == nil {
			t.Errorf("History of a deleted record = %+v, want empty lists", got)
		}
		if got := h.c.History("scl_unknown"); len(got.Decisions) != 0 || got.Series == nil {
			t.Errorf("History(unknown) = %+v, want empty lists", got)
		}
	})
}

// TestOnDecisionNeverBlocks: an OnDecision that never returns fills its
// buffer; the controller goes on deciding and calling, and counts what
// it could not report.
func TestOnDecisionNeverBlocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var told sync.WaitGroup
		told.Add(1)
		var once sync.Once
		block := func(apitype.ScalingDecision) {
			once.Do(told.Done)
			<-release
		}
		r := rec("app.example.com")
		r.Max, r.Window, r.Cooldown = 1000, time.Second, time.Second
		h := newHarness(t, []Record{r}, withConfig(func(c *Config) { c.OnDecision = block }))
		h.pool.steady("app.example.com", pool(2, 18))
		// Two reports a call (pending, accepted), a call every 2s: 400s
		// are 200 calls, 400 reports, beyond DecisionBuffer + the one
		// OnDecision holds.
		advance(400*time.Second + 500*time.Millisecond)
		told.Wait()
		if n := len(h.caller.made()); n < 190 {
			t.Errorf("%d calls while OnDecision blocks, want about 200: the controller must not wait for it", n)
		}
		if m := h.c.Metrics(); m.DecisionsDropped == 0 {
			t.Errorf("Metrics.DecisionsDropped = 0, want the reports beyond the buffer counted")
		}
		close(release)
	})
}

// TestHistorySize pins the memory bound docs/autoscaling.md states: one
// record's history is under 9 KiB, allocated once.
func TestHistorySize(t *testing.T) {
	if got := unsafe.Sizeof(history{}); got > 9<<10 {
		t.Errorf("a record's history takes %d bytes, want at most 9 KiB as documented", got)
	}
}

// TestHistoryHoldAllocates nothing: a held sample of a pool with a
// history updates its latest decision in place.
func TestHistoryHoldAllocates(t *testing.T) {
	c := &Controller{}
	r := rec("app.example.com")
	r.ID = "scl_1"
	b := &bind{key: bindKey{testOrg, "app.example.com", ""}, rec: &r}
	var busy run
	now := time.Now()
	for i := range 40 {
		busy.add(now.Add(time.Duration(i)*time.Second), 0.9)
	}
	c.repeatLocked(b, now, apitype.ScalingActionNone, whyOutCooldown, apitype.ScalingOutcomeHeld, 2, 2, &busy)
	st := pool(2, 18)
	allocs := testing.AllocsPerRun(100, func() {
		c.pointLocked(b, st, now)
		c.repeatLocked(b, now, apitype.ScalingActionNone, whyOutCooldown, apitype.ScalingOutcomeHeld, 2, 2, &busy)
	})
	if allocs != 0 {
		t.Errorf("a held sample allocates %v times, want 0", allocs)
	}
	if d := b.hist.newest(); d.repeats != 101 || b.hist.nd != 1 {
		t.Errorf("after 102 held samples: %d decisions, newest repeated %d times; want 1, 101", b.hist.nd, d.repeats)
	}
}

// TestHistoryClipsErrors: a failed call's error is kept cut at
// maxAuditErrBytes, as the audit log keeps it, so a history stays bounded.
func TestHistoryClipsErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, []Record{rec("app.example.com")})
		id := h.store.recIDForTest("app.example.com")
		long := strings.Repeat("é", 4096)
		h.caller.answer = func(int, HookCall) (int, time.Duration, error) { return 0, 0, errors.New(long) }
		s, err := h.c.ColdStart(context.Background(), testOrg, "app.example.com", "")
		if err != nil {
			t.Fatalf("ColdStart: %v", err)
		}
		synctest.Wait()
		<-s.Failed()
		d := h.c.History(id).Decisions[0]
		if len(d.Error) > maxAuditErrBytes+len("…") || !utf8.ValidString(d.Error) || !strings.Contains(d.Error, "éé") {
			t.Errorf("kept error has %d bytes (valid UTF-8 %v), want at most %d of the error, valid", len(d.Error), utf8.ValidString(d.Error), maxAuditErrBytes+len("…"))
		}
	})
}
