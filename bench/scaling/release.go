package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aperio-dev/aperio/bench/internal/waitfor"
)

// releaseRun is one measured cold start.
type releaseRun struct {
	release  time.Duration // the instance's connected_at to the first held request at the backend
	last     time.Duration // connected_at to the burst's last answer
	calls    int           // provider calls for the run's hostname
	statuses map[int]int
	arrived  int   // requests that reached the backend
	peak     int   // most requests the backend served at once
	firstErr error // the first visitor transport error
}

// releaseResult is one burst size's runs.
type releaseResult struct {
	n      int
	runs   []releaseRun
	failed []string // why the failed runs failed
}

// runRelease measures, per burst size, the release of held requests with
// real processes. Each burst size gets a server of its own (embedded
// store) and runs+1 hostnames, armed by one client that declares them all
// and leaves; each run is the cold start of a hostname of its own, so that
// no run waits out the previous one's cold_start or cooldown, and the
// server stays up across runs as a real one would. The first run is a
// warm-up, not counted.
func runRelease(ctx context.Context, h *harness, o releaseOpts, stdout io.Writer) error {
	be, err := h.startBackend(o.work)
	if err != nil {
		return err
	}
	prov, err := startProvider(0)
	if err != nil {
		return err
	}
	defer h.stopProvider(prov)
	var results []releaseResult
	for _, n := range o.bursts {
		res, err := releaseBurst(ctx, h, o, be, prov, n)
		if err != nil {
			return fmt.Errorf("burst %d: %w", n, err)
		}
		results = append(results, res)
	}
	printRelease(stdout, o, results, prov.badCalls())
	return nil
}

func releaseBurst(ctx context.Context, h *harness, o releaseOpts, be *backend, prov *provider, n int) (releaseResult, error) {
	res := releaseResult{n: n}
	hosts := make([]string, o.runs+1)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("b%d-r%d.release.test", n, i)
	}
	srv, err := h.startServer(serverOpts{maxBurst: n, records: len(hosts)})
	if err != nil {
		return res, err
	}
	defer srv.proc.stop(15 * time.Second)
	block := scalingBlock{url: prov.url, min: 0, max: 1, coldStart: o.coldStart,
		window: 15 * time.Second, cooldown: 60 * time.Second, target: 0.8}
	if err := h.armHostnames(ctx, []*server{srv}, be, hosts, o.limit, block); err != nil {
		return res, err
	}
	consecutive := 0
	for i, host := range hosts {
		key := fmt.Sprintf("b%d-r%d", n, i)
		r, err := releaseOnce(ctx, h, o, srv, be, prov, host, key, n, block)
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		what := fmt.Sprintf("run %d/%d", i, o.runs)
		if i == 0 {
			what = "warm-up (not counted)"
		}
		if err != nil {
			h.logf("burst %d, %s failed: %v", n, what, err)
			if i > 0 {
				res.failed = append(res.failed, err.Error())
			}
			if consecutive++; consecutive >= 3 {
				return res, fmt.Errorf("three runs in a row failed, the last: %w", err)
			}
			continue
		}
		consecutive = 0
		h.logf("burst %d, %s: release %s ms, last answer %s ms after connected_at, %d call(s), answers %s, peak %d of %d",
			n, what, ms(r.release), ms(r.last), r.calls, statusList(r.statuses), r.peak, o.limit)
		if i > 0 {
			res.runs = append(res.runs, r)
		}
	}
	return res, nil
}

// armHostnames has one client declare block for hosts on every server,
// waits until each server has the records, stops the client, and waits
// until every server would hold a request for each hostname (a cold
// start with nothing serving it).
func (h *harness) armHostnames(ctx context.Context, servers []*server, be *backend, hosts []string, limit int, block scalingBlock) error {
	cl, err := h.startClient(clientOpts{servers: servers, backend: be, hostnames: hosts, maxConcurrent: limit, scaling: block})
	if err != nil {
		return err
	}
	for _, s := range servers {
		err := waitfor.Until(ctx, readyTimeout, 100*time.Millisecond, "the declaring client's records on "+s.base, func(ctx context.Context) (bool, error) {
			if cl.exited() {
				return false, fmt.Errorf("declaring client exited: %v; log ends: %s", cl.err, logTail(cl.log))
			}
			recs, err := h.recordsOn(ctx, s)
			if err != nil {
				return false, err
			}
			for _, host := range hosts {
				if _, ok := recs[host]; !ok {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			cl.stop(5 * time.Second)
			return err
		}
	}
	if err := h.stopClient(cl); err != nil {
		return err
	}
	for _, s := range servers {
		for _, host := range hosts {
			err := waitfor.Until(ctx, readyTimeout, 100*time.Millisecond, host+" armed on "+s.base, func(ctx context.Context) (bool, error) {
				return h.wouldHold(ctx, s, host)
			})
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// releaseOnce is one cold start of host: a burst of n requests while
// nothing serves it; the provider, called, waits until the whole burst is
// held, then starts the instance. Release is the instance's connected_at
// (the server's clock) to the first request's arrival at the backend (the
// backend's clock, the same machine's).
func releaseOnce(ctx context.Context, h *harness, o releaseOpts, srv *server, be *backend, prov *provider, host, key string, n int, block scalingBlock) (releaseRun, error) {
	var r releaseRun
	runCtx, cancel := context.WithTimeout(ctx, o.coldStart+2*time.Minute)
	defer cancel()
	started := make(chan error, 1)
	var answered atomic.Int64
	var (
		mu       sync.Mutex // guards the following fields
		instance *proc
		over     bool // the run has ended: start nothing more
	)
	var once sync.Once
	prov.on(host, func(hookCall) {
		once.Do(func() {
			err := waitfor.Until(runCtx, o.coldStart, 10*time.Millisecond, fmt.Sprintf("%d held or answered requests", n), func(ctx context.Context) (bool, error) {
				q, err := h.queued(ctx, srv)
				return q+int(answered.Load()) >= n, err
			})
			if err == nil {
				mu.Lock()
				if over {
					err = errors.New("the run ended before the burst was held")
				} else {
					instance, err = h.startClient(clientOpts{servers: []*server{srv}, backend: be, hostnames: []string{host}, maxConcurrent: o.limit, scaling: block})
				}
				mu.Unlock()
			}
			started <- err
		})
	})
	defer func() {
		prov.on(host, nil)
		mu.Lock()
		over = true
		p := instance
		mu.Unlock()
		if p != nil {
			if err := h.stopClient(p); err != nil {
				h.logf("%v", err)
			}
		}
	}()
	if err := waitfor.Until(runCtx, 10*time.Second, 50*time.Millisecond, host+" armed", func(ctx context.Context) (bool, error) {
		return h.wouldHold(ctx, srv, host)
	}); err != nil {
		return r, err
	}

	visitor, tr := h2cVisitor()
	defer tr.CloseIdleConnections()
	got, err := collect(runCtx, burst(runCtx, visitor, []*server{srv}, host, key, n, &answered), n)
	r.statuses, r.firstErr = got.statuses, got.firstErr
	if err != nil {
		return r, err
	}
	select {
	case err := <-started:
		if err != nil {
			return r, fmt.Errorf("provider: %w; answers %s, first transport error %v", err, statusList(r.statuses), r.firstErr)
		}
	case <-runCtx.Done():
		return r, errors.New("the provider never started the instance: no call?")
	}
	if r.firstErr != nil {
		h.logf("%s: answers %s, first transport error: %v", host, statusList(r.statuses), r.firstErr)
	}
	cs, err := h.clientsFor(runCtx, srv, host)
	if err != nil {
		return r, err
	}
	if len(cs) != 1 {
		return r, fmt.Errorf("%d clients serve %s, want 1", len(cs), host)
	}
	st, ok, err := h.backendStats(runCtx, be, key)
	if err != nil {
		return r, err
	}
	if !ok {
		return r, fmt.Errorf("no request reached the backend; answers %s", statusList(r.statuses))
	}
	at := cs[0].ConnectedAt
	r.release, r.last = st.First.Sub(at), got.last.Sub(at)
	r.arrived, r.peak = st.Count, st.Peak
	r.calls = len(prov.callsFor(host))
	return r, nil
}

func printRelease(w io.Writer, o releaseOpts, results []releaseResult, bad int) {
	fmt.Fprintf(w, "\n== Release of held requests, real processes (server, client, backend, visitors+provider): instance connected_at -> first held request at the backend\n")
	fmt.Fprintf(w, "   %d measured runs per burst after one warm-up; instance max_concurrent %d; backend work %v per request; p99 is by nearest rank (under 100 runs, the largest)\n",
		o.runs, o.limit, o.work)
	fmt.Fprintf(w, "%-6s %5s %8s %8s %8s %8s %8s  %-11s %-14s %-16s %-10s %s\n",
		"burst", "runs", "p50_ms", "p90_ms", "p99_ms", "max_ms", "min_ms", "calls/cold", "answers_200", "last_p50/max_ms", "peak/limit", "failed")
	for _, res := range results {
		var rel, last []time.Duration
		calls, ok, all, peak := 0, 0, 0, 0
		for _, r := range res.runs {
			rel = append(rel, r.release)
			last = append(last, r.last)
			calls += r.calls
			ok += r.statuses[http.StatusOK]
			all += res.n
			peak = max(peak, r.peak)
		}
		s, l := summarize(rel), summarize(last)
		perCold := "-"
		if len(res.runs) > 0 {
			perCold = fmt.Sprintf("%.2f", float64(calls)/float64(len(res.runs)))
		}
		fmt.Fprintf(w, "%-6d %5d %8s %8s %8s %8s %8s  %-11s %-14s %-16s %-10s %d\n",
			res.n, len(res.runs), ms(s.p50), ms(s.p90), ms(s.p99), ms(s.max), ms(s.min), perCold,
			fmt.Sprintf("%d/%d", ok, all), ms(l.p50)+"/"+ms(l.max), fmt.Sprintf("%d/%d", peak, o.limit), len(res.failed))
		for _, f := range res.failed {
			fmt.Fprintf(w, "       failed run: %s\n", truncate(f, 200))
		}
	}
	if bad > 0 {
		fmt.Fprintf(w, "malformed provider calls: %d\n", bad)
	}
	fmt.Fprintf(w, "in-process figure (one process, one garbage collector): go test -run XXX -bench BenchmarkScalingRelease -benchtime 1x ./internal/server/\n")
}
