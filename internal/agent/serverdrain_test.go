package agent

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/testkit/memnet"
	"github.com/aperio-dev/aperio/tunnel"
)

// lockedBuffer is a log destination the agent's goroutines share.
type lockedBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestServerAskedDrain: an agent holding tunnels to two servers, with a
// request in flight through the first, retires when the first server's
// ack says drain: both servers hear it announce draining, the request
// still finishes 200, Run returns nil (exit 0), and the log names the
// server that asked.
func TestServerAskedDrain(t *testing.T) {
	regA := &drainRegistry{attached: make(chan *tunnel.Session, 1), draining: make(chan struct{})}
	regB := &drainRegistry{attached: make(chan *tunnel.Session, 1), draining: make(chan struct{})}
	// Server A's 3 s down threshold makes its heartbeats 1 s apart: the
	// ack that carries the ask comes within a second, with no hook into
	// the client.
	lnA := startTunnelServer(t, tunnel.ServerConfig{Registry: regA, DownThreshold: 3 * time.Second})
	lnB := startTunnelServer(t, tunnel.ServerConfig{Registry: regB})
	lns := map[string]*memnet.Listener{"server-a.test:80": lnA, "server-b.test:80": lnB}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		ln := lns[addr]
		if ln == nil {
			t.Errorf("agent dialed %q, want one of the two servers", addr)
			return nil, net.ErrClosed
		}
		return ln.Dial(ctx, network, addr)
	}
	cfg := clientConfig("http://backend.test")
	cfg.ServerURL = "http://server-a.test"
	cfg.ServerURLs = []string{"http://server-b.test"}
	cfg.DrainTimeout = time.Minute
	var logs lockedBuffer
	a, err := New(cfg, Options{DialServer: dial, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatalf("New() error = %v", err)
	}
	be := &gateBackend{entered: make(chan struct{}, 1), release: make(chan struct{})}
	a.services()[0].transport = be
	ran := make(chan error, 1)
	go func() { ran <- a.Run(t.Context()) }()
	sessA := recv(t, regA.attached, "the session with server A")
	recv(t, regB.attached, "the session with server B")

	answered := sendSlow(sessA)
	recv(t, be.entered, "the request at the backend")

	sessA.AskDrain()
	recv(t, regA.draining, "the draining announcement at server A")
	recv(t, regB.draining, "the draining announcement at server B")
	select {
	case err := <-ran:
		t.Fatalf("Run() = %v with a request in flight, want it draining", err)
	default:
	}
	close(be.release)
	if r := recv(t, answered, "the in-flight answer"); r.err != nil || r.status != 200 || r.body != "done" {
		t.Fatalf("in-flight request during the drain = %d %q (%v), want 200 done", r.status, r.body, r.err)
	}
	if err := recv(t, ran, "Run to return"); err != nil {
		t.Fatalf("Run() = %v, want nil after a drain the server asked for", err)
	}
	out := logs.String()
	if !strings.Contains(out, `msg="server asked to drain" server_url=http://server-a.test`) {
		t.Errorf("log has no INFO line naming server A's drain ask:\n%s", out)
	}
	if strings.Contains(out, `msg="server asked to drain" server_url=http://server-b.test`) {
		t.Errorf("log blames server B, which never asked:\n%s", out)
	}
}

// TestAskDrainNeverBlocks: the ack handler's callback returns at once
// however many acks ask, since it runs on the tunnel's control loop.
func TestAskDrainNeverBlocks(t *testing.T) {
	a := newAgent(t, clientConfig("http://backend.test"))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 100 {
			a.askDrain("http://server.test")
		}
	}()
	recv(t, done, "100 drain asks")
	if u := recv(t, a.drainAsked, "the recorded ask"); u != "http://server.test" {
		t.Fatalf("drainAsked = %q, want http://server.test", u)
	}
}
