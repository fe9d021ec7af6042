package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/acme/acmetest"
	"github.com/aperio-dev/aperio/internal/echotest"
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
// statuses while the session and its other entry stay up; the port
// closes when the client leaves.
func TestExposedTCPPortEndToEnd(t *testing.T) {
	port := acmetest.FreePort(t)
	cfg := serverConfig(t)
	cfg.Host = "127.0.0.1"
	cfg.TCPPortRange = []string{fmt.Sprint(port)}
	s := startServer(t, cfg, nil, nil)

	statuses := make(chan []tunnel.ExposeStatus, 8)
	c, err := tunnel.NewClient(tunnel.ClientConfig{
		URL: s.url, Token: testToken, Forwarder: nopForwarder{}, RawForwarder: tcpForwarder{name: "ssh", addr: echotest.TCP(t)},
		Announce: func() tunnel.Announcement {
			return tunnel.Announcement{Name: "ports", InstanceID: "i-ports", Expose: []tunnel.Expose{
				{Name: "ssh", Protocol: tunnel.ExposeTCP, RemotePort: port},
				{Name: "outside", Protocol: tunnel.ExposeTCP, RemotePort: port + 1},
			}}
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

	st := wait(t, statuses, 10*time.Second, "the server's answer to the expose entries")
	if len(st) != 2 || st[0].Name != "ssh" || st[0].Port != port || st[0].Error != "" {
		t.Fatalf("statuses %+v, want ssh open on %d first", st, port)
	}
	if st[1].Port != 0 || !strings.Contains(st[1].Error, "range") {
		t.Fatalf("status of the entry outside the range = %+v, want refused naming the range", st[1])
	}

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
}
