package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testPEM returns a self-signed certificate and its key, PEM-encoded.
func testPEM(tb testing.TB) (cert, key string) {
	tb.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "backend.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"backend.test"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		tb.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		tb.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
}

// TestHostileBackendSettings loads hostile values of every backend key:
// each stops the client at load with one line naming the key and its
// file line, and a sane value of each loads.
func TestHostileBackendSettings(t *testing.T) {
	cert, key := testPEM(t)
	_, otherKey := testPEM(t)
	files := map[string]string{
		"/etc/aperio/ca.pem":     cert,
		"/etc/aperio/client.pem": cert,
		"/etc/aperio/client.key": key,
		"/etc/aperio/garbage":    "-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n",
		"/etc/aperio/huge.pem":   cert + strings.Repeat("#", MaxPEMBytes),
		"/etc/aperio/other.key":  otherKey,
	}
	tests := []struct {
		name string
		svc  string // yaml lines of the one service, after target and hostname
		tgt  string // target; default https://backend.test:8443
		want []string
	}{
		{name: "sane values load", svc: "trim_bind: false\npass_hostname: false\nhost_header: backend.internal:8080\ntls_server_name: backend.test\ntls_ca_file: /etc/aperio/ca.pem\ntls_client_cert: /etc/aperio/client.pem\ntls_client_key: /etc/aperio/client.key\ntimeout: 1h\nconnect_timeout: 5m\nretry: {attempts: 10, backoff: 10s, all_methods: true}\ncircuit_breaker: {failures: 1000, open_for: 1h}\n"},
		{name: "unix target loads", tgt: "unix:///run/app/app.sock", svc: "host_header: app.local\n"},
		{name: "guard/bounds/negative timeout", svc: "timeout: -1s\n", want: []string{`config: services[0].timeout (aperio.yaml:6): duration "-1s" is negative`}},
		{name: "guard/bounds/huge timeout", svc: "timeout: 100000d\n", want: []string{"config: services[0].timeout (aperio.yaml:6): 100000d is outside [0s, 1h]"}},
		{name: "guard/bounds/negative connect_timeout", svc: "connect_timeout: -5s\n", want: []string{`config: services[0].connect_timeout (aperio.yaml:6): duration "-5s" is negative`}},
		{name: "guard/bounds/huge connect_timeout", svc: "connect_timeout: 6m\n", want: []string{"config: services[0].connect_timeout (aperio.yaml:6): 6m is outside [0s, 5m]"}},
		{name: "guard/bounds/attempts above 10", svc: "retry: {attempts: 11}\n", want: []string{"config: services[0].retry.attempts (aperio.yaml:6): 11 is outside [0, 10]"}},
		{name: "guard/bounds/negative attempts", svc: "retry: {attempts: -1}\n", want: []string{"config: services[0].retry.attempts (aperio.yaml:6): -1 is outside [0, 10]"}},
		{name: "guard/bounds/huge backoff", svc: "retry: {attempts: 2, backoff: 1h}\n", want: []string{"config: services[0].retry.backoff (aperio.yaml:6): 1h is outside [0s, 10s]"}},
		{name: "guard/bounds/negative backoff", svc: "retry: {backoff: -1ms}\n", want: []string{`config: services[0].retry.backoff (aperio.yaml:6): duration "-1ms" is negative`}},
		{name: "guard/bounds/failures above 1000", svc: "circuit_breaker: {failures: 1001}\n", want: []string{"config: services[0].circuit_breaker.failures (aperio.yaml:6): 1001 is outside [0, 1000]"}},
		{name: "guard/bounds/negative failures", svc: "circuit_breaker: {failures: -3}\n", want: []string{"config: services[0].circuit_breaker.failures (aperio.yaml:6): -3 is outside [0, 1000]"}},
		{name: "guard/bounds/open_for zero", svc: "circuit_breaker: {failures: 3, open_for: 0s}\n", want: []string{"config: services[0].circuit_breaker.open_for (aperio.yaml:6): 0s is outside (0s, 1h]"}},
		{name: "guard/bounds/open_for huge", svc: "circuit_breaker: {failures: 3, open_for: 2d}\n", want: []string{"config: services[0].circuit_breaker.open_for (aperio.yaml:6): 2d is outside (0s, 1h]"}},
		{name: "guard/files/missing CA", svc: "tls_ca_file: /etc/aperio/nope.pem\n", want: []string{"config: services[0].tls_ca_file (aperio.yaml:6): /etc/aperio/nope.pem does not exist"}},
		{name: "guard/files/oversized CA", svc: "tls_ca_file: /etc/aperio/huge.pem\n", want: []string{"config: services[0].tls_ca_file (aperio.yaml:6): /etc/aperio/huge.pem is larger than 1048576 bytes"}},
		{name: "guard/files/garbage CA", svc: "tls_ca_file: /etc/aperio/garbage\n", want: []string{"config: services[0].tls_ca_file (aperio.yaml:6): /etc/aperio/garbage holds no PEM certificate"}},
		{name: "guard/files/missing client key", svc: "tls_client_cert: /etc/aperio/client.pem\ntls_client_key: /etc/aperio/gone.key\n", want: []string{"config: services[0].tls_client_key (aperio.yaml:7): /etc/aperio/gone.key does not exist"}},
		{name: "guard/files/garbage client cert", svc: "tls_client_cert: /etc/aperio/garbage\ntls_client_key: /etc/aperio/client.key\n",
			want: []string{"config: services[0].tls_client_cert (aperio.yaml:6): /etc/aperio/garbage and /etc/aperio/client.key are not a certificate and its key: tls: failed to find any PEM data in certificate input"}},
		{name: "guard/files/key of another certificate", svc: "tls_client_cert: /etc/aperio/client.pem\ntls_client_key: /etc/aperio/other.key\n",
			want: []string{"config: services[0].tls_client_cert (aperio.yaml:6): /etc/aperio/client.pem and /etc/aperio/other.key are not a certificate and its key: tls: private key does not match public key"}},
		{name: "guard/files/cert without key", svc: "tls_client_cert: /etc/aperio/client.pem\n", want: []string{"config: services[0].tls_client_key: required with tls_client_cert"}},
		{name: "guard/tls/on a plain target", tgt: "http://backend.test", svc: "tls_insecure_skip_verify: true\n", want: []string{`config: services[0].tls_insecure_skip_verify (aperio.yaml:6): applies to https:// targets only, the target is "http://backend.test"`}},
		{name: "guard/tls/bad server name", svc: "tls_server_name: \"bad name\"\n", want: []string{`config: services[0].tls_server_name (aperio.yaml:6): "bad name" is not a DNS name or IP address`}},
		{name: "guard/host_header/CRLF", svc: "host_header: \"a.test\\r\\nX-Evil: 1\"\n", want: []string{`config: services[0].host_header (aperio.yaml:6): "a.test\r\nX-Evil: 1" is not a host or host:port (no spaces, control characters or paths; at most 255 bytes)`}},
		{name: "guard/host_header/path", svc: "host_header: a.test/x\n", want: []string{`config: services[0].host_header (aperio.yaml:6): "a.test/x" is not a host or host:port (no spaces, control characters or paths; at most 255 bytes)`}},
		{name: "guard/host_header/long", svc: "host_header: " + strings.Repeat("a.", 130) + "test\n", want: []string{`config: services[0].host_header (aperio.yaml:6): "` + strings.Repeat("a.", 130) + `test" is not a host or host:port (no spaces, control characters or paths; at most 255 bytes)`}},
		{name: "guard/unix/relative path", tgt: "unix://app.sock", want: []string{`config: services[0].target (aperio.yaml:4): "unix://app.sock": a unix target names an absolute socket path: unix:///path/to.sock`}},
		{name: "guard/unix/opaque path", tgt: "unix:app.sock", want: []string{`config: services[0].target (aperio.yaml:4): "unix:app.sock" is not a port, host:port or URL`}},
		{name: "guard/unix/too long", tgt: "unix:///" + strings.Repeat("s", 120), want: []string{`config: services[0].target (aperio.yaml:4): "unix:///` + strings.Repeat("s", 120) + `": socket path longer than 107 bytes`}},
		{name: "guard/unix/query", tgt: "unix:///run/a.sock?x=1", want: []string{`config: services[0].target (aperio.yaml:4): "unix:///run/a.sock?x=1": a unix target has no query, fragment or user`}},
		{name: "guard/health/grpc on http", tgt: "http://backend.test", svc: "health: {type: grpc}\n", want: []string{`config: services[0].health.type (aperio.yaml:6): grpc probes need an h2c:// target, the target is "http://backend.test"`}},
		{name: "guard/health/unknown type", svc: "health: {type: tcp}\n", want: []string{`config: services[0].health.type (aperio.yaml:6): "tcp" is not http or grpc`}},
		{name: "guard/health/unknown success", svc: "health: {success: 2xx-4xx}\n", want: []string{`config: services[0].health.success (aperio.yaml:6): "2xx-4xx" is not 2xx or 2xx-3xx`}},
		{name: "guard/wait_for_backend without probe", svc: "wait_for_backend: true\n", want: []string{"config: services[0].wait_for_backend (aperio.yaml:6): needs a probe: set health.endpoint or health.type grpc"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tgt := tc.tgt
			if tgt == "" {
				tgt = "https://backend.test:8443"
			}
			var body strings.Builder
			for line := range strings.SplitSeq(strings.TrimSuffix(tc.svc, "\n"), "\n") {
				if line != "" {
					body.WriteString("    " + line + "\n")
				}
			}
			file := "server: {url: https://tunnel.example.com, token: apr_x}\n\nservices:\n  - target: " + tgt + "\n    hostname: app.example.com\n" + body.String()
			o := clientCase{file: file}.options()
			all := map[string]string{ClientFile: file}
			for k, v := range files {
				all[k] = v
			}
			o.ReadFile = filesOf(all)
			_, _, err := LoadClient(o)
			var got []string
			if err != nil {
				got = problems(t, err)
			}
			diffLines(t, "LoadClient("+tc.name+") errors", got, tc.want)
		})
	}
}

// TestClientWarnsInsecureTLS: tls_insecure_skip_verify is warned about.
func TestClientWarnsInsecureTLS(t *testing.T) {
	c := DefaultClient()
	s := DefaultService()
	s.Target = "https://backend.test"
	s.TLSInsecureSkipVerify = true
	c.Services = []Service{s}
	w := ClientWarnings(c)
	if len(w) != 1 || !strings.Contains(w[0], "services[0].tls_insecure_skip_verify") {
		t.Errorf("ClientWarnings(insecure) = %q, want one warning naming services[0].tls_insecure_skip_verify", w)
	}
}

// TestReadPEMBounded: a real file above MaxPEMBytes is refused without
// being read whole; a missing one is named as missing.
func TestReadPEMBounded(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.pem")
	if err := os.WriteFile(big, make([]byte, MaxPEMBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadPEM(big); !errors.Is(err, errPEMTooLarge) {
		t.Errorf("ReadPEM(1 MiB + 1) error = %v, want errPEMTooLarge", err)
	}
	if _, msg := readPEM(nil, big); !strings.Contains(msg, "is larger than 1048576 bytes") {
		t.Errorf("readPEM(1 MiB + 1) = %q, want it named too large", msg)
	}
	if _, msg := readPEM(nil, filepath.Join(dir, "none.pem")); !strings.Contains(msg, "does not exist") {
		t.Errorf("readPEM(missing) = %q, want it named missing", msg)
	}
}
