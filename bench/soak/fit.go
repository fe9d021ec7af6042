//go:build linux

package main

import (
	"fmt"
	"math"
)

// A series is "flat" when the change its least-squares line predicts over
// the fitted span, |slope × span|, is at most max(noiseK × the residual
// standard deviation, the series' floor). The residual deviation is the
// scatter around the line: GC cycles, connections open at the sampling
// instant, a client restarting. The floor is what a healthy process may
// drift in a short run anyway (heap growth to its steady size, pools
// filling); it is far below what a real leak of the traffic's size adds:
// one goroutine, one fd or 10 KiB leaked per small request at ~150 req/s
// is 150 goroutines, 150 fds or 1.5 MiB a second.
const noiseK = 3

// verdict is the fit of one series and its judgement.
type verdict struct {
	name   string
	n      int     // samples fitted
	slope  float64 // units per second
	change float64 // slope × the fitted span
	resid  float64 // residual standard deviation
	limit  float64 // the most |change| may be
	ok     bool
	reason string // why it failed, or why it was not judged
}

// fitLine returns the least-squares line y = a + b·x through the points
// and the standard deviation of the residuals (n−2 degrees of freedom;
// 0 for fewer than 3 points).
func fitLine(x, y []float64) (a, b, resid float64) {
	n := float64(len(x))
	var mx, my float64
	for i := range x {
		mx += x[i]
		my += y[i]
	}
	mx, my = mx/n, my/n
	var sxx, sxy float64
	for i := range x {
		sxx += (x[i] - mx) * (x[i] - mx)
		sxy += (x[i] - mx) * (y[i] - my)
	}
	if sxx > 0 {
		b = sxy / sxx
	}
	a = my - b*mx
	if len(x) > 2 {
		var ss float64
		for i := range x {
			r := y[i] - (a + b*x[i])
			ss += r * r
		}
		resid = math.Sqrt(ss / (n - 2))
	}
	return a, b, resid
}

// judge fits the samples taken at or after warmup seconds (t in seconds)
// and checks the slope is within noise. Fewer than minFit samples there
// fail: a run too short to judge must not pass.
func judge(name string, t, y []float64, warmup, floor float64) verdict {
	v := verdict{name: name}
	var xs, ys []float64
	for i := range t {
		if t[i] >= warmup {
			xs, ys = append(xs, t[i]), append(ys, y[i])
		}
	}
	v.n = len(xs)
	if v.n < minFit {
		v.reason = fmt.Sprintf("%d samples after the %.0f s warm-up, want at least %d: run longer or sample more often", v.n, warmup, minFit)
		return v
	}
	_, v.slope, v.resid = fitLine(xs, ys)
	v.change = v.slope * (xs[len(xs)-1] - xs[0])
	v.limit = max(noiseK*v.resid, floor)
	v.ok = math.Abs(v.change) <= v.limit
	if !v.ok {
		v.reason = "the trend exceeds the limit: a leak?"
	}
	return v
}

// minFit is the fewest samples judge fits a line to.
const minFit = 5
