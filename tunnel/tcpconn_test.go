package tunnel

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/aperio-dev/aperio/internal/recovery"
)

// TestTCPTransportUpgrade checks that a client set to TransportTCP
// upgrades to Subprotocol, not to a WebSocket, and is served over it.
func TestTCPTransportUpgrade(t *testing.T) {
	reg := newFakeRegistry()
	srv, err := NewServer(ServerConfig{Auth: tokenAuth{}, Registry: reg, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen http.Header
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = r.Header.Clone()
		mu.Unlock()
		srv.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	sess := runClient(t, srv, reg, hs.URL, TransportTCP)
	mu.Lock()
	up, key := seen.Get("Upgrade"), seen.Get("Sec-Websocket-Key")
	mu.Unlock()
	if up != Subprotocol || key != "" {
		t.Fatalf("client sent Upgrade %q, Sec-WebSocket-Key %q; want %q and none", up, key, Subprotocol)
	}
	req := httptest.NewRequest("GET", "/hello", nil)
	req.Host = "app.test"
	if resp, body := roundTrip(t, sess, req); resp.StatusCode != 200 || body != "hello app.test via 0" {
		t.Fatalf("GET /hello over the tcp transport = %d %q", resp.StatusCode, body)
	}
}

// runClient runs a client of srv at url on transport until the test ends
// (then shuts srv down) and returns the session reg saw attached.
func runClient(t *testing.T, srv *Server, reg *fakeRegistry, url, transport string) *Session {
	t.Helper()
	c, err := NewClient(ClientConfig{URL: url, Token: testToken, Transport: transport,
		Announce: testAnnouncement, Forwarder: newHandlerForwarder(t, echoHandler()), Jitter: func() float64 { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		srv.Shutdown(sctx)
	})
	select {
	case sess := <-reg.attached:
		return sess
	case <-time.After(10 * time.Second):
		t.Fatalf("%s client did not attach within 10s", transport)
		return nil
	}
}

// upgradeConn speaks the tcp transport's upgrade by hand: its first Write sends the
// upgrade request in front of the bytes written (so the server finds
// yamux frames pipelined behind the request head), and its first Read
// consumes the server's 101 head.
type upgradeConn struct {
	net.Conn
	br       *bufio.Reader
	wrote    bool
	readHead bool
	status   string
}

func (c *upgradeConn) Write(p []byte) (int, error) {
	if !c.wrote {
		c.wrote = true
		head := "GET " + Path + " HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: " + Subprotocol + "\r\nAuthorization: Bearer " + testToken + "\r\n\r\n"
		if _, err := c.Conn.Write(append([]byte(head), p...)); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *upgradeConn) Read(p []byte) (int, error) {
	if !c.readHead {
		c.readHead = true
		line, err := c.br.ReadString('\n')
		if err != nil {
			return 0, err
		}
		c.status = line
		for {
			l, err := c.br.ReadString('\n')
			if err != nil {
				return 0, err
			}
			if l == "\r\n" {
				break
			}
		}
	}
	return c.br.Read(p)
}

// TestTCPUpgradePipelined sends the hello in the same write as the
// upgrade request: the server must not lose the bytes it read past the
// head.
func TestTCPUpgradePipelined(t *testing.T) {
	reg := newFakeRegistry()
	srv, err := NewServer(ServerConfig{Auth: tokenAuth{}, Registry: reg, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		srv.Shutdown(sctx)
	})
	conn, err := net.Dial("tcp", hs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	uc := &upgradeConn{Conn: conn, br: bufio.NewReader(conn)}
	mux, err := yamux.Client(uc, yamuxConfig(clientAcceptBacklog))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mux.Close() })
	ctrl, welcome := (&rawClient{mux: mux}).hello(t)
	defer ctrl.Close()
	if !strings.HasPrefix(uc.status, "HTTP/1.1 101") || welcome.SessionID == "" {
		t.Fatalf("status %q, welcome %+v; want 101 and a session", uc.status, welcome)
	}
}

// fakeServer accepts one connection, reads its request head and hands
// it to serve, a server misbehaving after that.
func fakeServer(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	return "http://" + serveLoopback(t, func(ln net.Listener, _ *sync.WaitGroup) {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		if _, err := http.ReadRequest(bufio.NewReader(conn)); err != nil {
			return
		}
		serve(conn)
	})
}

// TestTCPDialHostileServer checks the client's side of the tcp transport's upgrade
// against servers that misbehave: each ends in a clear error within the
// bound, never a hang, and no more than rawResponseLimit is read.
func TestTCPDialHostileServer(t *testing.T) {
	tests := []struct {
		name  string
		serve func(net.Conn)
		check func(t *testing.T, err error)
	}{
		{"wrong upgrade", func(c net.Conn) {
			io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
			io.Copy(io.Discard, c) // until the client hangs up
		}, func(t *testing.T, err error) {
			var r *RefusedError
			if !errors.As(err, &r) || !strings.Contains(r.Reason, "did not accept upgrade") {
				t.Fatalf("err = %v, want a refusal naming the upgrade", err)
			}
		}},
		{"refused with a reason", func(c net.Conn) {
			body := `{"error":"invalid token","code":"token","permanent":true}`
			io.WriteString(c, "HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
		}, func(t *testing.T, err error) {
			var r *RefusedError
			if !errors.As(err, &r) || r.Status != 401 || r.Reason != "invalid token" || !r.Permanent {
				t.Fatalf("err = %v, want a permanent 401 refusal %q", err, "invalid token")
			}
		}},
		{"endless head", func(c net.Conn) {
			io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\n")
			line := "X-Filler: " + strings.Repeat("a", 1000) + "\r\n"
			for range 1000 { // 1 MB, far past rawResponseLimit
				if _, err := io.WriteString(c, line); err != nil {
					return
				}
			}
		}, func(t *testing.T, err error) {
			if err == nil || errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err = %v, want the head's limit to end the dial before its deadline", err)
			}
		}},
		{"silent", func(c net.Conn) { io.Copy(io.Discard, c) }, func(t *testing.T, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("err = %v, want the dial's deadline", err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := fakeServer(t, tt.serve)
			c, err := NewClient(ClientConfig{URL: url, Token: testToken, Transport: TransportTCP,
				Announce: testAnnouncement, Forwarder: newHandlerForwarder(t, echoHandler())})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			conn, _, err := c.dialTCPTransport(ctx)
			if err == nil {
				conn.Close()
			}
			tt.check(t, err)
		})
	}
}

// TestTCPDialKeepsPipelinedBytes checks that bytes a server sends right
// behind its 101 reach the session.
func TestTCPDialKeepsPipelinedBytes(t *testing.T) {
	url := fakeServer(t, func(c net.Conn) {
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+Subprotocol+"\r\n\r\nfirst frames")
		io.Copy(io.Discard, c)
	})
	c, err := NewClient(ClientConfig{URL: url, Token: testToken, Transport: TransportTCP,
		Announce: testAnnouncement, Forwarder: newHandlerForwarder(t, echoHandler())})
	if err != nil {
		t.Fatal(err)
	}
	conn, r, err := c.dialTCPTransport(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	got := make([]byte, len("first frames"))
	if _, err := io.ReadFull(r, got); err != nil || string(got) != "first frames" {
		t.Fatalf("read %q, %v; want the bytes behind the 101", got, err)
	}
}

func TestTransportValidated(t *testing.T) {
	_, err := NewClient(ClientConfig{URL: "http://x", Token: testToken, Transport: "carrier-pigeon",
		Announce: testAnnouncement, Forwarder: newHandlerForwarder(t, echoHandler())})
	if err == nil || !strings.Contains(err.Error(), `Transport must be "websocket" or "tcp"`) {
		t.Fatalf("NewClient with an unknown transport = %v, want the choices named", err)
	}
}

// TestTCPTransportGarbageAfterUpgrade sends bytes that are no yamux
// frames behind an accepted upgrade: the server ends the connection
// (within its handshake bound at most) and attaches nothing.
func TestTCPTransportGarbageAfterUpgrade(t *testing.T) {
	reg := newFakeRegistry()
	srv, err := NewServer(ServerConfig{Auth: tokenAuth{}, Registry: reg, HandshakeTimeout: testHandshake, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	for _, junk := range []string{strings.Repeat("\xff", 1024), "GET / HTTP/1.1\r\n\r\n", ""} {
		conn, err := net.Dial("tcp", hs.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		head := "GET " + Path + " HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: " + Subprotocol + "\r\nAuthorization: Bearer " + testToken + "\r\n\r\n"
		io.WriteString(conn, head+junk)
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade answered %v, %v; want 101", resp, err)
		}
		if _, err := io.Copy(io.Discard, conn); err != nil {
			t.Fatalf("junk %q: the server held the connection: %v", junk, err)
		}
		conn.Close()
	}
	select {
	case s := <-reg.attached:
		t.Fatalf("a session was attached from junk: %v", s)
	default:
	}
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	srv.Shutdown(sctx)
}

// TestServeHTTPReturnsAfterUpgrade checks that the tunnel endpoint's
// handler returns once a session is up, on either transport, so that
// net/http frees what it holds for the connection, and that the session
// goes on serving.
func TestServeHTTPReturnsAfterUpgrade(t *testing.T) {
	for _, transport := range []string{TransportWebSocket, TransportTCP} {
		t.Run(transport, func(t *testing.T) {
			reg := newFakeRegistry()
			srv, err := NewServer(ServerConfig{Auth: tokenAuth{}, Registry: reg, Logger: testLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			returned := make(chan struct{}, 1)
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				srv.ServeHTTP(w, r)
				returned <- struct{}{}
			}))
			t.Cleanup(hs.Close)
			sess := runClient(t, srv, reg, hs.URL, transport)
			select {
			case <-returned:
			case <-time.After(10 * time.Second):
				t.Fatal("ServeHTTP still runs with the session up")
			}
			req := httptest.NewRequest("GET", "/hello", nil)
			req.Host = "app.test"
			if resp, body := roundTrip(t, sess, req); resp.StatusCode != 200 || body != "hello app.test via 0" {
				t.Fatalf("GET /hello after ServeHTTP returned = %d %q", resp.StatusCode, body)
			}
		})
	}
}

// panicRegistry panics in Attach: a defect reached by one client.
type panicRegistry struct{ *fakeRegistry }

func (panicRegistry) Attach(context.Context, *Session) error { panic("attach defect") }

// TestSessionPanicIsContained checks that a panic on a session's
// goroutine, which net/http no longer guards once ServeHTTP has returned,
// ends that session only: it is counted, the client sees its connection
// end, and the server shuts down cleanly after.
func TestSessionPanicIsContained(t *testing.T) {
	recovery.AllowForTest(t)
	before := recovery.Total()
	srv, err := NewServer(ServerConfig{Auth: tokenAuth{}, Registry: panicRegistry{newFakeRegistry()}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	c, err := NewClient(ClientConfig{URL: hs.URL, Token: testToken,
		Announce: testAnnouncement, Forwarder: newHandlerForwarder(t, echoHandler())})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.runSession(ctx); err == nil || ctx.Err() != nil {
		t.Fatalf("runSession against a panicking server = %v (ctx %v), want the session to end with an error before the deadline", err, ctx.Err())
	}
	if got := recovery.Total() - before; got != 1 {
		t.Fatalf("%d panics recovered, want 1", got)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil {
		t.Fatalf("Shutdown after a session's panic: %v", err)
	}
}
