package servertest

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/agent"
	"github.com/aperio-dev/aperio/internal/config"
)

// Agent is a running aperio-client.
type Agent struct {
	// Agent is the client itself, for its Status.
	Agent *agent.Agent

	stop   func() error
	exited chan struct{} // closed once Run returned; err is its result then
	err    error
}

// AgentConfig returns a client configuration holding one tunnel to s with
// the token Token, publishing services.
func AgentConfig(s *Server, services ...config.Service) config.Client {
	return config.Client{
		ServerURL:    s.URL,
		Token:        Token,
		Name:         "e2e",
		DrainTimeout: 30 * time.Second,
		Services:     services,
	}
}

// Service publishes target under AppHost.
func Service(target string) config.Service {
	return config.Service{Target: target, Hostnames: []string{AppHost}}
}

// StartAgent runs an agent with cfg, trusting s's certificate, until the
// test ends. It opens no status socket, since several agents share the
// process.
func StartAgent(t testing.TB, s *Server, cfg config.Client) *Agent {
	t.Helper()
	a, err := agent.New(cfg, agent.Options{Logger: Logger(), TLSConfig: s.TLSClientConfig(), StatusSocket: config.StatusSocketOff})
	if err != nil {
		t.Fatalf("agent.New() = %v, want nil", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ta := &Agent{Agent: a, exited: make(chan struct{})}
	go func() {
		defer close(ta.exited)
		ta.err = a.Run(ctx)
	}()
	ta.stop = sync.OnceValue(func() error {
		cancel()
		timer := time.NewTimer(cfg.DrainTimeout + 20*time.Second)
		defer timer.Stop()
		select {
		case <-ta.exited:
			return ta.err
		case <-timer.C:
			return errors.New("Run did not return after its ctx ended")
		}
	})
	t.Cleanup(func() {
		if err := ta.stop(); err != nil {
			t.Errorf("agent Run() = %v, want nil", err)
		}
	})
	return ta
}

// Stop cancels Run (the SIGTERM path) and returns its result, waiting for
// it up to the drain timeout and 20 s more. It is idempotent; the test's
// cleanup calls it too.
func (a *Agent) Stop() error { return a.stop() }

// Exited is closed once Run returned, on its own or after Stop.
func (a *Agent) Exited() <-chan struct{} { return a.exited }

// Err returns Run's result once Exited is closed, and nil before.
func (a *Agent) Err() error {
	select {
	case <-a.exited:
		return a.err
	default:
		return nil
	}
}

// WaitExit waits up to timeout for Run to return on its own (a drain or
// an idle retirement) and returns its result; it fails the test if Run is
// still going.
func (a *Agent) WaitExit(t testing.TB, timeout time.Duration) error {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-a.exited:
		return a.err
	case <-timer.C:
		t.Fatalf("agent Run still going after %v", timeout)
		return nil
	}
}

// Backend serves h on an httptest server closed at cleanup.
func Backend(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	b := httptest.NewServer(h)
	t.Cleanup(b.Close)
	return b
}
