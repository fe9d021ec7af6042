package agent

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pires/go-proxyproto"

	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/testkit/echotest"
	"github.com/aperio-dev/aperio/tunnel"
)

// parseProxyV2 reads a PROXY protocol header from r as a backend would;
// local is true for the LOCAL command.
func parseProxyV2(r *bufio.Reader) (src, dst netip.AddrPort, local bool, err error) {
	h, err := proxyproto.Read(r)
	if err != nil {
		return src, dst, false, err
	}
	if h.Version != 2 {
		return src, dst, false, fmt.Errorf("version %d", h.Version)
	}
	if h.Command.IsLocal() {
		return src, dst, true, nil
	}
	sa, err := netip.ParseAddrPort(h.SourceAddr.String())
	if err != nil {
		return src, dst, false, err
	}
	da, err := netip.ParseAddrPort(h.DestinationAddr.String())
	return sa, da, false, err
}

func TestProxyV2Header(t *testing.T) {
	for _, tc := range []struct {
		name, src, dst string
		udp            bool
		fam            byte
		wantLocal      bool
	}{
		{"v4 tcp", "203.0.113.7:51000", "192.0.2.1:2222", false, 0x11, false},
		{"v4 udp", "203.0.113.7:51000", "192.0.2.1:53", true, 0x12, false},
		{"v6", "[2001:db8::7]:51000", "[2001:db8::1]:2222", false, 0x21, false},
		{"mixed", "[2001:db8::7]:51000", "192.0.2.1:2222", false, 0x21, false},
		{"mapped v4 stays v4", "[::ffff:203.0.113.7]:51000", "192.0.2.1:2222", false, 0x11, false},
		{"no visitor", "", "192.0.2.1:2222", false, 0, true},
		{"garbage", "not-an-address", "192.0.2.1:2222", false, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := proxyV2Header(tc.udp, tc.src, tc.dst)
			src, dst, local, err := parseProxyV2(bufio.NewReader(bytes.NewReader(h)))
			if err != nil {
				t.Fatalf("parse: %v (header % x)", err, h)
			}
			if local != tc.wantLocal {
				t.Fatalf("local = %v, want %v", local, tc.wantLocal)
			}
			if local {
				return
			}
			if len(h) < 14 || h[13] != tc.fam {
				t.Errorf("family byte = %#x, want %#x", h[13], tc.fam)
			}
			ws, wd := netip.MustParseAddrPort(tc.src), netip.MustParseAddrPort(tc.dst)
			if src.Addr().Unmap() != ws.Addr().Unmap() || src.Port() != ws.Port() || dst.Addr().Unmap() != wd.Addr().Unmap() || dst.Port() != wd.Port() {
				t.Fatalf("parsed %v → %v, want %v → %v", src, dst, ws, wd)
			}
		})
	}
}

// exposeAgent is an agent with expose entries and no service.
func exposeAgent(t *testing.T, entries ...config.Expose) *Agent {
	t.Helper()
	cfg := clientConfig("")
	cfg.Services = nil
	cfg.Expose = entries
	return newAgent(t, cfg)
}

// TestForwardRawTCPProxyV2: a TCP entry with proxy_protocol v2 sends the
// backend the visitor's address first, then the visitor's bytes, and
// half-closes; the header's addresses are the server's.
func TestForwardRawTCPProxyV2(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type seen struct {
		src  netip.AddrPort
		body string
		err  error
	}
	got := make(chan seen, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- seen{err: err}
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		src, _, _, err := parseProxyV2(br)
		body, rerr := io.ReadAll(br) // to the visitor's half-close
		if err == nil {
			err = rerr
		}
		io.WriteString(c, "bye")
		got <- seen{src, string(body), err}
	}()
	a := exposeAgent(t, config.Expose{Expose: tunnel.Expose{Name: "db", Protocol: "tcp"}, Target: ln.Addr().String(), ProxyProtocol: "v2"})
	conn, err := a.ForwardRaw(t.Context(), tunnel.RawHeader{Kind: tunnel.RawTCP, Name: "db", Port: 2222, Visitor: "198.51.100.9:40000", Local: "192.0.2.1:2222"})
	if err != nil {
		t.Fatalf("ForwardRaw: %v", err)
	}
	defer conn.Close()
	io.WriteString(conn, "hello")
	cw, ok := conn.(interface{ CloseWrite() error })
	if !ok {
		t.Fatal("the TCP end has no CloseWrite: the relay could not half-close it")
	}
	cw.CloseWrite()
	s := <-got
	if s.err != nil || s.src.String() != "198.51.100.9:40000" || s.body != "hello" {
		t.Fatalf("backend saw %v %q %v, want the visitor 198.51.100.9:40000 and hello", s.src, s.body, s.err)
	}
	if b, _ := io.ReadAll(conn); string(b) != "bye" {
		t.Fatalf("answer = %q, want bye", b)
	}
}

// TestForwardRawRefusals: a stream naming no entry, the wrong protocol,
// a service that is not passed through, or an unreachable target is
// refused with the reason.
func TestForwardRawRefusals(t *testing.T) {
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	cfg := clientConfig("http://127.0.0.1:1")
	cfg.Expose = []config.Expose{{Expose: tunnel.Expose{Name: "ssh", Protocol: "tcp"}, Target: echotest.TCP(t)}, {Expose: tunnel.Expose{Name: "gone", Protocol: "tcp"}, Target: deadAddr}}
	a := newAgent(t, cfg)
	for _, tc := range []struct {
		h    tunnel.RawHeader
		want string
	}{
		{tunnel.RawHeader{Kind: tunnel.RawTCP, Name: "nope"}, `no expose entry "nope"`},
		{tunnel.RawHeader{Kind: tunnel.RawUDP, Name: "ssh"}, "is tcp, the stream udp"},
		{tunnel.RawHeader{Kind: tunnel.RawTLS, Name: "0"}, `no tls_passthrough service "0"`},
		{tunnel.RawHeader{Kind: tunnel.RawTLS, Name: "9"}, `no tls_passthrough service "9"`},
		{tunnel.RawHeader{Kind: tunnel.RawTCP, Name: "gone"}, "connection refused"},
		{tunnel.RawHeader{Kind: "sctp", Name: "ssh"}, "not served"},
	} {
		c, err := a.ForwardRaw(t.Context(), tc.h)
		if err == nil {
			c.Close()
			t.Errorf("ForwardRaw(%+v) accepted", tc.h)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ForwardRaw(%+v) = %v, want %q", tc.h, err, tc.want)
		}
	}
}

// TestForwardRawUDP: framed datagrams written in arbitrary pieces reach
// the target one datagram per frame, and its answers come back framed.
func TestForwardRawUDP(t *testing.T) {
	a := exposeAgent(t, config.Expose{Expose: tunnel.Expose{Name: "dns", Protocol: "udp"}, Target: echotest.UDP(t)})
	conn, err := a.ForwardRaw(t.Context(), tunnel.RawHeader{Kind: tunnel.RawUDP, Name: "dns", Port: 5353, Visitor: "198.51.100.9:40000"})
	if err != nil {
		t.Fatalf("ForwardRaw: %v", err)
	}
	defer conn.Close()
	var framed bytes.Buffer
	msgs := []string{"a", strings.Repeat("b", 1400), "", "query-3"}
	for _, m := range msgs {
		tunnel.WriteDatagram(&framed, []byte(m))
	}
	// One byte at a time: the flow must reassemble every frame.
	for _, b := range framed.Bytes() {
		if _, err := conn.Write([]byte{b}); err != nil {
			t.Fatalf("write: %v", err)
		}
	}
	conn.(*rawEnd).ReadWriteCloser.(*udpFlow).c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, tunnel.MaxDatagram)
	got := map[string]bool{}
	for range msgs {
		n, err := tunnel.ReadDatagram(conn, buf)
		if err != nil {
			t.Fatalf("read an answer: %v (got %d of %d)", err, len(got), len(msgs))
		}
		got[string(buf[:n])] = true
	}
	for _, m := range msgs {
		if !got["echo:"+m] {
			t.Errorf("no answer to %.20q", m)
		}
	}
}

// TestUDPFlowHostileFrames: a frame length over the datagram limit ends
// the flow with an error instead of buffering without bound.
func TestUDPFlowHostileFrames(t *testing.T) {
	c1, c2 := net.Pipe()
	defer c2.Close()
	f := newUDPFlow(c1)
	defer f.Close()
	if _, err := f.Write([]byte{0xff, 0xff, 1, 2, 3}); !errors.Is(err, errUDPFrame) {
		t.Fatalf("Write(oversize frame) = %v, want errUDPFrame", err)
	}
	f.in = f.in[:0]
	// A partial frame is held, not sent, and at most one frame's worth.
	if _, err := f.Write([]byte{0x00, 0x05, 'a', 'b'}); err != nil {
		t.Fatal(err)
	}
	if len(f.in) != 4 {
		t.Fatalf("held %d bytes of a partial frame, want 4", len(f.in))
	}
}

// TestExposedStatus: a server's answer to the expose entries shows in
// Status with the public address on the server's host, or the reason.
func TestExposedStatus(t *testing.T) {
	cfg := clientConfig("http://127.0.0.1:1")
	cfg.ServerURL = "https://tunnel.example.com:8443"
	a := newAgent(t, cfg)
	a.noteExposed(cfg.ServerURL, []tunnel.ExposeStatus{{Name: "ssh", Protocol: "tcp", Port: 2222}, {Name: "db", Protocol: "tcp", Error: "port 5432 is outside tcp_port_range"}})
	got := a.Status().Exposed
	want := []ExposedStatus{
		{Server: cfg.ServerURL, Name: "ssh", Protocol: "tcp", Public: "tunnel.example.com:2222"},
		{Server: cfg.ServerURL, Name: "db", Protocol: "tcp", Error: "port 5432 is outside tcp_port_range"},
	}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("Status().Exposed = %+v, want %+v", got, want)
	}
}

// TestExposeAnnouncedAndReloaded: the entries are announced, with the
// services' tls_passthrough; a reload replaces them, and a stream naming
// a removed entry is refused from then on.
func TestExposeAnnouncedAndReloaded(t *testing.T) {
	cfg := clientConfig("https://127.0.0.1:8443")
	cfg.Services[0].TLSPassthrough = true
	cfg.Expose = []config.Expose{{Expose: tunnel.Expose{Name: "ssh", Protocol: "tcp", RemotePort: 2222, AllowedIPs: []string{"10.0.0.0/8"}}, Target: "127.0.0.1:22"}}
	a := newAgent(t, cfg)
	ann := a.announcement()
	if len(ann.Expose) != 1 || ann.Expose[0].Name != "ssh" || ann.Expose[0].Protocol != "tcp" || ann.Expose[0].RemotePort != 2222 || len(ann.Expose[0].AllowedIPs) != 1 {
		t.Fatalf("announced expose = %+v, want port 2222 and its allowed_ips", ann.Expose)
	}
	if len(ann.Services) != 1 || !ann.Services[0].TLSPassthrough {
		t.Fatalf("announced services = %+v, want tls_passthrough", ann.Services)
	}
	next := cfg
	next.Expose = []config.Expose{{Expose: tunnel.Expose{Name: "dns", Protocol: "udp"}, Target: "127.0.0.1:53"}}
	if err := a.Apply(next); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if ann := a.announcement(); len(ann.Expose) != 1 || ann.Expose[0].Name != "dns" || ann.Expose[0].Protocol != "udp" {
		t.Fatalf("announced expose after the reload = %+v, want dns alone", ann.Expose)
	}
	if _, err := a.ForwardRaw(t.Context(), tunnel.RawHeader{Kind: tunnel.RawTCP, Name: "ssh"}); err == nil || !strings.Contains(err.Error(), `no expose entry "ssh"`) {
		t.Fatalf("a stream for the removed entry = %v, want refused", err)
	}
	none := cfg
	none.Services, none.Expose = nil, nil
	if err := a.Apply(none); err == nil {
		t.Fatal("Apply accepted a configuration with neither services nor expose entries")
	}
}

// TestPassthroughServiceRefusesHTTP: an HTTP request for a tls_passthrough
// service is answered 421 by the client, never written as plaintext to
// the backend's TLS port (#38 item 14, P4-5: a server that routes one
// there, or a bind mixing passthrough and terminated services).
func TestPassthroughServiceRefusesHTTP(t *testing.T) {
	var got atomic.Int64
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got.Add(1) }))
	t.Cleanup(backend.Close)
	cfg := clientConfig(backend.URL)
	cfg.Services[0].TLSPassthrough = true
	a := newAgent(t, cfg)
	resp, err := a.Forward(t.Context(), "0", httptest.NewRequest(http.MethodGet, "/", nil))
	if err != nil {
		t.Fatalf("Forward() error = %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest || got.Load() != 0 {
		t.Errorf("Forward to a tls_passthrough service = %d, backend reached %d times; want 421, never", resp.StatusCode, got.Load())
	}
}
