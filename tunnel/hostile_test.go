package tunnel

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/aperio-dev/aperio/internal/recovery"
)

// TestHostileTunnel holds the hostile-input cases of the tunnel: visitors
// that leave mid-body or upload slowly, backends that refuse upgrades,
// clients that misbehave on purpose. Each case fails on the code before
// its fix (a crash, a hang or unbounded reading).
func TestHostileTunnel(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"guard/failure/visitor-leaves-mid-body", testVisitorLeavesMidBody},
		{"guard/failure/slow-body-outlives-response-timeout", testSlowBodyOutlivesTimeout},
		{"guard/failure/panicking-forwarder-recovered", testPanickingForwarderRecovered},
		{"guard/upgrade/next-visitor-after-refused-upgrade", testNextVisitorAfterRefusedUpgrade},
		{"guard/upgrade/client-stops-after-refused-upgrade", testClientStopsAfterRefusedUpgrade},
		{"guard/slowloris/head-timeout-with-silent-client", testHeadTimeoutSilentClient},
		{"guard/host/absolute-form-target", testAbsoluteFormTarget},
		{"guard/host/host-field-in-header", testHostFieldInHeader},
		{"guard/oversize/endless-response-head", testEndlessResponseHead},
		{"guard/oversize/endless-request-head", testEndlessRequestHead},
		{"guard/protocol/client-opens-stream", testClientOpensStream},
		{"guard/flood/stream-cap", testStreamCap},
		{"guard/flood/unacknowledged-streams", testUnacknowledgedStreams},
		{"guard/flood/alternating-announcer", testAlternatingAnnouncer},
		{"guard/flood/first-change-not-held", testFirstChangeNotHeld},
		{"guard/smuggling/trailers-with-content-length", testTrailersWithContentLength},
		{"guard/smuggling/backend-length-header-dropped", testBackendLengthHeaderDropped},
		{"guard/disclosure/backend-address-hidden", testBackendAddressHidden},
		{"guard/flood/backend-warning-rate-limited", testBackendWarningRateLimited},
	}
	for _, tt := range tests {
		t.Run(tt.name, tt.run)
	}
}

// logBuffer collects log output from several goroutines.
type logBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// waitFor fails t unless ch yields within timeout.
func waitFor[T any](t *testing.T, ch <-chan T, timeout time.Duration, what string) T {
	t.Helper()
	tm := time.NewTimer(timeout)
	defer tm.Stop()
	select {
	case v := <-ch:
		return v
	case <-tm.C:
		t.Fatalf("%s: nothing within %v", what, timeout)
		var zero T
		return zero
	}
}

// leavingBody is a visitor's request body that delivers a first part, then
// blocks until leave is closed and fails the way net/http's body does when
// the visitor's connection drops. started is closed at the first block.
type leavingBody struct {
	first   []byte
	started chan struct{}
	leave   chan struct{}
	once    sync.Once
}

func newLeavingBody(first string) *leavingBody {
	return &leavingBody{first: []byte(first), started: make(chan struct{}), leave: make(chan struct{})}
}

func (b *leavingBody) Read(p []byte) (int, error) {
	if len(b.first) > 0 {
		n := copy(p, b.first)
		b.first = b.first[n:]
		return n, nil
	}
	b.once.Do(func() { close(b.started) })
	<-b.leave
	return 0, io.ErrUnexpectedEOF
}

func (b *leavingBody) Close() error { return nil }

// bodyReader is a backend that reads the whole body before it answers.
func bodyReader() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		io.WriteString(w, "read it all")
	})
}

// A visitor sends part of a body and leaves: its body read fails and its
// context ends, two aborts with causes of different types at once.
func testVisitorLeavesMidBody(t *testing.T) {
	p := startPair(t, "pipe", newHandlerForwarder(t, bodyReader()), nil)
	for i := range 20 {
		body := newLeavingBody("partial body")
		ctx, cancel := context.WithCancelCause(context.Background())
		req := httptest.NewRequest("POST", "/upload", body).WithContext(ctx)
		req.ContentLength = 100000
		errc := make(chan error, 1)
		go func() {
			_, err := p.session.RoundTrip(req, "0")
			errc <- err
		}()
		waitFor(t, body.started, 10*time.Second, "body copier reaching the visitor's silence")
		cancel(context.Canceled)
		close(body.leave)
		err := waitFor(t, errc, 10*time.Second, "RoundTrip after the visitor left")
		if err == nil {
			t.Fatalf("round %d: RoundTrip after the visitor left = nil, want an error", i)
		}
	}
	// The session still serves.
	if resp, body := roundTrip(t, p.session, httptest.NewRequest("GET", "/", nil)); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET after aborted uploads = %d %q, want 200", resp.StatusCode, body)
	}
}

// A slow upload outlives gateway_response_timeout: the visitor gets the
// timeout without waiting for the upload, which may then disconnect.
func testSlowBodyOutlivesTimeout(t *testing.T) {
	const timeout = 200 * time.Millisecond
	p := startPair(t, "pipe", newHandlerForwarder(t, bodyReader()), func(s *ServerConfig, _ *ClientConfig) {
		s.ResponseHeaderTimeout = timeout
	})
	body := newLeavingBody("slow")
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	req := httptest.NewRequest("POST", "/upload", body).WithContext(ctx)
	req.ContentLength = 100000
	start := time.Now()
	errc := make(chan error, 1)
	go func() {
		_, err := p.session.RoundTrip(req, "0")
		errc <- err
	}()
	err := waitFor(t, errc, 5*time.Second, "RoundTrip while the upload is still pending")
	if !errors.Is(err, ErrResponseTimeout) {
		t.Fatalf("RoundTrip with a slow upload = %v, want ErrResponseTimeout", err)
	}
	within(t, "slow upload answered", time.Since(start), timeout)
	// Now the uploader disconnects: a late cause must not crash anything.
	cancel(context.Canceled)
	close(body.leave)
	if resp, b := roundTrip(t, p.session, httptest.NewRequest("GET", "/", nil)); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET after the slow upload = %d %q, want 200", resp.StatusCode, b)
	}
}

// panickingForwarder panics on /panic and forwards everything else.
type panickingForwarder struct{ next Forwarder }

func (f panickingForwarder) Forward(ctx context.Context, service string, req *http.Request) (*http.Response, error) {
	if req.URL.Path == "/panic" {
		panic("forwarder bug")
	}
	return f.next.Forward(ctx, service, req)
}

// A panic while serving one stream ends that stream only: the client
// process and its session keep serving.
func testPanickingForwarderRecovered(t *testing.T) {
	recovery.AllowForTest(t)
	before := recovery.Total()
	p := startPair(t, "pipe", panickingForwarder{newHandlerForwarder(t, echoHandler())}, nil)
	if _, err := p.session.RoundTrip(httptest.NewRequest("GET", "/panic", nil), "0"); !errors.Is(err, ErrSessionClosed) {
		t.Fatalf("RoundTrip to a panicking forwarder = %v, want ErrSessionClosed", err)
	}
	if got := recovery.Total() - before; got != 1 {
		t.Fatalf("recovered panics = %d, want 1", got)
	}
	if resp, body := roundTrip(t, p.session, httptest.NewRequest("GET", "/hello", nil)); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET after a recovered panic = %d %q, want 200", resp.StatusCode, body)
	}
}

// refusingUpgrades answers an upgrade request with 403 and others with 200.
func refusingUpgrades() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if IsUpgrade(r.Header) {
			http.Error(w, "login first", http.StatusForbidden)
			return
		}
		io.WriteString(w, "ok")
	})
}

func refusedUpgrade(t *testing.T, s *Session) {
	t.Helper()
	req := httptest.NewRequest("GET", "/chat", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	if resp, body := roundTrip(t, s, req); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("refused upgrade = %d %q, want 403", resp.StatusCode, body)
	}
}

func testNextVisitorAfterRefusedUpgrade(t *testing.T) {
	p := startPair(t, "pipe", newHandlerForwarder(t, refusingUpgrades()), nil)
	for range 3 {
		refusedUpgrade(t, p.session)
	}
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := p.session.RoundTrip(httptest.NewRequest("GET", "/", nil).WithContext(ctx), "0")
		if err != nil {
			cancel()
			t.Fatalf("visitor %d after refused upgrades: %v, want 200 at once", i, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("visitor %d after refused upgrades = %d %q %v, want 200", i, resp.StatusCode, b, err)
		}
	}
}

func testClientStopsAfterRefusedUpgrade(t *testing.T) {
	p := startPair(t, "pipe", newHandlerForwarder(t, refusingUpgrades()), nil)
	refusedUpgrade(t, p.session)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		p.stop()
	}()
	waitFor(t, stopped, 10*time.Second, "client Run returning after a refused upgrade")
}

// startHostile runs a server and a hand-written client that completes the
// handshake and hands every stream the server opens to serve.
func startHostile(t *testing.T, mutate func(*ServerConfig), serve func(st *yamux.Stream)) (*Server, *fakeRegistry, *Session, *rawClient, *yamux.Stream) {
	t.Helper()
	reg := newFakeRegistry()
	cfg := ServerConfig{Auth: tokenAuth{}, Registry: reg, DownThreshold: 15 * time.Second, Logger: testLogger(t)}
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rc := dialRaw(t, srv)
	ctrl, _ := rc.hello(t)
	sess := waitFor(t, reg.attached, 10*time.Second, "session attaching")
	var wg sync.WaitGroup
	if serve != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				st, err := rc.mux.AcceptStream()
				if err != nil {
					return
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					serve(st)
				}()
			}
		}()
	}
	t.Cleanup(func() {
		rc.mux.Close()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		wg.Wait()
	})
	return srv, reg, sess, rc, ctrl
}

// A client that takes requests and never answers nor reads: the visitor
// waits gateway_response_timeout, not that plus yamux's close timeout.
func testHeadTimeoutSilentClient(t *testing.T) {
	const timeout = 300 * time.Millisecond
	hang := make(chan struct{})
	defer close(hang)
	_, _, sess, _, _ := startHostile(t, func(c *ServerConfig) { c.ResponseHeaderTimeout = timeout }, func(st *yamux.Stream) {
		<-hang
	})
	start := time.Now()
	_, err := sess.RoundTrip(httptest.NewRequest("GET", "/", nil), "0")
	if !errors.Is(err, ErrResponseTimeout) {
		t.Fatalf("RoundTrip to a silent client = %v, want ErrResponseTimeout", err)
	}
	within(t, "silent client answered", time.Since(start), timeout)
}

// inspectHost answers with the Host and request target the backend saw.
func inspectHost() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Host+" "+r.RequestURI)
	})
}

func testAbsoluteFormTarget(t *testing.T) {
	p := startPair(t, "pipe", newHandlerForwarder(t, inspectHost()), nil)
	req := httptest.NewRequest("GET", "http://internal.test/secret?q=1", nil)
	req.Host = "app.test" // what the request was routed on (:authority)
	if resp, body := roundTrip(t, p.session, req); resp.StatusCode != http.StatusOK || body != "app.test /secret?q=1" {
		t.Fatalf("absolute-form GET = %d %q, want 200 %q", resp.StatusCode, body, "app.test /secret?q=1")
	}
}

func testHostFieldInHeader(t *testing.T) {
	p := startPair(t, "pipe", newHandlerForwarder(t, inspectHost()), nil)
	req := httptest.NewRequest("GET", "/", nil)
	req.Host = "app.test"
	req.Header["Host"] = []string{"app.test"} // as net/http leaves an h2 host field
	if resp, body := roundTrip(t, p.session, req); resp.StatusCode != http.StatusOK || body != "app.test /" {
		t.Fatalf("GET with a host field = %d %q, want 200 %q", resp.StatusCode, body, "app.test /")
	}
}

// endless writes what, then filler until the stream fails.
func endless(st *yamux.Stream, what string) {
	defer st.Close()
	if _, err := io.WriteString(st, what); err != nil {
		return
	}
	filler := bytes.Repeat([]byte("a"), 32<<10)
	for {
		if _, err := st.Write(filler); err != nil {
			return
		}
	}
}

func testEndlessResponseHead(t *testing.T) {
	const limit = 64 << 10
	var logs logBuffer
	srv, _, sess, _, _ := startHostile(t, func(c *ServerConfig) {
		c.MaxHeaderBytes = limit
		c.ResponseHeaderTimeout = 10 * time.Second
		c.Logger = logs.logger()
	}, func(st *yamux.Stream) {
		endless(st, "HTTP/1.1 200 OK\r\nX-Huge: ")
	})
	inBefore, _ := srv.Bytes()
	_, err := sess.RoundTrip(httptest.NewRequest("GET", "/", nil), "0")
	if !errors.Is(err, ErrBadResponse) || !errors.Is(err, ErrHeadTooLarge) {
		t.Fatalf("RoundTrip with an endless response head = %v, want ErrBadResponse and ErrHeadTooLarge", err)
	}
	// What the server took in is bounded by the limit and one stream window,
	// not by what the client would send.
	in, _ := srv.Bytes()
	if got, most := in-inBefore, int64(limit+streamWindow+64<<10); got > most {
		t.Fatalf("server read %d bytes of an endless head, want at most %d", got, most)
	}
	if !strings.Contains(logs.String(), "tunnel response head too large") {
		t.Fatalf("log = %q, want the oversized head reported", logs.String())
	}
	// The session keeps serving other exchanges.
	if sess.mux.IsClosed() {
		t.Fatal("session closed after one oversized head, want it open")
	}
}

func testEndlessRequestHead(t *testing.T) {
	const limit = 64 << 10
	var logs logBuffer
	p := startPair(t, "pipe", newHandlerForwarder(t, echoHandler()), func(_ *ServerConfig, c *ClientConfig) {
		c.MaxHeaderBytes = limit
		c.Logger = logs.logger()
	})
	st, err := p.session.mux.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		endless(st, "GET / HTTP/1.1\r\nHost: app.test\r\nX-Huge: ")
	}()
	defer func() { <-done }()
	defer st.Close()
	// The client closes its side of the stream without answering.
	st.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := st.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("read on a stream with an endless request head = %d, %v, want EOF", n, err)
	}
	if !strings.Contains(logs.String(), "tunnel request head too large") {
		t.Fatalf("client log = %q, want the oversized head reported", logs.String())
	}
}

func testClientOpensStream(t *testing.T) {
	var logs logBuffer
	_, reg, _, rc, ctrl := startHostile(t, func(c *ServerConfig) { c.Logger = logs.logger() }, nil)
	st, err := rc.mux.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	go st.Write(bytes.Repeat([]byte("x"), 256<<10))
	m, err := readMessage(ctrl)
	if err != nil || m.Type != msgGoAway || !strings.Contains(m.Reason, "opened a stream") {
		t.Fatalf("server's answer to a client-opened stream = %+v, %v, want goaway naming the violation", m, err)
	}
	waitFor(t, rc.mux.CloseChan(), 10*time.Second, "session ending")
	waitFor(t, reg.detached, 10*time.Second, "session detaching")
	if !strings.Contains(logs.String(), "client opened a stream") {
		t.Fatalf("log = %q, want the violation logged", logs.String())
	}
}

func testStreamCap(t *testing.T) {
	hang, release := make(chan struct{}), make(chan struct{})
	defer close(hang)
	got := make(chan struct{}, 2)
	_, _, sess, _, _ := startHostile(t, func(c *ServerConfig) { c.MaxStreams = 3 }, func(st *yamux.Stream) {
		got <- struct{}{}
		select {
		case <-hang:
		case <-release:
			st.Close()
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	// The control stream and two requests fill the session.
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sess.RoundTrip(httptest.NewRequest("GET", "/", nil).WithContext(ctx), "0")
		}()
	}
	for i := range 2 {
		waitFor(t, got, 10*time.Second, fmt.Sprintf("stream %d reaching the client", i))
	}
	start := time.Now()
	_, err := sess.RoundTrip(httptest.NewRequest("GET", "/", nil), "0")
	if !errors.Is(err, ErrTooManyStreams) {
		t.Fatalf("RoundTrip beyond tunnel_max_streams = %v, want ErrTooManyStreams", err)
	}
	if d := time.Since(start); d < streamWait/2 {
		t.Errorf("the request at the cap failed after %v; it waits up to %v for a stream", d, streamWait)
	}
	// A request at the cap gets the slot a finished one frees: it waits
	// rather than failing.
	waiting := make(chan error, 1)
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	go func() {
		_, err := sess.RoundTrip(httptest.NewRequest("GET", "/", nil).WithContext(wctx), "0")
		waiting <- err
	}()
	select {
	case err := <-waiting:
		t.Fatalf("the request at the cap returned %v while both streams were busy", err)
	case <-time.After(100 * time.Millisecond): // still waiting, as it should
	}
	// The two hung requests end at both ends; their streams close.
	close(release)
	cancel()
	waitFor(t, got, 10*time.Second, "the waiting request's stream reaching the client")
	wcancel()
	if err := <-waiting; errors.Is(err, ErrTooManyStreams) {
		t.Fatalf("the request that waited at the cap = %v, want it sent", err)
	}
}

// A client that never accepts the server's streams never acknowledges
// them, and the server's yamux backlog is tunnel_max_streams: a burst of
// concurrent requests must neither take the session past the limit nor
// leave a request waiting on that backlog (yamux's open has no timeout).
// Each request ends, at its response timeout or at the stream wait.
func testUnacknowledgedStreams(t *testing.T) {
	const maxStreams, requests = 6, 200
	_, _, sess, _, _ := startHostile(t, func(c *ServerConfig) {
		c.MaxStreams = maxStreams
		c.ResponseHeaderTimeout = 200 * time.Millisecond
	}, nil)
	var most atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if n := int64(sess.mux.NumStreams()); n > most.Load() {
				most.Store(n)
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	errs := make(chan error, requests)
	start := make(chan struct{})
	for range requests {
		go func() {
			<-start
			_, err := sess.RoundTrip(httptest.NewRequest("GET", "/", nil), "0")
			errs <- err
		}()
	}
	close(start)
	deadline := time.After(streamWait + 10*time.Second)
	var capped, timedOut int
	for i := range requests {
		select {
		case err := <-errs:
			switch {
			case errors.Is(err, ErrTooManyStreams):
				capped++
			case errors.Is(err, ErrResponseTimeout):
				timedOut++
			default:
				t.Errorf("request %d = %v, want ErrTooManyStreams or ErrResponseTimeout", i, err)
			}
		case <-deadline:
			t.Fatalf("%d of %d requests still waiting %v after a burst at a client that never accepts (%d capped, %d timed out)", requests-i, requests, streamWait+10*time.Second, capped, timedOut)
		}
	}
	close(stop)
	<-sampled
	if n := most.Load(); n > maxStreams {
		t.Errorf("the session had %d streams open, beyond tunnel_max_streams %d", n, maxStreams)
	}
	if timedOut == 0 {
		t.Errorf("no request reached the client (%d capped): want the first %d sent and timed out", capped, maxStreams-1)
	}
}

// flip returns the test announcement with the service's health set.
func flip(healthy bool) *Announcement {
	a := testAnnouncement()
	a.Services[0].Healthy = healthy
	return &a
}

func testAlternatingAnnouncer(t *testing.T) {
	const interval = 100 * time.Millisecond
	const beats = 300
	_, reg, sess, _, ctrl := startHostile(t, func(c *ServerConfig) { c.AnnounceInterval = interval }, nil)
	reg.mu.Lock()
	before := reg.updates
	reg.mu.Unlock()
	start := time.Now()
	acked := make(chan uint64, 1)
	go func() {
		var last uint64
		for last < beats {
			m, err := readMessage(ctrl)
			if err != nil {
				break
			}
			if m.Type == msgAck {
				last = m.Seq
			}
		}
		acked <- last
	}()
	for seq := uint64(1); seq <= beats; seq++ {
		if err := writeMessage(ctrl, &message{Type: msgHeartbeat, Seq: seq, Announcement: flip(seq%2 == 0)}); err != nil {
			t.Fatalf("heartbeat %d: %v", seq, err)
		}
	}
	if last := waitFor(t, acked, 10*time.Second, "ack of the last heartbeat"); last != beats {
		t.Fatalf("last ack = %d, want %d", last, beats)
	}
	elapsed := time.Since(start)
	reg.mu.Lock()
	applied := reg.updates - before
	reg.mu.Unlock()
	if most := int(elapsed/interval) + 2; applied > most {
		t.Fatalf("%d alternating heartbeats in %v applied %d times, want at most %d", beats, elapsed, applied, most)
	}
	if got := sess.Announcement().Services[0].Healthy; got != (beats%2 == 0) {
		t.Fatalf("applied announcement healthy = %v, want the last one's %v", got, beats%2 == 0)
	}
}

func testFirstChangeNotHeld(t *testing.T) {
	const interval = time.Hour // only a held heartbeat could take this long
	_, reg, sess, _, ctrl := startHostile(t, func(c *ServerConfig) { c.AnnounceInterval = interval }, nil)
	if err := writeMessage(ctrl, &message{Type: msgHeartbeat, Seq: 1, Announcement: flip(false)}); err != nil {
		t.Fatal(err)
	}
	m, err := readMessage(ctrl)
	if err != nil || m.Type != msgAck || m.Seq != 1 {
		t.Fatalf("answer to the first heartbeat = %+v, %v, want ack 1", m, err)
	}
	if sess.Announcement().Services[0].Healthy {
		t.Fatal("first changed announcement not applied by its ack")
	}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if reg.updates != 2 { // the hello's and this one
		t.Fatalf("registry updates = %d, want 2", reg.updates)
	}
}

// h2cForwarder forwards to an h2c backend, as the agent does for h2c://
// targets.
func newH2CForwarder(t *testing.T, h http.Handler) *handlerForwarder {
	t.Helper()
	backend := httptest.NewUnstartedServer(h)
	backend.Config.Protocols = new(http.Protocols)
	backend.Config.Protocols.SetUnencryptedHTTP2(true)
	backend.Config.Protocols.SetHTTP1(true)
	backend.Start()
	t.Cleanup(backend.Close)
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	return &handlerForwarder{url: backend.URL, tr: tr}
}

func testTrailersWithContentLength(t *testing.T) {
	grpcLike := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 {
			http.Error(w, "want h2c", http.StatusHTTPVersionNotSupported)
			return
		}
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Content-Length", "5")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "hello")
		w.Header().Set(http.TrailerPrefix+"Grpc-Status", "0")
		w.Header().Set(http.TrailerPrefix+"Grpc-Message", "fine")
	})
	p := startPair(t, "pipe", newH2CForwarder(t, grpcLike), nil)
	resp, err := p.session.RoundTrip(httptest.NewRequest("POST", "/svc/Method", strings.NewReader("req")), "0")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || string(body) != "hello" || resp.ContentLength != 5 {
		t.Fatalf("gRPC-like answer = %d %q length %d, want 200 %q length 5", resp.StatusCode, body, resp.ContentLength, "hello")
	}
	if got := resp.Trailer.Get("Grpc-Status"); got != "0" {
		t.Fatalf("trailer Grpc-Status = %q (trailers %v), want %q", got, resp.Trailer, "0")
	}
	if _, ok := resp.Header[lengthHeader]; ok {
		t.Fatalf("response header carries %s, want it removed", lengthHeader)
	}
}

// A backend cannot make the server announce another length than the one
// its response has.
func testBackendLengthHeaderDropped(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(lengthHeader, "999")
		io.WriteString(w, "ok")
	})
	p := startPair(t, "pipe", newHandlerForwarder(t, h), nil)
	resp, body := roundTrip(t, p.session, httptest.NewRequest("GET", "/", nil))
	if resp.StatusCode != http.StatusOK || body != "ok" || resp.ContentLength != 2 {
		t.Fatalf("GET = %d %q length %d, want 200 %q length 2", resp.StatusCode, body, resp.ContentLength, "ok")
	}
	if v, ok := resp.Header[lengthHeader]; ok {
		t.Fatalf("response carries %s %v, want it removed", lengthHeader, v)
	}
}

func testBackendAddressHidden(t *testing.T) {
	var logs logBuffer
	fwd := newHandlerForwarder(t, echoHandler())
	fwd.url = "http://127.0.0.1:1" // nothing listens there
	p := startPair(t, "pipe", fwd, func(_ *ServerConfig, c *ClientConfig) { c.Logger = logs.logger() })
	resp, body := roundTrip(t, p.session, httptest.NewRequest("GET", "/", nil))
	if resp.StatusCode != http.StatusBadGateway || strings.Contains(body, "127.0.0.1") || strings.Contains(body, "dial") {
		t.Fatalf("GET with backend down = %d %q, want 502 without the backend's address", resp.StatusCode, body)
	}
	if out := logs.String(); !strings.Contains(out, "level=WARN msg=\"backend unreachable\"") || !strings.Contains(out, "127.0.0.1:1") {
		t.Fatalf("client log = %q, want a WARN naming the backend's address", out)
	}
}

func testBackendWarningRateLimited(t *testing.T) {
	var logs logBuffer
	now := time.Unix(1000, 0)
	w := newWarnLimiter(logs.logger(), "backend unreachable", 5*time.Second)
	w.now = func() time.Time { return now }
	errDial := errors.New("dial tcp 127.0.0.1:1: connection refused")
	for range 10 {
		w.warn("0", errDial)
	}
	w.warn("1", errDial) // another service has its own budget
	now = now.Add(6 * time.Second)
	w.warn("0", errDial)
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) != 3 {
		t.Fatalf("warnings = %q, want 3 lines", lines)
	}
	for i, want := range []string{"service=0 ", "service=1 ", "suppressed=9"} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("warning %d = %q, want it to contain %q", i, lines[i], want)
		}
	}
}
