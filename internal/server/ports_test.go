package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/edge/acme/acmetest"
	"github.com/aperio-dev/aperio/internal/testkit/echotest"
	"github.com/aperio-dev/aperio/tunnel"
)

// tcpForwarder dials addr for the expose entry named name.
type tcpForwarder struct{ name, addr string }

func (f tcpForwarder) ForwardRaw(ctx context.Context, h tunnel.RawHeader) (io.ReadWriteCloser, error) {
	if h.Kind != tunnel.RawTCP || h.Name != f.name {
		return nil, errors.New("no such expose entry")
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", f.addr)
}

// TestExposedTCPPortEndToEnd: through a real gateway and tunnel, an
// expose entry inside tcp_port_range opens a public port whose visitor
// connections reach the client's target, both ways with half-close; an
// entry outside the range is refused with the reason in the client's
// statuses and in a notice in the server's welcome, while the session,
// its HTTP service and its other entry stay up; each is audited (port_opened,
// port_refused, port_closed) and the open connection shows in
// aperio_tcp_connections; the port closes when the client leaves.
func TestExposedTCPPortEndToEnd(t *testing.T) {
	t.Parallel()
	port := acmetest.FreePort(t)
	cfg := serverConfig(t)
	cfg.Host = "127.0.0.1"
	cfg.TCPPortRange = []string{fmt.Sprint(port)}
	cfg.MetricsToken = "m-token-ports"
	s := startServer(t, cfg, nil, nil)

	expose := []tunnel.Expose{
		{Name: "ssh", Protocol: tunnel.ExposeTCP, RemotePort: port},
		{Name: "outside", Protocol: tunnel.ExposeTCP, RemotePort: port + 1},
	}
	statuses := make(chan []tunnel.ExposeStatus, 8)
	c, err := tunnel.NewClient(tunnel.ClientConfig{
		URL: s.url, Token: testToken, Forwarder: okForwarder{}, RawForwarder: tcpForwarder{name: "ssh", addr: echotest.TCP(t)},
		Announce: func() tunnel.Announcement {
			return tunnel.Announcement{Name: "ports", InstanceID: "i-ports", Expose: expose,
				Services: []tunnel.Service{{ID: "0", Hostnames: []string{"web.test"}, Healthy: true}}}
		},
		Logger:    testLogger(),
		Jitter:    func() float64 { return 0 },
		OnExposed: func(st []tunnel.ExposeStatus) { statuses <- st },
	})
	if err != nil {
		t.Fatal(err)
	}

	// The welcome carries the refusal as a notice, which the client logs:
	// an entry refused at connect is not only in the statuses.
	notices, err := c.Handshake(t.Context(), tunnel.Announcement{Name: "ports", InstanceID: "i-check", Draining: true, Expose: expose[1:]})
	if err != nil {
		t.Fatalf("Handshake() = %v", err)
	}
	if len(notices) != 1 || !strings.Contains(notices[0], "expose outside") || !strings.Contains(notices[0], "refused") {
		t.Fatalf("welcome notices %q, want one naming the refused entry outside", notices)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	defer func() { cancel(); <-done }()

	st := wait(t, statuses, 10*time.Second, "the server's answer to the expose entries")
	if len(st) != 2 || st[0].Name != "ssh" || st[0].Port != port || st[0].Error != "" {
		t.Fatalf("statuses %+v, want ssh open on %d first", st, port)
	}
	if st[1].Port != 0 || !strings.Contains(st[1].Error, "range") {
		t.Fatalf("status of the entry outside the range = %+v, want refused naming the range", st[1])
	}

	// The refused entry costs the client nothing else: its HTTP service
	// answers.
	poll(t, 10*time.Second, func() (bool, string) {
		resp, body := do(t, newVisitor(t, s), newRequest(t, t.Context(), s, "GET", "web.test", "/", nil))
		if resp.StatusCode != http.StatusOK || body != "http up" {
			return false, fmt.Sprintf("GET web.test = %d %q, want 200 from the client's service", resp.StatusCode, body)
		}
		return true, ""
	})

	conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 5*time.Second)
	if err != nil {
		t.Fatalf("dial the public port: %v", err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	msg := strings.Repeat("interactive line\n", 1000)
	if _, err := io.WriteString(conn, msg); err != nil {
		t.Fatal(err)
	}
	// Half-close: the backend sees EOF and still answers everything.
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(conn)
	if err != nil || string(got) != msg {
		t.Fatalf("echo through the port: %d bytes, %v; want the %d bytes sent", len(got), err, len(msg))
	}

	// A connection held open shows in the gauge of its port.
	held, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 5*time.Second)
	if err != nil {
		t.Fatalf("dial the public port: %v", err)
	}
	defer held.Close()
	gauge := fmt.Sprintf(`aperio_tcp_connections{port="%d",protocol="tcp"} 1`, port)
	poll(t, 10*time.Second, func() (bool, string) {
		req := newRequest(t, t.Context(), s, "GET", "anything.test", "/aperio/metrics", nil)
		req.Header.Set("Authorization", "Bearer m-token-ports")
		_, body := do(t, newVisitor(t, s), req)
		if !strings.Contains(body, gauge) {
			return false, "metrics lack " + gauge
		}
		return true, ""
	})
	held.Close()

	cancel()
	<-done
	poll(t, 10*time.Second, func() (bool, string) {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err != nil {
			return true, ""
		}
		c.Close()
		return false, "the public port still accepts after its only client left"
	})

	// The audit log has the port's life and the refusal.
	want := map[string]string{
		"port_opened":  fmt.Sprintf("%d", port),
		"port_refused": "expose outside",
		"port_closed":  fmt.Sprintf("%d", port),
	}
	for event, part := range want {
		poll(t, 10*time.Second, func() (bool, string) {
			got := auditEvents(t, s, event)
			for _, e := range got {
				if d, _ := e["detail"].(string); strings.Contains(d, part) {
					return true, ""
				}
			}
			return false, fmt.Sprintf("no %s audit entry naming %q in %v", event, part, got)
		})
	}
}

// TestExposedTCPPortQuota: a public port's bytes count into its token's
// daily_max_bytes like HTTP's: connections pass until the token's bytes
// reach the quota, then a new visitor connection is closed without
// reaching the client, and GET /usage shows the port's bytes under the
// token.
func TestExposedTCPPortQuota(t *testing.T) {
	t.Parallel()
	const quota, size = 4000, 1000
	port := acmetest.FreePort(t)
	cfg := serverConfig(t)
	cfg.Host = "127.0.0.1"
	cfg.TCPPortRange = []string{fmt.Sprint(port)}
	s := startServer(t, cfg, nil, nil)
	visitor := newVisitor(t, s)
	status, body := adminCall(t, visitor, s, "POST", "/tokens", map[string]any{"name": "tcp-quota", "daily_max_bytes": quota, "allow_tcp_ports": []string{fmt.Sprint(port)}})
	if status != http.StatusCreated {
		t.Fatalf("POST /tokens = %d %s, want 201", status, body)
	}
	var tok struct{ ID, Token string }
	if err := json.Unmarshal([]byte(body), &tok); err != nil {
		t.Fatal(err)
	}

	statuses := make(chan []tunnel.ExposeStatus, 8)
	c, err := tunnel.NewClient(tunnel.ClientConfig{
		URL: s.url, Token: tok.Token, Forwarder: okForwarder{}, RawForwarder: tcpForwarder{name: "db", addr: echotest.TCP(t)},
		Announce: func() tunnel.Announcement {
			return tunnel.Announcement{Name: "quota", InstanceID: "i-quota", Expose: []tunnel.Expose{{Name: "db", Protocol: tunnel.ExposeTCP, RemotePort: port}}}
		},
		Logger:    testLogger(),
		Jitter:    func() float64 { return 0 },
		OnExposed: func(st []tunnel.ExposeStatus) { statuses <- st },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if st := wait(t, statuses, 10*time.Second, "the expose status"); len(st) != 1 || st[0].Error != "" {
		t.Fatalf("statuses %+v, want db open", st)
	}

	// echo sends size bytes through the port and half-closes; it returns
	// how many came back.
	echo := func() int {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 5*time.Second)
		if err != nil {
			t.Fatalf("dial the public port: %v", err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(conn, strings.Repeat("q", size/2)); err != nil {
			return 0
		}
		conn.(*net.TCPConn).CloseWrite()
		got, _ := io.ReadAll(conn)
		return len(got)
	}
	// Each echo is size bytes of the visitor's: half in, half out. The
	// quota passes on the fourth; the fifth finds the token over it.
	for i := range quota / size {
		if n := echo(); n != size/2 {
			t.Fatalf("echo %d through the port = %d bytes back, want %d (the token is under its quota)", i, n, size/2)
		}
	}
	if n := echo(); n != 0 {
		t.Fatalf("echo with the token at its quota = %d bytes back, want the connection closed unanswered", n)
	}
	poll(t, waitFor, func() (bool, string) {
		if err := s.gw.FlushUsageForTest(t.Context()); err != nil {
			return false, err.Error()
		}
		b, _ := tokenUsage(usageRows(t, visitor, s, "token="+tok.ID), tok.ID)
		return b == quota, fmt.Sprintf("GET /usage of %s = %d bytes, want the port's %d", tok.ID, b, quota)
	})
}
