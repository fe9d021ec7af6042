package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/aperio-dev/aperio/wire"
)

// TestProcessesBackendMore runs the real binaries through more of what a
// client does with its backend: an https target verified against a CA of
// its own with mTLS, wait_for_backend, a gRPC health probe, the server's
// retry_on_5xx, and priority tiers.
func TestProcessesBackendMore(t *testing.T) {
	bin := buildBinaries(t)
	const master = "backend2-master-token-0123456789abcdef"

	// startServer starts a server with env beyond the defaults and returns
	// its base URL. The visitor bucket is raised: the polls below send
	// more requests a second from one address than its default allows.
	startServer := func(t *testing.T, env ...string) string {
		server := exec.Command(filepath.Join(bin, "aperio-server"))
		server.Dir = t.TempDir()
		server.Env = append(os.Environ(), "APERIO_SERVER_TOKEN="+master, "APERIO_HOST=127.0.0.1", "APERIO_PORT=0",
			"APERIO_DATA_DIR="+filepath.Join(server.Dir, "data"), "APERIO_LOG_LEVEL=info", "APERIO_IP_LIMIT_MAX=100000")
		server.Env = append(server.Env, env...)
		l := startLogged(t, server)
		return "http://" + l.wait(t, regexp.MustCompile(`msg="server listening" addr=(\S+)`))
	}
	// startClient starts a client named name with services (the yaml
	// list of services:, indented by two) and waits for its tunnel.
	startClient := func(t *testing.T, base, name, services string) *exec.Cmd {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "aperio.yaml"), "server: {url: "+base+", token: "+master+"}\nname: "+name+"\nservices:\n"+services)
		c := exec.Command(filepath.Join(bin, "aperio-client"))
		c.Dir = dir
		c.Env = append(os.Environ(), "HOME="+dir)
		startLogged(t, c).wait(t, regexp.MustCompile(`msg="tunnel connected"`))
		return c
	}
	// backend answers every request with status and name.
	backend := func(t *testing.T, name string, status int) string {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(status)
			io.WriteString(w, name)
		}))
		t.Cleanup(s.Close)
		return s.URL
	}
	tr := &http.Transport{Proxy: nil}
	t.Cleanup(tr.CloseIdleConnections)
	visitor := &http.Client{Transport: tr, Timeout: time.Minute}
	get := func(t *testing.T, base, host string) (int, string) {
		return getHost(t, visitor, base, host, "/")
	}
	// clients returns the server's GET /aperio/api/clients: one entry per
	// client and service.
	clients := func(t *testing.T, base string) []wire.ClientInfo {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+wire.Prefix+"/clients", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+master)
		resp, err := visitor.Do(req)
		if err != nil {
			t.Fatalf("GET /aperio/api/clients: %v, want an answer", err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /aperio/api/clients = %d %q, %v, want 200", resp.StatusCode, b, err)
		}
		var list []wire.ClientInfo
		if err := json.Unmarshal(b, &list); err != nil {
			t.Fatalf("GET /aperio/api/clients: %v in %q, want a JSON list", err, b)
		}
		return list
	}
	// entry returns the entry of the client called name bound to host.
	entry := func(list []wire.ClientInfo, name, host string) (wire.ClientInfo, bool) {
		for _, c := range list {
			if c.Name == name && len(c.Hostnames) == 1 && c.Hostnames[0] == host {
				return c, true
			}
		}
		return wire.ClientInfo{}, false
	}
	// waitHealthy waits until every name: host pair is listed healthy.
	waitHealthy := func(t *testing.T, base string, want map[string]string) {
		t.Helper()
		waitFor(t, fmt.Sprintf("GET /aperio/api/clients lists %v (name: hostname) healthy", want), func() bool {
			list := clients(t, base)
			for name, host := range want {
				if c, ok := entry(list, name, host); !ok || !c.Healthy {
					return false
				}
			}
			return true
		})
	}

	t.Run("tls_upstream", func(t *testing.T) {
		dir := t.TempDir()
		serverCA := newTestCA(t, "backend test CA")
		clientCA := newTestCA(t, "client test CA")
		backendCert := serverCA.issue(t, "backend.internal", []string{"backend.internal"}, []net.IP{net.ParseIP("127.0.0.1")}, x509.ExtKeyUsageServerAuth)
		clientCert := clientCA.issue(t, "aperio-client-mtls", nil, nil, x509.ExtKeyUsageClientAuth)
		writeFile(t, filepath.Join(dir, "ca.pem"), string(serverCA.certPEM))
		writeFile(t, filepath.Join(dir, "client.pem"), string(clientCert.certPEM))
		writeFile(t, filepath.Join(dir, "client.key"), string(clientCert.keyPEM))
		// The backend admits client certificates of the second chain only.
		clientPool := x509.NewCertPool()
		clientPool.AddCert(clientCA.cert)

		b := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
				w.WriteHeader(http.StatusTeapot)
				io.WriteString(w, "no client certificate")
				return
			}
			io.WriteString(w, "cn="+r.TLS.PeerCertificates[0].Subject.CommonName+" sni="+r.TLS.ServerName)
		}))
		b.TLS = &tls.Config{
			Certificates: []tls.Certificate{backendCert.pair(t)},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    clientPool,
			MinVersion:   tls.VersionTLS12,
		}
		b.StartTLS()
		t.Cleanup(b.Close)
		target := b.URL

		base := startServer(t)
		startClient(t, base, "mtls", fmt.Sprintf(`  - target: %s
    hostname: mtls.test
    tls_ca_file: %s
    tls_server_name: backend.internal
    tls_client_cert: %s
    tls_client_key: %s
`, target, filepath.Join(dir, "ca.pem"), filepath.Join(dir, "client.pem"), filepath.Join(dir, "client.key")))
		startClient(t, base, "nocert", fmt.Sprintf(`  - target: %s
    hostname: nocert.test
    tls_ca_file: %s
    tls_server_name: backend.internal
`, target, filepath.Join(dir, "ca.pem")))
		waitHealthy(t, base, map[string]string{"mtls": "mtls.test", "nocert": "nocert.test"})

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

		base := startServer(t)
		// A second service, without a probe, keeps the session's
		// announcement non-empty while the gated one waits.
		startClient(t, base, "waiter", fmt.Sprintf(`  - target: %s
    hostname: ready.test
  - target: %s
    hostname: gated.test
    health: {endpoint: /healthz, interval: 100ms, threshold: 1}
    wait_for_backend: true
`, backend(t, "ready", http.StatusOK), gated.URL))
		waitHealthy(t, base, map[string]string{"waiter": "ready.test"})
		waitFor(t, "the gated backend has answered 3 health probes 503", func() bool { return probes.Load() >= 3 })

		list := clients(t, base)
		for _, c := range list {
			for _, h := range c.Hostnames {
				if h == "gated.test" {
					t.Errorf("GET /aperio/api/clients while the probe fails lists %s on gated.test, want no service bound to it", c.Name)
				}
			}
		}
		if _, ok := entry(list, "waiter", "ready.test"); !ok {
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
		waitHealthy(t, base, map[string]string{"waiter": "gated.test"})
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

		base := startServer(t)
		startClient(t, base, "grpc", `  - target: h2c://`+ln.Addr().String()+`
    hostname: grpc.test
    health: {type: grpc, interval: 100ms, timeout: 2s, threshold: 1}
`)
		healthIs := func(want bool) func() bool {
			return func() bool {
				c, ok := entry(clients(t, base), "grpc", "grpc.test")
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
		base := startServer(t, "APERIO_RETRY_ON_5XX=503", "APERIO_OUTLIER_CONSECUTIVE_5XX=0")
		startClient(t, base, "bad", "  - target: "+bad.URL+"\n    hostname: "+host+"\n")
		startClient(t, base, "good", "  - target: "+backend(t, "good", http.StatusOK)+"\n    hostname: "+host+"\n")
		waitHealthy(t, base, map[string]string{"bad": host, "good": host})

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
			resp, err := visitor.Do(req)
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
		base := startServer(t, "APERIO_GATEWAY_TIMEOUT=1s")
		primary := startClient(t, base, "primary", "  - target: "+backend(t, "primary", http.StatusOK)+"\n    hostname: "+host+"\n    priority: 0\n")
		startClient(t, base, "standby", "  - target: "+backend(t, "standby", http.StatusOK)+"\n    hostname: "+host+"\n    priority: 1\n")
		waitHealthy(t, base, map[string]string{"primary": host, "standby": host})
		if c, _ := entry(clients(t, base), "standby", host); c.Priority != 1 {
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

// testCert is a certificate made by a testCA, with its key, in PEM.
type testCert struct {
	cert            *x509.Certificate
	key             *ecdsa.PrivateKey
	certPEM, keyPEM []byte
}

func (c testCert) pair(t *testing.T) tls.Certificate {
	t.Helper()
	pair, err := tls.X509KeyPair(c.certPEM, c.keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

type testCA struct{ testCert }

// newTestCA makes a self-signed ECDSA CA called cn.
func newTestCA(t *testing.T, cn string) testCA {
	t.Helper()
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: cn},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	return testCA{makeCert(t, tmpl, nil)}
}

// issue makes a certificate for cn, signed by ca.
func (ca testCA) issue(t *testing.T, cn string, dns []string, ips []net.IP, usage x509.ExtKeyUsage) testCert {
	t.Helper()
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		DNSNames:    dns,
		IPAddresses: ips,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}
	return makeCert(t, tmpl, &ca.testCert)
}

// makeCert signs tmpl with parent, or with its own new key when parent is
// nil.
func makeCert(t *testing.T, tmpl *x509.Certificate, parent *testCert) testCert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(time.Hour)
	signer, issuer := key, tmpl
	if parent != nil {
		signer, issuer = parent.key, parent.cert
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, issuer, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return testCert{
		cert:    cert,
		key:     key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}
}
