package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/testkit/blackhole"
	"github.com/aperio-dev/aperio/internal/testkit/testcert"
)

// seenRequest is what a recording backend saw of one request.
type seenRequest struct {
	host, uri, prefix string
	prefixes          []string
	peerCN            string
}

// recordingBackend returns a handler that sends what it saw on the
// returned channel and answers "ok".
func recordingBackend() (http.HandlerFunc, chan seenRequest) {
	seen := make(chan seenRequest, 16)
	return func(w http.ResponseWriter, r *http.Request) {
		s := seenRequest{host: r.Host, uri: r.RequestURI, prefix: r.Header.Get("X-Forwarded-Prefix"), prefixes: r.Header.Values("X-Forwarded-Prefix")}
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			s.peerCN = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		seen <- s
		io.WriteString(w, "ok")
	}, seen
}

// forwardGet forwards a GET of target (a URL or an origin-form path on
// app.test) to service 0 and returns the status and body.
func forwardGet(t *testing.T, a *Agent, target string, hdr http.Header) (int, string, error) {
	t.Helper()
	req := httptest.NewRequest("GET", target, nil)
	if !strings.HasPrefix(target, "http") {
		req.Host = "app.test"
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := a.Forward(t.Context(), "0", req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestForwardTrimBind: with trim_bind the backend sees the path without
// the bind's prefix, at a segment boundary, and the prefix in
// X-Forwarded-Prefix (a visitor's own is dropped); an encoded slash does
// not end the prefix; a dot segment is answered 400 without reaching the
// backend; without trim_bind the path goes whole.
func TestForwardTrimBind(t *testing.T) {
	h, seen := recordingBackend()
	backend := httptest.NewServer(h)
	t.Cleanup(backend.Close)

	tests := []struct {
		name, target, in  string
		trim              bool
		wantURI, wantPref string
		wantStatus        int
	}{
		{name: "prefix and rest", target: backend.URL, in: "/api/x?q=1", trim: true, wantURI: "/x?q=1", wantPref: "/api"},
		{name: "prefix alone", target: backend.URL, in: "/api", trim: true, wantURI: "/", wantPref: "/api"},
		{name: "not at a boundary", target: backend.URL, in: "/apix", trim: true, wantURI: "/apix"},
		{name: "encoded slash", target: backend.URL, in: "/api%2Fx", trim: true, wantURI: "/api%2Fx"},
		{name: "under the target's path", target: backend.URL + "/base/", in: "/api/a%2Fb", trim: true, wantURI: "/base/a%2Fb", wantPref: "/api"},
		{name: "trim off", target: backend.URL, in: "/api/x", trim: false, wantURI: "/api/x"},
		{name: "guard/traversal/dot segment", target: backend.URL, in: "/api/%2e%2e/admin", trim: true, wantStatus: http.StatusBadRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := clientConfig(tc.target)
			cfg.Services[0].Path = "/api"
			cfg.Services[0].TrimBind = tc.trim
			a := newAgent(t, cfg)
			code, body, err := forwardGet(t, a, tc.in, http.Header{"X-Forwarded-Prefix": {"/visitor"}})
			if err != nil {
				t.Fatalf("Forward(%s) error = %v", tc.in, err)
			}
			if tc.wantStatus != 0 {
				if code != tc.wantStatus {
					t.Errorf("Forward(%s) = %d %q, want %d", tc.in, code, body, tc.wantStatus)
				}
				select {
				case s := <-seen:
					t.Errorf("backend saw %q, want nothing", s.uri)
				default:
				}
				return
			}
			s := <-seen
			if code != 200 || s.uri != tc.wantURI || s.prefix != tc.wantPref || len(s.prefixes) > 1 {
				t.Errorf("Forward(%s): backend saw %q with X-Forwarded-Prefix %q; want %q, %q", tc.in, s.uri, s.prefixes, tc.wantURI, tc.wantPref)
			}
		})
	}
}

// TestForwardHostChoice: the backend gets the visitor's Host by default,
// its own with pass_hostname false, and host_header whatever the rest.
func TestForwardHostChoice(t *testing.T) {
	h, seen := recordingBackend()
	backend := httptest.NewServer(h)
	t.Cleanup(backend.Close)
	own := strings.TrimPrefix(backend.URL, "http://")
	tests := []struct {
		name    string
		rewrite bool
		header  string
		want    string
	}{
		{"visitor's Host by default", false, "", "app.test"},
		{"pass_hostname false", true, "", own},
		{"host_header", false, "bucket.s3.internal", "bucket.s3.internal"},
		{"host_header wins over pass_hostname false", true, "vhost.internal:8080", "vhost.internal:8080"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := clientConfig(backend.URL)
			cfg.Services[0].RewriteHost = tc.rewrite
			cfg.Services[0].HostHeader = tc.header
			a := newAgent(t, cfg)
			if _, _, err := forwardGet(t, a, "/", nil); err != nil {
				t.Fatal(err)
			}
			if s := <-seen; s.host != tc.want {
				t.Errorf("backend saw Host %q, want %q", s.host, tc.want)
			}
		})
	}
}

// TestForwardUnixTarget: a unix:// target is HTTP over the socket: the
// request's path is not prefixed with the socket's, and the probe goes
// over the socket too.
func TestForwardUnixTarget(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "app.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	h, seen := recordingBackend()
	backend := httptest.NewUnstartedServer(h)
	backend.Listener = ln
	backend.Start()
	t.Cleanup(backend.Close)

	cfg := clientConfig("unix://" + sock)
	cfg.Services[0].Health = config.Health{Endpoint: "/healthz", Timeout: 5 * time.Second}
	a := newAgent(t, cfg)
	code, body, err := forwardGet(t, a, "/x?y=1", nil)
	if err != nil || code != 200 || body != "ok" {
		t.Fatalf("Forward over the unix socket = %d %q, %v; want 200 ok", code, body, err)
	}
	if s := <-seen; s.uri != "/x?y=1" || s.host != "app.test" {
		t.Errorf("backend saw %q with Host %q, want /x?y=1 with app.test", s.uri, s.host)
	}
	ok, detail := newProber(a.services()[0]).probe(t.Context(), 5*time.Second)
	if s := <-seen; !ok || s.uri != "/healthz" {
		t.Errorf("probe over the unix socket = %v (%s), backend saw %q; want pass on /healthz", ok, detail, s.uri)
	}
}

// writeFile writes data to name in dir and returns its path.
func writeFile(tb testing.TB, dir, name string, data []byte) string {
	tb.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		tb.Fatal(err)
	}
	return p
}

// TestForwardTLSBackend: an https target with a certificate of its own
// CA is reached with tls_ca_file and tls_server_name, refused without,
// reached with tls_insecure_skip_verify; a backend that requires a client
// certificate gets tls_client_cert and refuses a client without one.
func TestForwardTLSBackend(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewCA(t, "test CA")
	srvCert := ca.Issue(t, testcert.Leaf{CommonName: "backend.internal", DNSNames: []string{"backend.internal"}, Usage: x509.ExtKeyUsageServerAuth})
	cliCert := ca.Issue(t, testcert.Leaf{CommonName: "aperio-client", Usage: x509.ExtKeyUsageClientAuth})
	caFile := writeFile(t, dir, "ca.pem", ca.CertPEM)
	certFile, keyFile := writeFile(t, dir, "client.pem", cliCert.CertPEM), writeFile(t, dir, "client.key", cliCert.KeyPEM)
	pair := srvCert.Pair(t)
	start := func(clientAuth tls.ClientAuthType) (*httptest.Server, chan seenRequest) {
		h, seen := recordingBackend()
		srv := httptest.NewUnstartedServer(h)
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: clientAuth, ClientCAs: ca.Pool()}
		srv.StartTLS()
		t.Cleanup(srv.Close)
		return srv, seen
	}
	plain, _ := start(tls.NoClientCert)
	mtls, mtlsSeen := start(tls.RequireAndVerifyClientCert)

	tests := []struct {
		name    string
		backend *httptest.Server
		edit    func(*config.Service)
		ok      bool
	}{
		{"own CA and server name", plain, func(s *config.Service) { s.TLSCAFile, s.TLSServerName = caFile, "backend.internal" }, true},
		{"guard/tls/unknown CA refused", plain, func(s *config.Service) { s.TLSServerName = "backend.internal" }, false},
		{"guard/tls/wrong server name refused", plain, func(s *config.Service) { s.TLSCAFile, s.TLSServerName = caFile, "other.internal" }, false},
		{"insecure skip verify", plain, func(s *config.Service) { s.TLSInsecureSkipVerify = true }, true},
		{"guard/mtls/no client certificate refused", mtls, func(s *config.Service) { s.TLSCAFile, s.TLSServerName = caFile, "backend.internal" }, false},
		{"client certificate", mtls, func(s *config.Service) {
			s.TLSCAFile, s.TLSServerName, s.TLSClientCert, s.TLSClientKey = caFile, "backend.internal", certFile, keyFile
		}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := clientConfig(tc.backend.URL)
			tc.edit(&cfg.Services[0])
			a := newAgent(t, cfg)
			code, _, err := forwardGet(t, a, "/", nil)
			if got := err == nil && code == 200; got != tc.ok {
				t.Fatalf("Forward to the TLS backend = %d, %v; want success %v", code, err, tc.ok)
			}
		})
	}
	select {
	case s := <-mtlsSeen:
		if s.peerCN != "aperio-client" {
			t.Errorf("mTLS backend saw client certificate %q, want aperio-client", s.peerCN)
		}
	default:
		t.Error("the mTLS backend saw no request")
	}

	cfg := clientConfig(plain.URL)
	cfg.Services[0].TLSCAFile = writeFile(t, dir, "garbage.pem", []byte("not PEM"))
	if _, err := New(cfg, Options{}); err == nil {
		t.Error("New(tls_ca_file of garbage) succeeded, want an error")
	}
}

// TestForwardTimeout: a backend that does not start its answer within
// timeout fails the request then, not when the visitor gives up.
func TestForwardTimeout(t *testing.T) {
	release := make(chan struct{})
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(backend.Close)
	t.Cleanup(func() { close(release) })
	cfg := clientConfig(backend.URL)
	cfg.Services[0].Timeout = 100 * time.Millisecond
	a := newAgent(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req := httptest.NewRequest("GET", "/", nil).WithContext(ctx)
	resp, err := a.Forward(ctx, "0", req)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("Forward to a silent backend = %d, want a timeout error", resp.StatusCode)
	}
	if ctx.Err() != nil {
		t.Fatalf("Forward failed only at the test's deadline (%v): timeout did not bound the wait", err)
	}
}

// TestForwardConnectTimeout: dialing a backend that never completes the
// TCP handshake ends at connect_timeout, as a connect error, not at the
// 10 s default; the GET is tried again per retry, each try bounded alike.
func TestForwardConnectTimeout(t *testing.T) {
	addr := blackhole.Addr(t)
	tests := []struct {
		name     string
		connect  time.Duration
		retry    config.Retry
		min, max time.Duration // the bounds of Forward's duration
	}{
		{name: "one try", connect: 150 * time.Millisecond, min: 150 * time.Millisecond, max: 3 * time.Second},
		{name: "each retry bounded", connect: 150 * time.Millisecond, retry: config.Retry{Attempts: 3, Backoff: 50 * time.Millisecond},
			min: 3*150*time.Millisecond + 2*50*time.Millisecond, max: 4 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := clientConfig("http://" + addr)
			cfg.Services[0].ConnectTimeout = tc.connect
			cfg.Services[0].Retry = tc.retry
			a := newAgent(t, cfg)
			// The test's own bound is above the default: a dial that
			// ignored connect_timeout would run into it.
			ctx, cancel := context.WithTimeout(t.Context(), config.DefaultConnectTimeout+5*time.Second)
			defer cancel()
			start := time.Now()
			resp, err := a.Forward(ctx, "0", httptest.NewRequest("GET", "/", nil).WithContext(ctx))
			took := time.Since(start)
			if err == nil {
				resp.Body.Close()
				t.Fatalf("Forward to a backend that never accepts = %d, want a dial timeout", resp.StatusCode)
			}
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() || !connectError(err) {
				t.Errorf("Forward() = %v, want a dial timeout (a connect error)", err)
			}
			if took < tc.min || took > tc.max {
				t.Errorf("Forward() took %v, want within [%v, %v] (connect_timeout %v, retry %+v)", took, tc.min, tc.max, tc.connect, tc.retry)
			}
		})
	}
}

// scriptedDialer is a transport whose first fails requests fail as a
// refused dial; it records the requests and how much body each read.
type scriptedDialer struct {
	mu       sync.Mutex // guards the following fields
	fails    int
	readBody bool // read the body before failing (a failure after sending)
	other    error
	tries    []time.Time
}

func (s *scriptedDialer) RoundTrip(req *http.Request) (*http.Response, error) {
	s.mu.Lock()
	s.tries = append(s.tries, time.Now())
	fail := s.fails > 0
	if fail {
		s.fails--
	}
	s.mu.Unlock()
	if req.Body != nil {
		defer req.Body.Close()
	}
	if fail {
		if s.readBody && req.Body != nil {
			if _, err := io.ReadAll(req.Body); err != nil {
				return nil, err
			}
		}
		if s.other != nil {
			return nil, s.other
		}
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	}
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}

func (s *scriptedDialer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.tries)
}

// TestForwardRetry: a request whose backend refused the connection is
// tried again, after the backoff, up to attempts in all; only idempotent
// methods unless all_methods; never once its body was read, nor after an
// error that is not a connect error.
func TestForwardRetry(t *testing.T) {
	tests := []struct {
		name       string
		method     string
		body       string
		retry      config.Retry
		fails      int
		readBody   bool
		other      error
		wantTries  int
		wantStatus int // 0: an error
	}{
		{name: "GET retried until it connects", method: "GET", retry: config.Retry{Attempts: 3, Backoff: time.Second}, fails: 2, wantTries: 3, wantStatus: 200},
		{name: "attempts bound the tries", method: "GET", retry: config.Retry{Attempts: 3, Backoff: time.Second}, fails: 5, wantTries: 3},
		{name: "no retry by default", method: "GET", fails: 1, wantTries: 1},
		{name: "POST not retried", method: "POST", body: "x", retry: config.Retry{Attempts: 3}, fails: 1, wantTries: 1},
		{name: "POST retried with all_methods", method: "POST", body: "x", retry: config.Retry{Attempts: 3, AllMethods: true}, fails: 1, wantTries: 2, wantStatus: 200},
		{name: "guard/replay/body already read", method: "PUT", body: "x", retry: config.Retry{Attempts: 3}, fails: 1, readBody: true, wantTries: 1},
		{name: "not after a non-connect error", method: "GET", retry: config.Retry{Attempts: 3}, fails: 1, other: io.ErrUnexpectedEOF, wantTries: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := clientConfig("http://backend.test")
				cfg.Services[0].Retry = tc.retry
				a := newAgent(t, cfg)
				tr := &scriptedDialer{fails: tc.fails, readBody: tc.readBody, other: tc.other}
				a.services()[0].transport = tr
				var body io.Reader
				if tc.body != "" {
					body = strings.NewReader(tc.body)
				}
				resp, err := a.Forward(t.Context(), "0", httptest.NewRequest(tc.method, "/", body))
				if err == nil {
					resp.Body.Close()
				}
				switch {
				case tc.wantStatus == 0 && err == nil:
					t.Errorf("Forward() = %d, want an error", resp.StatusCode)
				case tc.wantStatus != 0 && (err != nil || resp.StatusCode != tc.wantStatus):
					t.Errorf("Forward() = %v, want %d", err, tc.wantStatus)
				}
				if got := tr.count(); got != tc.wantTries {
					t.Fatalf("tries = %d, want %d", got, tc.wantTries)
				}
				for i := 1; i < len(tr.tries); i++ {
					if gap := tr.tries[i].Sub(tr.tries[i-1]); gap != tc.retry.Backoff {
						t.Errorf("gap before try %d = %v, want the backoff %v", i+1, gap, tc.retry.Backoff)
					}
				}
			})
		})
	}
}

// TestCircuitBreaker: failures consecutive failed exchanges open the
// breaker: the service is announced unhealthy at once, requests get an
// error without the backend being dialed; after open_for it is announced
// healthy and one trial goes through, whose failure opens it again and
// whose success closes it.
func TestCircuitBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := clientConfig("http://backend.test")
		cfg.Services[0].CircuitBreaker = config.CircuitBreaker{Failures: 3, OpenFor: 10 * time.Second}
		a := newAgent(t, cfg)
		tr := &scriptedDialer{fails: 4}
		a.services()[0].transport = tr
		try := func() error {
			resp, err := a.Forward(t.Context(), "0", httptest.NewRequest("GET", "/", nil))
			if err == nil {
				resp.Body.Close()
			}
			return err
		}
		healthy := func() bool { return a.announcement().Services[0].Healthy }

		for i := range 2 {
			if err := try(); err == nil {
				t.Fatalf("request %d to a refusing backend succeeded", i+1)
			}
		}
		if !healthy() || drainSignal(a.healthChange) {
			t.Fatal("announced unhealthy (or signalled) after 2 of 3 failures, want still healthy")
		}
		if err := try(); err == nil {
			t.Fatal("third request succeeded")
		}
		if healthy() || !drainSignal(a.healthChange) {
			t.Fatal("after 3 consecutive failures: announced healthy or no prompt announcement, want unhealthy at once")
		}
		if err := try(); !errors.Is(err, errBreakerOpen) || tr.count() != 3 {
			t.Fatalf("request while open = %v after %d dials, want errBreakerOpen and no dial", err, tr.count())
		}

		time.Sleep(10 * time.Second)
		synctest.Wait()
		if !healthy() || !drainSignal(a.healthChange) {
			t.Fatal("after open_for: announced unhealthy or no prompt announcement, want healthy (half-open)")
		}
		if err := try(); err == nil || tr.count() != 4 {
			t.Fatalf("trial = %v after %d dials, want the 4th dial to fail", err, tr.count())
		}
		if healthy() {
			t.Fatal("after a failed trial: announced healthy, want open again")
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if err := try(); err != nil {
			t.Fatalf("second trial = %v, want success", err)
		}
		if !healthy() {
			t.Fatal("after a successful trial: announced unhealthy, want closed")
		}
		if err := try(); err != nil || tr.count() != 6 {
			t.Fatalf("request after closing = %v after %d dials, want success on the 6th", err, tr.count())
		}
	})
}

// TestWaitForBackend: a wait_for_backend service is left out of the
// announcement while its probes fail, and announced, healthy, from its
// first passing probe on, with a prompt announcement; a service without
// it is announced unhealthy from the start.
func TestWaitForBackend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := clientConfig("http://backend.test")
		cfg.Services[0].Health = config.Health{Endpoint: "/up", Interval: 5 * time.Second, Timeout: time.Second, Threshold: 1}
		cfg.Services[0].WaitForBackend = true
		cfg.Services = append(cfg.Services, config.Service{Target: "http://other.test", Hostnames: []string{"other.test"}, Health: cfg.Services[0].Health})
		a := newAgent(t, cfg)
		svc := a.services()[0]
		svc.transport = &fakeBackend{statuses: []int{503, 503, 200}}
		a.services()[1].transport = &fakeBackend{statuses: []int{503}}
		ids := func() []string {
			var out []string
			for _, s := range a.announcement().Services {
				out = append(out, s.ID)
			}
			return out
		}
		if got := ids(); len(got) != 1 || got[0] != "1" {
			t.Fatalf("announced services before any probe = %q, want only 1", got)
		}
		startLoop(t, func(ctx context.Context) { a.probeLoop(ctx, svc) })
		synctest.Wait()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if got := ids(); len(got) != 1 {
			t.Fatalf("announced services after two failed probes = %q, want only 1", got)
		}
		drainSignal(a.healthChange)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		ann := a.announcement().Services
		if len(ann) != 2 || ann[0].ID != "0" || !ann[0].Healthy || !drainSignal(a.healthChange) {
			t.Fatalf("announcement after the first passing probe = %+v, want service 0 healthy, announced promptly", ann)
		}
	})
}

// TestProbeSuccess: by default only a 2xx passes a probe; with
// health.success 2xx-3xx a redirect does too; 4xx and 5xx never do.
func TestProbeSuccess(t *testing.T) {
	tests := []struct {
		success string
		status  int
		pass    bool
	}{
		{"", 204, true}, {"", 302, false}, {"", 404, false},
		{config.Success2xx, 200, true}, {config.Success2xx, 301, false},
		{config.Success2xx3xx, 302, true}, {config.Success2xx3xx, 404, false}, {config.Success2xx3xx, 500, false},
	}
	for _, tc := range tests {
		cfg := clientConfig("http://backend.test")
		cfg.Services[0].Health = config.Health{Endpoint: "/up", Success: tc.success}
		a := newAgent(t, cfg)
		a.services()[0].transport = &fakeBackend{statuses: []int{tc.status}}
		if ok, detail := newProber(a.services()[0]).probe(t.Context(), time.Second); ok != tc.pass {
			t.Errorf("probe(success %q, status %d) = %v (%s), want %v", tc.success, tc.status, ok, detail, tc.pass)
		}
	}
}

// TestGRPCProbe: a grpc probe of an h2c target passes while the gRPC
// health service says SERVING and fails once it says NOT_SERVING, or
// when the target speaks no gRPC.
func TestGRPCProbe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	hs := grpchealth.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	done := make(chan error, 1)
	go func() { done <- gs.Serve(ln) }()
	t.Cleanup(func() {
		gs.Stop()
		if err := <-done; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("grpc Serve: %v", err)
		}
	})
	cfg := clientConfig("h2c://" + ln.Addr().String())
	cfg.Services[0].Health = config.Health{Type: config.HealthGRPC}
	a := newAgent(t, cfg)
	pr := newProber(a.services()[0])
	if ok, detail := pr.probe(t.Context(), 5*time.Second); !ok {
		t.Fatalf("grpc probe of a SERVING server failed: %s", detail)
	}
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	if ok, detail := pr.probe(t.Context(), 5*time.Second); ok || !strings.Contains(detail, "not serving") {
		t.Fatalf("grpc probe of a NOT_SERVING server = %v (%s), want a failure saying not serving", ok, detail)
	}

	plain := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") }))
	plain.Config.Protocols = new(http.Protocols)
	plain.Config.Protocols.SetUnencryptedHTTP2(true)
	plain.Start()
	t.Cleanup(plain.Close)
	cfg = clientConfig("h2c://" + strings.TrimPrefix(plain.URL, "http://"))
	cfg.Services[0].Health = config.Health{Type: config.HealthGRPC}
	a = newAgent(t, cfg)
	if ok, _ := newProber(a.services()[0]).probe(t.Context(), 5*time.Second); ok {
		t.Fatal("grpc probe of a server without gRPC passed")
	}
}

// TestHealthStatusHostile: the hand-framed gRPC answer is decoded within
// its bounds whatever it holds.
func TestHealthStatusHostile(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want uint64
		ok   bool
	}{
		{"serving", []byte{0, 0, 0, 0, 2, 0x08, 0x01}, 1, true},
		{"empty message is UNKNOWN", []byte{0, 0, 0, 0, 0}, 0, true},
		{"unknown string field skipped", []byte{0, 0, 0, 0, 5, 0x12, 0x01, 'x', 0x08, 0x01}, 1, true},
		{"guard/malformed/short", []byte{0, 0, 0}, 0, false},
		{"guard/malformed/compressed", []byte{1, 0, 0, 0, 2, 0x08, 0x01}, 0, false},
		{"guard/malformed/length beyond body", []byte{0, 0xff, 0xff, 0xff, 0xff, 0x08}, 0, false},
		{"guard/malformed/field length beyond message", []byte{0, 0, 0, 0, 3, 0x12, 0x7f, 'x'}, 0, false},
		{"guard/malformed/truncated varint", []byte{0, 0, 0, 0, 2, 0x08, 0x80}, 0, false},
		{"guard/malformed/fixed64 field", []byte{0, 0, 0, 0, 1, 0x09}, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := healthStatus(tc.in)
			if (err == nil) != tc.ok || got != tc.want {
				t.Errorf("healthStatus(%x) = %d, %v; want %d (ok %v)", tc.in, got, err, tc.want, tc.ok)
			}
		})
	}
}
