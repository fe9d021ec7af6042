package tunnel

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/testkit/memnet"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const testToken = "test-token"

// tokenAuth accepts testToken only.
type tokenAuth struct{}

func (tokenAuth) Authenticate(_ context.Context, token string) (Identity, error) {
	if token == testToken {
		return Identity{Name: "test"}, nil
	}
	return Identity{}, errors.New("invalid token")
}

// fakeRegistry records sessions as they come and go.
type fakeRegistry struct {
	refuse   error
	attached chan *Session
	detached chan *Session
	mu       sync.Mutex // guards updates
	updates  int
}

func newFakeRegistry() *fakeRegistry {
	return &fakeRegistry{attached: make(chan *Session, 16), detached: make(chan *Session, 16)}
}

func (r *fakeRegistry) Attach(_ context.Context, s *Session) error {
	if r.refuse != nil {
		return r.refuse
	}
	r.attached <- s
	return nil
}

func (r *fakeRegistry) Update(_ context.Context, s *Session) []string {
	r.mu.Lock()
	r.updates++
	r.mu.Unlock()
	return nil
}

func (r *fakeRegistry) Detach(_ context.Context, s *Session) { r.detached <- s }

// handlerForwarder answers every request with an http.Handler through a
// real HTTP backend, the way the agent forwards to a local app.
type handlerForwarder struct {
	url string
	tr  *http.Transport
}

func newHandlerForwarder(t testing.TB, h http.Handler) *handlerForwarder {
	t.Helper()
	backend := httptest.NewServer(h)
	t.Cleanup(backend.Close)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &handlerForwarder{url: backend.URL, tr: tr}
}

func (f *handlerForwarder) Forward(ctx context.Context, service string, req *http.Request) (*http.Response, error) {
	req.RequestURI = ""
	req.URL.Scheme = "http"
	req.URL.Host = f.url[len("http://"):]
	req.Header.Set("X-Test-Service", service)
	return f.tr.RoundTrip(req)
}

// pair is a tunnel server and a connected client.
type pair struct {
	server   *Server
	registry *fakeRegistry
	client   *Client
	session  *Session
	stop     func()
}

// connKinds is the conn matrix every tunnel test runs over: a WebSocket
// session over an in-memory pipe, TCP and TLS, and a tcp-transport session
// (TransportTCP) over TCP and TLS.
var connKinds = []string{"pipe", "tcp", "tls", "tcp-transport", "tls-transport"}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

// startServer runs a tunnel server over kind and returns its URL and the
// dial options a client needs.
func startServer(t testing.TB, kind string, srv *Server) (url string, dial func(ctx context.Context, network, addr string) (net.Conn, error), tlsConf *tls.Config) {
	t.Helper()
	switch strings.TrimSuffix(kind, "-transport") {
	case "pipe":
		ln := memnet.Listen()
		hs := &http.Server{Handler: srv}
		go hs.Serve(ln)
		t.Cleanup(func() { hs.Close(); ln.Close() })
		return "http://memnet", ln.Dial, nil
	case "tcp":
		hs := httptest.NewServer(srv)
		t.Cleanup(hs.Close)
		return hs.URL, nil, nil
	case "tls":
		hs := httptest.NewTLSServer(srv)
		t.Cleanup(hs.Close)
		return hs.URL, nil, hs.Client().Transport.(*http.Transport).TLSClientConfig
	}
	t.Fatalf("unknown conn kind %q", kind)
	return "", nil, nil
}

func startPair(t testing.TB, kind string, fwd Forwarder, mutate func(*ServerConfig, *ClientConfig)) *pair {
	t.Helper()
	return startPairWith(t, kind, fwd, mutate, startServer)
}

// startPairWith is startPair with the tunnel server run by start instead
// of startServer (a test that watches the connection wraps it).
func startPairWith(t testing.TB, kind string, fwd Forwarder, mutate func(*ServerConfig, *ClientConfig), start func(testing.TB, string, *Server) (string, func(context.Context, string, string) (net.Conn, error), *tls.Config)) *pair {
	t.Helper()
	reg := newFakeRegistry()
	scfg := ServerConfig{Auth: tokenAuth{}, Registry: reg, DownThreshold: 15 * time.Second, Logger: testLogger(t)}
	ccfg := ClientConfig{
		Token:     testToken,
		Announce:  func() Announcement { return testAnnouncement() },
		Forwarder: fwd,
		Logger:    testLogger(t),
		Jitter:    func() float64 { return 0 },
	}
	connected := make(chan struct{}, 1)
	ccfg.OnConnect = func(string) {
		select {
		case connected <- struct{}{}:
		default:
		}
	}
	if strings.HasSuffix(kind, "-transport") {
		ccfg.Transport = TransportTCP
	}
	if mutate != nil {
		mutate(&scfg, &ccfg)
	}
	srv, err := NewServer(scfg)
	if err != nil {
		t.Fatal(err)
	}
	url, dial, tlsConf := start(t, kind, srv)
	ccfg.URL, ccfg.DialContext, ccfg.TLSConfig = url, dial, tlsConf
	c, err := NewClient(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx)
	}()
	p := &pair{server: srv, registry: reg, client: c}
	p.stop = sync.OnceFunc(func() {
		cancel()
		<-done
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		srv.Shutdown(sctx)
	})
	t.Cleanup(p.stop)
	select {
	case p.session = <-reg.attached:
	case <-time.After(10 * time.Second):
		t.Fatal("client did not attach within 10s")
	}
	select {
	case <-connected:
	case <-time.After(10 * time.Second):
		t.Fatal("client did not see the welcome within 10s")
	}
	return p
}

func testAnnouncement() Announcement {
	return Announcement{
		Name:       "test-client",
		InstanceID: "i-1",
		Services:   []Service{{ID: "0", Hostnames: []string{"app.test"}, Healthy: true}},
	}
}

// roundTrip sends a request through the session and returns status and body.
func roundTrip(t testing.TB, s *Session, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := s.RoundTrip(req, "0")
	if err != nil {
		t.Fatalf("RoundTrip(%s %s) error: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body of %s %s: %v", req.Method, req.URL, err)
	}
	return resp, string(b)
}
