package servertest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/server"
	"github.com/aperio-dev/aperio/internal/testkit/testcert"
	"github.com/aperio-dev/aperio/store/storetest"
)

// Config returns a server configuration for tests: the contract's
// defaults, the master token Token, a port the kernel picks, and a store
// copied from one migrated once per test process.
func Config(t testing.TB) server.Config {
	t.Helper()
	cfg := server.DefaultConfig()
	cfg.Token = Token
	cfg.Host = "127.0.0.1"
	cfg.Port = 0
	cfg.Store.DataDir = storetest.MigratedDataDir(t)
	return cfg
}

// Server is a running gateway.
type Server struct {
	// Gateway is the server itself.
	Gateway *server.Gateway
	// Addr is the listener's host:port.
	Addr string
	// URL is http:// or https:// and Addr.
	URL string
	// Roots trusts the server's certificate; nil for plain HTTP.
	Roots *x509.CertPool

	stop func() error // set by StartWith
}

// Start serves cfg on ln, or on a fresh 127.0.0.1:0 listener when ln is
// nil, until the test ends. roots is the pool trusting cfg's certificate
// when TLS is on.
func Start(t testing.TB, cfg server.Config, ln net.Listener, roots *x509.CertPool) *Server {
	t.Helper()
	return StartWith(t, cfg, ln, roots, server.Options{Logger: Logger()})
}

// StartWith is Start with the gateway's options given.
func StartWith(t testing.TB, cfg server.Config, ln net.Listener, roots *x509.CertPool, opts server.Options) *Server {
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
	s := &Server{Gateway: gw, Addr: ln.Addr().String(), URL: scheme + ln.Addr().String(), Roots: roots}
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

// Stop cancels Serve and returns its result, waiting for it up to the
// server's shutdown_timeout and 20 s more. It is idempotent; the test's
// cleanup calls it too. Only a Server that Start or StartWith returned has
// a Stop; it panics on one a test assembled itself.
func (s *Server) Stop() error {
	if s.stop == nil {
		panic("servertest: Stop of a Server that Start did not return")
	}
	return s.stop()
}

// TLSClientConfig returns a client configuration trusting s, or nil for a
// plain server.
func (s *Server) TLSClientConfig() *tls.Config {
	if s.Roots == nil {
		return nil
	}
	return &tls.Config{RootCAs: s.Roots}
}

// WriteCert writes a certificate for 127.0.0.1, localhost and AppHost,
// signed by a CA of the test's own (internal/testkit/testcert), into a
// temporary directory and returns the file names and a pool trusting the
// CA.
func WriteCert(t testing.TB) (certFile, keyFile string, roots *x509.CertPool) {
	t.Helper()
	ca := testcert.NewCA(t, "aperio e2e CA")
	leaf := ca.Issue(t, testcert.Leaf{CommonName: "aperio e2e", DNSNames: []string{"localhost", AppHost},
		IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Usage: x509.ExtKeyUsageServerAuth})
	dir := t.TempDir()
	certFile = filepath.Join(dir, "cert.pem")
	keyFile = filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, leaf.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, leaf.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, ca.Pool()
}
