package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"github.com/aperio-dev/aperio/internal/server/servertest"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/hashicorp/yamux"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/aperio-dev/aperio/internal/server"
)

// TestHostileTunnelGateway holds the hostile-input cases of the tunnel
// that need the whole server: raw HTTP/2 requests no Go client would
// send, a visitor that leaves mid-body, and hand-written tunnel clients.
func TestHostileTunnelGateway(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{}, 1)
	inspect := servertest.InspectHandler()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/upload" {
			inspect.ServeHTTP(w, r)
			return
		}
		arrived <- struct{}{}
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
		}
	})
	st := servertest.StartStack(t, h, nil)
	tests := []struct {
		name       string
		fields     [][2]string // request header fields, pseudo-headers first
		wantStatus int
		wantHost   string // the Host the backend saw, when 200
		wantURI    string
	}{
		{
			name:       "guard/host/h2-absolute-path-other-host",
			fields:     [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", servertest.AppHost}, {":path", "http://internal.test/secret?q=1"}},
			wantStatus: http.StatusOK, wantHost: servertest.AppHost, wantURI: "/secret?q=1",
		},
		{
			name:       "guard/host/h2-host-equal-to-authority",
			fields:     [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", servertest.AppHost}, {":path", "/h2"}, {"host", servertest.AppHost}},
			wantStatus: http.StatusOK, wantHost: servertest.AppHost, wantURI: "/h2",
		},
		{
			name:       "guard/host/h2-host-differs-from-authority",
			fields:     [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", servertest.AppHost}, {":path", "/h2"}, {"host", "internal.test"}},
			wantStatus: http.StatusBadRequest,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, body := rawH2Request(t, st.Server.Addr, tc.fields)
			if status != tc.wantStatus {
				t.Fatalf("h2 request %v = %d %q, want %d", tc.fields, status, body, tc.wantStatus)
			}
			if status != http.StatusOK {
				return
			}
			var got servertest.Inspection
			if err := json.Unmarshal([]byte(body), &got); err != nil {
				t.Fatalf("h2 request %v: body %q: %v", tc.fields, body, err)
			}
			if got.Host != tc.wantHost || got.RequestURI != tc.wantURI {
				t.Fatalf("h2 request %v: backend saw Host %q target %q, want %q %q", tc.fields, got.Host, got.RequestURI, tc.wantHost, tc.wantURI)
			}
		})
	}
	t.Run("guard/failure/visitor-leaves-mid-body", func(t *testing.T) {
		for range 5 {
			leaveMidBody(t, st.Server.Addr, arrived)
		}
		if status, body := servertest.Get(t, st.Visitor, st.Server, servertest.AppHost, "/after"); status != http.StatusOK {
			t.Fatalf("GET after visitors left mid-body = %d %q, want 200", status, body)
		}
	})
	hostileClientCases(t)
}

// leaveMidBody sends a POST promising 100,000 bytes, sends a few, and
// leaves once the backend has the request.
func leaveMidBody(t *testing.T, addr string, arrived <-chan struct{}) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "POST /upload HTTP/1.1\r\nHost: %s\r\nContent-Length: 100000\r\n\r\npartial body", servertest.AppHost); err != nil {
		t.Fatal(err)
	}
	servertest.Wait(t, arrived, 10*time.Second, "upload reaching the backend")
}

// rawH2Request sends one h2c prior-knowledge request with exactly fields
// and returns the status and body of the answer.
func rawH2Request(t *testing.T, addr string, fields [][2]string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	conn.SetDeadline(deadline)
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, bufio.NewReader(conn))
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range fields {
		if err := enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}); err != nil {
			t.Fatal(err)
		}
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	status := 0
	var body strings.Builder
	dec := hpack.NewDecoder(4096, func(f hpack.HeaderField) {
		if f.Name == ":status" {
			status, _ = strconv.Atoi(f.Value)
		}
	})
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("read h2 frame: %v (status %d, body %q)", err, status, body.String())
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := fr.WriteSettingsAck(); err != nil {
					t.Fatal(err)
				}
			}
		case *http2.HeadersFrame:
			if f.StreamID != 1 {
				continue
			}
			if _, err := dec.Write(f.HeaderBlockFragment()); err != nil {
				t.Fatal(err)
			}
			if f.StreamEnded() {
				return status, body.String()
			}
		case *http2.DataFrame:
			if f.StreamID != 1 {
				continue
			}
			body.Write(f.Data())
			if f.StreamEnded() {
				return status, body.String()
			}
		case *http2.RSTStreamFrame:
			t.Fatalf("stream reset: %v (status %d)", f.ErrCode, status)
		case *http2.GoAwayFrame:
			t.Fatalf("goaway: %v (status %d)", f.ErrCode, status)
		}
	}
}

// evilHost is the hostname the hand-written client publishes.
const evilHost = "evil.test"

// wsStream turns a WebSocket into the byte stream yamux runs on, one
// binary message per write, as the tunnel protocol frames it.
type wsStream struct {
	ws *websocket.Conn
	r  io.Reader
}

func (s *wsStream) Read(p []byte) (int, error) {
	for {
		if s.r != nil {
			n, err := s.r.Read(p)
			if err == io.EOF {
				s.r = nil
				if n > 0 {
					return n, nil
				}
				continue
			}
			return n, err
		}
		_, r, err := s.ws.NextReader()
		if err != nil {
			return 0, err
		}
		s.r = r
	}
}

func (s *wsStream) Write(p []byte) (int, error) {
	if err := s.ws.WriteMessage(websocket.BinaryMessage, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (s *wsStream) Close() error { return s.ws.Close() }

// controlFrame writes one control frame: a 4-byte length and JSON.
func controlFrame(t *testing.T, w io.Writer, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(b)))
	if _, err := w.Write(append(hdr[:], b...)); err != nil {
		t.Fatal(err)
	}
}

// readControlFrame reads one control frame into a map.
func readControlFrame(t *testing.T, r io.Reader) map[string]any {
	t.Helper()
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		t.Fatalf("read control frame: %v", err)
	}
	b := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	if _, err := io.ReadFull(r, b); err != nil {
		t.Fatalf("read control frame: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("control frame %q: %v", b, err)
	}
	return m
}

// startEvilClient connects a hand-written tunnel client to s publishing
// evilHost, and hands every stream the server opens to serve. It returns
// the client's yamux session and control stream.
func startEvilClient(t *testing.T, s *servertest.Server, serve func(st *yamux.Stream)) (*yamux.Session, *yamux.Stream) {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{"aperio-tunnel.v1"}}
	ws, resp, err := d.DialContext(t.Context(), "ws://"+s.Addr+"/aperio/tunnel", http.Header{"Authorization": {"Bearer " + servertest.Token}})
	if err != nil {
		t.Fatalf("tunnel upgrade: %v", err)
	}
	resp.Body.Close()
	cfg := yamux.DefaultConfig()
	cfg.EnableKeepAlive = false
	cfg.LogOutput = io.Discard
	mux, err := yamux.Client(&wsStream{ws: ws}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctrl, err := mux.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	controlFrame(t, ctrl, map[string]any{"type": "hello", "version": 1, "announcement": map[string]any{
		"name": "evil", "instance_id": "evil-1",
		"services": []any{map[string]any{"id": "0", "hostnames": []string{evilHost}, "healthy": true}},
	}})
	if m := readControlFrame(t, ctrl); m["type"] != "welcome" {
		t.Fatalf("answer to the hello = %v, want welcome", m)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		defer wg.Wait()
		for {
			st, err := mux.AcceptStream()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer st.Close()
				serve(st)
			}()
		}
	}()
	t.Cleanup(func() {
		mux.Close()
		<-done
	})
	return mux, ctrl
}

// answerWithHead reads each request of a stream and answers with a
// response whose head carries a header of size bytes.
func answerWithHead(size int) func(st *yamux.Stream) {
	return func(st *yamux.Stream) {
		req, err := http.ReadRequest(bufio.NewReader(st))
		if err != nil {
			return
		}
		req.Body.Close()
		io.WriteString(st, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Big: "+strings.Repeat("a", size)+"\r\n\r\nok")
		// Keep the stream open until the server gives up on it.
		io.Copy(io.Discard, st)
	}
}

func TestTunnelStreamCapWarning(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		maxStreams  int
		wantWarning bool
	}{
		{"at max_concurrent_requests", 100, true},
		{"above max_concurrent_requests", 256, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			logs := &servertest.SyncBuffer{}
			cfg := servertest.Config(t)
			cfg.Router.MaxConcurrentRequests = 100
			cfg.Tunnel.MaxStreams = tc.maxStreams
			servertest.StartWith(t, cfg, nil, nil, server.Options{Logger: slog.New(slog.NewJSONHandler(logs, nil))})
			warned := false
			for _, l := range logs.Lines(t) {
				if l["level"] == "WARN" && strings.Contains(fmt.Sprint(l["msg"]), "tunnel_max_streams") {
					warned = true
				}
			}
			if warned != tc.wantWarning {
				t.Fatalf("startup with tunnel_max_streams %d and max_concurrent_requests 100 warned = %v, want %v", tc.maxStreams, warned, tc.wantWarning)
			}
		})
	}
}

// hostileClientCases are the cases of TestHostileTunnelGateway that need a
// hand-written tunnel client; each starts its own server.
func hostileClientCases(t *testing.T) {
	t.Run("guard/oversize/oversized-response-head-answers-502", func(t *testing.T) {
		st := servertest.StartStack(t, servertest.InspectHandler(), func(c *server.Config) { c.Tunnel.MaxHeaderBytes = 32 << 10 })
		startEvilClient(t, st.Server, answerWithHead(40<<10))
		servertest.WaitClients(t, st.Visitor, st.Server, 2)
		if status, body := servertest.Get(t, st.Visitor, st.Server, evilHost, "/"); status != http.StatusBadGateway {
			t.Fatalf("GET from a client sending a 40 KiB head over tunnel_max_header_bytes 32KiB = %d %q, want 502", status, body)
		}
	})
	t.Run("guard/oversize/head-under-the-bound-passes", func(t *testing.T) {
		st := servertest.StartStack(t, servertest.InspectHandler(), func(c *server.Config) { c.Tunnel.MaxHeaderBytes = 64 << 10 })
		startEvilClient(t, st.Server, answerWithHead(40<<10))
		servertest.WaitClients(t, st.Visitor, st.Server, 2)
		if status, body := servertest.Get(t, st.Visitor, st.Server, evilHost, "/"); status != http.StatusOK || body != "ok" {
			t.Fatalf("GET from a client sending a 40 KiB head under tunnel_max_header_bytes 64KiB = %d %q, want 200 ok", status, body)
		}
	})
	t.Run("guard/protocol/client-opened-stream-ends-session", func(t *testing.T) {
		st := servertest.StartStack(t, servertest.InspectHandler(), nil)
		mux, ctrl := startEvilClient(t, st.Server, func(*yamux.Stream) {})
		servertest.WaitClients(t, st.Visitor, st.Server, 2)
		s, err := mux.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		go s.Write(bytes.Repeat([]byte("x"), 64<<10))
		if m := readControlFrame(t, ctrl); m["type"] != "goaway" || !strings.Contains(fmt.Sprint(m["reason"]), "opened a stream") {
			t.Fatalf("answer to a client-opened stream = %v, want goaway naming the violation", m)
		}
		servertest.Wait(t, mux.CloseChan(), 10*time.Second, "the server ending the session")
	})
}
