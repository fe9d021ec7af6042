package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aperio-dev/aperio/bench/internal/waitfor"
)

// flapHost is the hostname of the flap mode's service.
const flapHost = "flap.test"

// flapRampSkip is how much of a step's start the observed utilization
// leaves out, the load still changing then: at most half the step.
const flapRampSkip = 2 * time.Second

// stepResult is what one flap step saw.
type stepResult struct {
	step     flapStep
	from, to time.Time
	calls    []hookCall
	// Utilization and instances seen by the server after flapRampSkip;
	// samples is 0 when none was taken.
	samples                   int
	utilMin, utilMax, utilEnd float64
	instMin, instMax          int
}

// runFlap runs both phases of flapPlan(o) against one server and counts
// the provider's calls per step. Its provider starts an instance on
// scale_out and stops the newest one on scale_in, as a real provider acting
// on desired would, so that the load stays where the plan puts it.
func runFlap(ctx context.Context, h *harness, o flapOpts, stdout io.Writer) error {
	steps, err := flapPlan(o)
	if err != nil {
		return err
	}
	h.logf("flap: %d steps, about %v", len(steps), planLength(steps).Round(time.Second))
	be, err := h.startBackend(o.work)
	if err != nil {
		return err
	}
	prov, err := startProvider(0)
	if err != nil {
		return err
	}
	defer h.stopProvider(prov)
	srv, err := h.startServer(serverOpts{maxBurst: 4 * o.capacity, records: 1})
	if err != nil {
		return err
	}
	defer srv.proc.stop(15 * time.Second)
	block := scalingBlock{url: prov.url, min: 1, max: 2, coldStart: 30 * time.Second,
		window: o.window, cooldown: o.cooldown, target: o.target}
	copts := clientOpts{servers: []*server{srv}, backend: be, hostnames: []string{flapHost}, maxConcurrent: o.capacity, scaling: block}

	var (
		mu      sync.Mutex // guards the following fields
		started []*proc    // clients the provider started, oldest first
		notes   []string   // what the provider could not do
	)
	prov.onAny(func(c hookCall) {
		switch c.Reason {
		case reasonScaleOut:
			mu.Lock()
			defer mu.Unlock()
			p, err := h.startClient(copts)
			if err != nil {
				notes = append(notes, "scale_out: "+err.Error())
				return
			}
			started = append(started, p)
		case reasonScaleIn:
			mu.Lock()
			if len(started) == 0 {
				notes = append(notes, "scale_in with no started client to stop")
				mu.Unlock()
				return
			}
			p := started[len(started)-1]
			started = started[:len(started)-1]
			mu.Unlock()
			if err := h.stopClient(p); err != nil {
				mu.Lock()
				notes = append(notes, "scale_in: "+err.Error())
				mu.Unlock()
			}
		default:
			mu.Lock()
			notes = append(notes, "unexpected "+c.Reason)
			mu.Unlock()
		}
	})

	first, err := h.startClient(copts)
	if err != nil {
		return err
	}
	defer first.stop(15 * time.Second)
	err = waitfor.Until(ctx, readyTimeout, 200*time.Millisecond, "the first client's record", func(ctx context.Context) (bool, error) {
		recs, err := h.recordsOn(ctx, srv)
		if err != nil {
			return false, err
		}
		r, ok := recs[flapHost]
		return ok && r.Instances == 1 && r.Capacity == o.capacity, nil
	})
	if err != nil {
		return err
	}

	samp := &sampler{h: h, srv: srv}
	sampCtx, stopSampling := context.WithCancel(ctx)
	var swg sync.WaitGroup
	swg.Go(func() { samp.run(sampCtx) })
	defer func() {
		stopSampling()
		swg.Wait()
	}()

	visitors := &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4 * maxLimit}}
	ld := &load{ctx: ctx, c: visitors, srv: srv, host: flapHost, key: "flap", timeout: o.work + time.Minute}
	defer ld.close()

	began := time.Now()
	var results []stepResult
	for i, st := range steps {
		from := time.Now()
		ld.set(st.workers)
		t := time.NewTimer(st.hold)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		to := time.Now()
		r := samp.over(from.Add(min(flapRampSkip, st.hold/2)), to)
		r.step, r.from, r.to, r.calls = st, from, to, prov.callsBetween(from, to)
		results = append(results, r)
		h.logf("flap phase %d step %d/%d: level %.2f (%d in flight) for %v: %s, %d call(s) %s",
			st.phase, i+1, len(steps), st.level, st.workers, st.hold, r.seen(), len(r.calls), reasons(r.calls))
	}
	ld.close()
	before := prov.callsBetween(time.Time{}, began)
	mu.Lock()
	defer mu.Unlock()
	printFlap(stdout, o, results, before, ld, notes)
	return nil
}

func reasons(cs []hookCall) string {
	if len(cs) == 0 {
		return ""
	}
	s := "("
	for i, c := range cs {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s %d->%d", c.Reason, c.Current, c.Desired)
	}
	return s + ")"
}

func printFlap(w io.Writer, o flapOpts, results []stepResult, before []hookCall, ld *load, notes []string) {
	fmt.Fprintf(w, "\n== Flapping: target %g, window %v, cooldown %v, max_concurrent %d per client, scaling min 1 max 2, backend work %v\n",
		o.target, o.window, o.cooldown, o.capacity, o.work)
	out, in, c, wk := o.target, o.target/2, o.capacity, levelWorkers(o)
	fmt.Fprintf(w, "   thresholds: scale out at utilization >= %g for a window, scale in below %g for 4 windows; levels aimed %g%% from them\n",
		out, in, 100*o.margin)
	lo, hi := utilization(wk.bandLow, c, 1), utilization(wk.bandHigh, c, 1)
	fmt.Fprintf(w, "   phase 1, inside the band, every window: %d and %d in flight of %d = utilization %.3f (%+.1f%% of the scale-in threshold) and %.3f (%+.1f%% of the scale-out threshold)\n",
		wk.bandLow, wk.bandHigh, c, lo, 100*offThreshold(lo, in), hi, 100*offThreshold(hi, out))
	if o.crossings > 0 {
		up, down := utilization(wk.crossHigh, c, 1), utilization(wk.crossLow, c, 2)
		fmt.Fprintf(w, "   phase 2, %d steps across, alternately: %d in flight = %.3f of 1 client (%+.1f%% of the scale-out threshold), and %d = %.3f of 2 clients (%+.1f%% of the scale-in threshold)\n",
			o.crossings, wk.crossHigh, up, 100*offThreshold(up, out), wk.crossLow, down, 100*offThreshold(down, in))
	}
	fmt.Fprintf(w, "%-6s %6s %10s %-24s %-26s %9s %s\n", "phase", "steps", "length", "utilization seen", "instances seen", "expected", "seen")
	for phase := 1; phase <= 2; phase++ {
		var (
			n, expected    int
			length         time.Duration
			seen           []hookCall
			umin, umax     = 2.0, -1.0
			imin, imax     = 1 << 30, -1
			sampled, wrong int
		)
		for _, r := range results {
			if r.step.phase != phase {
				continue
			}
			n++
			length += r.to.Sub(r.from)
			seen = append(seen, r.calls...)
			if r.step.want != "" {
				expected++
			}
			if !stepMatches(r) {
				wrong++
			}
			if r.samples > 0 {
				sampled++
				umin, umax = min(umin, r.utilMin), max(umax, r.utilMax)
				imin, imax = min(imin, r.instMin), max(imax, r.instMax)
			}
		}
		if n == 0 {
			continue
		}
		util, inst := "-", "-"
		if sampled > 0 {
			util = fmt.Sprintf("%.3f..%.3f", umin, umax)
			inst = fmt.Sprintf("%d..%d", imin, imax)
		}
		fmt.Fprintf(w, "%-6d %6d %10v %-24s %-26s %9d %d %s\n", phase, n, length.Round(time.Second), util, inst, expected, len(seen), countReasons(seen))
		if wrong > 0 {
			fmt.Fprintf(w, "       %d step(s) of phase %d saw other calls than expected:\n", wrong, phase)
			for i, r := range results {
				if r.step.phase == phase && !stepMatches(r) {
					fmt.Fprintf(w, "       step %d, level %.2f: want %q, got %s\n", i+1, r.step.level, r.step.want, reasons(r.calls))
				}
			}
		}
	}
	if phase2 := phaseSteps(results, 2); len(phase2) > 0 {
		fmt.Fprintf(w, "   phase 2 steps:\n")
		for _, r := range phase2 {
			got := "none"
			if len(r.calls) > 0 {
				got = reasons(r.calls)
				got = got[1 : len(got)-1]
				got += fmt.Sprintf(" %v into the step", r.calls[0].At.Sub(r.from).Round(100*time.Millisecond))
			}
			fmt.Fprintf(w, "     level %.2f (%d in flight) for %v: %s; want %s, got %s\n",
				r.step.level, r.step.workers, r.step.hold, r.seen(), r.step.want, got)
		}
	}
	for phase, what := range []string{1: "per step inside the band (want 0)", 2: "per crossing (want 1)"} {
		if steps := phaseSteps(results, phase); len(steps) > 0 {
			calls, lo, hi := 0, 1<<30, -1
			for _, r := range steps {
				calls += len(r.calls)
				lo, hi = min(lo, len(r.calls)), max(hi, len(r.calls))
			}
			fmt.Fprintf(w, "   phase %d calls %s: %.2f (%d call(s) over %d step(s), %d..%d per step)\n",
				phase, what, float64(calls)/float64(len(steps)), calls, len(steps), lo, hi)
		}
	}
	fmt.Fprintf(w, "   calls before phase 1: %d; load requests answered 200: %d, others: %d\n", len(before), ld.ok.Load(), ld.failed.Load())
	for _, n := range notes {
		fmt.Fprintf(w, "   provider: %s\n", n)
	}
}

// seen says what the server reported during the step.
func (r stepResult) seen() string {
	if r.samples == 0 {
		return "no utilization sample"
	}
	return fmt.Sprintf("utilization %.3f..%.3f (last %.3f), %d..%d instance(s), %d sample(s)",
		r.utilMin, r.utilMax, r.utilEnd, r.instMin, r.instMax, r.samples)
}

// stepMatches reports whether a step saw exactly the calls it should: one
// of its reason, or none.
func stepMatches(r stepResult) bool {
	if r.step.want == "" {
		return len(r.calls) == 0
	}
	return len(r.calls) == 1 && r.calls[0].Reason == r.step.want
}

func phaseSteps(results []stepResult, phase int) []stepResult {
	var out []stepResult
	for _, r := range results {
		if r.step.phase == phase {
			out = append(out, r)
		}
	}
	return out
}

func countReasons(cs []hookCall) string {
	if len(cs) == 0 {
		return ""
	}
	m := map[string]int{}
	for _, c := range cs {
		m[c.Reason]++
	}
	s := "("
	for _, r := range []string{reasonColdStart, reasonScaleOut, reasonScaleIn} {
		if m[r] > 0 {
			if len(s) > 1 {
				s += ", "
			}
			s += fmt.Sprintf("%s %d", r, m[r])
		}
	}
	return s + ")"
}

// load holds a number of requests in flight for one hostname: each worker
// sends its next request when the previous one is answered. It is safe for
// concurrent use; close stops every worker and waits for it.
type load struct {
	ctx        context.Context // the harness's: every request ends with it
	c          *http.Client
	srv        *server
	host, key  string
	timeout    time.Duration // of one request
	ok, failed atomic.Int64
	wg         sync.WaitGroup
	mu         sync.Mutex      // guards the following field
	stops      []chan struct{} // one per running worker
}

// set changes the number of workers to n. A stopped worker finishes the
// request it has in flight.
func (l *load) set(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.stops) < n {
		stop := make(chan struct{})
		l.stops = append(l.stops, stop)
		l.wg.Go(func() { l.worker(stop) })
	}
	for len(l.stops) > n {
		close(l.stops[len(l.stops)-1])
		l.stops = l.stops[:len(l.stops)-1]
	}
}

func (l *load) worker(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-l.ctx.Done():
			return
		default:
		}
		ctx, cancel := context.WithTimeout(l.ctx, l.timeout)
		a := visit(ctx, l.c, l.srv, l.host, "/"+l.key+"/x")
		cancel()
		if a.status == http.StatusOK {
			l.ok.Add(1)
			continue
		}
		l.failed.Add(1)
		// A failing request fails fast: pace the retries.
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-t.C:
		case <-stop:
			t.Stop()
			return
		case <-l.ctx.Done():
			t.Stop()
			return
		}
	}
}

// close stops every worker and waits for them: at most one request
// timeout.
func (l *load) close() {
	l.set(0)
	l.wg.Wait()
}

// sampler reads the flap hostname's record every second: the server's own
// utilization, instances and capacity. It is safe for concurrent use.
type sampler struct {
	h   *harness
	srv *server

	mu      sync.Mutex // guards the following field
	samples []sample
}

type sample struct {
	at        time.Time
	util      float64 // -1 when the server could not measure it
	instances int
}

func (s *sampler) run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		recs, err := s.h.recordsOn(ctx, s.srv)
		if r, ok := recs[flapHost]; err == nil && ok {
			sm := sample{at: time.Now(), util: -1, instances: r.Instances}
			if r.Utilization != nil {
				sm.util = *r.Utilization
			}
			s.mu.Lock()
			s.samples = append(s.samples, sm)
			s.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// over summarizes the samples taken in [from, to).
func (s *sampler) over(from, to time.Time) stepResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := stepResult{utilMin: 2, utilMax: -1, instMin: 1 << 30, instMax: -1}
	for _, sm := range s.samples {
		if sm.at.Before(from) || !sm.at.Before(to) {
			continue
		}
		r.samples++
		r.utilMin, r.utilMax = min(r.utilMin, sm.util), max(r.utilMax, sm.util)
		r.instMin, r.instMax = min(r.instMin, sm.instances), max(r.instMax, sm.instances)
		r.utilEnd = sm.util
	}
	if r.samples == 0 {
		r.utilMin, r.utilMax, r.instMin, r.instMax = 0, 0, 0, 0
	}
	return r
}
