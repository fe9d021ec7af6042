package limiter

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newLimiter(tb testing.TB, cfg Config) *Limiter {
	tb.Helper()
	l, err := New(cfg)
	if err != nil {
		tb.Fatalf("New(%+v): %v", cfg, err)
	}
	return l
}

// logBuffer returns a debug logger and the buffer it writes to.
func logBuffer() (*slog.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	return slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), &buf
}

func TestNewNormalizes(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		want Snapshot
		warn string // substring of the log, "" for none
	}{
		{"fixed zero is one", Config{Mode: ModeFixed}, Snapshot{ModeFixed, 1, 1, 1, true}, ""},
		{"fixed negative is one", Config{Fixed: -4}, Snapshot{ModeFixed, 1, 1, 1, true}, ""},
		{"fixed n is desired min and max", Config{Fixed: 7, Min: 2, Max: 50, Initial: 30}, Snapshot{ModeFixed, 7, 7, 7, true}, ""},
		{"aimd defaults", Config{Mode: ModeAIMD}, Snapshot{ModeAIMD, 1, 1, 100, false}, ""},
		{"min below one", Config{Mode: ModeAIMD, Min: -3, Max: 5}, Snapshot{ModeAIMD, 1, 1, 5, false}, ""},
		{"initial clamped to max", Config{Mode: ModeAIMD, Min: 2, Max: 5, Initial: 9}, Snapshot{ModeAIMD, 5, 2, 5, false}, ""},
		{"initial clamped to min", Config{Mode: ModeAIMD, Min: 3, Max: 5, Initial: 1}, Snapshot{ModeAIMD, 3, 3, 5, false}, ""},
		{"max defaults at least min", Config{Mode: ModeAIMD, Min: 150}, Snapshot{ModeAIMD, 150, 150, 150, false}, ""},
		{"load-signal without signals falls back", Config{Mode: ModeLoadSignal, IncreaseAfterSuccesses: 3, DecreaseFactor: 0.9}, Snapshot{ModeAIMD, 1, 1, 100, false}, "load-signal mode without signals"},
		{"bad decrease factor warns", Config{Mode: ModeAIMD, DecreaseFactor: 1.5}, Snapshot{ModeAIMD, 1, 1, 100, false}, "decrease_factor outside"},
		{"negative increase threshold warns", Config{Mode: ModeAIMD, IncreaseAfterSuccesses: -1}, Snapshot{ModeAIMD, 1, 1, 100, false}, "increase_after_successes below 1"},
		{"load-signal with a signal", Config{Mode: ModeLoadSignal, Signals: []*Signal{NewBackendSignal()}}, Snapshot{ModeLoadSignal, 1, 1, 100, false}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			log, buf := logBuffer()
			c.cfg.Logger = log
			l := newLimiter(t, c.cfg)
			if diff := cmp.Diff(c.want, l.Snapshot()); diff != "" {
				t.Errorf("New(%+v).Snapshot() -want +got:\n%s", c.cfg, diff)
			}
			got := buf.String()
			if c.warn == "" && strings.Contains(got, "level=WARN") {
				t.Errorf("unexpected warning: %s", got)
			}
			if c.warn != "" && !strings.Contains(got, c.warn) {
				t.Errorf("log = %q, want a warning containing %q", got, c.warn)
			}
		})
	}
}

func TestNewRejects(t *testing.T) {
	for _, cfg := range []Config{
		{Mode: ModeAIMD, Min: 5, Max: 3},
		{Mode: "bogus"},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) = nil error, want one", cfg)
		}
	}
}

func TestFallbackParameters(t *testing.T) {
	// The fallback of load-signal mode uses 10 successes and 0.5, whatever
	// the config said for AIMD.
	l := newLimiter(t, Config{Mode: ModeLoadSignal, Initial: 20, Max: 40, IncreaseAfterSuccesses: 2, DecreaseFactor: 0.9})
	if l.cfg.IncreaseAfterSuccesses != 10 || l.cfg.DecreaseFactor != 0.5 {
		t.Errorf("fallback = %d / %g, want 10 / 0.5", l.cfg.IncreaseAfterSuccesses, l.cfg.DecreaseFactor)
	}
	bad := newLimiter(t, Config{Mode: ModeAIMD, DecreaseFactor: -0.2})
	zero := newLimiter(t, Config{Mode: ModeAIMD, IncreaseAfterSuccesses: 0})
	if bad.cfg.DecreaseFactor != 0.5 || zero.cfg.IncreaseAfterSuccesses != 10 {
		t.Errorf("decrease %g, increase %d; want 0.5, 10", bad.cfg.DecreaseFactor, zero.cfg.IncreaseAfterSuccesses)
	}
}

// run drives l with outcomes, each from its own request that began with
// the limiter at its limit, one after another.
func run(l *Limiter, outcomes string) {
	for _, c := range outcomes {
		// Fill to the limit so the request counts as near it.
		d := l.Desired()
		held := make([]Ticket, 0, d)
		for range d - 1 {
			held = append(held, l.Begin())
		}
		tk := l.Begin()
		o := Success
		switch c {
		case 'F':
			o = Failure
		case 'I':
			o = Ignored
		}
		l.End(tk, o)
		for range held {
			l.mu.Lock()
			l.inflight--
			l.mu.Unlock()
		}
	}
}

func TestAIMD(t *testing.T) {
	cases := []struct {
		name     string
		cfg      Config
		outcomes string // S success, F failure, I ignored
		want     int
	}{
		{"ten successes add one", Config{Initial: 4}, strings.Repeat("S", 10), 5},
		{"nine successes add nothing", Config{Initial: 4}, strings.Repeat("S", 9), 4},
		{"twenty successes add two", Config{Initial: 4}, strings.Repeat("S", 20), 6},
		{"failure halves", Config{Initial: 8}, "F", 4},
		{"failure rounds", Config{Initial: 5}, "F", 3}, // round(2.5) = 3
		{"failure clears the streak", Config{Initial: 8}, strings.Repeat("S", 9) + "F" + strings.Repeat("S", 9), 4},
		{"custom threshold and factor", Config{Initial: 10, IncreaseAfterSuccesses: 2, DecreaseFactor: 0.8}, "SSSSF", 10}, // 12 → round(9.6)=10
		{"clamped to max", Config{Initial: 5, Max: 5, IncreaseAfterSuccesses: 1}, "SSS", 5},
		{"clamped to min", Config{Initial: 4, Min: 3}, "FFF", 3},
		{"factor one keeps", Config{Initial: 6, DecreaseFactor: 1}, "FF", 6},
		{"threshold normalized to one", Config{Initial: 2, IncreaseAfterSuccesses: -5}, "SS", 4},
		{"ignored never decreases", Config{Initial: 8}, "IIII", 8},
		{"ignored keeps the streak", Config{Initial: 4}, strings.Repeat("S", 5) + "IIII" + strings.Repeat("S", 5), 5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.Mode = ModeAIMD
			if c.cfg.Max == 0 {
				c.cfg.Max = 50
			}
			l := newLimiter(t, c.cfg)
			run(l, c.outcomes)
			if got := l.Desired(); got != c.want {
				t.Errorf("after %s: desired = %d, want %d", c.outcomes, got, c.want)
			}
		})
	}
}

// TestAppLimitedDoesNotGrow proves that successes far below the limit are
// no evidence: a service using 1 of 20 permits never raises its limit.
func TestAppLimitedDoesNotGrow(t *testing.T) {
	l := newLimiter(t, Config{Mode: ModeAIMD, Initial: 20, Max: 50, IncreaseAfterSuccesses: 1})
	for range 100 {
		l.End(l.Begin(), Success)
	}
	if got := l.Desired(); got != 20 {
		t.Errorf("desired after 100 lone successes = %d, want 20", got)
	}
}

// TestOneDecreasePerOverload proves that failures of requests that began
// before a decrease do not decrease again, while a failure of a request
// begun after it does.
func TestOneDecreasePerOverload(t *testing.T) {
	l := newLimiter(t, Config{Mode: ModeAIMD, Initial: 16, Max: 50})
	var burst []Ticket
	for range 16 {
		burst = append(burst, l.Begin())
	}
	for _, tk := range burst {
		l.End(tk, Failure)
	}
	if got := l.Desired(); got != 8 {
		t.Fatalf("desired after one burst of 16 failures = %d, want 8", got)
	}
	l.End(l.Begin(), Failure)
	if got := l.Desired(); got != 4 {
		t.Errorf("desired after a later failure = %d, want 4", got)
	}
}

// TestIgnoredIsNoBackendSnapshot proves that an abandoned request (the
// visitor left) is no evidence for load-signal mode either: it records no
// backend snapshot, healthy or overloaded, so a burst of them neither
// lowers the limit nor counts towards a rise.
func TestIgnoredIsNoBackendSnapshot(t *testing.T) {
	backend := NewBackendSignal()
	l := newLimiter(t, Config{Mode: ModeLoadSignal, Initial: 10, Max: 50, MinSamples: 1, Now: func() time.Time { return t0 },
		Signals: []*Signal{backend}, Backend: backend})
	for range 20 {
		l.End(l.Begin(), Ignored)
	}
	if st := backend.stats(t0.Add(-time.Minute)); st.samples != 0 || st.latestOverloaded {
		t.Errorf("backend signal after 20 ignored outcomes = %+v, want no snapshot", st)
	}
	l.Evaluate(t0.Add(time.Second))
	if got := l.Desired(); got != 10 {
		t.Errorf("desired after 20 ignored outcomes = %d, want 10", got)
	}
}

func TestFixedIgnoresEverything(t *testing.T) {
	backend := NewBackendSignal()
	l := newLimiter(t, Config{Fixed: 6, Signals: []*Signal{backend}, Backend: backend})
	run(l, strings.Repeat("S", 50)+"FFFF")
	for i := range 20 {
		backend.Record(t0.Add(time.Duration(i)*time.Millisecond), true)
	}
	l.Evaluate(t0.Add(time.Second))
	if got := l.Snapshot(); got != (Snapshot{ModeFixed, 6, 6, 6, true}) {
		t.Errorf("fixed snapshot after signals = %+v, want 6/6/6 fixed", got)
	}
	if err := l.Run(t.Context()); err != nil {
		t.Errorf("Run in fixed mode = %v, want nil at once", err)
	}
}

func TestLoadSignal(t *testing.T) {
	type snap struct {
		sig  int
		at   time.Duration
		over bool
	}
	healthy := func(sig, n int) []snap {
		var out []snap
		for i := range n {
			out = append(out, snap{sig, time.Duration(i) * time.Millisecond, false})
		}
		return out
	}
	cases := []struct {
		name    string
		initial int
		snaps   []snap
		want    int
		idle    bool // no request came near the limit since the last evaluation
	}{
		{"no history holds", 20, nil, 20, false},
		{"too few samples hold", 20, healthy(0, 4), 20, false},
		{"healthy rises by ceil(5%)", 20, healthy(0, 5), 21, false},
		{"healthy rises by at least one", 3, healthy(0, 5), 4, false},
		{"both signals healthy, large step", 60, append(healthy(0, 5), healthy(1, 6)...), 63, false},
		{"rise clamped at max", 100, healthy(0, 5), 100, false},
		{"latest overloaded falls", 40, append(healthy(0, 9), snap{0, 10 * time.Millisecond, true}), 38, false},
		{"any signal overloaded falls", 10, append(healthy(0, 9), snap{1, 0, true}), 9, false},
		{"overloaded then healthy is not latest", 40, append([]snap{{0, 0, true}}, healthy(0, 9)[1:]...), 40, false}, // ratio 8/9 < 0.9
		{"mean below target holds", 20, append(healthy(0, 10), []snap{{1, 0, true}, {1, 1, true}, {1, 2, true}, {1, 3, true}, {1, 4, false}}...), 20, false},
		{"stale snapshots ignored", 20, []snap{{0, -20 * time.Second, true}}, 20, false},
		{"falls clamped at min", 1, []snap{{0, 0, true}}, 1, false},
		{"idle service holds", 20, healthy(0, 5), 20, true},
		{"idle service still falls", 20, []snap{{0, 0, true}}, 19, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sigs := []*Signal{NewBackendSignal(), NewSignal("other", nil)}
			l := newLimiter(t, Config{Mode: ModeLoadSignal, Initial: c.initial, Max: 100, Signals: sigs})
			for _, s := range c.snaps {
				sigs[s.sig].Record(t0.Add(s.at), s.over)
			}
			if !c.idle {
				fill(l)
			}
			l.Evaluate(t0.Add(time.Second))
			if got := l.Desired(); got != c.want {
				t.Errorf("desired = %d, want %d", got, c.want)
			}
		})
	}
}

// TestLoadSignalIgnoresOutcomesDirectly proves that in load-signal mode an
// outcome acts only through the backend signal at the next evaluation.
func TestLoadSignalIgnoresOutcomesDirectly(t *testing.T) {
	b := NewBackendSignal()
	now := t0
	l := newLimiter(t, Config{Mode: ModeLoadSignal, Initial: 10, Max: 20, Signals: []*Signal{b}, Backend: b, Now: func() time.Time { return now }})
	l.End(l.Begin(), Failure)
	if got := l.Desired(); got != 10 {
		t.Fatalf("desired right after a failure = %d, want 10 (no AIMD)", got)
	}
	l.Evaluate(now)
	if got := l.Desired(); got != 9 {
		t.Errorf("desired after evaluating the overloaded snapshot = %d, want 9", got)
	}
}

func TestChangeEventAndCallback(t *testing.T) {
	log, buf := logBuffer()
	var got []Snapshot
	l := newLimiter(t, Config{Mode: ModeAIMD, Initial: 4, Max: 8, Name: "0", Logger: log, OnChange: func(s Snapshot) { got = append(got, s) }})
	run(l, "F")
	want := []Snapshot{{ModeAIMD, 2, 1, 8, false}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("OnChange snapshots -want +got:\n%s", diff)
	}
	line := buf.String()
	for _, w := range []string{"msg=\"concurrency changed\"", "logger=" + LoggerName, "service=0", "desired=2", "current=4", "min=1", "max=8", "level=DEBUG"} {
		if !strings.Contains(line, w) {
			t.Errorf("log %q lacks %q", line, w)
		}
	}
}

func TestStep(t *testing.T) {
	for _, c := range []struct {
		cur   int
		ratio float64
		want  int
	}{{1, 0.05, 1}, {20, 0.05, 1}, {21, 0.05, 2}, {100, 0.05, 5}, {10, 0.5, 5}, {3, 0.5, 2}} {
		if got := step(c.cur, c.ratio); got != c.want {
			t.Errorf("step(%d, %g) = %d, want %d", c.cur, c.ratio, got, c.want)
		}
	}
}

func TestSignalRingIsBounded(t *testing.T) {
	s := NewBackendSignal()
	for i := range maxSnapshots + 10 {
		s.Record(t0.Add(time.Duration(i)), i >= maxSnapshots)
	}
	st := s.stats(t0)
	if st.samples != maxSnapshots || st.healthy != maxSnapshots-10 || !st.latestOverloaded {
		t.Errorf("stats = %+v, want %d samples, %d healthy, latest overloaded", st, maxSnapshots, maxSnapshots-10)
	}
}

func TestParseCPULine(t *testing.T) {
	got, err := parseCPULine("cpu  100 5 50 800 40 3 2 0 0 0")
	if err != nil || got != (cpuTimes{busy: 160, total: 1000}) {
		t.Errorf("parseCPULine = %+v, %v; want busy 160 total 1000", got, err)
	}
	for _, bad := range []string{"", "cpu0 1 2 3 4", "cpu 1 x 3 4 5", "cpu 1 2"} {
		if _, err := parseCPULine(bad); err == nil {
			t.Errorf("parseCPULine(%q) = nil error, want one", bad)
		}
	}
}

func TestParseMeminfo(t *testing.T) {
	got, err := parseMeminfo(strings.NewReader("MemTotal:  1000 kB\nMemFree: 10 kB\nMemAvailable:  250 kB\n"))
	if err != nil || got != 0.75 {
		t.Errorf("parseMeminfo = %g, %v; want 0.75", got, err)
	}
	if _, err := parseMeminfo(strings.NewReader("MemFree: 3 kB\n")); err == nil {
		t.Error("parseMeminfo without MemTotal = nil error, want one")
	}
}

func TestSchedulerSignal(t *testing.T) {
	s := NewSchedulerSignal(time.Second)
	s.poll(t0)                                        // reference only
	s.poll(t0.Add(time.Second + 10*time.Millisecond)) // 10ms late: healthy
	s.poll(t0.Add(2*time.Second + 200*time.Millisecond))
	st := s.stats(t0)
	if st.samples != 2 || st.healthy != 1 || !st.latestOverloaded {
		t.Errorf("scheduler stats = %+v, want 2 samples, 1 healthy, latest overloaded", st)
	}
}

// TestRunEvaluatesEveryInterval runs the load-signal loop in a synctest
// bubble: each interval it polls the signals and evaluates them.
func TestRunEvaluatesEveryInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		polls := 0
		busy := NewSignal("busy", func(time.Time) (bool, error) {
			polls++
			return polls > 3, nil // healthy three times, then overloaded
		})
		l := newLimiter(t, Config{Mode: ModeLoadSignal, Initial: 10, Max: 20, MinSamples: 2, Interval: time.Second, Signals: []*Signal{busy}})
		for range 12 {
			l.Begin() // a busy service: 12 requests in flight throughout
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- l.Run(ctx) }()

		var got []int
		for range 5 {
			time.Sleep(time.Second) // advance the bubble's clock one interval
			synctest.Wait()
			got = append(got, l.Desired())
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run after cancel = %v, want nil", err)
		}
		// 1 sample: hold; 2 and 3 healthy: rise; 4 and 5 overloaded: fall.
		want := []int{10, 11, 12, 11, 10}
		if !slices.Equal(got, want) {
			t.Errorf("desired after each interval = %v, want %v", got, want)
		}
	})
}

// TestBeginEndAllocateNothing pins the per-request cost: the agent calls
// Begin and End around every forwarded request.
func TestBeginEndAllocateNothing(t *testing.T) {
	l := newLimiter(t, Config{Mode: ModeAIMD, Initial: 4, Max: 8})
	if n := testing.AllocsPerRun(1000, func() { l.End(l.Begin(), Success) }); n != 0 {
		t.Errorf("Begin+End allocate %v times, want 0", n)
	}
}

func BenchmarkBeginEnd(b *testing.B) {
	for _, mode := range []Mode{ModeFixed, ModeAIMD} {
		b.Run(string(mode), func(b *testing.B) {
			l := newLimiter(b, Config{Mode: mode, Fixed: 64, Initial: 64, Max: 64})
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					l.End(l.Begin(), Success)
				}
			})
		})
	}
}

// fill takes the limiter to its limit and back, as a busy service does
// between two evaluations.
func fill(l *Limiter) {
	var held []Ticket
	for range l.Desired() {
		held = append(held, l.Begin())
	}
	for range held {
		l.mu.Lock()
		l.inflight--
		l.mu.Unlock()
	}
}
