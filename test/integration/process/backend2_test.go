package process_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"google.golang.org/grpc"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/aperio-dev/aperio/internal/testkit/testcert"
)

// TestProcessesBackendMore runs the real binaries through more of what a
// client does with its backend: an https target verified against a CA of
// its own with mTLS, wait_for_backend, a gRPC health probe, the server's
// retry_on_5xx, and priority tiers.
func TestProcessesBackendMore(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "backend2-master-token-0123456789abcdef")
	get := func(t *testing.T, base, host string) (int, string) {
		return getHost(t, f.http, base, host, "/")
	}

	t.Run("tls_upstream", func(t *testing.T) {
		dir := t.TempDir()
		serverCA := testcert.NewCA(t, "backend test CA")
		clientCA := testcert.NewCA(t, "client test CA")
		backendCert := serverCA.Issue(t, testcert.Leaf{CommonName: "backend.internal", DNSNames: []string{"backend.internal"},
			IPs: []net.IP{net.ParseIP("127.0.0.1")}, Usage: x509.ExtKeyUsageServerAuth})
		clientCert := clientCA.Issue(t, testcert.Leaf{CommonName: "aperio-client-mtls", Usage: x509.ExtKeyUsageClientAuth})
		writeFile(t, filepath.Join(dir, "ca.pem"), string(serverCA.CertPEM))
		writeFile(t, filepath.Join(dir, "client.pem"), string(clientCert.CertPEM))
		writeFile(t, filepath.Join(dir, "client.key"), string(clientCert.KeyPEM))

		b := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
				w.WriteHeader(http.StatusTeapot)
				io.WriteString(w, "no client certificate")
				return
			}
			io.WriteString(w, "cn="+r.TLS.PeerCertificates[0].Subject.CommonName+" sni="+r.TLS.ServerName)
		}))
		b.TLS = &tls.Config{
			Certificates: []tls.Certificate{backendCert.Pair(t)},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			// The backend admits client certificates of the second chain only.
			ClientCAs:  clientCA.Pool(),
			MinVersion: tls.VersionTLS12,
		}
		b.StartTLS()
		t.Cleanup(b.Close)
		target := b.URL

		base := f.startServer(t).url
		f.startClient(t, base, "mtls", fmt.Sprintf(`  - target: %s
    hostname: mtls.test
    tls_ca_file: %s
    tls_server_name: backend.internal
    tls_client_cert: %s
    tls_client_key: %s
`, target, filepath.Join(dir, "ca.pem"), filepath.Join(dir, "client.pem"), filepath.Join(dir, "client.key")))
		f.startClient(t, base, "nocert", fmt.Sprintf(`  - target: %s
    hostname: nocert.test
    tls_ca_file: %s
    tls_server_name: backend.internal
`, target, filepath.Join(dir, "ca.pem")))
		f.waitHealthy(t, base, map[string]string{"mtls": "mtls.test", "nocert": "nocert.test"})

		if code, body := get(t, base, "mtls.test"); code != http.StatusOK || body != "cn=aperio-client-mtls sni=backend.internal" {
			t.Errorf("GET mtls.test = %d %q, want 200 %q", code, body, "cn=aperio-client-mtls sni=backend.internal")
		}
		if code, body := get(t, base, "nocert.test"); code != http.StatusBadGateway {
			t.Errorf("GET nocert.test (no client certificate) = %d %q, want 502", code, body)
		}
	})

	t.Run("wait_for_backend", func(t *testing.T) {
		var ready atomic.Bool
		var probes atomic.Int32 // health probes answered 503
		gated := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/healthz" {
				if !ready.Load() {
					probes.Add(1)
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				io.WriteString(w, "ok")
				return
			}
			if !ready.Load() {
				t.Errorf("request %s reached the backend before its probe passed, want none", r.URL.Path)
			}
			io.WriteString(w, "gated")
		}))
		t.Cleanup(gated.Close)

		base := f.startServer(t).url
		// A second service, without a probe, keeps the session's
		// announcement non-empty while the gated one waits.
		f.startClient(t, base, "waiter", fmt.Sprintf(`  - target: %s
    hostname: ready.test
  - target: %s
    hostname: gated.test
    health: {endpoint: /healthz, interval: 100ms, threshold: 1}
    wait_for_backend: true
`, statusBackend(t, "ready", http.StatusOK), gated.URL))
		f.waitHealthy(t, base, map[string]string{"waiter": "ready.test"})
		waitFor(t, "the gated backend has answered 3 health probes 503", func() bool { return probes.Load() >= 3 })

		list := f.clients(t, base)
		for _, c := range list {
			for _, h := range c.Hostnames {
				if h == "gated.test" {
					t.Errorf("GET /aperio/api/clients while the probe fails lists %s on gated.test, want no service bound to it", c.Name)
				}
			}
		}
		if _, ok := clientEntry(list, "waiter", "ready.test"); !ok {
			t.Errorf("GET /aperio/api/clients = %+v, want waiter listed on ready.test", list)
		}
		if code, body := get(t, base, "gated.test"); code != http.StatusBadGateway {
			t.Errorf("GET gated.test while its probe fails = %d %q, want 502 (an unclaimed hostname)", code, body)
		}

		ready.Store(true)
		waitFor(t, "GET gated.test answers 200 gated", func() bool {
			code, body := get(t, base, "gated.test")
			return code == http.StatusOK && body == "gated"
		})
		f.waitHealthy(t, base, map[string]string{"waiter": "gated.test"})
	})

	t.Run("grpc_probe", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		gs := grpc.NewServer()
		hs := grpchealth.NewServer()
		healthpb.RegisterHealthServer(gs, hs)
		hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
		go gs.Serve(ln)
		t.Cleanup(gs.Stop)

		base := f.startServer(t).url
		f.startClient(t, base, "grpc", `  - target: h2c://`+ln.Addr().String()+`
    hostname: grpc.test
    health: {type: grpc, interval: 100ms, timeout: 2s, threshold: 1}
`)
		healthIs := func(want bool) func() bool {
			return func() bool {
				c, ok := clientEntry(f.clients(t, base), "grpc", "grpc.test")
				return ok && c.Healthy == want
			}
		}
		waitFor(t, "grpc is listed healthy on grpc.test while SERVING", healthIs(true))
		hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
		waitFor(t, "grpc is listed unhealthy on grpc.test while NOT_SERVING", healthIs(false))
		hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
		waitFor(t, "grpc is listed healthy on grpc.test once SERVING again", healthIs(true))
	})

	t.Run("retry_on_5xx", func(t *testing.T) {
		const host = "retry.test"
		var badSeen atomic.Int32
		bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			badSeen.Add(1)
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "bad")
		}))
		t.Cleanup(bad.Close)
		// Outlier ejection off: bad stays in rotation whatever it answers.
		base := f.startServer(t, "APERIO_RETRY_ON_5XX=503", "APERIO_OUTLIER_CONSECUTIVE_5XX=0").url
		f.startClient(t, base, "bad", "  - target: "+bad.URL+"\n    hostname: "+host+"\n")
		f.startClient(t, base, "good", "  - target: "+statusBackend(t, "good", http.StatusOK)+"\n    hostname: "+host+"\n")
		f.waitHealthy(t, base, map[string]string{"bad": host, "good": host})

		for i := range 10 {
			if code, body := get(t, base, host); code != http.StatusOK || body != "good" {
				t.Fatalf("GET %d = %d %q, want 200 good (a 503 retried on the other client)", i, code, body)
			}
		}
		if n := badSeen.Load(); n == 0 {
			t.Errorf("bad's backend saw %d of the 10 GETs, want some (round-robin over 2, then retried)", n)
		}

		post := func() (int, string) {
			req, err := http.NewRequest(http.MethodPost, base+"/", strings.NewReader("order=1"))
			if err != nil {
				t.Fatal(err)
			}
			req.Host = host
			resp, err := f.http.Do(req)
			if err != nil {
				t.Fatalf("POST: %v, want an answer", err)
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("POST: reading the answer: %v", err)
			}
			return resp.StatusCode, string(b)
		}
		got := []string{}
		for range 4 {
			code, body := post()
			got = append(got, fmt.Sprintf("%d %s", code, body))
			if code == http.StatusServiceUnavailable && body == "bad" {
				return
			}
			if code != http.StatusOK || body != "good" {
				t.Fatalf("POSTs answered %q, want 200 good or 503 bad each", got)
			}
		}
		t.Fatalf("4 POSTs answered %q, want one 503 bad (a POST is not retried)", got)
	})

	t.Run("priority_tiers", func(t *testing.T) {
		const host = "tiers.test"
		base := f.startServer(t, "APERIO_GATEWAY_TIMEOUT=1s").url
		primary, _ := f.startClient(t, base, "primary", "  - target: "+statusBackend(t, "primary", http.StatusOK)+"\n    hostname: "+host+"\n    priority: 0\n")
		f.startClient(t, base, "standby", "  - target: "+statusBackend(t, "standby", http.StatusOK)+"\n    hostname: "+host+"\n    priority: 1\n")
		f.waitHealthy(t, base, map[string]string{"primary": host, "standby": host})
		if c, _ := clientEntry(f.clients(t, base), "standby", host); c.Priority != 1 {
			t.Fatalf("standby's listed priority = %d, want 1", c.Priority)
		}

		for i := range 10 {
			if code, body := get(t, base, host); code != http.StatusOK || body != "primary" {
				t.Fatalf("GET %d = %d %q, want 200 primary (the priority-0 tier)", i, code, body)
			}
		}
		if err := primary.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatalf("SIGKILL primary: %v", err)
		}
		waitExit(t, primary)
		waitFor(t, "GET "+host+" is answered 200 by standby", func() bool {
			code, body := get(t, base, host)
			if code == http.StatusOK && body != "standby" {
				t.Fatalf("GET after primary died = 200 %q, want standby", body)
			}
			return code == http.StatusOK
		})
	})
}
