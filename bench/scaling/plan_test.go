package main

import (
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

// TestFlapPlanDefaults: the run. Phase 1 steps between 9 and 15
// of 20 in flight (45% and 75%, inside the band of target 0.8) every 15 s
// window for 10 minutes and expects no call; phase 2 alternates 19 and 4
// in flight, each step long enough for its decision and the cooldown.
func TestFlapPlanDefaults(t *testing.T) {
	o := defaultFlap(t)
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
		want := 9
		if i%2 == 1 {
			want = 15
		}
		if s.workers != want || s.hold != 15*time.Second || s.want != "" {
			t.Errorf("phase 1 step %d = %+v, want %d in flight for 15s, no call", i, s, want)
		}
		if b := band(float64(s.workers)/20, 0.8); b != "hold" {
			t.Errorf("phase 1 step %d: %d of 20 is in the %q band, want hold", i, s.workers, b)
		}
	}
	// Up: max(window, cooldown) + 2 windows + settle; down: max(4
	// windows, cooldown) + 2 windows + settle.
	wantPhase2 := []flapStep{
		{phase: 2, level: 0.95, workers: 19, hold: 95 * time.Second, want: reasonScaleOut},
		{phase: 2, level: 0.20, workers: 4, hold: 95 * time.Second, want: reasonScaleIn},
		{phase: 2, level: 0.95, workers: 19, hold: 95 * time.Second, want: reasonScaleOut},
		{phase: 2, level: 0.20, workers: 4, hold: 95 * time.Second, want: reasonScaleIn},
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
		// 0.75 of 2 rounds to 2 of 2: saturated, not inside the band.
		{"rounding pushes the high level out", func(o *flapOpts) { o.capacity = 2 }, `-band-high 0.75 is 2 of 2`},
		{"low level under half the target", func(o *flapOpts) { o.bandLow = 0.35 }, `-band-low 0.35`},
		{"high level at the target", func(o *flapOpts) { o.bandHigh = 0.8 }, `-band-high 0.8`},
		{"crossing up does not reach the target", func(o *flapOpts) { o.crossHigh = 0.7 }, `-cross-high 0.7 is 14 of 20 in flight with 1 client(s)`},
		// 1.7 of one client is 0.85 of two: a second scale-out would follow.
		{"crossing up saturates two clients", func(o *flapOpts) { o.crossHigh = 1.7 }, `-cross-high 1.7 is 34 of 40 in flight with 2 client(s)`},
		{"crossing down stays above half", func(o *flapOpts) { o.crossLow = 0.9 }, `-cross-low 0.9 is 18 of 40`},
		{"lower target moves the band", func(o *flapOpts) { o.target = 0.6 }, `-band-high 0.75`},
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
