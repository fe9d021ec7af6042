package server_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/agent"
	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/server"
	"github.com/aperio-dev/aperio/store/storetest"
	"go.uber.org/goleak"
)

// The harness runs the whole data path in one process: a gateway serving
// real TCP on 127.0.0.1:0 (the visitor path is what these tests are about),
// agents holding tunnels to it, and httptest backends behind the agents.
// Everything a helper starts is stopped by t.Cleanup, in reverse order of
// start, so the agent drains before its server stops and the backend closes
// last.
//
// Whole-stack tests call t.Parallel(): each starts its own servers, agents,
// backends and store (its own SQLite file or PostgreSQL database) on
// ports of 127.0.0.1:0, and spends most of its time waiting on the
// network, so running them side by side halves the package's time (376 s
// to about 200 s with -race). A test that calls t.Setenv or changes
// something process-wide does not call it; synctest tests need not.

func TestMain(m *testing.M) {
	// Every goroutine the harness starts is joined in a cleanup, and those
	// the product lets exit on their own once their connection closes
	// (tunnel accept loops, the agent's idle backend connections) are gone
	// within goleak's retries. One exception: certmagic keeps one rate
	// limiter per ACME CA and account email for the life of the process
	// (a package-level map it never prunes), which the automatic TLS test
	// creates.
	// The browser tests' shared Chromium is stopped first: its goroutines
	// are joined there, not in a test's cleanup.
	code := m.Run()
	closeChromium()
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/caddyserver/certmagic.(*RingBufferRateLimiter).loop")); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

const (
	testToken = "e2e-master-token"
	appHost   = "app.test"
	// waitFor bounds every poll for a state the data path reaches on its
	// own (a client attaching, a probe passing).
	waitFor = 15 * time.Second
)

// testLogger shows every component's logs under -v and discards them
// otherwise.
func testLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

// serverConfig returns a server configuration for tests: the contract's
// defaults, the test token, a port the kernel picks.
func serverConfig(t testing.TB) server.Config {
	t.Helper()
	cfg := server.DefaultConfig()
	cfg.Token = testToken
	cfg.Host = "127.0.0.1"
	cfg.Port = 0
	cfg.Store.DataDir = storetest.MigratedDataDir(t)
	return cfg
}

// testServer is a running gateway.
type testServer struct {
	gw   *server.Gateway
	addr string // host:port of the listener
	url  string // http:// or https:// and addr
	// roots trusts the server's certificate; nil for plain HTTP.
	roots *x509.CertPool
	// stop cancels Serve and returns its result. It is idempotent.
	stop func() error
}

// startServer serves cfg on ln, or on a fresh 127.0.0.1:0 listener when ln
// is nil. roots is the pool trusting cfg's certificate when TLS is on.
func startServer(t testing.TB, cfg server.Config, ln net.Listener, roots *x509.CertPool) *testServer {
	t.Helper()
	return startServerWith(t, cfg, ln, roots, server.Options{Logger: testLogger()})
}

// startServerWith is startServer with the gateway's options given.
func startServerWith(t testing.TB, cfg server.Config, ln net.Listener, roots *x509.CertPool, opts server.Options) *testServer {
	t.Helper()
	if ln == nil {
		var err error
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("net.Listen(tcp, 127.0.0.1:0) = %v", err)
		}
	}
	gw, err := server.New(context.Background(), cfg, opts)
	if err != nil {
		ln.Close()
		t.Fatalf("gateway.New() = %v, want nil", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.Serve(ctx, ln) }()
	scheme := "http://"
	if cfg.TLSCert != "" {
		scheme = "https://"
	}
	s := &testServer{gw: gw, addr: ln.Addr().String(), url: scheme + ln.Addr().String(), roots: roots}
	s.stop = sync.OnceValue(func() error {
		cancel()
		// Serve waits up to shutdown_timeout for visitors and then for the
		// tunnels; give it that and some slack.
		timer := time.NewTimer(cfg.ShutdownTimeout + 20*time.Second)
		defer timer.Stop()
		select {
		case err := <-done:
			return err
		case <-timer.C:
			return errors.New("Serve did not return after its ctx ended")
		}
	})
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Errorf("Serve() = %v, want nil", err)
		}
	})
	return s
}

// tlsClientConfig returns a client configuration trusting s, or nil for a
// plain server.
func (s *testServer) tlsClientConfig() *tls.Config {
	if s.roots == nil {
		return nil
	}
	return &tls.Config{RootCAs: s.roots}
}

// testAgent is a running aperio-client.
type testAgent struct {
	// stop cancels Run (the SIGTERM path) and returns its result. It is
	// idempotent.
	stop func() error
	// exited is closed once Run returned, on its own or after stop; res
	// is its result then.
	exited chan struct{}
	res    error
	// agent is the client itself, for its Status.
	agent *agent.Agent
}

// waitExit waits up to timeout for Run to return on its own (a drain or
// an idle retirement) and returns its result; it fails the test if Run
// is still going.
func (ta *testAgent) waitExit(t testing.TB, timeout time.Duration) error {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-ta.exited:
		return ta.res
	case <-timer.C:
		t.Fatalf("agent Run still going after %v", timeout)
		return nil
	}
}

// agentConfig returns a client configuration holding one tunnel to s and
// publishing services.
func agentConfig(s *testServer, services ...config.Service) config.Client {
	return config.Client{
		ServerURL:    s.url,
		Token:        testToken,
		Name:         "e2e",
		DrainTimeout: 30 * time.Second,
		Services:     services,
	}
}

// service publishes target under appHost.
func service(target string) config.Service {
	return config.Service{Target: target, Hostnames: []string{appHost}}
}

// startAgent runs an agent with cfg, trusting s's certificate.
func startAgent(t testing.TB, s *testServer, cfg config.Client) *testAgent {
	t.Helper()
	// Several agents share this process: none opens a status socket.
	a, err := agent.New(cfg, agent.Options{Logger: testLogger(), TLSConfig: s.tlsClientConfig(), StatusSocket: config.StatusSocketOff})
	if err != nil {
		t.Fatalf("agent.New() = %v, want nil", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ta := &testAgent{exited: make(chan struct{}), agent: a}
	go func() {
		defer close(ta.exited)
		ta.res = a.Run(ctx)
	}()
	ta.stop = sync.OnceValue(func() error {
		cancel()
		timer := time.NewTimer(cfg.DrainTimeout + 20*time.Second)
		defer timer.Stop()
		select {
		case <-ta.exited:
			return ta.res
		case <-timer.C:
			return errors.New("Run did not return after its ctx ended")
		}
	})
	t.Cleanup(func() {
		if err := ta.stop(); err != nil {
			t.Errorf("agent Run() = %v, want nil", err)
		}
	})
	return ta
}

// startBackend serves h on an httptest server closed at cleanup.
func startBackend(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	b := httptest.NewServer(h)
	t.Cleanup(b.Close)
	return b
}

// stack is one gateway and one agent publishing a service as appHost.
type stack struct {
	server  *testServer
	agent   *testAgent
	visitor *http.Client // HTTP/1.1
}

// startStack starts a backend serving h, a gateway (with cfg, if not nil,
// applied to its configuration) and an agent publishing the backend as
// appHost, and waits until the agent is attached.
func startStack(t testing.TB, h http.Handler, cfg func(*server.Config)) *stack {
	t.Helper()
	return startStackFor(t, service(startBackend(t, h).URL), cfg, false)
}

// startStackFor starts a gateway (HTTPS with a fresh self-signed
// certificate when tlsOn is set) and an agent publishing svc, and waits
// until the agent is attached.
func startStackFor(t testing.TB, svc config.Service, cfg func(*server.Config), tlsOn bool) *stack {
	t.Helper()
	return startStackWith(t, svc, cfg, tlsOn, nil)
}

// startStackWith is startStackFor with agentCfg, if not nil, applied to
// the agent's configuration.
func startStackWith(t testing.TB, svc config.Service, cfg func(*server.Config), tlsOn bool, agentCfg func(*config.Client)) *stack {
	t.Helper()
	scfg := serverConfig(t)
	var roots *x509.CertPool
	if tlsOn {
		scfg.TLSCert, scfg.TLSKey, roots = writeCert(t)
	}
	if cfg != nil {
		cfg(&scfg)
	}
	srv := startServer(t, scfg, nil, roots)
	ac := agentConfig(srv, svc)
	if agentCfg != nil {
		agentCfg(&ac)
	}
	ag := startAgent(t, srv, ac)
	visitor := newVisitor(t, srv)
	waitClients(t, visitor, srv, 1)
	// The client counts as connected once attached; its routes are
	// published a moment later (under load, after the first request).
	if len(svc.Hostnames) > 0 && !strings.HasPrefix(svc.Hostnames[0], "*") {
		h := svc.Hostnames[0]
		poll(t, waitFor, func() (bool, string) {
			return srv.gw.RoutedForTest(h), "no route for " + h + " published"
		})
	}
	return &stack{server: srv, agent: ag, visitor: visitor}
}

// newVisitor returns an HTTP/1.1 client for s whose idle connections are
// closed at cleanup.
func newVisitor(t testing.TB, s *testServer) *http.Client {
	t.Helper()
	tr := &http.Transport{Proxy: nil, TLSClientConfig: s.tlsClientConfig()}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// newRequest builds a visitor request for path on s with the given Host.
func newRequest(t testing.TB, ctx context.Context, s *testServer, method, host, path string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, s.url+path, body)
	if err != nil {
		t.Fatalf("http.NewRequest(%s %s) = %v", method, path, err)
	}
	req.Host = host
	return req
}

// do sends req and returns the response with its body read.
func do(t testing.TB, c *http.Client, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s (Host %s): %v", req.Method, req.URL, req.Host, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s (Host %s): read body: %v", req.Method, req.URL, req.Host, err)
	}
	return resp, string(b)
}

// fetch sends req and returns the status and body; unlike do it may be
// called from any goroutine.
func fetch(c *http.Client, req *http.Request) (int, string, error) {
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// get sends GET path with Host host and returns status and body.
func get(t testing.TB, c *http.Client, s *testServer, host, path string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	resp, body := do(t, c, newRequest(t, ctx, s, http.MethodGet, host, path, nil))
	return resp.StatusCode, body
}

// healthReport is the body of /aperio/health.
type healthReport struct {
	Status           string `json:"status"`
	Version          string `json:"version"`
	ConnectedClients int    `json:"connected_clients"`
	UptimeSeconds    int64  `json:"uptime_seconds"`
}

// health fetches /aperio/health.
func health(t testing.TB, c *http.Client, s *testServer) healthReport {
	t.Helper()
	status, body := get(t, c, s, "aperio.internal", "/aperio/health")
	if status != http.StatusOK {
		t.Fatalf("GET /aperio/health = %d %q, want 200", status, body)
	}
	var h healthReport
	if err := json.Unmarshal([]byte(body), &h); err != nil {
		t.Fatalf("GET /aperio/health body %q: %v", body, err)
	}
	return h
}

// waitClients polls /aperio/health until exactly n clients are connected.
func waitClients(t testing.TB, c *http.Client, s *testServer, n int) {
	t.Helper()
	poll(t, waitFor, func() (bool, string) {
		got := health(t, c, s).ConnectedClients
		return got == n, fmt.Sprintf("/aperio/health connected_clients = %d, want %d", got, n)
	})
}

// poll calls cond every 20 ms until it reports true or timeout passes, and
// then fails the test with cond's last description.
func poll(t testing.TB, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, desc := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", timeout, desc)
		}
		<-tick.C
	}
}

// wait receives from ch or fails the test after timeout.
func wait[T any](t testing.TB, ch <-chan T, timeout time.Duration, what string) T {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("%s: nothing within %v", what, timeout)
		panic("unreachable")
	}
}

// writeCert writes a self-signed certificate for 127.0.0.1, localhost and
// appHost into a temporary directory and returns the file names and a pool
// trusting it.
func writeCert(t testing.TB) (certFile, keyFile string, roots *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("ecdsa.GenerateKey() = %v", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "aperio e2e"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost", appHost},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("x509.CreateCertificate() = %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("x509.ParseCertificate() = %v", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("x509.MarshalPKCS8PrivateKey() = %v", err)
	}
	dir := t.TempDir()
	certFile = filepath.Join(dir, "cert.pem")
	keyFile = filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	roots = x509.NewCertPool()
	roots.AddCert(cert)
	return certFile, keyFile, roots
}
