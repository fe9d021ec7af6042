package server_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/server"
)

// The scaling benchmarks print what autoscaling costs and how long it
// takes. They measure; they do not assert targets. Run them with
//
//	go test -run XXX -bench Scaling -benchtime 1x ./internal/server/
//
// Each benchmark does its whole measurement once per invocation, so
// -benchtime 1x is the intended setting; the figures come out as custom
// metrics (b.ReportMetric) and, in more detail, as b.Logf lines.
//
// Visitors, server, client and backend share one process here, so the
// garbage of the whole harness is collected at random moments, releases
// included; -scaling.gc=false shows the release without the collection
// that BenchmarkScalingRelease makes before each one.

// scalingRuns is the number of cold starts measured per burst size for the
// release latency.
var scalingGC = flag.Bool("scaling.gc", true, "collect garbage before each release in BenchmarkScalingRelease")

var scalingRuns = flag.Int("scaling.runs", 100, "cold starts per burst size in BenchmarkScalingRelease")

const (
	coldHost = "cold.test"
	warmHost = "warm.test"
	// instanceLimit is the started instance's max_concurrent.
	instanceLimit = 10
)

// probeBackend records when each request reaches it and how many it
// serves at once. Each request is held for work, so that a release
// that ignored the instance's limit would show as a peak above it.
type probeBackend struct {
	work time.Duration

	mu       sync.Mutex // guards the following fields
	arrivals []time.Time
	inflight int
	peak     int
}

func (p *probeBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	p.mu.Lock()
	p.arrivals = append(p.arrivals, now)
	p.inflight++
	p.peak = max(p.peak, p.inflight)
	p.mu.Unlock()
	if p.work > 0 {
		time.Sleep(p.work) // simulated backend work, not a wait for state
	}
	io.Copy(io.Discard, r.Body)
	io.WriteString(w, "ok")
	p.mu.Lock()
	p.inflight--
	p.mu.Unlock()
}

// reset forgets everything recorded so far.
func (p *probeBackend) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.arrivals, p.inflight, p.peak = nil, 0, 0
}

// figures returns the earliest arrival, the number of arrivals and the
// peak concurrency since the last reset.
func (p *probeBackend) figures() (first time.Time, n, peak int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, a := range p.arrivals {
		if first.IsZero() || a.Before(first) {
			first = a
		}
	}
	return first, len(p.arrivals), p.peak
}

// fakeProvider is a scaling hook receiver: it counts calls and signals
// the first of each cold start on called. It starts nothing itself: the
// benchmark starts the instance once the burst is held (see
// BenchmarkScalingRelease).
type fakeProvider struct {
	srv    *httptest.Server
	calls  atomic.Int64
	called chan struct{} // one value per call, dropped when full

	mu    sync.Mutex // guards the following field
	times []time.Time
}

// takeTimes returns the times of the calls since the last take.
func (p *fakeProvider) takeTimes() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.times
	p.times = nil
	return t
}

func startProvider(tb testing.TB) *fakeProvider {
	tb.Helper()
	p := &fakeProvider{called: make(chan struct{}, 1)}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.calls.Add(1)
		p.mu.Lock()
		p.times = append(p.times, time.Now())
		p.mu.Unlock()
		select {
		case p.called <- struct{}{}:
		default:
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	tb.Cleanup(p.srv.Close)
	return p
}

// benchServerConfig is a scaling server whose limits do not get in the
// way of bursts of maxBurst requests from one visitor address.
func benchServerConfig(tb testing.TB, dataDir string, maxBurst int) server.Config {
	tb.Helper()
	cfg := serverConfig(tb)
	cfg.Store.DataDir = dataDir
	cfg.ScalingEnabled, cfg.Outbound.AllowHTTP, cfg.Outbound.AllowPrivate = true, true, true
	cfg.Router.MaxHeld = 2 * maxBurst
	cfg.Router.MaxConcurrentRequests = 2 * maxBurst
	cfg.Router.IPLimitMax = 10 * maxBurst
	cfg.Router.IPLimitRefill = float64(10 * maxBurst)
	cfg.MetricsToken = metricsToken // for queued
	cfg.ShutdownTimeout = 5 * time.Second
	// Every visitor of a burst comes from 127.0.0.1, and a burst of 1,000
	// needs more connections than the per-address cap allows.
	cfg.MaxConnectionsPerIP = 0
	return cfg
}

// scalingAgentConfig declares coldHost on s with a scaling block calling
// hookURL and a limit of instanceLimit.
func scalingAgentConfig(s *testServer, backendURL, hookURL string, coldStart, cooldown time.Duration) config.Client {
	ac := agentConfig(s, config.Service{Target: backendURL, Hostnames: []string{coldHost}})
	ac.Name = "cold"
	ac.MaxConcurrent = instanceLimit
	ac.DrainTimeout = 5 * time.Second
	ac.Scaling = &config.Scaling{URL: hookURL, Min: 0, Max: 3, ColdStart: coldStart,
		TargetUtilization: 0.8, Window: 15 * time.Second, Cooldown: cooldown}
	return ac
}

// armColdHost leaves an armed scaling record for coldHost in dataDir's
// store with nothing serving it: a client declares it on a first server,
// then both stop, as in TestColdStartFromZero.
func armColdHost(tb testing.TB, cfg server.Config, ac func(*testServer) config.Client) {
	tb.Helper()
	srv := startServer(tb, cfg, nil, nil)
	ag := startAgent(tb, srv, ac(srv))
	visitor := newVisitor(tb, srv)
	waitClients(tb, visitor, srv, 1)
	if err := ag.stop(); err != nil {
		tb.Fatalf("declaring client Run() = %v, want nil", err)
	}
	if err := srv.stop(); err != nil {
		tb.Fatalf("declaring server Serve() = %v, want nil", err)
	}
}

// newH2CVisitor returns a client multiplexing its requests over HTTP/2
// without TLS, so that thousands of concurrent requests need tens of
// connections rather than thousands.
func newH2CVisitor(tb testing.TB) (*http.Client, *http.Transport) {
	tb.Helper()
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Proxy: nil, Protocols: p, MaxIdleConnsPerHost: 1000}
	tb.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}, tr
}

// waitQueued polls until n requests are held on s.
func waitQueued(tb testing.TB, c *http.Client, s *testServer, n int) {
	tb.Helper()
	poll(tb, 60*time.Second, func() (bool, string) {
		got := queued(tb, c, s)
		return got >= n, fmt.Sprintf("aperio_requests_queued = %d, want %d", got, n)
	})
}

// connectedAt returns when s completed the handshake of its only client:
// the session's connected_at, taken before the router attaches it (so a
// latency measured from it includes the attach itself).
func connectedAt(tb testing.TB, c *http.Client, s *testServer) time.Time {
	tb.Helper()
	req := newRequest(tb, tb.Context(), s, "GET", "admin.test", "/aperio/api/clients", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, body := do(tb, c, req)
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("GET /aperio/api/clients = %d %s, want 200", resp.StatusCode, body)
	}
	var list []struct {
		ConnectedAt time.Time `json:"connected_at"`
	}
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		tb.Fatalf("GET /aperio/api/clients body %q: %v", body, err)
	}
	if len(list) != 1 {
		tb.Fatalf("GET /aperio/api/clients = %s, want exactly one client", body)
	}
	return list[0].ConnectedAt
}

// burst sends n GETs for host to s at once and returns a channel that
// yields each status (0 on a transport error) and a cancel for the lot.
func burst(tb testing.TB, c *http.Client, s *testServer, host string, n int) (<-chan int, context.CancelFunc) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), 2*time.Minute)
	statuses := make(chan int, n)
	for i := range n {
		req := newRequest(tb, ctx, s, "GET", host, "/held/"+strconv.Itoa(i), nil)
		go func() {
			status, _, err := fetch(c, req)
			if err != nil {
				status = 0
			}
			statuses <- status
		}()
	}
	return statuses, cancel
}

// countStatuses collects n statuses.
func countStatuses(tb testing.TB, statuses <-chan int, n int) map[int]int {
	tb.Helper()
	got := map[int]int{}
	for range n {
		got[wait(tb, statuses, 3*time.Minute, "a held request's answer")]++
	}
	return got
}

// coldRun is one measured cold start.
type coldRun struct {
	release  time.Duration // connected_at to the first held request at the backend
	calls    int64         // provider calls
	peak     int           // the instance's peak in-flight
	statuses map[int]int
	// callTimes are the provider calls' times after the burst began.
	callTimes []time.Duration
}

// runColdStart starts a server on dataDir (whose store holds coldHost's
// armed record), sends n requests for coldHost, waits for the provider
// call and for every request the router will hold to be held, then starts
// the instance the provider was asked for, and measures the release.
func runColdStart(b *testing.B, cfg server.Config, prov *fakeProvider, backend *probeBackend, ac func(*testServer) config.Client, n int) coldRun {
	b.Helper()
	prov.calls.Store(0)
	prov.takeTimes()
	backend.reset()
	srv := startServer(b, cfg, nil, nil)
	ctl := newVisitor(b, srv)
	visitor, tr := newH2CVisitor(b)
	sent := time.Now()
	statuses, cancel := burst(b, visitor, srv, coldHost, n)
	defer cancel()
	wait(b, prov.called, 60*time.Second, "the provider call")
	// benchServerConfig sets scaling_max_held above n: every request of
	// the burst is held and part of the release.
	waitQueued(b, ctl, srv, n)
	// The hook receiver of TestColdStartFromZero starts the client from
	// the call itself; here it starts once the whole burst is held, so
	// the release covers every request of the burst.
	if *scalingGC {
		// The harness's garbage (servers, stores and visitors of earlier
		// runs, the burst's own requests) would otherwise be collected at
		// a random moment, release included: in one process the test's
		// heap is the server's heap. testing.B collects before each
		// benchmark for the same reason.
		runtime.GC()
	}
	ag := startAgent(b, srv, ac(srv))
	got := countStatuses(b, statuses, n)
	at := connectedAt(b, ctl, srv)
	first, _, peak := backend.figures()
	run := coldRun{release: first.Sub(at), calls: prov.calls.Load(), peak: peak, statuses: got}
	for _, c := range prov.takeTimes() {
		run.callTimes = append(run.callTimes, c.Sub(sent).Round(time.Millisecond))
	}
	if err := ag.stop(); err != nil {
		b.Fatalf("instance Run() = %v, want nil", err)
	}
	tr.CloseIdleConnections()
	if err := srv.stop(); err != nil {
		b.Fatalf("Serve() = %v, want nil", err)
	}
	// Drain a signal left by a second call, if the provider got one.
	select {
	case <-prov.called:
	default:
	}
	return run
}

// coldFixture prepares a data dir holding coldHost's armed record.
func coldFixture(b *testing.B, maxBurst int, coldStart, cooldown time.Duration) (server.Config, *fakeProvider, *probeBackend, func(*testServer) config.Client) {
	b.Helper()
	backend := &probeBackend{work: time.Millisecond}
	bs := startBackend(b, backend)
	prov := startProvider(b)
	cfg := benchServerConfig(b, b.TempDir(), maxBurst)
	ac := func(s *testServer) config.Client {
		return scalingAgentConfig(s, bs.URL, prov.srv.URL+"/scale", coldStart, cooldown)
	}
	armColdHost(b, cfg, ac)
	return cfg, prov, backend, ac
}

// BenchmarkScalingRelease reports, per burst size, the time from the new
// instance's session being established (connected_at, before the router
// attaches it) to the first held request reaching the backend, as
// p50/p99/max over -scaling.runs cold starts; the peak in-flight on the
// instance divided by its limit, across the runs; and the provider calls
// per cold start. Targets: p99 at most 5 ms, peak/limit at most 1.0,
// exactly one call.
func BenchmarkScalingRelease(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("burst=%d", n), func(b *testing.B) {
			cfg, prov, backend, ac := coldFixture(b, n, time.Minute, time.Minute)
			var lat []time.Duration
			peak := 0
			var calls int64
			served := 0
			runs := *scalingRuns
			// One cold start first, not counted: it pays the process's
			// one-time costs (heap growth, lazily built tables), which
			// are not part of a release.
			warmup := runColdStart(b, cfg, prov, backend, ac, n)
			b.Logf("burst %d: warm-up cold start (not counted): release %v", n, warmup.release)
			for range runs {
				r := runColdStart(b, cfg, prov, backend, ac, n)
				lat = append(lat, r.release)
				peak = max(peak, r.peak)
				calls += r.calls
				served += r.statuses[http.StatusOK]
				if r.statuses[http.StatusOK] != n {
					b.Logf("burst %d: answers %v, want %d × 200", n, r.statuses, n)
				}
			}
			slices.Sort(lat)
			p50, p99, mx := quantile(lat, 0.50), quantile(lat, 0.99), lat[len(lat)-1]
			b.ReportMetric(ms(p50), "release-p50-ms")
			b.ReportMetric(ms(p99), "release-p99-ms")
			b.ReportMetric(ms(mx), "release-max-ms")
			b.ReportMetric(float64(peak)/instanceLimit, "peak/limit")
			b.ReportMetric(float64(calls)/float64(runs), "calls/coldstart")
			b.Logf("burst %d, %d runs: release p50 %v p99 %v max %v (min %v); peak in-flight %d of limit %d; %d provider calls; %d/%d served",
				n, runs, p50, p99, mx, lat[0], peak, instanceLimit, calls, served, n*runs)
		})
	}
}

// BenchmarkScalingCalls reports the provider calls made for one cold
// start by bursts of 1, 100 and 10,000 requests (target exactly 1), and
// how the burst was answered, with the default cooldown (60s) and the
// smallest one (1s): a burst whose arrival outlasts the cooldown shows
// whether a still-pending cold start is called again.
func BenchmarkScalingCalls(b *testing.B) {
	for _, cooldown := range []time.Duration{time.Minute, time.Second} {
		for _, n := range []int{1, 100, 10000} {
			b.Run(fmt.Sprintf("cooldown=%v/burst=%d", cooldown, n), func(b *testing.B) {
				cfg, prov, backend, ac := coldFixture(b, n, time.Minute, cooldown)
				start := time.Now()
				r := runColdStart(b, cfg, prov, backend, ac, n)
				b.ReportMetric(float64(r.calls), "calls/coldstart")
				b.ReportMetric(float64(r.statuses[http.StatusOK]), "served")
				b.ReportMetric(float64(r.peak)/instanceLimit, "peak/limit")
				b.Logf("burst %d, cooldown %v: %d provider calls at %v after the first request was sent; answers %v; peak in-flight %d of limit %d; %v in all",
					n, cooldown, r.calls, r.callTimes, r.statuses, r.peak, instanceLimit, time.Since(start).Round(time.Millisecond))
			})
		}
	}
}

// BenchmarkScalingWarmP99 reports the p99 latency of a warm hostname
// served by its own client, alone and while 10,000 requests are sent to a
// cold hostname whose cold start never completes (the provider accepts
// and starts nothing; cold_start is 5m). Target: within 5%.
func BenchmarkScalingWarmP99(b *testing.B) {
	const (
		held     = 10000
		requests = 3000
	)
	backend := &probeBackend{}
	bs := startBackend(b, backend)
	prov := startProvider(b)
	cfg := benchServerConfig(b, b.TempDir(), held)
	ac := func(s *testServer) config.Client {
		return scalingAgentConfig(s, bs.URL, prov.srv.URL+"/scale", 5*time.Minute, time.Minute)
	}
	armColdHost(b, cfg, ac)

	srv := startServer(b, cfg, nil, nil)
	wc := agentConfig(srv, config.Service{Target: bs.URL, Hostnames: []string{warmHost}})
	wc.Name = "warm"
	wc.DrainTimeout = 5 * time.Second
	startAgent(b, srv, wc)
	ctl := newVisitor(b, srv)
	waitClients(b, ctl, srv, 1)
	warm := newVisitor(b, srv)

	measure := func() time.Duration {
		lat := make([]time.Duration, 0, requests)
		for i := range requests {
			t0 := time.Now()
			status, _ := get(b, warm, srv, warmHost, "/warm/"+strconv.Itoa(i))
			lat = append(lat, time.Since(t0))
			if status != http.StatusOK {
				b.Fatalf("GET warm /warm/%d = %d, want 200", i, status)
			}
		}
		slices.Sort(lat)
		return quantile(lat, 0.99)
	}
	measure() // warm up connections and caches
	before := measure()

	visitor, tr := newH2CVisitor(b)
	statuses, cancel := burst(b, visitor, srv, coldHost, held)
	wait(b, prov.called, 60*time.Second, "the provider call")
	// Measure once the whole burst is held, not while it is still
	// arriving: the figure is the cost of holding, not of admitting.
	waitQueued(b, ctl, srv, held)
	nowHeld := queued(b, ctl, srv)
	during := measure()
	stillHeld := queued(b, ctl, srv)
	cancel()
	got := countStatuses(b, statuses, held)
	tr.CloseIdleConnections()
	after := measure()

	b.ReportMetric(ms(before), "warm-p99-ms")
	b.ReportMetric(ms(during), "warm-p99-held-ms")
	b.ReportMetric(ms(after), "warm-p99-after-ms")
	// Compared with the mean of the figures measured before and after, so
	// that a drift of the machine's load during the run weighs less.
	b.ReportMetric(float64(during)/float64((before+after)/2), "held/alone")
	b.ReportMetric(float64(nowHeld), "held")
	b.Logf("warm p99 over %d sequential requests: alone %v, with %d sent to %s (%d held at start, %d at end) %v (ratio %.3f to the mean of alone before and after), alone again %v; cold burst answers %v (0 = cancelled while held); %d provider calls",
		requests, before, held, coldHost, nowHeld, stillHeld, during, float64(during)/float64((before+after)/2), after, got, prov.calls.Load())
}

// quantile returns the q quantile of sorted (nearest rank).
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(float64(len(sorted))*q+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
