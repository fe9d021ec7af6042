package config

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, or rewrites it under -update.
func golden(tb testing.TB, name string, got []byte) {
	tb.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			tb.Fatalf("write %s: %v", path, err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("read %s: %v (run go test -update to create it)", path, err)
	}
	diffLines(tb, name, strings.Split(string(got), "\n"), strings.Split(string(want), "\n"))
}

const printServerFile = `# aperio-server.yaml
server:
  token: ${MASTER_TOKEN}
port: 443
tls_cert: /etc/aperio/cert.pem
tls_key: /etc/aperio/key.pem
lb_strategy: least-inflight
failover: retry
fallbacks:
  app.example.com: https://status.example.com
cache:
  enabled: true
  max_bytes: 256MiB
scaling:
  enabled: true
  record_ttl: 7d
outbound:
  allowlist: ["*.provider.example", 203.0.113.0/24]
`

var printServerEnv = map[string]string{
	"MASTER_TOKEN":           "m-secret-0123456789",
	"APERIO_SERVER_TOKEN":    "ignored-secret",
	"APERIO_DATABASE_URL":    "postgres://aperio:db-secret@db/aperio",
	"APERIO_GATEWAY_TIMEOUT": "5s",
	"PORT":                   "8080",
	"LOG_LEVEL":              "debug",
	"APERIO_LOG_FORMAT":      "json",
}

func TestPrintServerGolden(t *testing.T) {
	cfg, src, err := LoadServer(ServerOptions{
		Env:      envOf(printServerEnv),
		ReadFile: filesOf(map[string]string{ServerFile: printServerFile}),
	})
	if err != nil {
		t.Fatalf("LoadServer() error = %v", err)
	}
	var b bytes.Buffer
	if err := PrintServer(&b, cfg, src); err != nil {
		t.Fatalf("PrintServer() error = %v", err)
	}
	golden(t, "print_server.golden", b.Bytes())
	for _, secret := range []string{"m-secret-0123456789", "ignored-secret", "db-secret"} {
		if strings.Contains(b.String(), secret) {
			t.Errorf("PrintServer() output contains secret %q", secret)
		}
	}
}

const printClientFile = `# aperio.yaml
server:
  url: https://tunnel.example.com
  token: ${CLIENT_TOKEN}
max_concurrent: 10
health: {interval: 15s}
idle_timeout: 5m
services:
  - target: 3000
    hostname: [app.example.com, www.example.com]
    health: {endpoint: /healthz}
    resilience: true
  - target: h2c://localhost:50051
    hostname: grpc.example.com
    path: /grpc
    max_concurrent: 50
    priority: 1
scaling:
  url: https://api.provider.example/apps/web/scale
  secret: ${SCALE_SECRET}
  max: 8
`

func TestPrintClientGolden(t *testing.T) {
	o := clientCase{
		file: printClientFile,
		home: "name: laptop\nlog_level: debug\n",
		env: map[string]string{
			"CLIENT_TOKEN":       "apr_secret",
			"SCALE_SECRET":       "scale-secret",
			"APERIO_SCALING_MIN": "1",
			"APERIO_LOG_LEVEL":   "warn",
		},
		flags: map[string]string{"scaling-cold-start": "30s", "drain-timeout": "1m"},
	}.options()
	cfg, src, err := LoadClient(o)
	if err != nil {
		t.Fatalf("LoadClient() error = %v", err)
	}
	var b bytes.Buffer
	if err := PrintClient(&b, cfg, src); err != nil {
		t.Fatalf("PrintClient() error = %v", err)
	}
	golden(t, "print_client.golden", b.Bytes())
	for _, secret := range []string{"apr_secret", "scale-secret"} {
		if strings.Contains(b.String(), secret) {
			t.Errorf("PrintClient() output contains secret %q", secret)
		}
	}
}

func TestPrintSecrets(t *testing.T) {
	s := DefaultServer()
	s.Token = "t0p"
	c := DefaultClient()
	c.APIKey = "apk_1"
	c.Scaling = &Scaling{Secret: "shh"}
	server := printedServer(t, s, nil)
	client := printedClient(t, c, nil)
	tests := []struct {
		got, want string
	}{
		{server["server.token"], "server.token = <set>  # default"},
		{server["database_url"], "database_url = <unset>  # default"},
		{server["metrics_token"], "metrics_token = <unset>  # default"},
		{client["server.token"], "server.token = <unset>  # default"},
		{client["server.api_key"], "server.api_key = <set>  # default"},
		{client["scaling.secret"], "scaling.secret = <set>  # default"},
	}
	for _, tc := range tests {
		key, _, _ := strings.Cut(tc.want, " = ")
		t.Run(key, func(t *testing.T) {
			if tc.got != tc.want {
				t.Errorf("Print %s = %q, want %q", key, tc.got, tc.want)
			}
		})
	}
}

func TestPrintQuotes(t *testing.T) {
	s := DefaultServer()
	s.DataDir = " padded "
	s.TLSCert = "a #b"
	s.TLSKey = "line\nbreak"
	lines := printedServer(t, s, nil)
	tests := []struct {
		key, want string
	}{
		{"data_dir", `data_dir = " padded "  # default`},
		{"tls_cert", `tls_cert = "a #b"  # default`},
		{"tls_key", `tls_key = "line\nbreak"  # default`},
		{"host", "host = 0.0.0.0  # default"},
	}
	for _, tc := range tests {
		t.Run(tc.key, func(t *testing.T) {
			if got := lines[tc.key]; got != tc.want {
				t.Errorf("PrintServer() %s = %q, want %q", tc.key, got, tc.want)
			}
		})
	}
}

type failWriter struct{ err error }

func (w failWriter) Write([]byte) (int, error) { return 0, w.err }

func TestPrintWriteError(t *testing.T) {
	boom := errors.New("disk full")
	if err := PrintServer(failWriter{boom}, DefaultServer(), nil); !errors.Is(err, boom) {
		t.Errorf("PrintServer(failing writer) = %v, want %v", err, boom)
	}
	if err := PrintClient(failWriter{boom}, DefaultClient(), nil); !errors.Is(err, boom) {
		t.Errorf("PrintClient(failing writer) = %v, want %v", err, boom)
	}
}
