package serverconfig

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

const printFile = `# aperio-server.yaml
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

func TestPrintGolden(t *testing.T) {
	cfg, src, err := Load(Options{
		Env:      envOf(printServerEnv),
		ReadFile: filesOf(map[string]string{File: printFile}),
	})
	if err != nil {
		t.Fatalf("Load() error = %v", err)
	}
	var b bytes.Buffer
	if err := Print(&b, cfg, src); err != nil {
		t.Fatalf("Print() error = %v", err)
	}
	golden(t, "print_server.golden", b.Bytes())
	for _, secret := range []string{"m-secret-0123456789", "ignored-secret", "db-secret"} {
		if strings.Contains(b.String(), secret) {
			t.Errorf("Print() output contains secret %q", secret)
		}
	}
}

func TestPrintSecretsServer(t *testing.T) {
	s := Default()
	s.Token = "t0p"
	server := printed(t, s, nil)
	tests := []struct {
		got, want string
	}{
		{server["server.token"], "server.token = <set>  # default"},
		{server["database_url"], "database_url = <unset>  # default"},
		{server["metrics_token"], "metrics_token = <unset>  # default"},
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
	s := Default()
	s.Store.DataDir = " padded "
	s.TLSCert = "a #b"
	s.TLSKey = "line\nbreak"
	lines := printed(t, s, nil)
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
				t.Errorf("Print() %s = %q, want %q", tc.key, got, tc.want)
			}
		})
	}
}

type failWriter struct{ err error }

func (w failWriter) Write([]byte) (int, error) { return 0, w.err }

func TestPrintWriteError(t *testing.T) {
	boom := errors.New("disk full")
	if err := Print(failWriter{boom}, Default(), nil); !errors.Is(err, boom) {
		t.Errorf("Print(failing writer) = %v, want %v", err, boom)
	}
}

func FuzzLoadServerYAML(f *testing.F) {
	for _, tc := range serverLoadCases {
		f.Add(tc.file)
	}
	for _, tc := range serverErrorCases {
		f.Add(tc.file)
	}
	f.Add(printFile)
	env := envOf(map[string]string{"TOKEN": "token-0123456789abcdef", "PORT_NUMBER": "80", "APERIO_PORT": "81"})
	f.Fuzz(func(t *testing.T, data string) {
		read := func(string) ([]byte, error) { return []byte(data), nil }
		cfg, src, err := Load(Options{Env: env, ReadFile: read})
		problems(t, err) // every problem a one-line *Error
		if err := Print(io.Discard, cfg, src); err != nil {
			t.Fatalf("Print() = %v", err)
		}
	})
}
