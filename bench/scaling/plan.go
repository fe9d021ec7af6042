package main

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Reasons of the scaling hook's calls.
const (
	reasonColdStart = "cold_start"
	reasonScaleOut  = "scale_out"
	reasonScaleIn   = "scale_in"
)

// flapStep is one step of the flap mode's load.
type flapStep struct {
	phase   int     // 1: inside the band; 2: across it
	level   float64 // the load, a fraction of one client's capacity
	workers int     // requests held in flight for it
	hold    time.Duration
	// want is the reason of the one call the step should cause; "" when
	// it should cause none.
	want string
}

// flapSettle is the margin each phase 2 step adds for a client process to
// start or drain after a call.
const flapSettle = 5 * time.Second

// workersUp and workersDown are the whole number of requests in flight
// nearest level of a capacity, rounded up or down. The slack keeps a
// product such as 0.76 × 50 = 38.00000000000001 at 38.
func workersUp(level float64, capacity int) int {
	return int(math.Ceil(level*float64(capacity) - 1e-9))
}

func workersDown(level float64, capacity int) int {
	return int(math.Floor(level*float64(capacity) + 1e-9))
}

// flapWorkers are the requests in flight of the four levels.
type flapWorkers struct {
	bandLow, bandHigh, crossHigh, crossLow int
}

// levelWorkers rounds o's levels to whole requests of one client's
// capacity, each toward the threshold it sits next to, so that rounding
// never moves a level further from its threshold than the level itself
// is: bandLow down (towards the scale-in threshold it is above), bandHigh
// up (towards the scale-out threshold it is under), crossHigh down (to the
// scale-out threshold it passes) and crossLow up (to the scale-in
// threshold it passes). A level whose rounding crosses its threshold (one
// request wider than the margin) is refused by flapPlan.
func levelWorkers(o flapOpts) flapWorkers {
	c := o.capacity
	return flapWorkers{
		bandLow:   workersDown(o.bandLow, c),
		bandHigh:  workersUp(o.bandHigh, c),
		crossHigh: workersDown(o.crossHigh, c),
		crossLow:  workersUp(o.crossLow, c),
	}
}

// band says where a utilization falls for target: "out" at or above the
// target (a window of it asks for one more instance), "in" below half of
// it (four windows ask for one fewer), "hold" between, where neither
// applies.
func band(util, target float64) string {
	switch {
	case util >= target:
		return "out"
	case util < target/2:
		return "in"
	default:
		return "hold"
	}
}

// flapLevelSet is the four load levels of the flap mode, each a fraction
// of one client's capacity.
type flapLevelSet struct {
	bandLow, bandHigh, crossHigh, crossLow float64
}

// flapLevels returns the levels that sit margin (a fraction of each
// threshold) from the server's thresholds for target: scale out at or
// above target, scale in below target/2 (autoscale's planSample).
//
//   - phase 1, on the quiet side: bandHigh at (1-margin) × target and
//     bandLow at (1+margin) × target/2, with one client;
//   - phase 2, just past: crossHigh at (1+margin) × target with one
//     client (and half that with two, inside the band), and crossLow at
//     (1-margin) × target/2 of two clients' capacity, which is
//     (1-margin) × target of one (inside the band once one is left).
//
// At target 0.8 and margin 0.05: 0.42 and 0.76 in phase 1, 0.84 and 0.76
// (0.38 of two clients) in phase 2. Each is rounded to six decimals, so
// that 0.42 reads 0.42, not 0.42000000000000004.
func flapLevels(target, margin float64) flapLevelSet {
	out, in := target, target/2
	r := func(x float64) float64 { return math.Round(x*1e6) / 1e6 }
	return flapLevelSet{
		bandLow:   r((1 + margin) * in),
		bandHigh:  r((1 - margin) * out),
		crossHigh: r((1 + margin) * out),
		crossLow:  r(2 * (1 - margin) * in),
	}
}

// utilization is the utilization the server measures with workers
// requests in flight on clients clients of capacity each.
func utilization(workers, capacity, clients int) float64 {
	return float64(workers) / float64(clients*capacity)
}

// offThreshold is how far util is from threshold, as a signed fraction of
// the threshold: -0.05 is 5% under it.
func offThreshold(util, threshold float64) float64 {
	return util/threshold - 1
}

// flapPlan returns the steps of both phases for o, or why o's levels,
// rounded to whole requests (levelWorkers), do not do what the phases
// need. The scaling block is min 1, max 2, and the
// provider starts a client on scale_out and stops one on scale_in, so:
//
//   - phase 1 steps between bandLow and bandHigh every window for
//     duration with one client: both levels must fall in the hold band,
//     and no call is expected;
//   - phase 2 alternates crossHigh and crossLow, crossings steps: with one
//     client crossHigh must be in the out band (one scale_out, and the new
//     client brings it into the hold band, which it must then be, so that
//     no second call follows); with two clients crossLow must be in the in
//     band (one scale_in, after which one client is at min and no call
//     follows), and with one it must stay under the out band.
//
// A phase 2 step lasts long enough for its decision (a window up, four
// down), for the cooldown since the previous call, and for flapSettle
// plus two windows of margin.
func flapPlan(o flapOpts) ([]flapStep, error) {
	c := o.capacity
	wk := levelWorkers(o)
	var errs []error
	need := func(name string, level float64, workers, clients int, want ...string) {
		u := utilization(workers, c, clients)
		got := band(u, o.target)
		for _, w := range want {
			if got == w {
				return
			}
		}
		errs = append(errs, fmt.Errorf("%s %g is %d of %d in flight with %d client(s), utilization %.3f: in the %q band of target %g, want %q",
			name, level, workers, clients*c, clients, u, got, o.target, want))
	}
	need("-band-low", o.bandLow, wk.bandLow, 1, "hold")
	need("-band-high", o.bandHigh, wk.bandHigh, 1, "hold")
	if o.crossings > 0 {
		need("-cross-high", o.crossHigh, wk.crossHigh, 1, "out")
		need("-cross-high", o.crossHigh, wk.crossHigh, 2, "hold")
	}
	if o.crossings > 1 {
		need("-cross-low", o.crossLow, wk.crossLow, 2, "in")
		need("-cross-low", o.crossLow, wk.crossLow, 1, "in", "hold")
	}
	if o.window <= 0 {
		errs = append(errs, errors.New("window must be positive"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	var steps []flapStep
	n := int((o.duration + o.window - 1) / o.window)
	for i := range max(n, 2) {
		level, workers := o.bandLow, wk.bandLow
		if i%2 == 1 {
			level, workers = o.bandHigh, wk.bandHigh
		}
		steps = append(steps, flapStep{phase: 1, level: level, workers: workers, hold: o.window})
	}
	up := max(o.window, o.cooldown) + 2*o.window + flapSettle
	down := max(4*o.window, o.cooldown) + 2*o.window + flapSettle
	for i := range o.crossings {
		s := flapStep{phase: 2, level: o.crossHigh, workers: wk.crossHigh, hold: up, want: reasonScaleOut}
		if i%2 == 1 {
			s.level, s.workers, s.hold, s.want = o.crossLow, wk.crossLow, down, reasonScaleIn
		}
		steps = append(steps, s)
	}
	return steps, nil
}

// planLength is the time steps take in all.
func planLength(steps []flapStep) time.Duration {
	var d time.Duration
	for _, s := range steps {
		d += s.hold
	}
	return d
}
