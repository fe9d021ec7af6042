package main

import (
	"bytes"
	"strings"
	"testing"
)

func runClient(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	t.Chdir(t.TempDir()) // no ./aperio.yaml from the developer's tree
	t.Setenv("HOME", t.TempDir())
	for _, k := range []string{"APERIO_SERVER_URL", "APERIO_SERVER_TOKEN", "APERIO_TARGET", "APERIO_HOSTNAME"} {
		t.Setenv(k, "")
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestClientCheckConfig(t *testing.T) {
	quick := []string{"3000", "--hostname", "app.test", "--server-url", "http://127.0.0.1:8080", "--server-token", "t"}
	tests := []struct {
		name     string
		env      map[string]string
		args     []string
		code     int
		stderrIn []string
	}{
		{"quick mode", nil, append(quick, "--check-config"), 0, nil},
		{"flags after and before TARGET", nil, []string{"--hostname", "app.test", "3000", "--server-url", "http://x", "--server-token", "t", "--check-config"}, 0, nil},
		{"env fills the rest", map[string]string{"APERIO_SERVER_URL": "http://x", "APERIO_SERVER_TOKEN": "t", "APERIO_HOSTNAME": "app.test"}, []string{"3000", "--check-config"}, 0, nil},
		// With no hostname the server decides: the token's exact hostnames
		// (auto-bind) or a catch-all.
		{"no hostname", nil, []string{"3000", "--server-url", "http://x", "--server-token", "t", "--check-config"}, 0, nil},
		{"bad server url scheme", nil, []string{"3000", "--hostname", "app.test", "--server-url", "ftp://x", "--server-token", "t", "--check-config"}, 2, []string{"server.url", "flag --server-url"}},
		{"bad duration", nil, append(quick, "--drain-timeout", "soon", "--check-config"), 2, []string{"drain_timeout", "--drain-timeout"}},
		{"debug_listen loopback", nil, append(quick, "--debug-listen", "127.0.0.1:6061", "--check-config"), 0, nil},
		{"debug_listen every interface", nil, append(quick, "--debug-listen", "0.0.0.0:6061", "--check-config"), 2, []string{"debug_listen", "flag --debug-listen", "must be a loopback address"}},
		{"debug_listen from env, public", map[string]string{"APERIO_DEBUG_LISTEN": "203.0.113.9:6061"}, append(quick, "--check-config"), 2, []string{"debug_listen", "env APERIO_DEBUG_LISTEN", "must be a loopback address"}},
		{"scaling max below min", nil, append(quick, "--scaling-url", "https://p.example/scale", "--scaling-min", "3", "--scaling-max", "2", "--check-config"), 2, []string{"scaling.max"}},
		{"scaling max 0 below min", nil, append(quick, "--scaling-url", "https://p.example/scale", "--scaling-min", "3", "--scaling-max", "0", "--check-config"), 2, []string{"scaling.max", "0 is below scaling.min 3"}},
		{"adaptive fallbacks warn", nil, append(quick, "--adaptive-concurrency-increase-after-successes", "0", "--adaptive-concurrency-decrease-factor", "0", "--check-config"), 0, []string{
			"warning: adaptive_concurrency.increase_after_successes: 0 is below 1, using 1",
			"warning: adaptive_concurrency.decrease_factor: 0 is outside (0, 1], using 0.5",
		}},
		{"unknown flag", nil, append(quick, "--no-such-flag"), 2, []string{"no-such-flag"}},
		{"two targets", nil, []string{"3000", "4000"}, 2, []string{"accepts at most 1 arg"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runClient(t, tt.env, tt.args...)
			if code != tt.code {
				t.Fatalf("aperio-client %v = exit %d (stderr %q), want %d", tt.args, code, stderr, tt.code)
			}
			for _, want := range tt.stderrIn {
				if !strings.Contains(stderr, want) {
					t.Errorf("aperio-client %v stderr = %q, want it to contain %q", tt.args, stderr, want)
				}
			}
		})
	}
}

func TestClientPrintConfig(t *testing.T) {
	code, stdout, stderr := runClient(t, map[string]string{"APERIO_SERVER_TOKEN": "hush-hush"},
		"3000", "--hostname", "app.test", "--server-url", "http://127.0.0.1:8080", "--print-config")
	if code != 0 {
		t.Fatalf("--print-config = exit %d, stderr %q", code, stderr)
	}
	if strings.Contains(stdout, "hush-hush") {
		t.Fatalf("--print-config printed the token:\n%s", stdout)
	}
	for _, want := range []string{"http://localhost:3000", "arg TARGET", "flag --hostname", "env APERIO_SERVER_TOKEN", "<set>"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("--print-config output lacks %q:\n%s", want, stdout)
		}
	}
}
