package limiter

import (
	"container/heap"
	"fmt"
	"testing"
	"time"
)

// The convergence tests run a discrete-event simulation: a saturating load
// generator admits requests while fewer than the limiter's desired value
// are in flight (as the server's per-client limiter does with the
// announced limit), and a test backend answers each after a latency that
// depends on how many requests it holds. Time is the simulation's clock,
// injected into the limiter, so 60 simulated seconds take milliseconds and
// the result is deterministic.

// kneeBackend has a capacity knee at k: up to k concurrent requests are
// answered in base time; past k, latency grows by half of base per extra
// request and the answer is a 503.
func kneeBackend(k int, base time.Duration) func(n int) (time.Duration, Outcome) {
	return func(n int) (time.Duration, Outcome) {
		if n <= k {
			return base, Success
		}
		return base + time.Duration(n-k)*base/2, Failure
	}
}

type pending struct {
	done time.Time
	tk   Ticket
	o    Outcome
}

type pendingHeap []pending

func (h pendingHeap) Len() int           { return len(h) }
func (h pendingHeap) Less(i, j int) bool { return h[i].done.Before(h[j].done) }
func (h pendingHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *pendingHeap) Push(x any)        { *h = append(*h, x.(pending)) }
func (h *pendingHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// simSample is the limiter's desired value at a simulated time.
type simSample struct {
	at      time.Duration
	desired int
}

type simResult struct {
	samples   []simSample // every 100ms
	completed int
	failed    int
}

// simulate runs cfg against backend for dur with workers concurrent
// callers at most.
func simulate(tb testing.TB, cfg Config, backend func(n int) (time.Duration, Outcome), workers int, dur time.Duration) simResult {
	tb.Helper()
	now := t0
	cfg.Now = func() time.Time { return now }
	l := newLimiter(tb, cfg)
	var (
		res      simResult
		inflight pendingHeap
	)
	const every = 100 * time.Millisecond
	nextSample := t0
	nextEval := t0.Add(l.cfg.Interval)
	end := t0.Add(dur)
	for now.Before(end) {
		for len(inflight) < workers && len(inflight) < l.Desired() {
			tk := l.Begin()
			lat, o := backend(len(inflight) + 1)
			heap.Push(&inflight, pending{now.Add(lat), tk, o})
		}
		// Advance to the next event: a completion, a sample or an
		// evaluation.
		next := nextSample
		if l.mode == ModeLoadSignal && nextEval.Before(next) {
			next = nextEval
		}
		if len(inflight) > 0 && inflight[0].done.Before(next) {
			next = inflight[0].done
		}
		now = next
		switch {
		case now.Equal(nextSample):
			res.samples = append(res.samples, simSample{now.Sub(t0), l.Desired()})
			nextSample = nextSample.Add(every)
		case l.mode == ModeLoadSignal && now.Equal(nextEval):
			l.Evaluate(now)
			nextEval = nextEval.Add(l.cfg.Interval)
		default:
			p := heap.Pop(&inflight).(pending)
			l.End(p.tk, p.o)
			res.completed++
			if p.o == Failure {
				res.failed++
			}
		}
	}
	return res
}

// settle returns the time after which every sample stays within ±tol of k,
// and whether there is such a time at least 10 s before the last sample.
func settle(samples []simSample, k int, tol float64) (time.Duration, bool) {
	lo, hi := float64(k)*(1-tol), float64(k)*(1+tol)
	at, ok := time.Duration(0), false
	for _, s := range samples {
		d := float64(s.desired)
		if d < lo || d > hi {
			ok = false
			continue
		}
		if !ok {
			at, ok = s.at, true
		}
	}
	if ok && samples[len(samples)-1].at-at < 10*time.Second {
		ok = false
	}
	return at, ok
}

func mean(samples []simSample, from time.Duration) float64 {
	var sum, n float64
	for _, s := range samples {
		if s.at >= from {
			sum += float64(s.desired)
			n++
		}
	}
	return sum / n
}

// TestAIMDConvergesToKnee proves that AIMD, starting at 1, settles within
// ±20% of the backend's knee within 30 s and stays there, for several knees.
// The decrease factor is 0.8: with 0.5 the sawtooth spans K/2..K by design
// (BenchmarkAIMDKnee prints both).
func TestAIMDConvergesToKnee(t *testing.T) {
	for _, k := range []int{5, 20, 50} {
		t.Run(fmt.Sprintf("K=%d", k), func(t *testing.T) {
			cfg := Config{Mode: ModeAIMD, Min: 1, Max: 200, DecreaseFactor: 0.8}
			res := simulate(t, cfg, kneeBackend(k, 20*time.Millisecond), 3*k, 60*time.Second)
			at, ok := settle(res.samples, k, 0.2)
			if !ok || at > 30*time.Second {
				t.Errorf("K=%d: settled within ±20%% at %v (settled: %v), want by 30s; last desired %d", k, at, ok, res.samples[len(res.samples)-1].desired)
			}
			if res.failed == 0 {
				t.Errorf("K=%d: no 503 in the run: the limit never probed past the knee", k)
			}
		})
	}
}

// TestAIMDOnlyFallsWhileEverythingTimesOut proves that timeouts count as
// failures: with every request timing out, the limit never rises.
func TestAIMDOnlyFallsWhileEverythingTimesOut(t *testing.T) {
	timeout := func(int) (time.Duration, Outcome) { return time.Second, Failure }
	res := simulate(t, Config{Mode: ModeAIMD, Initial: 64, Max: 100}, timeout, 200, 30*time.Second)
	prev := 64
	for _, s := range res.samples {
		if s.desired > prev {
			t.Fatalf("desired rose from %d to %d at %v while every request timed out", prev, s.desired, s.at)
		}
		prev = s.desired
	}
	if prev != 1 {
		t.Errorf("desired after 30s of timeouts = %d, want the minimum 1", prev)
	}
}

// TestFixedIgnoresTheKnee proves fixed mode keeps its limit whatever the
// backend answers.
func TestFixedIgnoresTheKnee(t *testing.T) {
	res := simulate(t, Config{Fixed: 30}, kneeBackend(10, 20*time.Millisecond), 100, 20*time.Second)
	for _, s := range res.samples {
		if s.desired != 30 {
			t.Fatalf("fixed desired = %d at %v, want 30", s.desired, s.at)
		}
	}
	if res.failed == 0 {
		t.Error("no failure reached the fixed limiter; the test proves nothing")
	}
}

// TestLoadSignalBacksOffAtKnee proves that load-signal mode with only the
// backend signal ends near the knee rather than at the ceiling.
func TestLoadSignalBacksOffAtKnee(t *testing.T) {
	b := NewBackendSignal()
	cfg := Config{Mode: ModeLoadSignal, Max: 200, Signals: []*Signal{b}, Backend: b, Interval: 500 * time.Millisecond, Window: 5 * time.Second}
	res := simulate(t, cfg, kneeBackend(20, 20*time.Millisecond), 100, 60*time.Second)
	m := mean(res.samples, 30*time.Second)
	if m < 10 || m > 30 {
		t.Errorf("load-signal mean desired over the last 30s = %.1f, want within 10..30 of a knee at 20", m)
	}
}

// BenchmarkAIMDKnee prints how fast and how close AIMD gets to a knee at
// K=20 for the default decrease factor and for 0.8: settled_s is the
// simulated time after which the limit stays within ±20% of K (-1: never),
// mean_over_K the mean desired value of the last 30 s divided by K, and
// fail_pct the share of requests answered 503.
func BenchmarkAIMDKnee(b *testing.B) {
	const k = 20
	for _, factor := range []float64{0.5, 0.8} {
		b.Run(fmt.Sprintf("decrease=%g", factor), func(b *testing.B) {
			b.ReportAllocs()
			var res simResult
			for b.Loop() {
				res = simulate(b, Config{Mode: ModeAIMD, Max: 200, DecreaseFactor: factor}, kneeBackend(k, 20*time.Millisecond), 3*k, 60*time.Second)
			}
			at, ok := settle(res.samples, k, 0.2)
			settled := at.Seconds()
			if !ok {
				settled = -1
			}
			b.ReportMetric(settled, "settled_s")
			b.ReportMetric(mean(res.samples, 30*time.Second)/k, "mean_over_K")
			b.ReportMetric(100*float64(res.failed)/float64(res.completed), "fail_pct")
		})
	}
}
