package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/tunnel"
)

// twoServices returns a client of two named services, web and api.
func twoServices() config.Client {
	cfg := clientConfig("http://web.test")
	cfg.ReloadDrain = 10 * time.Second
	cfg.Services[0].Name = "web"
	cfg.Services = append(cfg.Services, config.Service{Name: "api", Target: "http://api.test", Hostnames: []string{"api.test"}})
	return cfg
}

// announced returns the announced services by id.
func announced(a *Agent) map[string]tunnel.Service {
	out := map[string]tunnel.Service{}
	for _, s := range a.announcement().Services {
		out[s.ID] = s
	}
	return out
}

// waitFor polls cond every 10ms for at most 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond) // polling a state the agent changes on its own goroutine
	}
}

func TestApplyAddsChangesAndRemoves(t *testing.T) {
	a := newAgent(t, twoServices())
	startLoop(t, func(ctx context.Context) { a.Run(ctx) })
	gate := &gateBackend{entered: make(chan struct{}, 1), release: make(chan struct{})}
	a.service("1").transport = gate
	// A request in flight on api, which the reload removes.
	answered := make(chan error, 1)
	go func() {
		resp, err := a.Forward(t.Context(), "1", httptest.NewRequest("GET", "/", nil))
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		answered <- err
	}()
	recv(t, gate.entered, "the request on api")

	next := twoServices()
	next.Services[0].Target = "http://web2.test" // web changed
	next.Services[1] = config.Service{Name: "docs", Target: "http://docs.test", Hostnames: []string{"docs.test"}}
	if err := a.Apply(next); err != nil {
		t.Fatalf("Apply() error = %v", err)
	}
	got := announced(a)
	if s, ok := got["0"]; !ok || s.Name != "web" || !s.Healthy || s.Draining {
		t.Errorf("announced web = %+v, %v; want id 0 kept, healthy, not draining", s, ok)
	}
	if tgt := a.service("0").cfg.Target; tgt != "http://web2.test" {
		t.Errorf("web's target after Apply = %q, want http://web2.test", tgt)
	}
	if s, ok := got["2"]; !ok || s.Name != "docs" || !s.Healthy {
		t.Errorf("announced docs = %+v, %v; want the new id 2, healthy", s, ok)
	}
	if s, ok := got["1"]; !ok || !s.Draining || s.Healthy {
		t.Errorf("announced api = %+v, %v; want draining and unhealthy while its request is in flight", s, ok)
	}
	if a.service("1") == nil {
		t.Fatal("api is not forwarded to while draining")
	}

	close(gate.release)
	if err := recv(t, answered, "the api request's answer"); err != nil {
		t.Fatalf("in-flight request on the removed service = %v, want its answer", err)
	}
	waitFor(t, "api withdrawn", func() bool { return a.service("1") == nil })
	if _, ok := announced(a)["1"]; ok {
		t.Error("api still announced after its withdrawal")
	}
	if got := len(a.Status().Services); got != 2 {
		t.Errorf("Status() services after withdrawal = %d, want 2", got)
	}
}

func TestApplyKeepsUnchangedService(t *testing.T) {
	a := newAgent(t, twoServices())
	api := a.service("1")
	next := twoServices()
	next.Services = next.Services[1:] // api moves from index 1 to 0
	if err := a.Apply(next); err != nil {
		t.Fatalf("Apply() error = %v", err)
	}
	if a.service("1") != api {
		t.Error("an unchanged service was replaced, want the same service kept (limiter, breaker, health)")
	}
	// web, removed with nothing in flight, is announced draining until
	// its withdrawal, which may already have happened.
	if s, ok := announced(a)["0"]; ok && !s.Draining {
		t.Errorf("web removed: announced %+v, want draining", s)
	}
	waitFor(t, "web withdrawn", func() bool { _, ok := announced(a)["0"]; return !ok && a.service("0") == nil })
}

func TestApplyCarriesHealthOnlyWithSameProbe(t *testing.T) {
	cfg := twoServices()
	cfg.Services[0].Health = config.Health{Endpoint: "/healthz", Interval: time.Hour, Timeout: time.Second, Threshold: 1}
	a := newAgent(t, cfg)
	a.service("0").healthy.Store(true) // as after a passing probe

	next := twoServices()
	next.Services[0].Health = cfg.Services[0].Health
	next.Services[0].MaxConcurrent = 7
	if err := a.Apply(next); err != nil {
		t.Fatalf("Apply() error = %v", err)
	}
	if !a.service("0").healthy.Load() {
		t.Error("a service changed elsewhere than its probe lost its health, want it carried over")
	}
	next.Services[0].Target = "http://elsewhere.test"
	if err := a.Apply(next); err != nil {
		t.Fatalf("Apply() error = %v", err)
	}
	if a.service("0").healthy.Load() {
		t.Error("a service with a new target kept the old target's health, want unhealthy until probed")
	}
}

func TestApplyBadConfigKeepsOld(t *testing.T) {
	a := newAgent(t, twoServices())
	before := a.state.Load()
	bad := twoServices()
	bad.Services[1].Target = "ftp://api.test"
	if err := a.Apply(bad); err == nil {
		t.Fatal("Apply(ftp target) = nil, want an error")
	}
	empty := twoServices()
	empty.Services = nil
	if err := a.Apply(empty); err == nil {
		t.Fatal("Apply(no services) = nil, want an error")
	}
	if a.state.Load() != before {
		t.Fatal("a refused Apply changed the state")
	}
	if a.nextID != 2 {
		t.Fatalf("nextID after refused Applys = %d, want 2", a.nextID)
	}
}

func TestApplyDrainIsBounded(t *testing.T) {
	var logs lockedBuffer
	cfg := twoServices()
	a, err := New(cfg, Options{DialServer: (&failingDialer{}).dial, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	startLoop(t, func(ctx context.Context) { a.Run(ctx) })
	a.service("1").transport = &fakeBackend{statuses: []int{0}} // never answers
	go a.Forward(t.Context(), "1", httptest.NewRequest("GET", "/", nil))
	waitFor(t, "the request in flight", func() bool { return a.service("1").inflight.Load() == 1 })

	next := twoServices()
	next.ReloadDrain = 50 * time.Millisecond
	next.Services = next.Services[:1]
	start := time.Now()
	if err := a.Apply(next); err != nil {
		t.Fatalf("Apply() error = %v", err)
	}
	waitFor(t, "api withdrawn", func() bool { return a.service("1") == nil })
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("withdrawal took %v with reload_drain 50ms", took)
	}
	if !strings.Contains(logs.String(), `msg="reload drain timeout reached" service=1 service_name=api abandoned=1`) {
		t.Errorf("logs lack the drain timeout of api:\n%s", logs.String())
	}
}

func TestApplyLogsRestartKeys(t *testing.T) {
	var logs lockedBuffer
	a, err := New(twoServices(), Options{DialServer: (&failingDialer{}).dial, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	next := twoServices()
	next.Name = "renamed"
	next.ServerURL = "http://other.test"
	next.Priority = 3 // live
	if err := a.Apply(next); err != nil {
		t.Fatalf("Apply() error = %v", err)
	}
	if !strings.Contains(logs.String(), `msg="settings need a restart to change" restart=server.url,name`) {
		t.Errorf("logs lack the restart keys:\n%s", logs.String())
	}
	ann := a.announcement()
	if ann.Name != "" || ann.Services[0].Priority != 3 {
		t.Errorf("announcement name %q priority %d, want the running name and the new priority 3", ann.Name, ann.Services[0].Priority)
	}
}

func TestApplyAfterRunStopped(t *testing.T) {
	a := newAgent(t, twoServices())
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := a.Run(ctx); err != nil {
		t.Fatalf("Run() = %v", err)
	}
	if err := a.Apply(twoServices()); !errors.Is(err, ErrStopped) {
		t.Fatalf("Apply() after Run = %v, want ErrStopped", err)
	}
}

// TestApplyDuplicateKeys: unnamed services with the same (empty) binds
// are matched one to one, in order; the extra one is new, and a bind
// listed twice never takes one running service twice.
func TestApplyDuplicateKeys(t *testing.T) {
	cfg := clientConfig("http://a.test")
	cfg.Services[0].Hostnames = nil
	a := newAgent(t, cfg)
	first := a.service("0")
	next := clientConfig("http://a.test")
	next.Services[0].Hostnames = nil
	next.Services = append(next.Services, config.Service{Target: "http://b.test"}, config.Service{Target: "http://c.test"})
	if err := a.Apply(next); err != nil {
		t.Fatalf("Apply() error = %v", err)
	}
	var ids []string
	for _, s := range a.announcement().Services {
		ids = append(ids, s.ID)
	}
	if want := []string{"0", "1", "2"}; !slices.Equal(ids, want) {
		t.Fatalf("announced ids = %v, want %v", ids, want)
	}
	if a.service("0") != first {
		t.Error("the first unnamed service was replaced, want it kept")
	}
}

// TestCountBodyKeepsUpgrade: the count of a 101's connection ends when
// it closes, and the connection stays writable.
func TestCountBodyKeepsUpgrade(t *testing.T) {
	svc := &service{}
	svc.inflight.Add(1)
	conn := &rwc{}
	resp := svc.countBody(&http.Response{StatusCode: http.StatusSwitchingProtocols, Body: conn})
	w, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		t.Fatal("a 101's body lost its Write")
	}
	if _, err := w.Write([]byte("x")); err != nil || conn.written != 1 {
		t.Fatalf("Write() = %v, wrote %d, want 1 byte through", err, conn.written)
	}
	w.Close()
	w.Close()
	if n := svc.inflight.Load(); n != 0 {
		t.Fatalf("inflight after two Closes = %d, want 0", n)
	}
}

// TestCountBodyOnce: a response body's count ends on its first Close
// only, and wrapping the body costs one allocation per request (#43).
func TestCountBodyOnce(t *testing.T) {
	svc := &service{}
	svc.inflight.Add(1)
	resp := svc.countBody(&http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("ok"))})
	resp.Body.Close()
	resp.Body.Close()
	if n := svc.inflight.Load(); n != 0 {
		t.Fatalf("inflight after two Closes = %d, want 0", n)
	}
	body := io.NopCloser(strings.NewReader(""))
	allocs := testing.AllocsPerRun(100, func() {
		svc.inflight.Add(1)
		svc.countBody(&http.Response{StatusCode: http.StatusOK, Body: body}).Body.Close()
	})
	if allocs > 1 {
		t.Errorf("countBody: %v allocations per response, want at most 1", allocs)
	}
	if n := svc.inflight.Load(); n != 0 {
		t.Fatalf("inflight after the runs = %d, want 0", n)
	}
}

// rwc is a ReadWriteCloser that counts what is written to it.
type rwc struct{ written int }

func (c *rwc) Read([]byte) (int, error)    { return 0, io.EOF }
func (c *rwc) Write(p []byte) (int, error) { c.written += len(p); return len(p), nil }
func (c *rwc) Close() error                { return nil }

// TestRestartKeysDebugListen proves a reload that moves debug_listen
// names it among the keys that wait for a restart: the listener stays
// where it was bound.
func TestRestartKeysDebugListen(t *testing.T) {
	old := config.Client{DebugListen: "127.0.0.1:6061"}
	for _, tc := range []struct {
		new  string
		want []string
	}{{"127.0.0.1:6061", nil}, {"127.0.0.1:6062", []string{"debug_listen"}}, {"", []string{"debug_listen"}}} {
		n := old
		n.DebugListen = tc.new
		if got := restartKeys(old, n); !slices.Equal(got, tc.want) {
			t.Errorf("restartKeys(debug_listen %q → %q) = %v, want %v", old.DebugListen, tc.new, got, tc.want)
		}
	}
}
