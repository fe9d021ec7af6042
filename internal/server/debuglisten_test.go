package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/agent"
	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/debughttp"
	"github.com/aperio-dev/aperio/internal/server"
)

// getDebug fetches path from a debug listener at addr and returns the
// status and body.
func getDebug(t testing.TB, addr, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s on the debug listener %s: %v", path, addr, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// wantDebugServed checks that the debug listener at addr answers the
// command line of this process, a heap profile and the runtime metrics.
func wantDebugServed(t testing.TB, side, addr string) {
	t.Helper()
	if code, body := getDebug(t, addr, "/debug/pprof/cmdline"); code != http.StatusOK || !strings.Contains(body, "server.test") {
		t.Errorf("%s: GET /debug/pprof/cmdline = %d %.100q, want 200 with this test binary's name", side, code, body)
	}
	if code, body := getDebug(t, addr, "/debug/pprof/heap?debug=1"); code != http.StatusOK || !strings.Contains(body, "heap profile") {
		t.Errorf("%s: GET /debug/pprof/heap?debug=1 = %d %.100q, want 200 with a heap profile", side, code, body)
	}
	code, body := getDebug(t, addr, debughttp.MetricsPath)
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); code != http.StatusOK || err != nil || m["/sched/goroutines:goroutines"] == nil {
		t.Errorf("%s: GET %s = %d (%v), want 200 with /sched/goroutines:goroutines", side, debughttp.MetricsPath, code, err)
	}
}

// TestDebugListen runs a server and a client each with debug_listen,
// fetches profiles and metrics from both, and checks that the public port
// serves none of it.
func TestDebugListen(t *testing.T) {
	scfg := serverConfig(t)
	scfg.DebugListen = "127.0.0.1:0"
	srv := startServer(t, scfg, nil, nil)
	ac := agentConfig(srv, service(startBackend(t, headerEcho()).URL))
	ac.DebugListen = "127.0.0.1:0"
	ta := startAgent(t, srv, ac)
	visitor := newVisitor(t, srv)
	waitClients(t, visitor, srv, 1)

	serverAddr := srv.gw.DebugAddrForTest()
	if serverAddr == "" {
		t.Fatal("the server has no debug listener")
	}
	var clientAddr string
	poll(t, waitFor, func() (bool, string) {
		clientAddr = ta.agent.Status().Debug
		return clientAddr != "", "the client's Status names no debug listener"
	})
	if serverAddr == clientAddr {
		t.Fatalf("server and client debug listeners share %s", serverAddr)
	}
	wantDebugServed(t, "server", serverAddr)
	wantDebugServed(t, "client", clientAddr)

	// The public port: on an operator's hostname the paths reach the
	// router, which has no client for it, and under /aperio/ nothing;
	// on a tunneled hostname the path is the app's like any other.
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/heap", "/debug/pprof/profile?seconds=1", debughttp.MetricsPath, "/debug/vars"} {
		resp, body := do(t, visitor, newRequest(t, t.Context(), srv, http.MethodGet, "127.0.0.1", path, nil))
		if resp.StatusCode != http.StatusBadGateway || strings.Contains(body, "goroutine") || strings.Contains(body, "server.test") {
			t.Errorf("GET %s on the public port (an admin host) = %d %.100q, want the router's 502 and nothing of the debug listener", path, resp.StatusCode, body)
		}
		resp, body = do(t, visitor, newRequest(t, t.Context(), srv, http.MethodGet, "127.0.0.1", "/aperio"+path, nil))
		if resp.StatusCode != http.StatusNotFound || strings.Contains(body, "goroutine") || strings.Contains(body, "server.test") {
			t.Errorf("GET /aperio%s on the public port (an admin host) = %d %.100q, want 404", path, resp.StatusCode, body)
		}
		if resp, seen := edgeVisit(t, visitor, srv, appHost, path, nil); seen == nil {
			t.Errorf("GET %s on the public port (the app's hostname) = %d, want the app's answer", path, resp.StatusCode)
		}
	}
}

// TestDebugListenInUse checks that an address in use stops either side at
// start with an error naming debug_listen.
func TestDebugListenInUse(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()

	t.Run("server", func(t *testing.T) {
		cfg := serverConfig(t)
		cfg.DebugListen = taken.Addr().String()
		gw, err := server.New(t.Context(), cfg, server.Options{Logger: testLogger()})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		err = gw.Serve(ctx, ln)
		if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "debug_listen "+taken.Addr().String()) {
			t.Errorf("Serve() with debug_listen in use = %v, want EADDRINUSE naming debug_listen and the address", err)
		}
	})
	t.Run("client", func(t *testing.T) {
		cfg := config.Client{ServerURL: "http://127.0.0.1:1", Token: testToken, Name: "e2e", DrainTimeout: time.Second,
			Services: []config.Service{service("http://127.0.0.1:1")}, DebugListen: taken.Addr().String()}
		a, err := agent.New(cfg, agent.Options{Logger: testLogger(), StatusSocket: config.StatusSocketOff})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		err = a.Run(ctx)
		if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "debug_listen "+taken.Addr().String()) {
			t.Errorf("Run() with debug_listen in use = %v, want EADDRINUSE naming debug_listen and the address", err)
		}
	})
}

// TestDebugListenRefusesPublicAddress checks that a debug_listen that is
// not loopback stops either side even when the loader was bypassed: the
// server's New, the client's Run before it dials.
func TestDebugListenRefusesPublicAddress(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:6060", ":6060", "[::]:6060", "192.0.2.1:6060"} {
		cfg := serverConfig(t)
		cfg.DebugListen = addr
		if _, err := server.New(t.Context(), cfg, server.Options{Logger: testLogger()}); !errors.Is(err, debughttp.ErrNotLoopback) {
			t.Errorf("server.New() with debug_listen %s = %v, want ErrNotLoopback", addr, err)
		}
		ac := config.Client{ServerURL: "http://127.0.0.1:1", Token: testToken, Name: "e2e", DrainTimeout: time.Second,
			Services: []config.Service{service("http://127.0.0.1:1")}, DebugListen: addr}
		a, err := agent.New(ac, agent.Options{Logger: testLogger(), StatusSocket: config.StatusSocketOff})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		if err := a.Run(ctx); !errors.Is(err, debughttp.ErrNotLoopback) {
			t.Errorf("agent Run() with debug_listen %s = %v, want ErrNotLoopback", addr, err)
		}
		cancel()
	}
}
