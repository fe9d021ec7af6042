package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runServer runs the command line with a controlled environment and
// returns its exit code and output.
func runServer(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	t.Chdir(t.TempDir()) // no ./aperio-server.yaml from the developer's tree
	for _, k := range []string{"APERIO_SERVER_TOKEN", "APERIO_PORT", "PORT", "APERIO_SERVER_CONFIG"} {
		t.Setenv(k, "")
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestCheckConfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "server.yaml")
	if err := os.WriteFile(file, []byte("server:\n  token: s3cret\nmax_concurent_requests: 5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		env      map[string]string
		args     []string
		code     int
		stdout   string
		stderrIn []string
	}{
		{"valid", map[string]string{"APERIO_SERVER_TOKEN": "t"}, []string{"--check-config"}, 0, "configuration OK\n", nil},
		{"missing token", nil, []string{"--check-config"}, 2, "", []string{"server.token"}},
		{"bad env value", map[string]string{"APERIO_SERVER_TOKEN": "t", "APERIO_PORT": "eighty"}, []string{"--check-config"}, 2, "", []string{"APERIO_PORT"}},
		{"unknown key with suggestion", nil, []string{"--check-config", "--config", file}, 2, "", []string{"max_concurent_requests", "server.yaml:3", "did you mean", "max_concurrent_requests"}},
		{"missing explicit file", nil, []string{"--config", "/nonexistent/aperio.yaml"}, 2, "", []string{"/nonexistent/aperio.yaml"}},
		{"stray argument", map[string]string{"APERIO_SERVER_TOKEN": "t"}, []string{"extra"}, 2, "", []string{"extra"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runServer(t, tt.env, tt.args...)
			if code != tt.code || (tt.stdout != "" && stdout != tt.stdout) {
				t.Fatalf("aperio-server %v = exit %d, stdout %q, stderr %q; want exit %d, stdout %q", tt.args, code, stdout, stderr, tt.code, tt.stdout)
			}
			for _, want := range tt.stderrIn {
				if !strings.Contains(stderr, want) {
					t.Errorf("aperio-server %v stderr = %q, want it to contain %q", tt.args, stderr, want)
				}
			}
		})
	}
}

func TestPrintConfigMasksSecrets(t *testing.T) {
	code, stdout, stderr := runServer(t, map[string]string{"APERIO_SERVER_TOKEN": "very-secret-token", "APERIO_PORT": "9999"}, "--print-config")
	if code != 0 {
		t.Fatalf("--print-config = exit %d, stderr %q, want 0", code, stderr)
	}
	if strings.Contains(stdout, "very-secret-token") {
		t.Fatalf("--print-config printed the token:\n%s", stdout)
	}
	for _, want := range []string{"<set>", "9999", "env APERIO_PORT"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("--print-config output lacks %q:\n%s", want, stdout)
		}
	}
}
