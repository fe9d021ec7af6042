package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/agent"
	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/server"
	"github.com/aperio-dev/aperio/internal/server/servertest"
)

// These tests drive the router through real tunnels: several agents, each
// in front of its own origin, and origins that keep their own books (what
// they served, how many requests were inside them at once, in what order
// requests came). The assertions are on the origins' numbers, not on the
// router's: a limit holds only if the app behind the client never sees it
// broken.

// answer is what a visitor got back.
type answer struct {
	status int
	header http.Header
	body   string
	err    error
}

// roundTrip sends req and reads the whole answer; it may be called from
// any goroutine.
func roundTrip(c *http.Client, req *http.Request) answer {
	resp, err := c.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: string(b), err: err}
}

// goRoundTrip sends req from a new goroutine and delivers its answer.
func goRoundTrip(c *http.Client, req *http.Request) <-chan answer {
	ch := make(chan answer, 1)
	go func() { ch <- roundTrip(c, req) }()
	return ch
}

// String describes an answer in failure messages.
func (a answer) String() string {
	if a.err != nil {
		return a.err.Error()
	}
	return fmt.Sprintf("%d %q", a.status, a.body)
}

// gate holds the requests that reach it until the test lets them through,
// one token per request. Held requests give up when the visitor leaves or
// the test ends (t.Context is cancelled before any cleanup runs, so a
// failing test never leaves an agent draining held requests).
type gate struct {
	ctx     context.Context
	entered chan string // the holding origin's name, as each request arrives
	tokens  chan struct{}
}

// newGate returns a gate that opens for good when t ends.
func newGate(t testing.TB) *gate {
	t.Helper()
	return &gate{ctx: t.Context(), entered: make(chan string, 100), tokens: make(chan struct{})}
}

// hold reports r's arrival at the origin called name and blocks until a
// token comes.
func (g *gate) hold(name string, r *http.Request) {
	select {
	case g.entered <- name:
	case <-r.Context().Done():
		return
	case <-g.ctx.Done():
		return
	}
	select {
	case <-g.tokens:
	case <-r.Context().Done():
	case <-g.ctx.Done():
	}
}

// release lets n held requests through.
func (g *gate) release(t testing.TB, n int) {
	t.Helper()
	timer := time.NewTimer(servertest.WaitFor)
	defer timer.Stop()
	for i := range n {
		select {
		case g.tokens <- struct{}{}:
		case <-timer.C:
			t.Fatalf("released %d of %d held requests: nobody took the rest within %v", i, n, servertest.WaitFor)
		}
	}
}

// origin is a backend that answers with its name and keeps its own books.
type origin struct {
	name string
	url  string

	served atomic.Int64 // requests answered
	inside atomic.Int64 // requests in the handler now
	peak   atomic.Int64 // the most ever in the handler at once

	mu    sync.Mutex // guards paths
	paths []string   // request paths in order of arrival
}

// startOrigin serves an origin called name. A request whose path is /hold
// waits at g (when g is not nil) while counted as inside.
func startOrigin(t testing.TB, name string, g *gate) *origin {
	t.Helper()
	o := &origin{name: name}
	o.url = servertest.Backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := o.inside.Add(1)
		for p := o.peak.Load(); n > p; p = o.peak.Load() {
			if o.peak.CompareAndSwap(p, n) {
				break
			}
		}
		o.mu.Lock()
		o.paths = append(o.paths, r.URL.Path)
		o.mu.Unlock()
		if g != nil && r.URL.Path == "/hold" {
			g.hold(name, r)
		}
		// Out before the answer leaves: the router may hand the permit on
		// as soon as the visitor has it.
		o.inside.Add(-1)
		o.served.Add(1)
		w.Header().Set("X-Origin", name)
		io.WriteString(w, name)
	})).URL
	return o
}

// arrivals returns the paths the origin saw, in order.
func (o *origin) arrivals() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.paths)
}

// getRequest builds a GET for path on host with a deadline well past any
// wait these tests provoke.
func getRequest(t testing.TB, s *servertest.Server, host, path string) *http.Request {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return servertest.NewRequest(t, ctx, s, http.MethodGet, host, path, nil)
}

// sendQueued sends req from a new goroutine and returns once the router
// counts n requests waiting, req the last of them to arrive, so that
// requests sent one after another this way queue in that order.
func sendQueued(t testing.TB, c *http.Client, s *servertest.Server, req *http.Request, n int) <-chan answer {
	t.Helper()
	ch := goRoundTrip(c, req)
	servertest.Poll(t, servertest.WaitFor, func() (bool, string) {
		select {
		case a := <-ch:
			t.Fatalf("%s %s (Host %s) = %v, want it to wait in the queue", req.Method, req.URL.Path, req.Host, a)
		default:
		}
		got := servertest.Queued(t, c, s)
		return got == n, fmt.Sprintf("after %s %s (Host %s): %d requests queued, want %d", req.Method, req.URL.Path, req.Host, got, n)
	})
	return ch
}

// limitedService publishes target as host with a max_concurrent.
func limitedService(target, host string, maxConcurrent int) config.Service {
	return config.Service{Target: target, Hostnames: []string{host}, MaxConcurrent: maxConcurrent}
}

func TestBurstUnderClientLimits(t *testing.T) {
	t.Parallel()
	const clients, limit, burst = 3, 2, 50
	g := newGate(t)
	scfg := servertest.Config(t)
	scfg.Router.GatewayTimeout = time.Minute // every request waits its turn, none is refused
	scfg.Router.MaxConcurrentRequests = burst
	scfg.Router.IPLimitMax = 10 * burst
	srv := servertest.Start(t, scfg, nil, nil)
	origins := make([]*origin, clients)
	for i := range origins {
		origins[i] = startOrigin(t, fmt.Sprintf("origin-%d", i), g)
		cfg := servertest.AgentConfig(srv, servertest.Service(origins[i].url))
		// Both ways of announcing a limit: for the client, for the service.
		if i%2 == 0 {
			cfg.MaxConcurrent = limit
		} else {
			cfg.Services[0].MaxConcurrent = limit
		}
		servertest.StartAgent(t, srv, cfg)
	}
	visitor := servertest.NewVisitor(t, srv)
	servertest.WaitClients(t, visitor, srv, clients)

	answers := make([]<-chan answer, burst)
	for i := range answers {
		answers[i] = goRoundTrip(visitor, getRequest(t, srv, servertest.AppHost, "/hold"))
	}
	// Waves: let the requests through only once every permit of the pool
	// is taken, so that each origin is pushed to its limit every time.
	for released := 0; released < burst; {
		wave := min(clients*limit, burst-released)
		for range wave {
			servertest.Wait(t, g.entered, servertest.WaitFor, fmt.Sprintf("a request reaching an origin (%d released so far)", released))
		}
		if wave == clients*limit {
			for _, o := range origins {
				if got := o.inside.Load(); got != limit {
					t.Fatalf("with every permit taken, %s has %d requests inside, want %d (%d released so far)", o.name, got, limit, released)
				}
			}
		}
		g.release(t, wave)
		released += wave
	}
	servedBy := map[string]int{}
	for i, ch := range answers {
		a := servertest.Wait(t, ch, servertest.WaitFor, fmt.Sprintf("answer to request %d", i))
		if a.err != nil || a.status != http.StatusOK {
			t.Errorf("request %d of the burst = %v, want 200", i, a)
			continue
		}
		servedBy[a.body]++
	}
	total := 0
	for _, o := range origins {
		if got := o.peak.Load(); got != limit {
			t.Errorf("%s peak concurrent requests = %d, want %d (its max_concurrent)", o.name, got, limit)
		}
		if servedBy[o.name] == 0 {
			t.Errorf("%s served none of the burst, want a share", o.name)
		}
		total += int(o.served.Load())
	}
	if total != burst {
		t.Errorf("origins served %d requests in all, want %d", total, burst)
	}
}

func TestClientConcurrencyQueue(t *testing.T) {
	t.Parallel()
	t.Run("429 after gateway_timeout", func(t *testing.T) {
		g := newGate(t)
		o := startOrigin(t, "only", g)
		scfg := servertest.Config(t)
		scfg.Router.GatewayTimeout = 200 * time.Millisecond
		srv := servertest.Start(t, scfg, nil, nil)
		servertest.StartAgent(t, srv, servertest.AgentConfig(srv, limitedService(o.url, servertest.AppHost, 1)))
		visitor := servertest.NewVisitor(t, srv)
		servertest.WaitClients(t, visitor, srv, 1)

		holder := goRoundTrip(visitor, getRequest(t, srv, servertest.AppHost, "/hold"))
		servertest.Wait(t, g.entered, servertest.WaitFor, "the holding request reaching the origin")
		start := time.Now()
		a := roundTrip(visitor, getRequest(t, srv, servertest.AppHost, "/queued"))
		if a.err != nil || a.status != http.StatusTooManyRequests {
			t.Fatalf("GET /queued while the only permit is held = %v, want 429", a)
		}
		if d := time.Since(start); d < scfg.Router.GatewayTimeout {
			t.Errorf("GET /queued refused after %v, want it to wait gateway_timeout (%v) first", d, scfg.Router.GatewayTimeout)
		}
		if got, want := a.header.Get("X-Aperio-Limit"), "client-concurrency; setting=max_concurrent"; got != want {
			t.Errorf("GET /queued X-Aperio-Limit = %q, want %q", got, want)
		}
		g.release(t, 1)
		if a := servertest.Wait(t, holder, servertest.WaitFor, "the holding request"); a.err != nil || a.status != http.StatusOK || a.body != "only" {
			t.Fatalf("GET /hold = %v, want 200 %q", a, "only")
		}
		// The refused request never reached the origin, and the permit
		// came back.
		if a := roundTrip(visitor, getRequest(t, srv, servertest.AppHost, "/after")); a.err != nil || a.status != http.StatusOK {
			t.Fatalf("GET /after the holder finished = %v, want 200", a)
		}
		if got, want := o.arrivals(), []string{"/hold", "/after"}; !slices.Equal(got, want) {
			t.Errorf("origin saw %q, want %q", got, want)
		}
	})

	t.Run("served in arrival order", func(t *testing.T) {
		const waiting = 5
		g := newGate(t)
		o := startOrigin(t, "only", g)
		scfg := servertest.Config(t)
		scfg.Router.GatewayTimeout = time.Minute
		scfg.MetricsToken = servertest.MetricsToken
		srv := servertest.Start(t, scfg, nil, nil)
		servertest.StartAgent(t, srv, servertest.AgentConfig(srv, limitedService(o.url, servertest.AppHost, 1)))
		visitor := servertest.NewVisitor(t, srv)
		servertest.WaitClients(t, visitor, srv, 1)

		holder := goRoundTrip(visitor, getRequest(t, srv, servertest.AppHost, "/hold"))
		servertest.Wait(t, g.entered, servertest.WaitFor, "the holding request reaching the origin")
		var answers []<-chan answer
		want := []string{"/hold"}
		for i := range waiting {
			path := fmt.Sprintf("/queued/%d", i)
			answers = append(answers, sendQueued(t, visitor, srv, getRequest(t, srv, servertest.AppHost, path), i+1))
			want = append(want, path)
		}
		// Nothing gets past the holder while it holds the only permit.
		if got := o.arrivals(); !slices.Equal(got, want[:1]) {
			t.Fatalf("origin saw %q while the holder held the only permit, want %q", got, want[:1])
		}
		g.release(t, 1)
		if a := servertest.Wait(t, holder, servertest.WaitFor, "the holding request"); a.err != nil || a.status != http.StatusOK {
			t.Fatalf("GET /hold = %v, want 200", a)
		}
		for i, ch := range answers {
			if a := servertest.Wait(t, ch, servertest.WaitFor, fmt.Sprintf("queued request %d", i)); a.err != nil || a.status != http.StatusOK {
				t.Errorf("GET /queued/%d = %v, want 200", i, a)
			}
		}
		if got := o.arrivals(); !slices.Equal(got, want) {
			t.Errorf("origin saw %q, want %q (the queue is FIFO)", got, want)
		}
		if got := o.peak.Load(); got != 1 {
			t.Errorf("origin peak concurrent requests = %d, want 1 (its max_concurrent)", got)
		}
	})
}

func TestGlobalConcurrencyLimit(t *testing.T) {
	t.Parallel()
	const one, two = "one.test", "two.test"
	g := newGate(t)
	o := startOrigin(t, "origin", g)
	scfg := servertest.Config(t)
	scfg.Router.MaxConcurrentRequests = 1
	srv := servertest.Start(t, scfg, nil, nil)
	servertest.StartAgent(t, srv, servertest.AgentConfig(srv,
		config.Service{Target: o.url, Hostnames: []string{one}},
		config.Service{Target: o.url, Hostnames: []string{two}}))
	visitor := servertest.NewVisitor(t, srv)
	servertest.WaitClients(t, visitor, srv, 1)

	holder := goRoundTrip(visitor, getRequest(t, srv, one, "/hold"))
	servertest.Wait(t, g.entered, servertest.WaitFor, "the holding request reaching the origin")
	a := roundTrip(visitor, getRequest(t, srv, two, "/other"))
	if a.err != nil || a.status != http.StatusTooManyRequests {
		t.Fatalf("GET %s/other while %s holds the only global slot = %v, want 429", two, one, a)
	}
	if got, want := a.header.Get("X-Aperio-Limit"), "server-concurrency; setting=max_concurrent_requests"; got != want {
		t.Errorf("GET %s/other X-Aperio-Limit = %q, want %q", two, got, want)
	}
	g.release(t, 1)
	if a := servertest.Wait(t, holder, servertest.WaitFor, "the holding request"); a.err != nil || a.status != http.StatusOK {
		t.Fatalf("GET %s/hold = %v, want 200", one, a)
	}
	if a := roundTrip(visitor, getRequest(t, srv, two, "/after")); a.err != nil || a.status != http.StatusOK {
		t.Fatalf("GET %s/after the slot freed = %v, want 200", two, a)
	}
}

func TestWaitingRequestHoldsNoGlobalSlot(t *testing.T) {
	t.Parallel()
	const busy, free = "busy.test", "free.test"
	const waiting = 3
	g := newGate(t)
	o := startOrigin(t, "origin", g)
	scfg := servertest.Config(t)
	scfg.Router.MaxConcurrentRequests = 2
	scfg.Router.GatewayTimeout = time.Minute
	scfg.MetricsToken = servertest.MetricsToken
	srv := servertest.Start(t, scfg, nil, nil)
	servertest.StartAgent(t, srv, servertest.AgentConfig(srv,
		limitedService(o.url, busy, 1),
		config.Service{Target: o.url, Hostnames: []string{free}}))
	visitor := servertest.NewVisitor(t, srv)
	servertest.WaitClients(t, visitor, srv, 1)

	// The holder takes busy's only permit and one of the two global slots.
	holder := goRoundTrip(visitor, getRequest(t, srv, busy, "/hold"))
	servertest.Wait(t, g.entered, servertest.WaitFor, "the holding request reaching the origin")
	var waiters []<-chan answer
	for i := range waiting {
		waiters = append(waiters, sendQueued(t, visitor, srv, getRequest(t, srv, busy, fmt.Sprintf("/waiting/%d", i)), i+1))
	}
	// Were a waiter holding a global slot, the second slot would be gone
	// and free.test would be refused.
	for i := range 10 {
		a := roundTrip(visitor, getRequest(t, srv, free, fmt.Sprintf("/free/%d", i)))
		if a.err != nil || a.status != http.StatusOK {
			t.Fatalf("GET %s/free/%d while %d requests wait for %s = %v, want 200", free, i, waiting, busy, a)
		}
	}
	for i, ch := range waiters {
		select {
		case a := <-ch:
			t.Fatalf("GET %s/waiting/%d = %v while the holder holds the permit, want it still waiting", busy, i, a)
		default:
		}
	}
	g.release(t, 1)
	if a := servertest.Wait(t, holder, servertest.WaitFor, "the holding request"); a.err != nil || a.status != http.StatusOK {
		t.Fatalf("GET %s/hold = %v, want 200", busy, a)
	}
	for i, ch := range waiters {
		if a := servertest.Wait(t, ch, servertest.WaitFor, "a waiting request"); a.err != nil || a.status != http.StatusOK {
			t.Errorf("GET %s/waiting/%d = %v, want 200", busy, i, a)
		}
	}
}

func TestIPLimit(t *testing.T) {
	t.Parallel()
	const burst = 3
	o := startOrigin(t, "origin", nil)
	st := servertest.StartStackFor(t, servertest.Service(o.url), func(c *server.Config) {
		c.Router.IPLimitMax = burst + 1 // the client's tunnel handshake takes one token
		c.Router.IPLimitRefill = 0.001  // one token every ~17 minutes: none within the test
	}, false)
	for i := range burst {
		if a := roundTrip(st.Visitor, getRequest(t, st.Server, servertest.AppHost, fmt.Sprintf("/%d", i))); a.err != nil || a.status != http.StatusOK {
			t.Fatalf("GET /%d (within the burst of %d) = %v, want 200", i, burst, a)
		}
	}
	a := roundTrip(st.Visitor, getRequest(t, st.Server, servertest.AppHost, "/over"))
	if a.err != nil || a.status != http.StatusTooManyRequests {
		t.Fatalf("GET /over (request %d from 127.0.0.1) = %v, want 429", burst+1, a)
	}
	wantHeader := http.Header{"X-Aperio-Limit": {"ip; setting=ip_limit_max"}, "Retry-After": {"1"}}
	for k, want := range wantHeader {
		if got := a.header.Values(k); !slices.Equal(got, want) {
			t.Errorf("GET /over %s = %q, want %q", k, got, want)
		}
	}
	if got := o.served.Load(); got != burst {
		t.Errorf("origin served %d requests, want %d (the refused one never reaches it)", got, burst)
	}
}

func TestDrainUnderSteadyLoad(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// hold keeps a request in flight on the draining client until the
		// drain is in force; without it the client usually finds nothing
		// in flight and closes its tunnel at once, racing the requests
		// dispatched to it just before its announcement took effect.
		hold bool
	}{
		{name: "nothing held", hold: false},
		{name: "a request in flight", hold: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { testDrainUnderSteadyLoad(t, tc.hold) })
	}
}

func testDrainUnderSteadyLoad(t *testing.T, hold bool) {
	const workers = 8
	g := newGate(t)
	scfg := servertest.Config(t)
	scfg.Router.IPLimitMax = 0 // the load would empty any bucket
	srv := servertest.Start(t, scfg, nil, nil)
	origins := map[string]*origin{}
	agents := map[string]*servertest.Agent{}
	for _, name := range []string{"a", "b"} {
		origins[name] = startOrigin(t, name, g)
		agents[name] = servertest.StartAgent(t, srv, servertest.AgentConfig(srv, servertest.Service(origins[name].url)))
	}
	// One kept-alive connection per worker, not one per request.
	tr := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: workers}
	t.Cleanup(tr.CloseIdleConnections)
	visitor := &http.Client{Transport: tr}
	servertest.WaitClients(t, visitor, srv, 2)

	var (
		failMu   sync.Mutex // guards failures
		failures []string
	)
	fail := func(f string) {
		failMu.Lock()
		failures = append(failures, f)
		failMu.Unlock()
	}
	stop := make(chan struct{})
	var workerWG sync.WaitGroup
	for w := range workers {
		workerWG.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				path := fmt.Sprintf("/load/%d/%d", w, i)
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
				if err != nil {
					cancel()
					fail(fmt.Sprintf("GET %s: %v", path, err))
					return
				}
				req.Host = servertest.AppHost
				if a := roundTrip(visitor, req); a.err != nil || a.status != http.StatusOK {
					fail(fmt.Sprintf("GET %s = %v", path, a))
				}
				cancel()
			}
		})
	}
	stopLoad := sync.OnceFunc(func() {
		close(stop)
		workerWG.Wait()
	})
	t.Cleanup(stopLoad)
	servertest.Poll(t, servertest.WaitFor, func() (bool, string) {
		a, b := origins["a"].served.Load(), origins["b"].served.Load()
		return a >= 20 && b >= 20, fmt.Sprintf("load served by a: %d, b: %d; want both at 20 or more", a, b)
	})

	drained, kept := "a", "b"
	var holder <-chan answer
	if hold {
		holder = goRoundTrip(visitor, getRequest(t, srv, servertest.AppHost, "/hold"))
		if drained = servertest.Wait(t, g.entered, servertest.WaitFor, "the holding request reaching an origin"); drained == "b" {
			kept = "a"
		}
	}
	runErr := make(chan error, 1)
	go func() { runErr <- agents[drained].Stop() }()

	// Draining is in force once the load reaches only the other client.
	lastDrained, keptAt := origins[drained].served.Load(), origins[kept].served.Load()
	servertest.Poll(t, servertest.WaitFor, func() (bool, string) {
		d, k := origins[drained].served.Load(), origins[kept].served.Load()
		if d != lastDrained {
			lastDrained, keptAt = d, k
			return false, fmt.Sprintf("draining client %s still receives requests (%d served)", drained, d)
		}
		return k-keptAt >= 20, fmt.Sprintf("%s served %d requests since %s last did, want 20", kept, k-keptAt, drained)
	})
	if hold {
		select {
		case err := <-runErr:
			t.Fatalf("Run() of %s = %v with a request in flight, want it to wait", drained, err)
		default:
		}
		g.release(t, 1)
		if a := servertest.Wait(t, holder, servertest.WaitFor, "the in-flight request"); a.err != nil || a.status != http.StatusOK || a.body != drained {
			t.Fatalf("in-flight GET /hold on the draining client = %v, want 200 %q", a, drained)
		}
	}
	if err := servertest.Wait(t, runErr, servertest.WaitFor, "Run of the draining client"); err != nil {
		t.Fatalf("Run() of %s = %v, want nil", drained, err)
	}
	afterDrain := origins[kept].served.Load()
	servertest.Poll(t, servertest.WaitFor, func() (bool, string) {
		n := origins[kept].served.Load() - afterDrain
		return n >= 20, fmt.Sprintf("%s served %d requests since %s's Run returned, want 20", kept, n, drained)
	})
	stopLoad()
	// The workers have exited: failures is no longer written.
	if len(failures) > 0 {
		t.Errorf("%d requests failed while %s drained under load, want none; first: %s", len(failures), drained, strings.Join(failures[:min(5, len(failures))], "; "))
	}
}

func TestStandbyTakeoverAndHandBack(t *testing.T) {
	t.Parallel()
	var primaryHealthy atomic.Bool
	primaryHealthy.Store(true)
	named := func(name string, healthy *atomic.Bool) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/healthz" {
				if !healthy.Load() {
					http.Error(w, "down", http.StatusServiceUnavailable)
				}
				return
			}
			io.WriteString(w, name)
		})
	}
	srv := servertest.Start(t, servertest.Config(t), nil, nil)
	primary := servertest.Service(servertest.Backend(t, named("primary", &primaryHealthy)).URL)
	primary.Health = config.Health{Endpoint: "/healthz", Interval: 50 * time.Millisecond, Timeout: time.Second, Threshold: 1}
	servertest.StartAgent(t, srv, servertest.AgentConfig(srv, primary))
	standbyCfg := servertest.AgentConfig(srv, servertest.Service(servertest.Backend(t, named("standby", nil)).URL))
	standbyCfg.Priority = 1
	servertest.StartAgent(t, srv, standbyCfg)
	visitor := servertest.NewVisitor(t, srv)
	servertest.WaitClients(t, visitor, srv, 2)

	steps := []struct {
		name    string
		healthy bool
		want    string
	}{
		{name: "both healthy", healthy: true, want: "primary"},
		{name: "primary unhealthy", healthy: false, want: "standby"},
		{name: "primary healthy again", healthy: true, want: "primary"},
	}
	for _, step := range steps {
		primaryHealthy.Store(step.healthy)
		// The switch follows the next probe; every answer meanwhile is a 200
		// from one of the two.
		servertest.Poll(t, servertest.WaitFor, func() (bool, string) {
			status, body := servertest.Get(t, visitor, srv, servertest.AppHost, "/")
			if status != http.StatusOK {
				t.Fatalf("%s: GET / = %d %q, want 200", step.name, status, body)
			}
			return body == step.want, fmt.Sprintf("%s: GET / served by %s, want %s", step.name, body, step.want)
		})
		for i := range 10 {
			if status, body := servertest.Get(t, visitor, srv, servertest.AppHost, "/"); status != http.StatusOK || body != step.want {
				t.Fatalf("%s: GET / #%d = %d %q, want 200 %q", step.name, i, status, body, step.want)
			}
		}
	}
}

func TestLeastInflight(t *testing.T) {
	t.Parallel()
	g := newGate(t)
	scfg := servertest.Config(t)
	scfg.Router.Strategy = "least-inflight"
	srv := servertest.Start(t, scfg, nil, nil)
	for _, name := range []string{"a", "b"} {
		servertest.StartAgent(t, srv, servertest.AgentConfig(srv, servertest.Service(startOrigin(t, name, g).url)))
	}
	visitor := servertest.NewVisitor(t, srv)
	servertest.WaitClients(t, visitor, srv, 2)

	holder := goRoundTrip(visitor, getRequest(t, srv, servertest.AppHost, "/hold"))
	busy := servertest.Wait(t, g.entered, servertest.WaitFor, "the slow request reaching an origin")
	idle := "a"
	if busy == "a" {
		idle = "b"
	}
	for i := range 10 {
		if status, body := servertest.Get(t, visitor, srv, servertest.AppHost, fmt.Sprintf("/next/%d", i)); status != http.StatusOK || body != idle {
			t.Fatalf("GET /next/%d while %s holds a slow request = %d %q, want 200 from %s", i, busy, status, body, idle)
		}
	}
	g.release(t, 1)
	if a := servertest.Wait(t, holder, servertest.WaitFor, "the slow request"); a.err != nil || a.status != http.StatusOK || a.body != busy {
		t.Fatalf("GET /hold = %v, want 200 %q", a, busy)
	}
}

// startCrashableAgent runs an agent like servertest.StartAgent and returns
// crash, which cuts its tunnel connections the way its process dying would,
// and keeps it from reconnecting. Its backend stays up.
func startCrashableAgent(t testing.TB, s *servertest.Server, cfg config.Client) (crash func()) {
	t.Helper()
	var (
		mu      sync.Mutex // guards conns and crashed
		conns   []net.Conn
		crashed bool
	)
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		defer mu.Unlock()
		if crashed {
			return nil, errors.New("crashed")
		}
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err == nil {
			conns = append(conns, c)
		}
		return c, err
	}
	a, err := agent.New(cfg, agent.Options{Logger: servertest.Logger(), DialServer: dial})
	if err != nil {
		t.Fatalf("agent.New() = %v, want nil", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := servertest.Wait(t, done, servertest.WaitFor, "Run of the crashed agent"); err != nil {
			t.Errorf("agent Run() = %v, want nil", err)
		}
	})
	return func() {
		mu.Lock()
		defer mu.Unlock()
		crashed = true
		for _, c := range conns {
			if err := c.Close(); err != nil {
				t.Errorf("cut tunnel connection: %v", err)
			}
		}
	}
}

func TestQueueMovesToStandbyWhenPrimaryDies(t *testing.T) {
	t.Parallel()
	tests := []struct {
		failover   string
		wantHolder int // the request in flight on the primary
	}{
		{failover: "fail", wantHolder: http.StatusBadGateway},
		{failover: "retry", wantHolder: http.StatusOK},
	}
	for _, tc := range tests {
		t.Run(tc.failover, func(t *testing.T) {
			g := newGate(t)
			scfg := servertest.Config(t)
			// Far longer than the test may take: a queued request that is
			// not handed on when its client dies would wait all of it.
			scfg.Router.GatewayTimeout = time.Minute
			scfg.MetricsToken = servertest.MetricsToken
			scfg.Router.Failover = tc.failover
			srv := servertest.Start(t, scfg, nil, nil)
			primary := startOrigin(t, "primary", g)
			crash := startCrashableAgent(t, srv, servertest.AgentConfig(srv, limitedService(primary.url, servertest.AppHost, 1)))
			standbyCfg := servertest.AgentConfig(srv, servertest.Service(startOrigin(t, "standby", nil).url))
			standbyCfg.Priority = 1
			servertest.StartAgent(t, srv, standbyCfg)
			visitor := servertest.NewVisitor(t, srv)
			servertest.WaitClients(t, visitor, srv, 2)

			holder := goRoundTrip(visitor, getRequest(t, srv, servertest.AppHost, "/hold"))
			if got := servertest.Wait(t, g.entered, servertest.WaitFor, "the holding request reaching an origin"); got != "primary" {
				t.Fatalf("GET /hold reached %s, want primary", got)
			}
			// The primary is at its limit: the next request queues for it,
			// standbys taking nothing while a primary is routable.
			queuedAnswer := sendQueued(t, visitor, srv, getRequest(t, srv, servertest.AppHost, "/queued"), 1)
			crash()
			if a := servertest.Wait(t, holder, servertest.WaitFor, "the request in flight on the dead primary"); a.err != nil || a.status != tc.wantHolder {
				t.Errorf("GET /hold in flight when the primary died = %v, want %d", a, tc.wantHolder)
			} else if a.status == http.StatusOK && a.body != "standby" {
				t.Errorf("GET /hold failed over to %q, want standby", a.body)
			}
			if a := servertest.Wait(t, queuedAnswer, servertest.WaitFor, "the request queued for the dead primary"); a.err != nil || a.status != http.StatusOK || a.body != "standby" {
				t.Errorf("GET /queued, waiting when the primary died = %v, want 200 %q", a, "standby")
			}
			if got := primary.arrivals(); !slices.Equal(got, []string{"/hold"}) {
				t.Errorf("primary saw %q, want only /hold", got)
			}
		})
	}
}
