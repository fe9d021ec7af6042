package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aperio-dev/aperio/bench/internal/waitfor"
)

// callsRun is one cold start served by several servers.
type callsRun struct {
	calls    int // provider calls for the run's hostname
	keys     int // distinct Idempotency-Keys among them
	statuses map[int]int
	// From the servers' logs, over the run: decisions deferred because
	// another server held the record's lease (a call in flight), and
	// decisions ended without a call because another server's call
	// answered them.
	deferred, settled int
}

// Log lines of the autoscale controller that the calls mode counts: a
// decision that met another server's live lease (debug), and one that
// ended without a call of its own (info, with its hostname).
const (
	logDeferred = `msg="scaling call deferred"`
	logDropped  = `msg="scaling decision dropped"`
)

// maxLogRead bounds what the calls mode reads of one server's log per run.
const maxLogRead = 64 << 20

// countLeaseLines counts, in a server's log text, the decisions deferred
// on another server's lease (any hostname: one hostname is in play at a
// time) and those of host dropped without a call.
func countLeaseLines(r io.Reader, host string) (deferred, dropped int, err error) {
	sc := bufio.NewScanner(io.LimitReader(r, maxLogRead))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	hostKV := "hostname=" + host
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.Contains(line, logDeferred):
			deferred++
		case strings.Contains(line, logDropped) && hasField(line, hostKV):
			dropped++
		}
	}
	return deferred, dropped, sc.Err()
}

// hasField reports whether the logfmt line holds kv as a whole field.
func hasField(line, kv string) bool {
	for f := range strings.FieldsSeq(line) {
		if f == kv {
			return true
		}
	}
	return false
}

// logSize returns the size of the log at path: where a run's lines start.
func logSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// countLeaseLinesFrom counts countLeaseLines in the log at path from
// offset on.
func countLeaseLinesFrom(path string, offset int64, host string) (deferred, dropped int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return 0, 0, err
	}
	return countLeaseLines(f, host)
}

// callsResult is one number of servers' runs.
type callsResult struct {
	servers int
	burst   int
	runs    []callsRun
	failed  []string
}

// runCalls counts the provider calls one cold start makes when a burst is
// split across several servers sharing one PostgreSQL database. Each
// number of servers gets fresh servers; each run is the cold start of a
// hostname of its own, armed on every server by one client that holds a
// tunnel to each and leaves. The provider holds each call for
// o.providerDelay before it answers, then, on the first call, waits until
// every server holds its share of the burst and starts one instance
// connected to every server; calls arriving until settle after the last
// answer are counted, and so are the decisions the servers' logs (at debug
// level) show deferred on another server's lease or dropped for another
// server's call.
func runCalls(ctx context.Context, h *harness, o callsOpts, stdout io.Writer) error {
	be, err := h.startBackend(time.Millisecond)
	if err != nil {
		return err
	}
	prov, err := startProvider(o.providerDelay)
	if err != nil {
		return err
	}
	defer h.stopProvider(prov)
	// One harness run never reuses a hostname, even on a database an
	// earlier run left records in.
	tag := randomToken()[len("bench-"):][:8]
	var results []callsResult
	for _, n := range o.servers {
		res, err := callsServers(ctx, h, o, be, prov, n, tag)
		if err != nil {
			return fmt.Errorf("%d servers: %w", n, err)
		}
		results = append(results, res)
	}
	printCalls(stdout, o, results)
	return nil
}

func callsServers(ctx context.Context, h *harness, o callsOpts, be *backend, prov *provider, n int, tag string) (callsResult, error) {
	res := callsResult{servers: n, burst: o.burst}
	var servers []*server
	defer func() {
		for _, s := range servers {
			s.proc.stop(15 * time.Second)
		}
	}()
	for range n {
		s, err := h.startServer(serverOpts{dsn: o.dsn, maxBurst: o.burst, records: o.runs, logLevel: "debug"})
		if err != nil {
			return res, err
		}
		servers = append(servers, s)
	}
	hosts := make([]string, o.runs)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("s%d-r%d-%s.calls.test", n, i, tag)
	}
	block := scalingBlock{url: prov.url, min: 0, max: 1, coldStart: o.coldStart,
		window: 15 * time.Second, cooldown: 60 * time.Second, target: 0.8}
	if err := h.armHostnames(ctx, servers, be, hosts, 10, block); err != nil {
		return res, err
	}
	for i, host := range hosts {
		r, err := callsOnce(ctx, h, o, servers, be, prov, host, fmt.Sprintf("s%d-r%d", n, i), block)
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		if err != nil {
			h.logf("%d servers, run %d/%d failed: %v", n, i+1, o.runs, err)
			res.failed = append(res.failed, err.Error())
			continue
		}
		h.logf("%d servers, run %d/%d: %d call(s), %d distinct key(s), %d decision(s) deferred on a lease, %d dropped for another server's call, answers %s",
			n, i+1, o.runs, r.calls, r.keys, r.deferred, r.settled, statusList(r.statuses))
		res.runs = append(res.runs, r)
	}
	return res, nil
}

func callsOnce(ctx context.Context, h *harness, o callsOpts, servers []*server, be *backend, prov *provider, host, key string, block scalingBlock) (callsRun, error) {
	var r callsRun
	runCtx, cancel := context.WithTimeout(ctx, o.coldStart+2*time.Minute)
	defer cancel()
	var (
		mu       sync.Mutex // guards the following fields
		instance *proc
		over     bool
	)
	started := make(chan error, 1)
	var answered atomic.Int64
	var once sync.Once
	prov.on(host, func(hookCall) {
		once.Do(func() {
			err := waitfor.Until(runCtx, o.coldStart, 10*time.Millisecond, fmt.Sprintf("%d held requests on %d servers", o.burst, len(servers)), func(ctx context.Context) (bool, error) {
				total := 0
				for _, s := range servers {
					q, err := h.queued(ctx, s)
					if err != nil {
						return false, err
					}
					total += q
				}
				return total+int(answered.Load()) >= o.burst, nil
			})
			if err == nil {
				mu.Lock()
				if over {
					err = errors.New("the run ended before the burst was held")
				} else {
					instance, err = h.startClient(clientOpts{servers: servers, backend: be, hostnames: []string{host}, maxConcurrent: 10, scaling: block})
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
	for _, s := range servers {
		if err := waitfor.Until(runCtx, 10*time.Second, 50*time.Millisecond, host+" armed on "+s.base, func(ctx context.Context) (bool, error) {
			return h.wouldHold(ctx, s, host)
		}); err != nil {
			return r, err
		}
	}
	offsets := make([]int64, len(servers))
	for i, s := range servers {
		offsets[i] = logSize(s.proc.log)
	}
	visitor, tr := h2cVisitor()
	defer tr.CloseIdleConnections()
	got, err := collect(runCtx, burst(runCtx, visitor, servers, host, key, o.burst, &answered), o.burst)
	r.statuses = got.statuses
	if err != nil {
		return r, err
	}
	select {
	case err := <-started:
		if err != nil {
			return r, fmt.Errorf("provider: %w; answers %s, first transport error %v", err, statusList(got.statuses), got.firstErr)
		}
	case <-runCtx.Done():
		return r, errors.New("the provider never started the instance: no call?")
	}
	// Calls a server makes late (after a lease or a cooldown) count too.
	t := time.NewTimer(o.settle)
	select {
	case <-t.C:
	case <-runCtx.Done():
		t.Stop()
		return r, runCtx.Err()
	}
	calls := prov.callsFor(host)
	keys := map[string]bool{}
	for _, c := range calls {
		keys[c.Key] = true
	}
	r.calls, r.keys = len(calls), len(keys)
	for i, s := range servers {
		d, x, err := countLeaseLinesFrom(s.proc.log, offsets[i], host)
		if err != nil {
			return r, fmt.Errorf("reading %s: %w", s.proc.log, err)
		}
		r.deferred += d
		r.settled += x
	}
	return r, nil
}

func printCalls(w io.Writer, o callsOpts, results []callsResult) {
	fmt.Fprintf(w, "\n== Provider calls per cold start decision, N servers on one PostgreSQL, burst of %d split round-robin across them\n", o.burst)
	fmt.Fprintf(w, "   the provider holds each call %v before it answers; target: exactly 1 call per decision\n", o.providerDelay)
	fmt.Fprintf(w, "%-8s %5s %16s %10s %10s %14s %14s %-14s %s\n", "servers", "runs", "calls/decision", "min..max", "keys", "lease_waits", "dropped", "answers_200", "failed")
	for _, res := range results {
		calls, keys, ok, all, deferred, settled := 0, 0, 0, 0, 0, 0
		lo, hi := 1<<30, -1
		for _, r := range res.runs {
			calls += r.calls
			keys += r.keys
			deferred += r.deferred
			settled += r.settled
			lo, hi = min(lo, r.calls), max(hi, r.calls)
			ok += r.statuses[http.StatusOK]
			all += res.burst
		}
		per, rng, k, dw, ds := "-", "-", "-", "-", "-"
		if n := float64(len(res.runs)); n > 0 {
			per = fmt.Sprintf("%.2f", float64(calls)/n)
			rng = fmt.Sprintf("%d..%d", lo, hi)
			k = fmt.Sprintf("%.2f", float64(keys)/n)
			dw = fmt.Sprintf("%.2f", float64(deferred)/n)
			ds = fmt.Sprintf("%.2f", float64(settled)/n)
		}
		fmt.Fprintf(w, "%-8d %5d %16s %10s %10s %14s %14s %-14s %d\n", res.servers, len(res.runs), per, rng, k, dw, ds, fmt.Sprintf("%d/%d", ok, all), len(res.failed))
		for _, f := range res.failed {
			fmt.Fprintf(w, "         failed run: %s\n", truncate(f, 200))
		}
	}
	fmt.Fprintf(w, "(keys: distinct Idempotency-Keys per decision; lease_waits: decisions per cold start that the servers deferred because another server's call held the lease; dropped: decisions per cold start ended without a call, another server's call answering them; both from the servers' logs)\n")
}
