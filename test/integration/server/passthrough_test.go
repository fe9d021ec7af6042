package server_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"github.com/aperio-dev/aperio/internal/server/servertest"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/passhash"
	"github.com/aperio-dev/aperio/internal/testkit/testcert"
	"github.com/aperio-dev/aperio/tunnel"
)

const passHost = "secure.test"

// tlsBackend serves HTTPS with a certificate of its own CA for passHost,
// answering "backend: <SNI>" so a test sees whose TLS it reached.
func tlsBackend(t *testing.T) (addr string, roots *x509.CertPool) {
	t.Helper()
	ca := testcert.NewCA(t, "backend ca")
	leaf := ca.Issue(t, testcert.Leaf{CommonName: passHost, DNSNames: []string{passHost}, Usage: x509.ExtKeyUsageServerAuth})
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{leaf.Pair(t)}, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "backend: "+r.TLS.ServerName)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), ca.Pool()
}

// rawDialer is a client's RawForwarder for TLS passthrough: the service
// "0" dials addr as plain TCP; it counts the streams it took.
type rawDialer struct {
	addr  string
	taken atomic.Int64
}

func (d *rawDialer) ForwardRaw(ctx context.Context, h tunnel.RawHeader) (io.ReadWriteCloser, error) {
	if h.Kind != tunnel.RawTLS || h.Name != "0" {
		return nil, errors.New("unexpected raw stream")
	}
	d.taken.Add(1)
	var nd net.Dialer
	return nd.DialContext(ctx, "tcp", d.addr)
}

// startPassthroughClient connects a tunnel client whose service "0"
// binds passHost with tls_passthrough (and access as given).
func startPassthroughClient(t *testing.T, s *servertest.Server, fwd tunnel.RawForwarder, acc *tunnel.Access) {
	t.Helper()
	startPassthroughService(t, s, fwd, tunnel.Service{ID: "0", Hostnames: []string{passHost}, Healthy: true, TLSPassthrough: true, Access: acc})
}

// startPassthroughService connects a tunnel client announcing svc, its
// raw streams to fwd, its HTTP requests to fwd too when it is a
// tunnel.Forwarder (else they fail).
func startPassthroughService(t *testing.T, s *servertest.Server, fwd tunnel.RawForwarder, svc tunnel.Service) {
	t.Helper()
	var hf tunnel.Forwarder = servertest.NopForwarder{}
	if f, ok := fwd.(tunnel.Forwarder); ok {
		hf = f
	}
	connected := make(chan struct{}, 1)
	c, err := tunnel.NewClient(tunnel.ClientConfig{
		URL: s.URL, Token: servertest.Token, Forwarder: hf, RawForwarder: fwd,
		TLSConfig: s.TLSClientConfig(),
		Announce: func() tunnel.Announcement {
			return tunnel.Announcement{Name: "pass", InstanceID: "i-pass", Services: []tunnel.Service{svc}}
		},
		Logger: servertest.Logger(),
		Jitter: func() float64 { return 0 },
		OnConnect: func(string) {
			select {
			case connected <- struct{}{}:
			default:
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	servertest.Wait(t, connected, 10*time.Second, "the passthrough client to connect")
}

// httpsGet makes one HTTP/1.1 request over TLS to the gateway with sni,
// trusting roots, and returns the body.
func httpsGet(t *testing.T, s *servertest.Server, sni string, roots *x509.CertPool) (string, error) {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", s.Addr, &tls.Config{ServerName: sni, RootCAs: roots, NextProtos: []string{"http/1.1"}})
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(conn, "GET / HTTP/1.1\r\nHost: "+sni+"\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func tlsServerConfig(t *testing.T) (cfgFn func() (string, string), roots *x509.CertPool) {
	t.Helper()
	certFile, keyFile, roots := servertest.WriteCert(t)
	return func() (string, string) { return certFile, keyFile }, roots
}

// TestTLSPassthroughBySNI: on the TLS port, a hostname whose service takes
// passthrough reaches its backend's own certificate through the tunnel,
// while another hostname on the same port is terminated by the server.
func TestTLSPassthroughBySNI(t *testing.T) {
	t.Parallel()
	backendAddr, backendRoots := tlsBackend(t)
	cfg := servertest.Config(t)
	files, serverRoots := tlsServerConfig(t)
	cfg.TLSCert, cfg.TLSKey = files()
	s := servertest.Start(t, cfg, nil, serverRoots)
	fwd := &rawDialer{addr: backendAddr}
	startPassthroughClient(t, s, fwd, &tunnel.Access{Public: true})

	// The backend's certificate, which the server never held, verifies
	// against the backend's CA: the TLS went through untouched.
	body, err := httpsGet(t, s, passHost, backendRoots)
	if err != nil {
		t.Fatalf("passthrough request: %v", err)
	}
	if body != "backend: "+passHost {
		t.Fatalf("body %q, want the backend's answer", body)
	}
	// The server's own certificate would not verify for the backend's CA.
	if _, err := httpsGet(t, s, passHost, serverRoots); err == nil {
		t.Fatal("the passthrough hostname verified against the server's own CA")
	}
	// Another hostname on the same port is the server's TLS.
	conn, err := tls.Dial("tcp", s.Addr, &tls.Config{ServerName: servertest.AppHost, RootCAs: serverRoots})
	if err != nil {
		t.Fatalf("terminated handshake for %s: %v", servertest.AppHost, err)
	}
	conn.Close()
	if n := fwd.taken.Load(); n != 2 {
		t.Fatalf("client took %d raw streams, want 2 (one per passthrough handshake)", n)
	}
}

// TestTLSPassthroughRefusals: a passthrough service closed by
// default_access deny, or refusing the visitor's address, gets no stream;
// the connection is closed without a handshake.
func TestTLSPassthroughRefusals(t *testing.T) {
	t.Parallel()
	backendAddr, _ := tlsBackend(t)
	hash, err := passhash.Hash("pw")
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		acc  *tunnel.Access
		deny bool
	}{
		"default_access deny": {acc: nil, deny: true},
		"denied_ips":          {acc: &tunnel.Access{Public: true, DeniedIPs: []string{"127.0.0.0/8"}}},
		"needs a login":       {acc: &tunnel.Access{Auth: tunnel.Auth{Basic: &tunnel.BasicAuth{Users: map[string]string{"u": hash}}}}},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := servertest.Config(t)
			files, serverRoots := tlsServerConfig(t)
			cfg.TLSCert, cfg.TLSKey = files()
			if tc.deny {
				cfg.DefaultAccess = "deny"
			}
			s := servertest.Start(t, cfg, nil, serverRoots)
			fwd := &rawDialer{addr: backendAddr}
			startPassthroughClient(t, s, fwd, tc.acc)
			// The bind is in the route table once the client saw its
			// welcome. A refused passthrough closes the connection before
			// any handshake: neither the backend's nor the server's TLS.
			if err := handshake(s, passHost); err == nil {
				t.Fatal("refused visitor completed a TLS handshake")
			}
			// The same server terminates other hostnames as usual.
			if err := handshake(s, servertest.AppHost); err != nil {
				t.Fatalf("handshake for %s: %v", servertest.AppHost, err)
			}
			if n := fwd.taken.Load(); n != 0 {
				t.Fatalf("client took %d raw streams, want 0", n)
			}
		})
	}
}

// handshake reports whether a TLS handshake for sni with the gateway
// completes, whoever's certificate it shows.
func handshake(s *servertest.Server, sni string) error {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", s.Addr, &tls.Config{ServerName: sni, InsecureSkipVerify: true})
	if err == nil {
		conn.Close()
	}
	return err
}

// TestTLSPassthroughHoldsPermits: each passed-through connection holds one
// of the service's max_concurrent permits while it lasts.
func TestTLSPassthroughHoldsPermits(t *testing.T) {
	t.Parallel()
	backendAddr, backendRoots := tlsBackend(t)
	cfg := servertest.Config(t)
	files, serverRoots := tlsServerConfig(t)
	cfg.TLSCert, cfg.TLSKey = files()
	s := servertest.Start(t, cfg, nil, serverRoots)
	fwd := &rawDialer{addr: backendAddr}
	startPassthroughService(t, s, fwd, tunnel.Service{ID: "0", Hostnames: []string{passHost}, Healthy: true, TLSPassthrough: true, MaxConcurrent: 1, Access: &tunnel.Access{Public: true}})
	held, err := tls.Dial("tcp", s.Addr, &tls.Config{ServerName: passHost, RootCAs: backendRoots})
	if err != nil {
		t.Fatalf("first connection: %v", err)
	}
	if err := handshake(s, passHost); err == nil {
		t.Fatal("a second connection got through while the only permit was held")
	}
	held.Close()
	// The permit returns when the relay ends, a moment after the close.
	servertest.Poll(t, 10*time.Second, func() (bool, string) {
		_, err := httpsGet(t, s, passHost, backendRoots)
		return err == nil, "a connection after the first one closed"
	})
}

// httpCountingDialer is a rawDialer that also counts the HTTP requests
// its client is given, answering each 200.
type httpCountingDialer struct {
	rawDialer
	http atomic.Int64
}

func (d *httpCountingDialer) Forward(_ context.Context, _ string, req *http.Request) (*http.Response, error) {
	d.http.Add(1)
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}

// TestTLSPassthroughNoHTTP: an HTTP request whose Host names a hostname
// bound only by passthrough services, on a TLS connection the server
// terminated (another SNI, or none) over HTTP/1.1 or HTTP/2, or over
// plain HTTP, is answered 421 and never reaches the client, which would
// send it as plaintext to the backend's TLS port (#38 item 14, P4-5).
func TestTLSPassthroughNoHTTP(t *testing.T) {
	t.Parallel()
	backendAddr, _ := tlsBackend(t)
	cfg := servertest.Config(t)
	files, serverRoots := tlsServerConfig(t)
	cfg.TLSCert, cfg.TLSKey = files()
	s := servertest.Start(t, cfg, nil, serverRoots)
	fwd := &httpCountingDialer{rawDialer: rawDialer{addr: backendAddr}}
	startPassthroughClient(t, s, fwd, &tunnel.Access{Public: true})
	for _, tc := range []struct {
		name, sni string
		h2        bool
	}{
		{"h1 another SNI", servertest.AppHost, false},
		{"h1 no SNI", "", false},
		{"h2 another SNI", servertest.AppHost, true},
		{"h2 no SNI", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tlsCfg := &tls.Config{ServerName: tc.sni, RootCAs: serverRoots, InsecureSkipVerify: tc.sni == ""}
			p := new(http.Protocols)
			if tc.h2 {
				p.SetHTTP2(true)
			} else {
				p.SetHTTP1(true)
			}
			tr := &http.Transport{TLSClientConfig: tlsCfg, Protocols: p}
			t.Cleanup(tr.CloseIdleConnections)
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+s.Addr+"/", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = passHost
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusMisdirectedRequest || resp.ProtoMajor != map[bool]int{false: 1, true: 2}[tc.h2] {
				t.Errorf("GET Host %s over %s = %d, want 421", passHost, resp.Proto, resp.StatusCode)
			}
		})
	}
	if n := fwd.http.Load(); n != 0 {
		t.Errorf("the passthrough client was given %d HTTP requests, want none", n)
	}
}
