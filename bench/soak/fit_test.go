//go:build linux

package main

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestFitLineExact(t *testing.T) {
	x := []float64{0, 10, 20, 30}
	y := []float64{5, 25, 45, 65}
	a, b, resid := fitLine(x, y)
	if math.Abs(a-5) > 1e-9 || math.Abs(b-2) > 1e-9 || resid > 1e-9 {
		t.Errorf("fitLine = %v, %v, %v; want 5, 2, 0", a, b, resid)
	}
}

// series returns samples every 10 s over dur seconds of base + perSec·t
// plus uniform noise of ±noise.
func series(r *rand.Rand, dur, base, perSec, noise float64) (t, y []float64) {
	for s := 0.0; s <= dur; s += 10 {
		t = append(t, s)
		y = append(y, base+perSec*s+noise*(2*r.Float64()-1))
	}
	return t, y
}

func TestJudge(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name                     string
		dur, base, perSec, noise float64
		floor                    float64
		want                     bool
	}{
		// 3 minutes and an hour of flat series with GC-like noise.
		{"flat rss 3m", 180, 40 * mib, 0, 3 * mib, 2 * mib, true},
		{"flat rss 1h", 3600, 40 * mib, 0, 3 * mib, 2 * mib, true},
		{"flat goroutines", 180, 300, 0, 40, 20, true},
		{"flat fds", 3600, 60, 0, 8, 10, true},
		// A leak of 10 KiB a request at 150 req/s, and a far slower one:
		// 10 KiB a second.
		{"rss leak per request", 180, 40 * mib, 150 * 10 << 10, 3 * mib, 2 * mib, false},
		{"slow rss leak 1h", 3600, 40 * mib, 10 << 10, 1 * mib, 2 * mib, false},
		// One goroutine a request, and one every 5 s.
		{"goroutine leak per request", 180, 300, 150, 40, 20, false},
		{"slow goroutine leak", 180, 300, 0.2, 3, 20, false},
		// An fd a second: a connection never closed.
		{"fd leak", 180, 60, 1, 8, 10, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Several seeds: the verdict must not hang on one draw.
			for seed := range uint64(20) {
				ts, ys := series(rand.New(rand.NewPCG(seed, 1)), tc.dur, tc.base, tc.perSec, tc.noise)
				v := judge(tc.name, ts, ys, 0.2*tc.dur, tc.floor)
				if v.ok != tc.want {
					t.Fatalf("seed %d: judge = %+v, want ok=%v", seed, v, tc.want)
				}
			}
		})
	}
}

// TestJudgeSkipsWarmup: growth only before the warm-up ends (a heap
// reaching its size) passes.
func TestJudgeSkipsWarmup(t *testing.T) {
	var ts, ys []float64
	for s := 0.0; s <= 180; s += 10 {
		ts = append(ts, s)
		ys = append(ys, 100*math.Min(s, 30))
	}
	if v := judge("warm", ts, ys, 36, 20); !v.ok {
		t.Errorf("judge = %+v, want ok", v)
	}
}

func TestJudgeTooFewSamples(t *testing.T) {
	v := judge("short", []float64{0, 10, 20, 30}, []float64{1, 1, 1, 1}, 0, 10)
	if v.ok || v.reason == "" {
		t.Errorf("judge of 4 samples = %+v, want a failure saying why", v)
	}
}
