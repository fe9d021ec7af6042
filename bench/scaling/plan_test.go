package main

import (
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func defaultFlap(t *testing.T) flapOpts {
	t.Helper()
	o, err := parseFlap(bins, nil)
	if err != nil {
		t.Fatalf("parseFlap defaults = %v, want nil", err)
	}
	return o
}

func TestBand(t *testing.T) {
	tests := []struct {
		util, target float64
		want         string
	}{
		{0.8, 0.8, "out"},
		{0.95, 0.8, "out"},
		{0.7999, 0.8, "hold"},
		{0.4, 0.8, "hold"},
		{0.3999, 0.8, "in"},
		{0, 0.8, "in"},
		{1, 1, "out"},
		{0.5, 1, "hold"},
	}
	for _, tt := range tests {
		if got := band(tt.util, tt.target); got != tt.want {
			t.Errorf("band(%g, %g) = %q, want %q", tt.util, tt.target, got, tt.want)
		}
	}
}

// TestFlapPlanDefaults: issue 42's run. Phase 1 steps between 21 and 38
// of 50 in flight (0.42 and 0.76: 5% above the scale-in threshold 0.4 and
// 5% under the scale-out threshold 0.8 of target 0.8) every 15 s window
// for 10 minutes and expects no call; phase 2 alternates 42 of 50 (5% past
// the scale-out threshold) and 38 of two clients' 100 (5% past the
// scale-in threshold), each step long enough for its decision and the
// cooldown.
func TestFlapPlanDefaults(t *testing.T) {
	o := defaultFlap(t)
	if o.capacity != 50 || o.target != 0.8 || o.margin != 0.05 {
		t.Fatalf("defaults: capacity %d, target %g, margin %g; want 50, 0.8, 0.05", o.capacity, o.target, o.margin)
	}
	if want := (flapLevelSet{bandLow: 0.42, bandHigh: 0.76, crossHigh: 0.84, crossLow: 0.76}); (flapLevelSet{o.bandLow, o.bandHigh, o.crossHigh, o.crossLow}) != want {
		t.Errorf("default levels = %g, %g, %g, %g; want %+v", o.bandLow, o.bandHigh, o.crossHigh, o.crossLow, want)
	}
	steps, err := flapPlan(o)
	if err != nil {
		t.Fatalf("flapPlan(defaults) = %v", err)
	}
	var phase1, phase2 []flapStep
	for _, s := range steps {
		if s.phase == 1 {
			phase1 = append(phase1, s)
		} else {
			phase2 = append(phase2, s)
		}
	}
	if len(phase1) != 40 {
		t.Fatalf("phase 1 steps = %d, want 40 (10m / 15s)", len(phase1))
	}
	for i, s := range phase1 {
		want := 21
		if i%2 == 1 {
			want = 38
		}
		if s.workers != want || s.hold != 15*time.Second || s.want != "" {
			t.Errorf("phase 1 step %d = %+v, want %d in flight for 15s, no call", i, s, want)
		}
		if b := band(float64(s.workers)/50, 0.8); b != "hold" {
			t.Errorf("phase 1 step %d: %d of 50 is in the %q band, want hold", i, s.workers, b)
		}
	}
	// Up: max(window, cooldown) + 2 windows + settle; down: max(4
	// windows, cooldown) + 2 windows + settle.
	wantPhase2 := []flapStep{
		{phase: 2, level: 0.84, workers: 42, hold: 95 * time.Second, want: reasonScaleOut},
		{phase: 2, level: 0.76, workers: 38, hold: 95 * time.Second, want: reasonScaleIn},
		{phase: 2, level: 0.84, workers: 42, hold: 95 * time.Second, want: reasonScaleOut},
		{phase: 2, level: 0.76, workers: 38, hold: 95 * time.Second, want: reasonScaleIn},
	}
	if len(phase2) != len(wantPhase2) {
		t.Fatalf("phase 2 = %+v, want %+v", phase2, wantPhase2)
	}
	for i := range phase2 {
		if phase2[i] != wantPhase2[i] {
			t.Errorf("phase 2 step %d = %+v, want %+v", i, phase2[i], wantPhase2[i])
		}
	}
	if got, want := planLength(steps), 10*time.Minute+4*95*time.Second; got != want {
		t.Errorf("planLength = %v, want %v", got, want)
	}
}

// checkNearThresholds fails t unless every step of steps puts the
// utilization the server measures within margin of the threshold it is
// about, as a fraction of that threshold, on the side the step needs:
// phase 1 on the quiet side of both (no call), phase 2 just past them (one
// call). Thresholds are the server's: scale out at or above target, scale
// in below target/2.
func checkNearThresholds(t *testing.T, steps []flapStep, o flapOpts, margin float64) {
	t.Helper()
	capacity, target := o.capacity, o.target
	out, in := target, target/2
	const slack = 1e-9
	for i, s := range steps {
		var u, thr float64
		var side string // where u must be: "under" thr, or "at or over" it
		switch {
		case s.phase == 1 && s.level == o.bandLow:
			// The low level, above the scale-in threshold.
			u, thr, side = utilization(s.workers, capacity, 1), in, "at or over"
		case s.phase == 1:
			// The high level, under the scale-out threshold.
			u, thr, side = utilization(s.workers, capacity, 1), out, "under"
		case s.want == reasonScaleOut:
			u, thr, side = utilization(s.workers, capacity, 1), out, "at or over"
		default:
			u, thr, side = utilization(s.workers, capacity, 2), in, "under"
		}
		off := offThreshold(u, thr)
		near := math.Abs(off) <= margin+slack
		right := (side == "under" && u < thr) || (side == "at or over" && u >= thr)
		if !near || !right {
			t.Errorf("target %g: step %d (phase %d, %d of %d in flight, want %q): utilization %.4f is %+.2f%% of threshold %g; want %s it, within %g%%",
				target, i, s.phase, s.workers, capacity, s.want, u, 100*off, thr, side, 100*margin)
		}
	}
}

// TestFlapLevelsWithinMarginOfThresholds: with the default margin (5%) and
// capacity, every level of the plan sits within 5% of its threshold, on
// the quiet side in phase 1 and just past it in phase 2, for the default
// target and others: rounding to whole requests goes toward the threshold.
func TestFlapLevelsWithinMarginOfThresholds(t *testing.T) {
	for _, target := range []float64{0.5, 0.6, 0.7, 0.75, 0.8, 0.9} {
		o, err := parseFlap(append(slices.Clone(bins), "-target", strconv.FormatFloat(target, 'g', -1, 64)), io.Discard)
		if err != nil {
			t.Fatalf("parseFlap -target %g = %v", target, err)
		}
		steps, err := flapPlan(o)
		if err != nil {
			t.Fatalf("flapPlan(target %g) = %v", target, err)
		}
		checkNearThresholds(t, steps, o, 0.05)
	}
	// A capacity too coarse for the margin is refused, not run further
	// from the thresholds: 0.76 of 4 rounds up to 4 of 4, at the target.
	o := defaultFlap(t)
	o.capacity = 4
	if _, err := flapPlan(o); err == nil || !strings.Contains(err.Error(), "-band-high 0.76 is 4 of 4") {
		t.Errorf("flapPlan(capacity 4) = %v, want -band-high refused", err)
	}
}

func TestFlapLevels(t *testing.T) {
	if got, want := flapLevels(0.8, 0.05), (flapLevelSet{bandLow: 0.42, bandHigh: 0.76, crossHigh: 0.84, crossLow: 0.76}); got != want {
		t.Errorf("flapLevels(0.8, 0.05) = %+v, want %+v", got, want)
	}
	if got, want := flapLevels(0.6, 0.1), (flapLevelSet{bandLow: 0.33, bandHigh: 0.54, crossHigh: 0.66, crossLow: 0.54}); got != want {
		t.Errorf("flapLevels(0.6, 0.1) = %+v, want %+v", got, want)
	}
}

func TestWorkersRounding(t *testing.T) {
	// 0.76 × 50 is 38.00000000000001 in float64: still 38 either way.
	if up, down := workersUp(0.76, 50), workersDown(0.76, 50); up != 38 || down != 38 {
		t.Errorf("workersUp/Down(0.76, 50) = %d, %d, want 38, 38", up, down)
	}
	if up, down := workersUp(0.665, 50), workersDown(0.665, 50); up != 34 || down != 33 {
		t.Errorf("workersUp/Down(0.665, 50) = %d, %d, want 34, 33", up, down)
	}
}

func TestFlapPlanShortWindow(t *testing.T) {
	o := defaultFlap(t)
	o.window, o.cooldown, o.duration, o.crossings = 2*time.Second, 3*time.Second, 5*time.Second, 2
	steps, err := flapPlan(o)
	if err != nil {
		t.Fatal(err)
	}
	// 5s of 2s windows rounds up to 3 steps; the up step waits the
	// cooldown (3s), the down step four windows (8s).
	wantHolds := []time.Duration{2 * time.Second, 2 * time.Second, 2 * time.Second,
		3*time.Second + 4*time.Second + flapSettle, 8*time.Second + 4*time.Second + flapSettle}
	if len(steps) != len(wantHolds) {
		t.Fatalf("flapPlan = %d steps, want %d", len(steps), len(wantHolds))
	}
	for i, s := range steps {
		if s.hold != wantHolds[i] {
			t.Errorf("step %d hold = %v, want %v", i, s.hold, wantHolds[i])
		}
	}
}

// TestFlapPlanRefusesLevelsOutsideTheirBand: levels that would not do
// what their phase needs, once rounded to whole requests, are refused.
func TestFlapPlanRefusesLevelsOutsideTheirBand(t *testing.T) {
	tests := []struct {
		name string
		set  func(*flapOpts)
		want string
	}{
		// 0.76 of 2 rounds up to 2 of 2: saturated, not inside the band.
		{"rounding pushes the high level out", func(o *flapOpts) { o.capacity = 2 }, `-band-high 0.76 is 2 of 2`},
		{"low level under half the target", func(o *flapOpts) { o.bandLow = 0.35 }, `-band-low 0.35`},
		{"high level at the target", func(o *flapOpts) { o.bandHigh = 0.8 }, `-band-high 0.8`},
		{"crossing up does not reach the target", func(o *flapOpts) { o.crossHigh = 0.79 }, `-cross-high 0.79 is 39 of 50 in flight with 1 client(s)`},
		// 1.7 of one client is 0.85 of two: a second scale-out would follow.
		{"crossing up saturates two clients", func(o *flapOpts) { o.crossHigh = 1.7 }, `-cross-high 1.7 is 85 of 100 in flight with 2 client(s)`},
		{"crossing down stays above half", func(o *flapOpts) { o.crossLow = 0.9 }, `-cross-low 0.9 is 45 of 100`},
		{"lower target moves the band", func(o *flapOpts) { o.target = 0.6 }, `-band-high 0.76`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := defaultFlap(t)
			tt.set(&o)
			_, err := flapPlan(o)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("flapPlan = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestFlapPlanWithoutCrossings(t *testing.T) {
	o := defaultFlap(t)
	o.crossings = 0
	o.crossHigh = 0.5 // irrelevant without phase 2
	steps, err := flapPlan(o)
	if err != nil {
		t.Fatalf("flapPlan without crossings = %v", err)
	}
	for _, s := range steps {
		if s.phase != 1 {
			t.Fatalf("step %+v in phase 2, want phase 1 only", s)
		}
	}
}

func TestStepMatches(t *testing.T) {
	out := hookCall{Reason: reasonScaleOut}
	in := hookCall{Reason: reasonScaleIn}
	tests := []struct {
		want  string
		calls []hookCall
		ok    bool
	}{
		{"", nil, true},
		{"", []hookCall{out}, false},
		{reasonScaleOut, []hookCall{out}, true},
		{reasonScaleOut, nil, false},
		{reasonScaleOut, []hookCall{in}, false},
		{reasonScaleOut, []hookCall{out, out}, false},
	}
	for _, tt := range tests {
		r := stepResult{step: flapStep{want: tt.want}, calls: tt.calls}
		if got := stepMatches(r); got != tt.ok {
			t.Errorf("stepMatches(want %q, %d calls) = %v, want %v", tt.want, len(tt.calls), got, tt.ok)
		}
	}
}
