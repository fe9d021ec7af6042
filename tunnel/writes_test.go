package tunnel

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/testkit/memnet"
	"github.com/gorilla/websocket"
)

// writeCounter counts the Write calls made on the connections it wraps:
// each is one write syscall on a real socket.
type writeCounter struct{ n atomic.Int64 }

// countedConn is a net.Conn whose Writes are counted.
type countedConn struct {
	net.Conn
	w *writeCounter
}

func (c *countedConn) Write(p []byte) (int, error) {
	c.w.n.Add(1)
	return c.Conn.Write(p)
}

// countedListener wraps every connection it accepts in a countedConn.
type countedListener struct {
	*memnet.Listener
	w *writeCounter
}

func (l *countedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countedConn{Conn: c, w: l.w}, nil
}

// TestSmallRequestOneWriteEachWay pins what a small request costs the
// tunnel connection: once its stream is pooled, a GET and its small
// response are one write on the server's end and one on the client's
// (#43). yamux writes a data frame's header and body in two calls; the
// muxConn joins them, so a change that lets them leave apart (or sends
// stream housekeeping of its own) doubles the count.
func TestSmallRequestOneWriteEachWay(t *testing.T) {
	for _, kind := range []string{"pipe", "pipe-transport"} {
		t.Run(kind, func(t *testing.T) {
			var srvW, cliW writeCounter
			start := func(t testing.TB, kind string, srv *Server) (string, func(context.Context, string, string) (net.Conn, error), *tls.Config) {
				ln := memnet.Listen()
				hs := &http.Server{Handler: srv}
				go hs.Serve(&countedListener{Listener: ln, w: &srvW})
				t.Cleanup(func() { hs.Close(); ln.Close() })
				dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
					c, err := ln.Dial(ctx, network, addr)
					if err != nil {
						return nil, err
					}
					return &countedConn{Conn: c, w: &cliW}, nil
				}
				return "http://memnet", dial, nil
			}
			fwd := newHandlerForwarder(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Write([]byte("ok"))
			}))
			// No heartbeat falls inside the measured requests.
			p := startPairWith(t, kind, fwd, func(s *ServerConfig, _ *ClientConfig) { s.DownThreshold = time.Hour }, start)

			get := func() {
				req, err := http.NewRequest(http.MethodGet, "http://app.test/small", nil)
				if err != nil {
					t.Fatal(err)
				}
				resp, body := roundTrip(t, p.session, req)
				if resp.StatusCode != http.StatusOK || body != "ok" {
					t.Fatalf("GET /small = %d %q, want 200 ok", resp.StatusCode, body)
				}
			}
			get() // opens the stream the others reuse
			const n = 20
			s0, c0 := srvW.n.Load(), cliW.n.Load()
			for range n {
				get()
			}
			if got := srvW.n.Load() - s0; got != n {
				t.Errorf("server end: %d requests took %d writes, want %d", n, got, n)
			}
			if got := cliW.n.Load() - c0; got != n {
				t.Errorf("client end: %d requests took %d writes, want %d", n, got, n)
			}
		})
	}
}

// syncCarrier is a carrier whose sends complete at once; sent receives a
// value after each.
type syncCarrier struct {
	testCarrierAddrs
	sent chan struct{}
}

func (c *syncCarrier) Read([]byte) (int, error) { select {} }
func (c *syncCarrier) send(head, body []byte) error {
	c.sent <- struct{}{}
	return nil
}
func (c *syncCarrier) close() error { return nil }

// testCarrierAddrs fills the address and deadline methods of a test
// carrier.
type testCarrierAddrs struct{}

func (testCarrierAddrs) LocalAddr() net.Addr              { return memnetAddr{} }
func (testCarrierAddrs) RemoteAddr() net.Addr             { return memnetAddr{} }
func (testCarrierAddrs) SetReadDeadline(time.Time) error  { return nil }
func (testCarrierAddrs) SetWriteDeadline(time.Time) error { return nil }

type memnetAddr struct{}

func (memnetAddr) Network() string { return "test" }
func (memnetAddr) String() string  { return "test" }

// TestMuxConnSmallFrameAllocs pins that a small frame written to an idle
// muxConn, which starts a flusher goroutine to send it, allocates nothing
// once the connection has sent one batch: the pending buffer is the last
// batch's, and the flusher's function is bound once (#43).
func TestMuxConnSmallFrameAllocs(t *testing.T) {
	car := &syncCarrier{sent: make(chan struct{})}
	c := newMuxConn(car)
	hdr, body := yframe(yamuxTypeData, 1, 100, 'x')
	// Each run ends when the flusher has exited, so the next starts one.
	run := func() {
		if _, err := c.Write(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(body); err != nil {
			t.Fatal(err)
		}
		<-car.sent
		c.wmu.Lock()
		for c.flushing {
			c.idle.Wait()
		}
		c.wmu.Unlock()
	}
	if got := testing.AllocsPerRun(100, run); got != 0 {
		t.Errorf("a small frame to an idle muxConn: %v allocations, want 0", got)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// TestWSCarrierServerSend sends from the server's end of a WebSocket
// tunnel, where a batch goes through WriteMessage's fast path: a batch
// smaller than the write buffer, one larger (the rest leaves beside the
// buffer in the same message), and a header with its body. Each arrives
// as one binary message with its bytes in order.
func TestWSCarrierServerSend(t *testing.T) {
	srvCar := make(chan *wsCarrier, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := upgrader.Upgrade(w, r, nil)
		if err != nil {
			t.Errorf("upgrade: %v", err)
			return
		}
		srvCar <- &wsCarrier{ws: ws}
	}))
	t.Cleanup(srv.Close)
	peer, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	car := <-srvCar
	t.Cleanup(func() { car.close(); peer.Close() })
	fill := func(n int, seed byte) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = seed + byte(i%251)
		}
		return b
	}
	tests := []struct {
		name       string
		head, body []byte
	}{
		{"small batch", nil, fill(300, 1)},
		{"batch past the write buffer", nil, fill(wsBufferSize+directMin, 2)},
		{"header and body", fill(yamuxHeaderSize, 3), fill(40<<10, 4)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() { done <- car.send(tt.head, tt.body) }()
			peer.SetReadDeadline(time.Now().Add(10 * time.Second))
			typ, msg, err := peer.ReadMessage()
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			if err := <-done; err != nil {
				t.Fatalf("send: %v", err)
			}
			want := append(append([]byte{}, tt.head...), tt.body...)
			if typ != websocket.BinaryMessage || !bytes.Equal(msg, want) {
				t.Fatalf("message of type %d, %d bytes; want binary, the %d bytes sent", typ, len(msg), len(want))
			}
		})
	}
}
