package tunnel

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func echoHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s via %s", r.Host, r.Header.Get("X-Test-Service"))
	})
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Write(b)
	})
	mux.HandleFunc("/trailers", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Checksum")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "body")
		w.(http.Flusher).Flush()
		w.Header().Set("X-Checksum", "abc123")
	})
	return mux
}

func TestRoundTrip(t *testing.T) {
	for _, kind := range connKinds {
		t.Run(kind, func(t *testing.T) {
			p := startPair(t, kind, newHandlerForwarder(t, echoHandler()), nil)

			// Several exchanges in a row reuse pooled streams.
			for i := range 3 {
				req := httptest.NewRequest("GET", "/hello", nil)
				req.Host = "app.test"
				resp, body := roundTrip(t, p.session, req)
				if resp.StatusCode != 200 || body != "hello app.test via 0" {
					t.Fatalf("GET /hello #%d = %d %q, want 200 %q", i, resp.StatusCode, body, "hello app.test via 0")
				}
			}

			payload := strings.Repeat("x", 100_000)
			req := httptest.NewRequest("POST", "/echo", strings.NewReader(payload))
			resp, body := roundTrip(t, p.session, req)
			if resp.StatusCode != 200 || body != payload {
				t.Fatalf("POST /echo = %d, %d bytes, want 200, %d bytes", resp.StatusCode, len(body), len(payload))
			}

			// A body of unknown length goes chunked.
			req = httptest.NewRequest("POST", "/echo", io.NopCloser(strings.NewReader("chunked body")))
			req.ContentLength = -1
			resp, body = roundTrip(t, p.session, req)
			if body != "chunked body" {
				t.Fatalf("chunked POST /echo = %q, want %q", body, "chunked body")
			}

			req = httptest.NewRequest("GET", "/trailers", nil)
			resp, body = roundTrip(t, p.session, req)
			if body != "body" || resp.Trailer.Get("X-Checksum") != "abc123" {
				t.Fatalf("GET /trailers = %q trailer %q, want %q trailer %q", body, resp.Trailer.Get("X-Checksum"), "body", "abc123")
			}
		})
	}
}

func TestAnnouncementReachesServer(t *testing.T) {
	p := startPair(t, "pipe", newHandlerForwarder(t, echoHandler()), nil)
	ann := p.session.Announcement()
	if ann.Name != "test-client" || len(ann.Services) != 1 || ann.Services[0].Hostnames[0] != "app.test" {
		t.Fatalf("Announcement() = %+v, want the client's announcement", ann)
	}
	if err := p.client.AnnounceNow(context.Background()); err != nil {
		t.Fatalf("AnnounceNow() = %v, want nil", err)
	}
	p.registry.mu.Lock()
	updates := p.registry.updates
	p.registry.mu.Unlock()
	if updates < 2 {
		t.Fatalf("registry updates = %d, want at least 2 (hello and heartbeat)", updates)
	}
}

// dispatchingRegistry sends one request through the first session it
// updates, from inside Update: before the server writes the welcome, as
// the router does when it releases requests held for a cold start.
type dispatchingRegistry struct {
	*fakeRegistry
	once   sync.Once
	answer chan string
}

func (r *dispatchingRegistry) Update(ctx context.Context, s *Session) []string {
	r.once.Do(func() {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		req := httptest.NewRequestWithContext(ctx, "GET", "/hello", nil)
		req.Host = "app.test"
		resp, err := s.RoundTrip(req, "0")
		if err != nil {
			r.answer <- "error: " + err.Error()
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			r.answer <- "error reading body: " + err.Error()
			return
		}
		r.answer <- fmt.Sprintf("%d %s", resp.StatusCode, b)
	})
	return r.fakeRegistry.Update(ctx, s)
}

func TestClientServesStreamsBeforeWelcome(t *testing.T) {
	for _, kind := range []string{"pipe", "tcp"} {
		t.Run(kind, func(t *testing.T) {
			reg := &dispatchingRegistry{answer: make(chan string, 1)}
			startPair(t, kind, newHandlerForwarder(t, echoHandler()), func(sc *ServerConfig, _ *ClientConfig) {
				reg.fakeRegistry = sc.Registry.(*fakeRegistry)
				sc.Registry = reg
			})
			// startPair returned after the welcome: the answer is in.
			if got, want := <-reg.answer, "200 hello app.test via 0"; got != want {
				t.Fatalf("request dispatched before the welcome answered %q, want %q", got, want)
			}
		})
	}
}

func TestCancellationReachesBackend(t *testing.T) {
	started := make(chan struct{})
	cancelled := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done()
		close(cancelled)
	})
	p := startPair(t, "tcp", newHandlerForwarder(t, h), nil)
	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequest("GET", "/slow", nil).WithContext(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := p.session.RoundTrip(req, "0")
		errc <- err
	}()
	<-started
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("RoundTrip after cancel = %v, want context.Canceled", err)
	}
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("backend request was not cancelled within 10s")
	}
}

func TestResponseHeadTimeout(t *testing.T) {
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	p := startPair(t, "pipe", newHandlerForwarder(t, h), func(s *ServerConfig, _ *ClientConfig) {
		s.ResponseHeaderTimeout = 50 * time.Millisecond
	})
	defer close(release)
	_, err := p.session.RoundTrip(httptest.NewRequest("GET", "/", nil), "0")
	if !errors.Is(err, ErrResponseTimeout) {
		t.Fatalf("RoundTrip to a silent backend = %v, want ErrResponseTimeout", err)
	}
}

func TestBackendDownAnswers502(t *testing.T) {
	fwd := newHandlerForwarder(t, echoHandler())
	fwd.url = "http://127.0.0.1:1" // nothing listens there
	p := startPair(t, "pipe", fwd, nil)
	resp, body := roundTrip(t, p.session, httptest.NewRequest("GET", "/", nil))
	if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("X-Aperio-Error") != "backend" {
		t.Fatalf("GET with backend down = %d %q, want 502 with X-Aperio-Error", resp.StatusCode, body)
	}
}

func TestUpgradeRelaysBytes(t *testing.T) {
	// A backend that switches to a line echo protocol.
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		brw.Flush()
		line, _ := brw.ReadString('\n')
		brw.WriteString("echo: " + line)
		brw.Flush()
	})
	p := startPair(t, "tcp", newHandlerForwarder(t, h), nil)
	req := httptest.NewRequest("GET", "/ws", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "echo")
	resp, err := p.session.RoundTrip(req, "0")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade status = %d, want 101", resp.StatusCode)
	}
	rw := resp.Body.(io.ReadWriteCloser)
	defer rw.Close()
	io.WriteString(rw, "ping\n")
	got, err := io.ReadAll(rw)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "echo: ping\n" {
		t.Fatalf("upgraded read = %q, want %q", got, "echo: ping\n")
	}
}

func TestRefusals(t *testing.T) {
	srv, err := NewServer(ServerConfig{Auth: tokenAuth{}, Registry: newFakeRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	upgrade := func(h http.Header) {
		h.Set("Connection", "Upgrade")
		h.Set("Upgrade", "websocket")
		h.Set("Sec-WebSocket-Version", "13")
		h.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	}
	tests := []struct {
		name   string
		header func(http.Header)
		status int
		reason string
	}{
		{"plain GET", func(http.Header) {}, 400, "expects a WebSocket upgrade"},
		{"no subprotocol", func(h http.Header) { upgrade(h); h.Set("Authorization", "Bearer "+testToken) }, 426, "this server speaks " + Subprotocol},
		{"no token", func(h http.Header) { upgrade(h); h.Set("Sec-WebSocket-Protocol", Subprotocol) }, 401, "missing token"},
		{"wrong token", func(h http.Header) {
			upgrade(h)
			h.Set("Sec-WebSocket-Protocol", Subprotocol)
			h.Set("Authorization", "Bearer nope")
		}, 401, "invalid token"},
		{"tcp transport, no token", func(h http.Header) { h.Set("Connection", "Upgrade"); h.Set("Upgrade", Subprotocol) }, 401, "missing token"},
		{"tcp transport, another version", func(h http.Header) {
			h.Set("Connection", "Upgrade")
			h.Set("Upgrade", "aperio-tunnel.v9")
			h.Set("Authorization", "Bearer "+testToken)
		}, 426, "this server speaks " + Subprotocol},
		{"unknown upgrade", func(h http.Header) {
			h.Set("Connection", "Upgrade")
			h.Set("Upgrade", "h2c")
			h.Set("Authorization", "Bearer "+testToken)
		}, 400, "or an upgrade to " + Subprotocol},
		{"tcp transport over HTTP/2", func(h http.Header) {
			h.Set("Connection", "Upgrade")
			h.Set("Upgrade", Subprotocol)
			h.Set("Authorization", "Bearer "+testToken)
			h.Set("X-Test-Proto", "2")
		}, 400, "needs HTTP/1.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest("GET", Path, nil)
			tt.header(req.Header)
			if req.Header.Get("X-Test-Proto") == "2" {
				req.Proto, req.ProtoMajor, req.ProtoMinor = "HTTP/2.0", 2, 0
			}
			rec := httptest.NewRecorder()
			srv.ServeHTTP(rec, req)
			if rec.Code != tt.status || !strings.Contains(rec.Body.String(), tt.reason) {
				t.Fatalf("ServeHTTP(%s) = %d %q, want %d containing %q", tt.name, rec.Code, rec.Body.String(), tt.status, tt.reason)
			}
		})
	}
}

// sessionOnce runs one client session against a fresh server built from
// scfg and returns how it ended.
func sessionOnce(t *testing.T, scfg ServerConfig, token string, announce func() Announcement) error {
	t.Helper()
	if scfg.Registry == nil {
		scfg.Registry = newFakeRegistry()
	}
	srv, err := NewServer(scfg)
	if err != nil {
		t.Fatal(err)
	}
	url, dial, _ := startServer(t, "pipe", srv)
	c, err := NewClient(ClientConfig{URL: url, Token: token, DialContext: dial,
		Announce: announce, Forwarder: newHandlerForwarder(t, echoHandler())})
	if err != nil {
		t.Fatal(err)
	}
	return c.runSession(context.Background())
}

func TestWrongTokenClientSeesReason(t *testing.T) {
	err := sessionOnce(t, ServerConfig{Auth: tokenAuth{}}, "wrong", testAnnouncement)
	var refused *RefusedError
	if !errors.As(err, &refused) || refused.Status != 401 || refused.Reason != "invalid token" {
		t.Fatalf("runSession with a wrong token = %v, want RefusedError 401 %q", err, "invalid token")
	}
}

func TestRegistryRefusalReachesClient(t *testing.T) {
	reg := newFakeRegistry()
	reg.refuse = errors.New("hostname app.test is not allowed for this token")
	err := sessionOnce(t, ServerConfig{Auth: tokenAuth{}, Registry: reg}, testToken, testAnnouncement)
	var refused *RefusedError
	if !errors.As(err, &refused) || refused.Reason != reg.refuse.Error() {
		t.Fatalf("runSession refused by registry = %v, want RefusedError %q", err, reg.refuse)
	}
}

func TestInvalidAnnouncementRefused(t *testing.T) {
	p := func() Announcement {
		a := testAnnouncement()
		a.Services[0].Hostnames = []string{"bad host!"}
		return a
	}
	err := sessionOnce(t, ServerConfig{Auth: tokenAuth{}}, testToken, p)
	var refused *RefusedError
	if !errors.As(err, &refused) || !strings.Contains(refused.Reason, "invalid hostname") {
		t.Fatalf("runSession with a bad hostname = %v, want RefusedError naming the hostname", err)
	}
}

func TestFrameLimits(t *testing.T) {
	// A length prefix above the limit is refused before any allocation.
	huge := []byte{0x7f, 0xff, 0xff, 0xff}
	if _, err := readMessage(bytes.NewReader(huge)); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("readMessage(2 GiB prefix) = %v, want ErrFrameTooLarge", err)
	}
	big := &message{Type: msgHello, Announcement: &Announcement{Name: strings.Repeat("x", MaxFrameSize)}}
	if err := writeMessage(io.Discard, big); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("writeMessage(oversized) = %v, want ErrFrameTooLarge", err)
	}
	var buf bytes.Buffer
	if err := writeMessage(&buf, &message{Type: msgAck, Seq: 7}); err != nil {
		t.Fatal(err)
	}
	m, err := readMessage(&buf)
	if err != nil || m.Type != msgAck || m.Seq != 7 {
		t.Fatalf("readMessage(writeMessage(ack 7)) = %+v, %v, want ack 7", m, err)
	}
}

func TestTunnelURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"http://example.com", "ws://example.com/aperio/tunnel"},
		{"https://example.com/", "wss://example.com/aperio/tunnel"},
		{"ws://example.com:8080/base", "ws://example.com:8080/base/aperio/tunnel"},
		{"wss://example.com", "wss://example.com/aperio/tunnel"},
	}
	for _, tt := range tests {
		got, err := tunnelURL(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("tunnelURL(%q) = %q, %v, want %q", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"ftp://example.com", "http://", "::"} {
		if _, err := tunnelURL(bad); err == nil {
			t.Errorf("tunnelURL(%q) = nil error, want an error", bad)
		}
	}
}

func TestReconnectBackoff(t *testing.T) {
	full := func() float64 { return 0.999999 }
	b := reconnectBackoff{jitter: full}
	var got []time.Duration
	for range 9 {
		got = append(got, b.next(0).Round(time.Second))
	}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60, 60}
	for i := range want {
		if got[i] != want[i]*time.Second {
			t.Fatalf("backoff waits = %v, want %v seconds", got, want)
		}
	}
	// A session that stayed up 30 s resets the backoff; a shorter one does not.
	if w := b.next(29 * time.Second).Round(time.Second); w != 60*time.Second {
		t.Fatalf("next(29s) = %v, want 60s (no reset before 30s up)", w)
	}
	if w := b.next(30 * time.Second).Round(time.Second); w != time.Second {
		t.Fatalf("next(30s) = %v, want 1s (reset after 30s up)", w)
	}
	// Full jitter: the wait is the jitter fraction of the backoff.
	half := reconnectBackoff{jitter: func() float64 { return 0.5 }}
	half.next(0)
	if w := half.next(0); w != time.Second {
		t.Fatalf("second wait with jitter 0.5 = %v, want 1s (half of 2s)", w)
	}
}

// funcAuth authenticates with a function.
type funcAuth func(token string) (Identity, error)

func (f funcAuth) Authenticate(_ context.Context, token string) (Identity, error) { return f(token) }

func TestUnavailableTokenCheckAnswers503(t *testing.T) {
	down := funcAuth(func(string) (Identity, error) {
		return Identity{}, fmt.Errorf("lookup: %w", ErrUnavailable)
	})
	err := sessionOnce(t, ServerConfig{Auth: down}, testToken, testAnnouncement)
	var refused *RefusedError
	if !errors.As(err, &refused) || refused.Status != 503 || !strings.Contains(refused.Reason, "retry") {
		t.Fatalf("runSession while tokens cannot be checked = %v, want RefusedError 503 asking to retry", err)
	}
}

func TestExpiredTokenEndsSessionAtHeartbeat(t *testing.T) {
	// Heartbeats every 500 ms: under a loaded machine a tighter schedule let
	// the client give up on a late ack before it read the goaway.
	expires := time.Now().Add(time.Second)
	auth := funcAuth(func(token string) (Identity, error) {
		return Identity{TokenID: "tok_1", Name: "short", ExpiresAt: expires}, nil
	})
	disconnected := make(chan error, 4)
	p := startPair(t, "pipe", newHandlerForwarder(t, echoHandler()), func(s *ServerConfig, c *ClientConfig) {
		s.Auth = auth
		s.DownThreshold = 1500 * time.Millisecond
		c.OnDisconnect = func(err error) { disconnected <- err }
	})
	select {
	case <-p.registry.detached:
	case <-time.After(10 * time.Second):
		t.Fatal("session of an expired token still attached after 10s")
	}
	if time.Now().Before(expires) {
		t.Fatal("session ended before its token expired")
	}
	select {
	case err := <-disconnected:
		if err == nil || !strings.Contains(err.Error(), "token expired") {
			t.Fatalf("client disconnect reason = %v, want one naming the expired token", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("client did not report the disconnect")
	}
}

// TestServerBytes: the server counts the tunnel bytes each way, frames
// included once: a 100,000-byte body echoed through the tunnel adds that
// much, plus frame headers and the HTTP heads, to each direction.
func TestServerBytes(t *testing.T) {
	for _, kind := range connKinds {
		t.Run(kind, func(t *testing.T) {
			p := startPair(t, kind, newHandlerForwarder(t, echoHandler()), nil)
			in0, out0 := p.server.Bytes()
			const size = 100_000
			req := httptest.NewRequest("POST", "/echo", strings.NewReader(strings.Repeat("x", size)))
			if resp, body := roundTrip(t, p.session, req); resp.StatusCode != 200 || len(body) != size {
				t.Fatalf("POST /echo = %d, %d bytes, want 200, %d bytes", resp.StatusCode, len(body), size)
			}
			in, out := p.server.Bytes()
			// Heads, yamux headers (12 bytes a frame) and window updates stay
			// well under 5% of the body; a body counted twice would not.
			const slack = size / 20
			if d := in - in0; d < size || d > size+slack {
				t.Errorf("Bytes() in grew by %d, want %d to %d", d, size, size+slack)
			}
			if d := out - out0; d < size || d > size+slack {
				t.Errorf("Bytes() out grew by %d, want %d to %d", d, size, size+slack)
			}
		})
	}
}
