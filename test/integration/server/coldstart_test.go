package server_test

import (
	"encoding/json"
	"fmt"
	"github.com/aperio-dev/aperio/internal/server/servertest"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/config"
)

// TestColdStartFromZero: a client declares a scaling block with min 0 and
// leaves; the server restarts; a burst of requests (a POST with a body
// among them) for the sleeping hostname makes exactly one provider call,
// whose handler starts a new client, and every held request is served.
func TestColdStartFromZero(t *testing.T) {
	t.Parallel()
	backend := servertest.Backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		fmt.Fprintf(w, "%s %s %d", r.Method, r.URL.Path, len(b))
	}))

	var calls atomic.Int64
	var bodyMu sync.Mutex
	var hookBody map[string]any
	var srv2 *servertest.Server // set before any hook call can arrive
	var started sync.Once
	var agentCfg config.Client
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		bodyMu.Lock()
		json.NewDecoder(r.Body).Decode(&hookBody)
		bodyMu.Unlock()
		started.Do(func() {
			servertest.StartAgent(t, srv2, withServer(agentCfg, srv2))
		})
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(hook.Close)

	cfg := servertest.Config(t)
	cfg.ScalingEnabled = true
	cfg.Outbound.AllowHTTP = true    // the test provider is plain http…
	cfg.Outbound.AllowPrivate = true // …on loopback
	srv1 := servertest.Start(t, cfg, nil, nil)
	agentCfg = servertest.AgentConfig(srv1, servertest.Service(backend.URL))
	agentCfg.MaxConcurrent = 4
	agentCfg.Scaling = &config.Scaling{URL: hook.URL + "/scale", Min: 0, Max: 3, ColdStart: 30 * time.Second,
		TargetUtilization: 0.8, Window: 15 * time.Second, Cooldown: time.Minute}
	first := servertest.StartAgent(t, srv1, agentCfg)
	visitor := servertest.NewVisitor(t, srv1)
	servertest.WaitClients(t, visitor, srv1, 1)
	if err := first.Stop(); err != nil {
		t.Fatalf("first client Run() = %v, want nil", err)
	}
	if err := srv1.Stop(); err != nil {
		t.Fatalf("first server Serve() = %v, want nil", err)
	}

	// A new server on the same store: nothing is connected, the record is.
	srv2 = servertest.Start(t, cfg, nil, nil)
	visitor2 := servertest.NewVisitor(t, srv2)

	// Explain first: it must predict the cold start and not make it.
	req := servertest.NewRequest(t, t.Context(), srv2, "GET", "admin.localhost", "/aperio/api/explain?host="+servertest.AppHost+"&path=/r&ip=203.0.113.9", nil)
	req.Header.Set("Authorization", "Bearer "+servertest.Token)
	resp, body := servertest.Do(t, visitor2, req)
	var ex struct {
		Verdict string `json:"verdict"`
	}
	if err := json.Unmarshal([]byte(body), &ex); resp.StatusCode != http.StatusOK || err != nil {
		t.Fatalf("GET /aperio/api/explain = %d %s (%v), want 200 JSON", resp.StatusCode, body, err)
	}
	if ex.Verdict != "cold start: would call provider" || calls.Load() != 0 {
		t.Fatalf("explain before the burst = %s with %d provider calls, want a predicted cold start and no call", body, calls.Load())
	}
	const burst = 40
	type result struct {
		status int
		body   string
		err    error
	}
	results := make(chan result, burst)
	start := time.Now()
	for i := range burst {
		method, body := "GET", io.Reader(nil)
		if i%4 == 0 {
			method, body = "POST", strings.NewReader(strings.Repeat("x", 1000))
		}
		req := servertest.NewRequest(t, t.Context(), srv2, method, servertest.AppHost, fmt.Sprint("/r", i), body)
		go func() {
			status, b, err := servertest.Fetch(visitor2, req)
			results <- result{status, b, err}
		}()
	}
	for range burst {
		r := servertest.Wait(t, results, 60*time.Second, "a held request")
		if r.err != nil || r.status != http.StatusOK || !strings.HasPrefix(r.body, "GET /r") && !strings.HasSuffix(r.body, " 1000") {
			t.Fatalf("held request = %d %q, %v, want 200 from the started instance (POST bodies intact)", r.status, r.body, r.err)
		}
	}
	t.Logf("%d held requests served %v after the first arrived", burst, time.Since(start))
	if n := calls.Load(); n != 1 {
		t.Fatalf("provider calls for a burst of %d = %d, want exactly 1", burst, n)
	}
	bodyMu.Lock()
	defer bodyMu.Unlock()
	if hookBody["reason"] != "cold_start" || hookBody["hostname"] != servertest.AppHost || hookBody["desired"] != 1.0 || hookBody["current"] != 0.0 {
		t.Fatalf("hook body = %v, want a cold_start for %s from 0 to 1", hookBody, servertest.AppHost)
	}
}

// withServer points a client configuration at s.
func withServer(c config.Client, s *servertest.Server) config.Client {
	c.ServerURL = s.URL
	return c
}

// TestScaleOutThenIn: sustained saturation for a whole window asks for one
// more instance; once load stops, four quiet windows later it asks for one
// fewer.
func TestScaleOutThenIn(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	backend := servertest.Backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/busy" {
			<-release
		}
		io.WriteString(w, "ok")
	}))
	type call struct {
		Reason           string
		Current, Desired int
	}
	calls := make(chan call, 16)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var c call
		json.NewDecoder(r.Body).Decode(&c)
		calls <- c
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(hook.Close)

	cfg := servertest.Config(t)
	cfg.ScalingEnabled, cfg.Outbound.AllowHTTP, cfg.Outbound.AllowPrivate = true, true, true
	srv := servertest.Start(t, cfg, nil, nil)
	visitor := servertest.NewVisitor(t, srv)
	ac := servertest.AgentConfig(srv, servertest.Service(backend.URL))
	ac.MaxConcurrent = 2
	ac.Scaling = &config.Scaling{URL: hook.URL, Min: 1, Max: 3, ColdStart: 30 * time.Second,
		TargetUtilization: 0.8, Window: time.Second, Cooldown: time.Second}
	// Two instances of the same service, so there is one to give back.
	servertest.StartAgent(t, srv, ac)
	second := ac
	second.Name = "e2e-2"
	servertest.StartAgent(t, srv, second)
	servertest.WaitClients(t, visitor, srv, 2)

	// Saturate: 4 requests in flight on a capacity of 4 (utilization 1.0).
	done := make(chan struct{}, 4)
	for range 4 {
		req := servertest.NewRequest(t, t.Context(), srv, "GET", servertest.AppHost, "/busy", nil)
		go func() {
			servertest.Fetch(visitor, req)
			done <- struct{}{}
		}()
	}
	out := servertest.Wait(t, calls, 20*time.Second, "a scale_out call")
	if out.Reason != "scale_out" || out.Current != 2 || out.Desired != 3 {
		t.Fatalf("call under saturation = %+v, want scale_out from 2 to 3", out)
	}
	close(release)
	for range 4 {
		servertest.Wait(t, done, 10*time.Second, "a busy request finishing")
	}
	in := servertest.Wait(t, calls, 30*time.Second, "a scale_in call")
	if in.Reason != "scale_in" || in.Current != 2 || in.Desired != 1 {
		t.Fatalf("call after load stopped = %+v, want scale_in from 2 to 1", in)
	}
}

// TestScalingAPIThroughServer lists and disarms a record through the admin
// API of a running server; the secret never leaves the server.
func TestScalingAPIThroughServer(t *testing.T) {
	t.Parallel()
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(hook.Close)
	cfg := servertest.Config(t)
	cfg.ScalingEnabled, cfg.Outbound.AllowHTTP, cfg.Outbound.AllowPrivate = true, true, true
	srv := servertest.Start(t, cfg, nil, nil)
	visitor := servertest.NewVisitor(t, srv)
	ac := servertest.AgentConfig(srv, servertest.Service(servertest.Backend(t, http.NotFoundHandler()).URL))
	ac.Scaling = &config.Scaling{URL: hook.URL, Secret: "very-secret", Max: 2, ColdStart: time.Minute,
		TargetUtilization: 0.8, Window: time.Second, Cooldown: time.Second}
	servertest.StartAgent(t, srv, ac)
	servertest.WaitClients(t, visitor, srv, 1)

	api := func(method, path string) (int, string) {
		req := servertest.NewRequest(t, t.Context(), srv, method, "admin.localhost", "/aperio/api"+path, nil)
		req.Header.Set("Authorization", "Bearer "+servertest.Token)
		resp, body := servertest.Do(t, visitor, req)
		return resp.StatusCode, body
	}
	var list []struct {
		ID, Hostname  string
		Authenticated bool
	}
	servertest.Poll(t, 5*time.Second, func() (bool, string) {
		code, body := api("GET", "/scaling")
		if code != 200 || strings.Contains(body, "very-secret") {
			t.Fatalf("GET /scaling = %d %s, want 200 without the secret", code, body)
		}
		list = nil
		json.Unmarshal([]byte(body), &list)
		return len(list) == 1, "GET /scaling = " + body + ", want one record"
	})
	if list[0].Hostname != servertest.AppHost || !list[0].Authenticated {
		t.Fatalf("scaling record = %+v, want %s with authenticated true", list[0], servertest.AppHost)
	}
	if code, body := api("DELETE", "/scaling/"+list[0].ID); code != http.StatusNoContent {
		t.Fatalf("DELETE /scaling/%s = %d %s, want 204", list[0].ID, code, body)
	}
}

// TestDeclareAndLeaveAtOnce: a bind is armed by the heartbeat that first
// declares it, so a client that declares and leaves straight away can be
// cold started by the next request.
func TestDeclareAndLeaveAtOnce(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(hook.Close)
	cfg := servertest.Config(t)
	cfg.ScalingEnabled, cfg.Outbound.AllowHTTP, cfg.Outbound.AllowPrivate = true, true, true
	cfg.Router.GatewayTimeout = 100 * time.Millisecond
	srv := servertest.Start(t, cfg, nil, nil)
	visitor := servertest.NewVisitor(t, srv)
	ac := servertest.AgentConfig(srv, servertest.Service(servertest.Backend(t, http.NotFoundHandler()).URL))
	ac.Scaling = &config.Scaling{URL: hook.URL, Max: 1, ColdStart: 200 * time.Millisecond,
		TargetUtilization: 0.8, Window: time.Second, Cooldown: time.Minute}
	ag := servertest.StartAgent(t, srv, ac)
	servertest.WaitClients(t, visitor, srv, 1)
	if err := ag.Stop(); err != nil {
		t.Fatal(err)
	}
	servertest.WaitClients(t, visitor, srv, 0)
	status, _ := servertest.Get(t, visitor, srv, servertest.AppHost, "/")
	if n := calls.Load(); n != 1 {
		t.Fatalf("provider calls after declare-and-leave = %d (request answered %d), want 1", n, status)
	}
}
