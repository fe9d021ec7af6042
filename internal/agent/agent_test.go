package agent

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aperio-dev/aperio/internal/buildinfo"
	"github.com/aperio-dev/aperio/internal/config"
)

// fakeBackend is a service's transport that answers from a script, with
// no I/O, so that it runs inside a synctest bubble. Each request takes
// the next status; the last one repeats. A status of 0 blocks until the
// request's context ends.
type fakeBackend struct {
	mu       sync.Mutex // guards the following fields
	statuses []int
	paths    []string
	agents   []string
}

func (f *fakeBackend) RoundTrip(req *http.Request) (*http.Response, error) {
	f.mu.Lock()
	status := f.statuses[0]
	if len(f.statuses) > 1 {
		f.statuses = f.statuses[1:]
	}
	f.paths = append(f.paths, req.URL.Path)
	f.agents = append(f.agents, req.Header.Get("User-Agent"))
	f.mu.Unlock()
	if status == 0 {
		<-req.Context().Done()
		return nil, req.Context().Err()
	}
	return &http.Response{StatusCode: status, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}

func (f *fakeBackend) requests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.paths)
}

// failingDialer stands in for an unreachable server: every dial fails at
// once, and the tunnel keeps retrying with its backoff.
type failingDialer struct{ dials atomic.Int64 }

var errUnreachable = errors.New("server unreachable (test)")

func (d *failingDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.dials.Add(1)
	return nil, errUnreachable
}

// clientConfig returns a one-service client configuration whose service
// targets target.
func clientConfig(target string) config.Client {
	return config.Client{
		ServerURL:    "http://server.test",
		Token:        "token",
		StatusSocket: config.StatusSocketOff,
		Services: []config.Service{{
			Target:    target,
			Hostnames: []string{"app.test"},
		}},
	}
}

func newAgent(t testing.TB, cfg config.Client) *Agent {
	t.Helper()
	d := &failingDialer{}
	a, err := New(cfg, Options{DialServer: d.dial})
	if err != nil {
		t.Fatalf("New() error = %v", err)
	}
	return a
}

// startLoop runs loop in the background until the test ends, and waits
// for it to return.
func startLoop(t *testing.T, loop func(ctx context.Context)) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		loop(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// forward sends one request to service 0 and closes its response.
func forward(t *testing.T, a *Agent) {
	t.Helper()
	resp, err := a.Forward(t.Context(), "0", httptest.NewRequest("GET", "/", nil))
	if err != nil {
		t.Fatalf("Forward() error = %v", err)
	}
	resp.Body.Close()
}

// drainSignal empties ch and reports whether it held a signal.
func drainSignal(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	tests := []struct {
		name string
		edit func(*config.Client)
	}{
		{"no services", func(c *config.Client) { c.Services = nil }},
		{"no server url", func(c *config.Client) { c.ServerURL = "" }},
		{"target scheme", func(c *config.Client) { c.Services[0].Target = "ftp://backend.test" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := clientConfig("http://backend.test")
			tt.edit(&cfg)
			if a, err := New(cfg, Options{}); err == nil {
				t.Fatalf("New(%s) = %v, nil; want an error", tt.name, a)
			}
		})
	}
}

// TestProbeHealthTransitions: a service with a probe starts unhealthy, turns
// healthy on the first passing probe, survives fewer than threshold
// consecutive failures (a success resets the count) and turns unhealthy at
// the threshold; each transition, and only a transition, signals a prompt
// announcement.
func TestProbeHealthTransitions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := clientConfig("http://backend.test/base/")
		// 2xx-3xx: a redirect passes (the default, 2xx, is TestProbeSuccess).
		cfg.Services[0].Health = config.Health{Endpoint: "/healthz", Interval: 10 * time.Second, Timeout: time.Second, Threshold: 2, Success: config.Success2xx3xx}
		a := newAgent(t, cfg)
		svc := a.services()[0]
		if svc.healthy.Load() {
			t.Fatal("service with a probe is healthy before any probe, want unhealthy")
		}
		be := &fakeBackend{statuses: []int{204, 500, 302, 503, 502}}
		svc.transport = be
		startLoop(t, func(ctx context.Context) { a.probeLoop(ctx, svc) })

		steps := []struct {
			name    string
			healthy bool
			signal  bool
		}{
			{"first probe passes", true, true},
			{"one failure, below threshold", true, false},
			{"a redirect passes and resets the count", true, false},
			{"one failure again", true, false},
			{"second consecutive failure", false, true},
			{"still failing", false, false},
		}
		for i, st := range steps {
			if i > 0 {
				time.Sleep(10 * time.Second)
			}
			synctest.Wait()
			if got := be.requests(); got != i+1 {
				t.Fatalf("%s: probes sent = %d, want %d (one per interval)", st.name, got, i+1)
			}
			if got := svc.healthy.Load(); got != st.healthy {
				t.Errorf("%s: healthy = %v, want %v", st.name, got, st.healthy)
			}
			if got := drainSignal(a.healthChange); got != st.signal {
				t.Errorf("%s: health change signalled = %v, want %v", st.name, got, st.signal)
			}
		}
		if be.paths[0] != "/base/healthz" || be.agents[0] != "aperio-client health probe" {
			t.Errorf("probe request = %s (User-Agent %q), want /base/healthz from the health probe", be.paths[0], be.agents[0])
		}
		if got := a.announcement().Services[0].Healthy; got {
			t.Errorf("announcement().Services[0].Healthy = %v after the threshold, want false", got)
		}
	})
}

// TestProbeTimeoutCounts: a probe the backend never answers fails after
// the probe timeout, not later, and counts towards the threshold.
func TestProbeTimeoutCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := clientConfig("http://backend.test")
		cfg.Services[0].Health = config.Health{Endpoint: "/up", Interval: time.Minute, Timeout: 3 * time.Second, Threshold: 1}
		a := newAgent(t, cfg)
		svc := a.services()[0]
		svc.transport = &fakeBackend{statuses: []int{200, 0}}
		startLoop(t, func(ctx context.Context) { a.probeLoop(ctx, svc) })
		synctest.Wait()
		if !svc.healthy.Load() {
			t.Fatal("healthy after a passing probe = false, want true")
		}
		time.Sleep(time.Minute) // the second probe starts and hangs
		synctest.Wait()
		if !svc.healthy.Load() {
			t.Fatal("healthy while the hanging probe is within its timeout = false, want true")
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if svc.healthy.Load() {
			t.Fatal("healthy once the probe timed out with threshold 1 = true, want false")
		}
	})
}

func TestServiceWithoutProbeIsHealthy(t *testing.T) {
	a := newAgent(t, clientConfig("http://backend.test"))
	if got := a.announcement().Services[0].Healthy; !got {
		t.Fatalf("announcement().Services[0].Healthy without a probe = %v, want true", got)
	}
}

// TestForwardRewritesToTarget: Forward sends the visitor's request to the
// service's target under its path, keeps the visitor's Host and adds no
// User-Agent of its own.
func TestForwardRewritesToTarget(t *testing.T) {
	type seen struct {
		host, uri string
		agent     []string
	}
	got := make(chan seen, 1)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.Host, r.RequestURI, r.Header.Values("User-Agent")}
		io.WriteString(w, "from backend")
	}))
	t.Cleanup(backend.Close)
	a := newAgent(t, clientConfig(backend.URL+"/base/"))

	req := httptest.NewRequest("GET", "http://app.test/a%2Fb/c?q=1", nil)
	req.Header.Del("User-Agent")
	resp, err := a.Forward(t.Context(), "0", req)
	if err != nil {
		t.Fatalf("Forward() error = %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	if resp.StatusCode != 200 || string(body) != "from backend" {
		t.Errorf("Forward() = %d %q, want 200 from backend", resp.StatusCode, body)
	}
	s := <-got
	if s.host != "app.test" || s.uri != "/base/a%2Fb/c?q=1" || len(s.agent) != 0 {
		t.Errorf("backend saw Host %q, URI %q, User-Agent %q; want app.test, /base/a%%2Fb/c?q=1, none", s.host, s.uri, s.agent)
	}
	if n := a.served.Load(); n != 1 {
		t.Errorf("served = %d after one request, want 1", n)
	}

	if resp, err := a.Forward(t.Context(), "7", httptest.NewRequest("GET", "/", nil)); err == nil {
		resp.Body.Close()
		t.Errorf("Forward(unknown service 7) = %d, nil; want an error", resp.StatusCode)
	}
	if n := a.served.Load(); n != 1 {
		t.Errorf("served = %d after a request for an unknown service, want still 1", n)
	}
}

// TestLimiterWiring: the resolved concurrency of a service decides what it
// announces, and Forward reports each exchange's outcome to the limiter,
// whose change asks for a prompt announcement.
func TestLimiterWiring(t *testing.T) {
	tests := []struct {
		name    string
		conc    config.Concurrency
		mode    string // "" when no limit is announced
		desired int
	}{
		{"none", config.Concurrency{Mode: config.ConcurrencyNone}, "", 0},
		{"fixed", config.Concurrency{Mode: config.ConcurrencyFixed, Limit: 7}, "fixed", 7},
		{"aimd", config.Concurrency{Mode: config.ConcurrencyAIMD, Limit: 50, Adaptive: config.Adaptive{Min: 1, Initial: 20, IncreaseAfterSuccesses: 10, DecreaseFactor: 0.5}}, "aimd", 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := clientConfig("http://backend.test")
			cfg.Services[0].Concurrency = tt.conc
			a := newAgent(t, cfg)
			s := a.announcement().Services[0]
			if s.MaxConcurrent != tt.desired {
				t.Errorf("announced MaxConcurrent = %d, want %d", s.MaxConcurrent, tt.desired)
			}
			switch {
			case tt.mode == "" && s.Concurrency != nil:
				t.Errorf("announced Concurrency = %+v, want none", *s.Concurrency)
			case tt.mode != "" && (s.Concurrency == nil || s.Concurrency.Mode != tt.mode):
				t.Errorf("announced Concurrency = %+v, want mode %s", s.Concurrency, tt.mode)
			}
		})
	}

	t.Run("aimd failure halves the limit", func(t *testing.T) {
		cfg := clientConfig("http://backend.test")
		cfg.Services[0].Concurrency = tests[2].conc
		a := newAgent(t, cfg)
		a.services()[0].transport = &fakeBackend{statuses: []int{503}}
		drainSignal(a.limitChange)
		forward(t, a)
		if got := a.announcement().Services[0].MaxConcurrent; got != 10 {
			t.Errorf("announced MaxConcurrent after a 503 = %d, want 10 (20 × 0.5)", got)
		}
		if !drainSignal(a.limitChange) {
			t.Error("limit change signalled = false, want true")
		}
	})
}

// TestNudgeLoopSpacesAnnouncements: a change is announced at once, and
// changes within minAnnounceGap of it are not lost but wait for the gap.
func TestNudgeLoopSpacesAnnouncements(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newAgent(t, clientConfig("http://backend.test"))
		startLoop(t, a.nudgeLoop)
		a.signalHealth()
		synctest.Wait()
		if len(a.healthChange) != 0 {
			t.Fatal("health change still pending after the loop ran, want taken at once")
		}
		a.signalLimit()
		time.Sleep(minAnnounceGap - time.Millisecond)
		synctest.Wait()
		if len(a.limitChange) != 1 {
			t.Fatal("limit change taken within the gap, want it kept until the gap ends")
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if len(a.limitChange) != 0 {
			t.Fatal("limit change still pending after the gap, want taken")
		}
	})
}

// TestIdleRetirement: idle_timeout counts from the end of the last
// request; a client that never became routable (no tunnel up) never
// retires; the context ending stops the wait with no error.
func TestIdleRetirement(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := clientConfig("http://backend.test")
		cfg.IdleTimeout = time.Minute
		a := newAgent(t, cfg)
		a.services()[0].transport = &fakeBackend{statuses: []int{200}}
		stopped := make(chan error, 1)
		go func() { stopped <- a.waitForStop(t.Context()) }()

		time.Sleep(5 * time.Minute)
		synctest.Wait()
		if len(stopped) != 0 {
			t.Fatal("client that never became routable retired, want it kept")
		}
		forward(t, a)
		time.Sleep(30 * time.Second)
		forward(t, a) // the idle minute starts again here
		time.Sleep(59 * time.Second)
		synctest.Wait()
		if len(stopped) != 0 {
			t.Fatal("retired 59s after the last request, want idle_timeout 1m to pass first")
		}
		time.Sleep(time.Second)
		synctest.Wait()
		select {
		case err := <-stopped:
			if !errors.Is(err, ErrIdle) {
				t.Fatalf("waitForStop() = %v, want ErrIdle", err)
			}
		default:
			t.Fatal("not retired a minute after the last request, want ErrIdle")
		}

		ctx, cancel := context.WithCancel(t.Context())
		go func() { stopped <- a.waitForStop(ctx) }()
		cancel()
		if err := <-stopped; err != nil {
			t.Fatalf("waitForStop(cancelled) = %v, want nil", err)
		}
	})
}

// TestIdleRetirementFromRoutable: before its first request, idle_timeout
// counts from when the client became routable, so an instance nothing is
// ever sent to retires; becoming routable needs a healthy service, so an
// instance whose backend is still starting keeps waiting.
func TestIdleRetirementFromRoutable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := clientConfig("http://backend.test")
		cfg.IdleTimeout = time.Minute
		a := newAgent(t, cfg)
		a.services()[0].healthy.Store(false) // its backend is starting
		stopped := make(chan error, 1)
		go func() { stopped <- a.waitForStop(t.Context()) }()

		a.markRoutable() // a tunnel came up: not routable while unhealthy
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		if len(stopped) != 0 {
			t.Fatal("client with no healthy service retired, want it kept")
		}
		a.services()[0].healthy.Store(true)
		a.markRoutable()
		start := time.Now()
		time.Sleep(59 * time.Second)
		synctest.Wait()
		if len(stopped) != 0 {
			t.Fatal("retired 59s after becoming routable, want idle_timeout 1m to pass first")
		}
		select {
		case err := <-stopped:
			if !errors.Is(err, ErrIdle) {
				t.Fatalf("waitForStop() = %v, want ErrIdle", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("not retired within 2m of becoming routable, want ErrIdle after idle_timeout 1m")
		}
		if el := time.Since(start); el != time.Minute {
			t.Errorf("retired %v after becoming routable, want idle_timeout 1m", el)
		}
	})
}

// TestRunDrainsOnCancel: with no server reachable and nothing in flight,
// Run announces draining and returns nil as soon as its context ends,
// without waiting for drain_timeout, and its goroutines have exited (the
// bubble would report any left behind).
func TestRunDrainsOnCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := clientConfig("http://backend.test")
		cfg.DrainTimeout = time.Hour
		cfg.Services[0].Health = config.Health{Endpoint: "/up", Interval: time.Second, Timeout: time.Second, Threshold: 1}
		d := &failingDialer{}
		a, err := New(cfg, Options{DialServer: d.dial})
		if err != nil {
			t.Fatalf("New() error = %v", err)
		}
		a.services()[0].transport = &fakeBackend{statuses: []int{200}}
		ctx, cancel := context.WithCancel(t.Context())
		ran := make(chan error, 1)
		go func() { ran <- a.Run(ctx) }()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if d.dials.Load() == 0 {
			t.Fatal("Run dialled no server in 10s, want it trying")
		}
		if a.announcement().Draining {
			t.Fatal("announcement().Draining before the context ended = true, want false")
		}
		start := time.Now()
		cancel()
		if err := <-ran; err != nil {
			t.Fatalf("Run() = %v, want nil after a drain on cancel", err)
		}
		if el := time.Since(start); el != 0 {
			t.Errorf("Run returned %v after cancel with nothing in flight, want at once", el)
		}
		if !a.announcement().Draining {
			t.Error("announcement().Draining after Run = false, want true")
		}
	})
}

// TestRunRetiresWhenIdle: Run returns ErrIdle once idle_timeout has passed
// since the last request.
func TestRunRetiresWhenIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := clientConfig("http://backend.test")
		cfg.IdleTimeout = 2 * time.Minute
		a := newAgent(t, cfg)
		a.services()[0].transport = &fakeBackend{statuses: []int{200}}
		forward(t, a)
		start := time.Now()
		if err := a.Run(t.Context()); !errors.Is(err, ErrIdle) {
			t.Fatalf("Run() = %v, want ErrIdle", err)
		}
		if el := time.Since(start); el != 2*time.Minute {
			t.Errorf("Run retired after %v, want idle_timeout 2m", el)
		}
	})
}

// TestAnnouncementCarriesAccess checks that a service's access settings
// reach the announcement, durations as they were loaded, and that a service
// without any announces none.
func TestAnnouncementCarriesAccess(t *testing.T) {
	cfg := clientConfig("http://backend.test")
	if got := newAgent(t, cfg).announcement().Services[0].Access; got != nil {
		t.Fatalf("Access without settings = %+v, want nil", got)
	}
	cfg.Services[0].AllowedIPs = []string{"10.0.0.0/8"}
	cfg.Services[0].IdentityJWT = true
	cfg.Services[0].Auth = &config.Auth{
		Basic: &config.BasicAuth{Realm: "staff", Users: map[string]string{"ann": "$2b$..."}},
		JWT:   &config.JWTAuth{JWKSURL: "https://idp/jwks", Issuer: "i", Audience: []string{"a"}, Timeout: 3 * time.Second},
	}
	got := newAgent(t, cfg).announcement().Services[0].Access
	if got == nil || got.AllowedIPs[0] != "10.0.0.0/8" || !got.IdentityJWT || got.Basic.Realm != "staff" || got.Basic.Users["ann"] != "$2b$..." || got.JWT.Timeout != 3*time.Second || got.Bearer != nil {
		t.Fatalf("Access = %+v, want the service's settings", got)
	}
}

func TestAnnouncementCarriesServiceName(t *testing.T) {
	cfg := clientConfig("http://backend.test")
	if got := newAgent(t, cfg).announcement().Services[0].Name; got != "" {
		t.Fatalf("Name without services[].name = %q, want empty", got)
	}
	cfg.Services[0].Name = "web"
	if got := newAgent(t, cfg).announcement().Services[0].Name; got != "web" {
		t.Fatalf("announcement().Services[0].Name = %q, want web", got)
	}
}

// TestAnnouncesVersion: the client announces its release, as its
// `version` command prints it, for the server's GET /clients; and the
// announcement passes the server's check.
func TestAnnouncesVersion(t *testing.T) {
	a := newAgent(t, clientConfig("http://backend.test"))
	ann := a.announcement()
	if ann.Version == "" || ann.Version != buildinfo.Version() {
		t.Errorf("announcement().Version = %q, want buildinfo.Version() %q", ann.Version, buildinfo.Version())
	}
	if err := ann.Validate(); err != nil {
		t.Errorf("the announcement with its version fails Validate: %v", err)
	}
}
