package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/agent"
	"github.com/aperio-dev/aperio/internal/agent/limiter"
	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/testkit/poll"
)

func TestStatusWithoutClientExits1(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	for _, args := range [][]string{{"status"}, {"status", "--json"}, {"status", "--socket", filepath.Join(t.TempDir(), "none.sock")}} {
		code, stdout, stderr := runClient(t, nil, args...)
		if code != 1 || stdout != "" || !strings.Contains(stderr, "no running aperio-client") {
			t.Errorf("aperio-client %v = exit %d, stdout %q, stderr %q; want 1 and a clear message", args, code, stdout, stderr)
		}
	}
}

// TestStatusShowsEveryRunningClient runs two agents (no server needed) and
// reads their snapshots through `aperio-client status`.
func TestStatusShowsEveryRunningClient(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	dir := config.StatusDir()
	base := config.DefaultClient()
	base.ServerURL, base.Token, base.Name = "http://127.0.0.1:1", "t", "status-test"
	base.DrainTimeout = 0

	fixed := base
	fixed.MaxConcurrent = 7
	fixed.Services = []config.Service{{Target: "http://127.0.0.1:1", Hostnames: []string{"fixed.test"}}}
	adaptive := base
	ad := config.DefaultAdaptive()
	ad.Initial = 3
	adaptive.Adaptive = &ad
	adaptive.Services = []config.Service{{Target: "http://127.0.0.1:1", Hostnames: []string{"aimd.test"}}}

	var sockets []string
	for i, cfg := range []config.Client{fixed, adaptive} {
		sock := filepath.Join(dir, []string{"a.sock", "b.sock"}[i])
		sockets = append(sockets, sock)
		startAgent(t, cfg, sock)
	}
	for _, s := range sockets {
		poll.Until(t, 20*time.Second, "the status socket answers", func() bool {
			_, err := agent.ReadStatus(t.Context(), s)
			return err == nil
		})
	}

	code, stdout, stderr := runClient(t, nil, "status", "--json")
	if code != 0 {
		t.Fatalf("status --json = exit %d, stderr %q", code, stderr)
	}
	var sts []agent.Status
	if err := json.Unmarshal([]byte(stdout), &sts); err != nil {
		t.Fatalf("status --json output %q: %v", stdout, err)
	}
	got := map[string]limiter.Snapshot{}
	for _, st := range sts {
		for _, s := range st.Services {
			if s.Concurrency == nil {
				t.Fatalf("service %s has no concurrency snapshot", s.Hostnames)
			}
			got[s.Hostnames[0]] = *s.Concurrency
		}
	}
	want := map[string]limiter.Snapshot{
		"fixed.test": {Mode: limiter.ModeFixed, Desired: 7, Min: 7, Max: 7, Fixed: true},
		"aimd.test":  {Mode: limiter.ModeAIMD, Desired: 3, Min: 1, Max: 100},
	}
	for h, w := range want {
		if got[h] != w {
			t.Errorf("status of %s = %+v, want %+v", h, got[h], w)
		}
	}

	code, stdout, _ = runClient(t, nil, "status", "--socket", sockets[1])
	if code != 0 || !strings.Contains(stdout, "aimd.test") || strings.Contains(stdout, "fixed.test") ||
		!strings.Contains(stdout, "DESIRED") || !strings.Contains(stdout, "aimd") {
		t.Errorf("status --socket = exit %d:\n%s\nwant a table of aimd.test only", code, stdout)
	}

	// Neither client reaches its server: the table says 0/1, and
	// --require-connected (the container image's health check) fails.
	if !strings.Contains(stdout, "0/1") {
		t.Errorf("status --socket table lacks TUNNELS 0/1:\n%s", stdout)
	}
	code, _, stderr = runClient(t, nil, "status", "--socket", sockets[1], "--require-connected")
	if code != 1 || !strings.Contains(stderr, "no tunnel up") {
		t.Errorf("status --require-connected with the server unreachable = exit %d, stderr %q; want 1 naming the missing tunnel", code, stderr)
	}

	// The status_socket setting picks one client: from a file, from the
	// environment; off is a usage error.
	file := filepath.Join(t.TempDir(), "aperio.yaml")
	if err := os.WriteFile(file, []byte("status_socket: "+sockets[0]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, _ = runClient(t, nil, "status", "--config", file)
	if code != 0 || !strings.Contains(stdout, "fixed.test") || strings.Contains(stdout, "aimd.test") {
		t.Errorf("status --config (status_socket = a.sock) = exit %d:\n%s\nwant fixed.test only", code, stdout)
	}
	code, stdout, _ = runClient(t, map[string]string{"APERIO_STATUS_SOCKET": sockets[1]}, "status")
	if code != 0 || !strings.Contains(stdout, "aimd.test") || strings.Contains(stdout, "fixed.test") {
		t.Errorf("status with APERIO_STATUS_SOCKET = b.sock = exit %d:\n%s\nwant aimd.test only", code, stdout)
	}
	code, _, stderr = runClient(t, map[string]string{"APERIO_STATUS_SOCKET": "off"}, "status")
	if code != 2 || !strings.Contains(stderr, "status_socket is off") {
		t.Errorf("status with status_socket off = exit %d, stderr %q; want 2", code, stderr)
	}
}

func startAgent(t *testing.T, cfg config.Client, socket string) {
	t.Helper()
	a, err := agent.New(cfg, agent.Options{StatusSocket: socket})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent Run = %v", err)
		}
	})
}

// TestStatusTableShowsRetired: a client idle_timeout retired with
// idle_action wait has no tunnel up by design, and its row says why.
func TestStatusTableShowsRetired(t *testing.T) {
	var b strings.Builder
	statusTable(&b, []agent.Status{{PID: 7, Name: "web-1", Retired: "idle", Tunnels: []agent.TunnelStatus{{Server: "https://a.test"}}}})
	if !strings.Contains(b.String(), "7\tweb-1\t0/1\t(retired: idle, waiting for SIGTERM)") {
		t.Errorf("status table:\n%s\nwant a row saying the client retired idle and waits", b.String())
	}
}
