package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/cmd/aperio-server/serverconfig"
	"github.com/aperio-dev/aperio/internal/server"
)

func TestReadyzURL(t *testing.T) {
	tests := []struct {
		host string
		tls  bool
		want string
	}{
		{"", false, "http://127.0.0.1:8080/aperio/readyz"},
		{"0.0.0.0", false, "http://127.0.0.1:8080/aperio/readyz"},
		{"::", false, "http://[::1]:8080/aperio/readyz"},
		{"0.0.0.0", true, "https://127.0.0.1:8080/aperio/readyz"},
		{"10.1.2.3", false, "http://10.1.2.3:8080/aperio/readyz"},
		{"fd00::7", true, "https://[fd00::7]:8080/aperio/readyz"},
		{"localhost", false, "http://localhost:8080/aperio/readyz"},
	}
	for _, tt := range tests {
		cfg := serverconfig.Default()
		cfg.Host, cfg.Port = tt.host, 8080
		if tt.tls {
			cfg.TLSCert, cfg.TLSKey = "c.pem", "k.pem"
		}
		if got := readyzURL(cfg); got != tt.want {
			t.Errorf("readyzURL(host %q, tls %v) = %q, want %q", tt.host, tt.tls, got, tt.want)
		}
	}
}

// liveGateway is a real server serving on 127.0.0.1.
type liveGateway struct {
	gw   *server.Gateway
	port int
	stop func() // begins the shutdown and returns once Serve has
}

func startGateway(t *testing.T, certFile, keyFile string) *liveGateway {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("net.Listen(tcp, 127.0.0.1:0) = %v", err)
	}
	cfg := serverconfig.Default()
	cfg.Token, cfg.Store.DataDir = "token-0123456789abcdef", t.TempDir()
	cfg.TLSCert, cfg.TLSKey = certFile, keyFile
	gw, err := server.New(t.Context(), cfg.Config, server.Options{})
	if err != nil {
		ln.Close()
		t.Fatalf("gateway.New() = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- gw.Serve(ctx, ln) }()
	var stopped bool
	lg := &liveGateway{gw: gw, port: ln.Addr().(*net.TCPAddr).Port}
	lg.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve() = %v, want nil after a clean shutdown", err)
		}
	}
	t.Cleanup(lg.stop)
	return lg
}

// writeSelfSigned writes a throwaway self-signed certificate and its key:
// the check must answer 0 without being able to verify either.
func writeSelfSigned(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"tunnel.example.com"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// closedPort returns a loopback port nothing listens on any more.
func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return port
}

// drainingGateway is a real server after its shutdown began, as a request
// in flight then sees it: readyz answers 503. Serve closes its listener
// first, so readyz is asked of the same Gateway through a second listener.
func drainingGateway(t *testing.T) int {
	t.Helper()
	lg := startGateway(t, "", "")
	lg.stop()
	srv := httptest.NewServer(lg.gw.Handler())
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().(*net.TCPAddr).Port
}

func TestHealthcheck(t *testing.T) {
	certFile, keyFile := writeSelfSigned(t)
	tests := []struct {
		name     string
		setup    func(t *testing.T) map[string]string // the server's environment
		code     int
		stderrIn []string
	}{
		{"ready", func(t *testing.T) map[string]string {
			return map[string]string{"APERIO_PORT": strconv.Itoa(startGateway(t, "", "").port)}
		}, 0, nil},
		{"ready over TLS, certificate not verified", func(t *testing.T) map[string]string {
			return map[string]string{
				"APERIO_PORT":     strconv.Itoa(startGateway(t, certFile, keyFile).port),
				"APERIO_TLS_CERT": certFile, "APERIO_TLS_KEY": keyFile,
			}
		}, 0, nil},
		{"TLS server asked over plain HTTP", func(t *testing.T) map[string]string {
			// tls_cert unset in the checker's config: it must not pass.
			return map[string]string{"APERIO_PORT": strconv.Itoa(startGateway(t, certFile, keyFile).port)}
		}, 1, []string{"http://127.0.0.1:", "answered 400"}},
		{"shutting down", func(t *testing.T) map[string]string {
			return map[string]string{"APERIO_PORT": strconv.Itoa(drainingGateway(t))}
		}, 1, []string{"http://127.0.0.1:", "/aperio/readyz", "answered 503 Service Unavailable"}},
		{"nothing listening", func(t *testing.T) map[string]string {
			return map[string]string{"APERIO_PORT": strconv.Itoa(closedPort(t))}
		}, 1, []string{"healthcheck http://127.0.0.1:", "/aperio/readyz", "connection refused"}},
		{"bad config", func(t *testing.T) map[string]string {
			return map[string]string{"APERIO_PORT": "eighty"}
		}, 2, []string{"APERIO_PORT"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := tt.setup(t)
			env["APERIO_SERVER_TOKEN"] = "token-0123456789abcdef"
			for _, k := range []string{"APERIO_HOST", "HOST", "APERIO_TLS_CERT", "APERIO_TLS_KEY"} {
				if _, set := env[k]; !set {
					env[k] = "" // unset: host 0.0.0.0 is checked on loopback
				}
			}
			code, stdout, stderr := runServer(t, env, "--healthcheck")
			if code != tt.code || stdout != "" {
				t.Fatalf("aperio-server --healthcheck = exit %d, stdout %q, stderr %q; want exit %d, no stdout", code, stdout, stderr, tt.code)
			}
			if tt.code == 0 && stderr != "" {
				t.Errorf("aperio-server --healthcheck stderr = %q, want nothing", stderr)
			}
			if tt.code == 1 && strings.Count(stderr, "\n") != 1 {
				t.Errorf("aperio-server --healthcheck stderr = %q, want one line", stderr)
			}
			for _, want := range tt.stderrIn {
				if !strings.Contains(stderr, want) {
					t.Errorf("aperio-server --healthcheck stderr = %q, want it to contain %q", stderr, want)
				}
			}
		})
	}
}

// TestHealthcheckConfigFile: --config is honoured, as at a start; the
// file's port wins over the environment's.
func TestHealthcheckConfigFile(t *testing.T) {
	lg := startGateway(t, "", "")
	file := filepath.Join(t.TempDir(), "server.yaml")
	if err := os.WriteFile(file, []byte("port: "+strconv.Itoa(lg.port)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"APERIO_SERVER_TOKEN": "token-0123456789abcdef", "APERIO_HOST": "", "HOST": "", "APERIO_PORT": strconv.Itoa(closedPort(t))}
	if code, _, stderr := runServer(t, env, "--healthcheck", "--config", file); code != 0 {
		t.Fatalf("aperio-server --healthcheck --config (port %d) = exit %d, stderr %q; want 0", lg.port, code, stderr)
	}
	lg.stop()
	code, _, stderr := runServer(t, env, "--healthcheck", "--config", file)
	if code != 1 || !strings.Contains(stderr, ":"+strconv.Itoa(lg.port)+"/aperio/readyz") {
		t.Fatalf("aperio-server --healthcheck --config after stop = exit %d, stderr %q; want 1 naming port %d", code, stderr, lg.port)
	}
}
