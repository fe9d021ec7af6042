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

// workersFor is the number of requests in flight that make level of a
// capacity.
func workersFor(level float64, capacity int) int {
	return int(math.Round(level * float64(capacity)))
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

// flapPlan returns the steps of both phases for o, or why o's levels do
// not do what the phases need. The scaling block is min 1, max 2, and the
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
	util := func(level float64, clients int) float64 {
		return float64(workersFor(level, c)) / float64(clients*c)
	}
	var errs []error
	need := func(name string, level float64, clients int, want ...string) {
		u := util(level, clients)
		got := band(u, o.target)
		for _, w := range want {
			if got == w {
				return
			}
		}
		errs = append(errs, fmt.Errorf("%s %g is %d of %d in flight with %d client(s), utilization %.3f: in the %q band of target %g, want %q",
			name, level, workersFor(level, c), clients*c, clients, u, got, o.target, want))
	}
	need("-band-low", o.bandLow, 1, "hold")
	need("-band-high", o.bandHigh, 1, "hold")
	if o.crossings > 0 {
		need("-cross-high", o.crossHigh, 1, "out")
		need("-cross-high", o.crossHigh, 2, "hold")
	}
	if o.crossings > 1 {
		need("-cross-low", o.crossLow, 2, "in")
		need("-cross-low", o.crossLow, 1, "in", "hold")
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
		level := o.bandLow
		if i%2 == 1 {
			level = o.bandHigh
		}
		steps = append(steps, flapStep{phase: 1, level: level, workers: workersFor(level, c), hold: o.window})
	}
	up := max(o.window, o.cooldown) + 2*o.window + flapSettle
	down := max(4*o.window, o.cooldown) + 2*o.window + flapSettle
	for i := range o.crossings {
		s := flapStep{phase: 2, level: o.crossHigh, hold: up, want: reasonScaleOut}
		if i%2 == 1 {
			s.level, s.hold, s.want = o.crossLow, down, reasonScaleIn
		}
		s.workers = workersFor(s.level, c)
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
