package config

import (
	"bytes"
	"errors"
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/config/configtest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, or rewrites it under -update.
func golden(tb testing.TB, name string, got []byte) {
	tb.Helper()
	configtest.Golden(tb, filepath.Join("testdata", name), got, *update)
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
    trim_bind: false
    host_header: grpc.internal
    health: {type: grpc}
    timeout: 2s
    retry: {attempts: 3, backoff: 50ms}
    circuit_breaker: {failures: 5, open_for: 10s}
    wait_for_backend: true
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
	c := DefaultClient()
	c.APIKey = "apk_1"
	c.Scaling = &Scaling{Secret: "shh"}
	client := printedClient(t, c, nil)
	tests := []struct {
		got, want string
	}{
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

type failWriter struct{ err error }

func (w failWriter) Write([]byte) (int, error) { return 0, w.err }

func TestPrintWriteError(t *testing.T) {
	boom := errors.New("disk full")
	if err := PrintClient(failWriter{boom}, DefaultClient(), nil); !errors.Is(err, boom) {
		t.Errorf("PrintClient(failing writer) = %v, want %v", err, boom)
	}
}
