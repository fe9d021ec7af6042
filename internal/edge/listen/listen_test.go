package listen

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/pires/go-proxyproto"
)

// listenLoopback listens on 127.0.0.1:0, closed at the test's cleanup.
func listenLoopback(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

func TestChainZeroConfigIsTheListener(t *testing.T) {
	t.Parallel()
	ln := listenLoopback(t)
	if got := Chain(ln, Config{}); got != ln {
		t.Errorf("Chain(ln, Config{}) = %T, want ln itself", got)
	}
}

func TestChainFramingAndHelloPanics(t *testing.T) {
	t.Parallel()
	defer func() {
		if recover() == nil {
			t.Error("Chain with Framing and Hello did not panic")
		}
	}()
	Chain(listenLoopback(t), Config{Framing: true, Hello: true})
}

// TestChainProxyProtocol: a trusted peer's PROXY header names the source
// and is consumed; an untrusted peer's is left in the stream, unread.
func TestChainProxyProtocol(t *testing.T) {
	t.Parallel()
	h := &proxyproto.Header{
		Version: 2, Command: proxyproto.PROXY, TransportProtocol: proxyproto.TCPv4,
		SourceAddr:      net.TCPAddrFromAddrPort(netip.MustParseAddrPort("203.0.113.7:1234")),
		DestinationAddr: net.TCPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:8080")),
	}
	header, err := h.Format()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		trusted  func(netip.Addr) bool
		wantAddr string // the accepted connection's remote IP
		wantHead bool   // the header is still in the stream
	}{
		{"trusted", func(a netip.Addr) bool { return a == netip.MustParseAddr("127.0.0.1") }, "203.0.113.7", false},
		{"untrusted", func(a netip.Addr) bool { return a == netip.MustParseAddr("10.0.0.1") }, "127.0.0.1", true},
		{"none-trusted", nil, "127.0.0.1", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ln := Chain(listenLoopback(t), Config{ProxyProtocol: true, Trusted: tc.trusted})
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write(append(bytes.Clone(header), "ping"...)); err != nil {
				t.Fatal(err)
			}
			// Nothing more comes: a read past what was sent ends, not waits.
			if err := c.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			sc, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer sc.Close()
			ap, err := netip.ParseAddrPort(sc.RemoteAddr().String())
			if err != nil {
				t.Fatal(err)
			}
			if got := ap.Addr().String(); got != tc.wantAddr {
				t.Errorf("RemoteAddr = %s, want %s", got, tc.wantAddr)
			}
			want := "ping"
			if tc.wantHead {
				want = string(header) + "ping"
			}
			got := make([]byte, len(want))
			if _, err := io.ReadFull(sc, got); err != nil {
				t.Fatal(err)
			}
			if string(got) != want {
				t.Errorf("read %q, want %q", got, want)
			}
		})
	}
}

// TestChainFramingRefusesSmuggled serves a plain listener of Chain: a
// request with both Content-Length and Transfer-Encoding is answered 400
// and the connection closed; a plain one reaches the handler.
func TestChainFramingRefusesSmuggled(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if RefuseSmuggled(w, r) {
			return
		}
		io.WriteString(w, "ok")
	}))
	srv.Listener = Chain(srv.Listener, Config{Framing: true})
	srv.Config.ConnContext = FramingContext
	srv.Start()
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		name      string
		req       string
		want      int
		wantClose bool
	}{
		{"plain", "GET / HTTP/1.1\r\nHost: a\r\n\r\n", http.StatusOK, false},
		{"cl-te", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", http.StatusBadRequest, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, tc.req); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tc.want || resp.Close != tc.wantClose {
				t.Errorf("status %d, close %v; want %d, %v", resp.StatusCode, resp.Close, tc.want, tc.wantClose)
			}
		})
	}
}

// helloPair returns a HelloConn over one end of a pipe and the other end,
// both closed at the test's cleanup.
func helloPair(t testing.TB) (*HelloConn, net.Conn) {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	return &HelloConn{Conn: a}, b
}

// send writes p to c from its own goroutine (a pipe's write waits for the
// read) and returns the write's error channel.
func send(c net.Conn, p []byte) <-chan error {
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(p)
		errc <- err
	}()
	return errc
}

func TestHelloConnTake(t *testing.T) {
	t.Parallel()
	hc, peer := helloPair(t)
	errc := send(peer, []byte("hello"))
	buf := make([]byte, 5)
	if _, err := io.ReadFull(hc, buf); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	rec, ok := hc.Take()
	if !ok || string(rec) != "hello" {
		t.Fatalf("Take() = %q, %v; want %q, true", rec, ok, "hello")
	}
	if _, err := hc.Read(buf); !errors.Is(err, errConnTaken) {
		t.Errorf("Read after Take: err %v, want %v", err, errConnTaken)
	}
	if _, err := hc.Write(buf); !errors.Is(err, errConnTaken) {
		t.Errorf("Write after Take: err %v, want %v", err, errConnTaken)
	}
	if err := hc.SetDeadline(time.Unix(1, 0)); err != nil {
		t.Errorf("SetDeadline after Take = %v, want nil (ignored)", err)
	}
	// The taker still has the connection itself.
	errc = send(peer, []byte("more"))
	if _, err := io.ReadFull(hc.Conn, buf[:4]); err != nil || string(buf[:4]) != "more" {
		t.Errorf("read on Conn after Take: %q, %v; want %q", buf[:4], err, "more")
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func TestHelloConnNoTake(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		in   []byte
		stop bool
	}{
		{"stopped", []byte("hello"), true},
		{"record-overflow", bytes.Repeat([]byte("x"), maxHelloRecord+1), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hc, peer := helloPair(t)
			errc := send(peer, tc.in)
			if _, err := io.ReadFull(hc, make([]byte, len(tc.in))); err != nil {
				t.Fatal(err)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if tc.stop {
				hc.Stop()
			}
			if rec, ok := hc.Take(); ok {
				t.Errorf("Take() = %d bytes, true; want false", len(rec))
			}
			// The handshake goes on: reads pass through.
			errc = send(peer, []byte("tls"))
			got := make([]byte, 3)
			if _, err := io.ReadFull(hc, got); err != nil || string(got) != "tls" {
				t.Errorf("read after %s: %q, %v; want %q", tc.name, got, err, "tls")
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		})
	}
}
