package agent

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/testkit/memnet"
	"github.com/aperio-dev/aperio/tunnel"
)

// acceptAll is a tunnel server's Authenticator that admits every token.
type acceptAll struct{}

func (acceptAll) Authenticate(context.Context, string) (tunnel.Identity, error) {
	return tunnel.Identity{Name: "agent-test"}, nil
}

// drainRegistry is a tunnel server's Registry that hands over each
// session and reports the first announcement that says draining.
type drainRegistry struct {
	attached chan *tunnel.Session
	draining chan struct{} // closed on the first draining announcement
	seen     bool          // touched only by the session's heartbeat loop
}

func (r *drainRegistry) Attach(_ context.Context, s *tunnel.Session) error {
	r.attached <- s
	return nil
}

func (r *drainRegistry) Update(_ context.Context, s *tunnel.Session) []string {
	if a := s.Announcement(); a != nil && a.Draining && !r.seen {
		r.seen = true
		close(r.draining)
	}
	return nil
}

func (r *drainRegistry) Detach(context.Context, *tunnel.Session) {}

// gateBackend is a service's transport whose requests wait until release
// is closed or their context ends.
type gateBackend struct {
	entered chan struct{}
	release chan struct{}
}

func (g *gateBackend) RoundTrip(req *http.Request) (*http.Response, error) {
	g.entered <- struct{}{}
	select {
	case <-g.release:
		return &http.Response{StatusCode: 200, Header: http.Header{}, ContentLength: 4, Body: io.NopCloser(strings.NewReader("done")), Request: req}, nil
	case <-req.Context().Done():
		return nil, req.Context().Err()
	}
}

// recv returns the next value of ch, failing the test after 10s.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

// startTunnelServer serves a tunnel server of cfg (Auth acceptAll, a 15 s
// DownThreshold unless set) on an in-memory network until the test ends,
// and returns the listener whose Dial reaches it.
func startTunnelServer(t *testing.T, cfg tunnel.ServerConfig) *memnet.Listener {
	t.Helper()
	cfg.Auth = acceptAll{}
	if cfg.DownThreshold == 0 {
		cfg.DownThreshold = 15 * time.Second
	}
	srv, err := tunnel.NewServer(cfg)
	if err != nil {
		t.Fatalf("tunnel.NewServer() error = %v", err)
	}
	ln := memnet.Listen()
	hs := &http.Server{Handler: srv}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("tunnel server Shutdown() = %v", err)
		}
		hs.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("http.Server.Serve() = %v, want http.ErrServerClosed", err)
		}
	})
	return ln
}

// memnetAgent starts a tunnel server of srv (its Registry a drainRegistry)
// as startTunnelServer does, and an agent of one service, changed by edit,
// that dials it and whose backend is a gateBackend. The agent is not run.
func memnetAgent(t *testing.T, srv tunnel.ServerConfig, edit func(*config.Client)) (*Agent, *drainRegistry, *gateBackend) {
	t.Helper()
	reg := &drainRegistry{attached: make(chan *tunnel.Session, 1), draining: make(chan struct{})}
	srv.Registry = reg
	ln := startTunnelServer(t, srv)
	cfg := clientConfig("http://backend.test")
	cfg.ServerURL = "http://memnet"
	edit(&cfg)
	a, err := New(cfg, Options{DialServer: ln.Dial})
	if err != nil {
		t.Fatalf("New() error = %v", err)
	}
	be := &gateBackend{entered: make(chan struct{}, 1), release: make(chan struct{})}
	a.services()[0].transport = be
	return a, reg, be
}

// TestDrainWaitsForInFlight runs an agent against a real tunnel server over
// an in-memory network, with one request in flight when its context ends.
// The agent announces draining first; a request that finishes within
// drain_timeout is answered in full and Run returns once it has; one that
// does not is abandoned when drain_timeout passes.
func TestDrainWaitsForInFlight(t *testing.T) {
	tests := []struct {
		name         string
		drainTimeout time.Duration
		finish       bool // the request finishes during the drain
	}{
		{"request finishes within drain_timeout", time.Minute, true},
		{"drain_timeout abandons the request", 300 * time.Millisecond, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, reg, be := memnetAgent(t, tunnel.ServerConfig{}, func(cfg *config.Client) { cfg.DrainTimeout = tt.drainTimeout })
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ran := make(chan error, 1)
			go func() { ran <- a.Run(ctx) }()
			sess := recv(t, reg.attached, "the agent's session")

			answered := sendSlow(sess)
			recv(t, be.entered, "the request at the backend")
			if n := a.active(); n != 1 {
				t.Fatalf("active() with one request at the backend = %d, want 1", n)
			}

			start := time.Now()
			cancel()
			if tt.finish {
				// The server hears of the drain while the request is held;
				// with drain_timeout short, the session may end before a
				// rate-limited announcement is applied, so only this case
				// waits for it.
				recv(t, reg.draining, "the draining announcement")
				select {
				case err := <-ran:
					t.Fatalf("Run() = %v with a request in flight, want it draining", err)
				default:
				}
				close(be.release)
				if r := recv(t, answered, "the in-flight answer"); r.err != nil || r.status != 200 || r.body != "done" {
					t.Fatalf("in-flight request during the drain = %d %q (%v), want 200 done", r.status, r.body, r.err)
				}
			}
			if err := recv(t, ran, "Run to return"); err != nil {
				t.Fatalf("Run() = %v, want nil after a drain on cancel", err)
			}
			elapsed := time.Since(start)
			if !a.announcement().Draining {
				t.Error("announcement().Draining after Run = false, want true")
			}
			if !tt.finish {
				if elapsed < tt.drainTimeout {
					t.Errorf("Run returned %v after cancel with a request in flight, want at least drain_timeout %v", elapsed, tt.drainTimeout)
				}
				if r := recv(t, answered, "the abandoned request's end"); r.err == nil && r.status == 200 {
					t.Errorf("abandoned request = %d %q, want it cut off", r.status, r.body)
				}
			}
		})
	}
}

// TestRunRetiresWithoutRequest runs an agent against a real tunnel server
// over an in-memory network and never sends it a request: once its tunnel
// is up (its service healthy), idle_timeout counts, and Run retires with
// ErrIdle, so an instance started for a visitor who gave up does not run
// for ever.
func TestRunRetiresWithoutRequest(t *testing.T) {
	const idle = 300 * time.Millisecond
	a, reg, _ := memnetAgent(t, tunnel.ServerConfig{}, func(cfg *config.Client) {
		cfg.IdleTimeout = idle
		cfg.DrainTimeout = time.Second
	})
	ran := make(chan error, 1)
	go func() { ran <- a.Run(t.Context()) }()
	recv(t, reg.attached, "the agent's session")
	up := time.Now()
	if err := recv(t, ran, "Run to retire"); !errors.Is(err, ErrIdle) {
		t.Fatalf("Run() = %v, want ErrIdle", err)
	}
	if el := time.Since(up); el < idle*9/10 {
		t.Errorf("Run retired %v after the tunnel came up, want at least idle_timeout %v", el, idle)
	}
}

// slowAnswer is the end of a request sent through a session: its status
// and body, or the error that ended it.
type slowAnswer struct {
	status int
	body   string
	err    error
}

// sendSlow sends GET http://app.test/slow through sess on service "0"
// and delivers its end on the channel it returns.
func sendSlow(sess *tunnel.Session) <-chan slowAnswer {
	answered := make(chan slowAnswer, 1)
	go func() {
		resp, err := sess.RoundTrip(httptest.NewRequest("GET", "http://app.test/slow", nil), "0")
		if err != nil {
			answered <- slowAnswer{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		answered <- slowAnswer{resp.StatusCode, string(b), err}
	}()
	return answered
}
