package serverconfig

import (
	"strings"
	"testing"
	"time"
)

// loadPolicy loads a server config file of yaml (a valid token added).
func loadPolicy(t *testing.T, yaml string) (Config, error) {
	t.Helper()
	files := filesOf(map[string]string{File: "server: {token: master-0123456789abcdef0123456789abcdef}\n" + yaml})
	cfg, _, err := Load(Options{ReadFile: files})
	return cfg, err
}

func TestLoadPolicy(t *testing.T) {
	cfg, err := loadPolicy(t, `
routes:
  - host: old.example.com
    redirect: {to: "https://new.example.com", status: 301, preserve_path: true}
  - host: app.example.com
    path: /healthz
    respond: {status: 200, body: "ok", content_type: text/plain}
  - host: app.example.com
    path: /api
    policy: {timeout: 5s, rate_limit: api, max_body_size: 1MiB, headers: {request: {set: {X-Env: prod}}}}
rate_limits:
  - {name: api, key: ip, rate: 10, burst: 20}
headers:
  - host: "*.example.com"
    response: {set: {X-Frame-Options: DENY}}
security_headers: true
`)
	if err != nil {
		t.Fatalf("Load() = %v", err)
	}
	pc := cfg.Router.Policy
	if len(pc.Routes) != 3 || pc.Routes[2].Policy.Timeout != 5*time.Second || pc.Routes[2].Policy.MaxBodySize != 1<<20 ||
		pc.Routes[1].Line != 6 || len(pc.RateLimits) != 1 || pc.Headers[0].Host != "*.example.com" || !pc.SecurityHeaders {
		t.Errorf("Load() policy = %+v", pc)
	}
	if w := Warnings(cfg); len(w) != 0 {
		t.Errorf("Warnings() = %q, want none", w)
	}
}

func TestLoadPolicyErrors(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       string
	}{
		{"invalid glob", "routes:\n  - {host: a.test, respond: {body: x}}\n  - path: \"/a/[b\"\n    policy: {timeout: 1s}\n",
			`routes (aperio-server.yaml:2): routes[1] (line 4): path "/a/[b" is not a valid glob`},
		{"unknown key", "routes:\n  - host: a.test\n    respnd: {body: x}\n", `line 4: unknown key "respnd"`},
		{"unknown limit", "routes:\n  - policy: {rate_limit: nope}\n", `routes[0] (line 3): policy.rate_limit "nope" names no entry of rate_limits`},
		{"bad key", "rate_limits:\n  - {name: a, key: cookie, rate: 1}\n", `rate_limits (aperio-server.yaml:2): rate_limits[0]: key "cookie" is not ip, header:NAME, user or token`},
		{"CRLF in a value", "headers:\n  - response: {set: {X-A: \"a\\r\\nSet-Cookie: b\"}}\n", "headers (aperio-server.yaml:2): headers[0] (line 3): response: set: X-A: value holds a control character"},
		{"hop-by-hop", "headers:\n  - request: {remove: [Connection]}\n", "Connection is a hop-by-hop or framing header"},
		{"covered rule", "routes:\n  - {path: /api, policy: {timeout: 1s}}\n  - {host: a.test, path: /api/v1, respond: {body: x}}\n",
			"routes (aperio-server.yaml:2): routes[1] is unreachable: routes[0], earlier, matches every request it does"},
		{"environment", "", "has no one-line form"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.yaml == "" {
				files := filesOf(map[string]string{File: "server: {token: master-0123456789abcdef0123456789abcdef}\n"})
				_, _, err = Load(Options{ReadFile: files, Env: envOf(map[string]string{"APERIO_ROUTES": "[]"})})
			} else {
				_, err = loadPolicy(t, tt.yaml)
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Load() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestPolicyWarnings(t *testing.T) {
	cfg, err := loadPolicy(t, "routes:\n  - {host: a.test, path: /api/v1, respond: {body: x}}\n  - {path: /api, policy: {timeout: 1s}}\n")
	if err != nil {
		t.Fatalf("Load() = %v", err)
	}
	w := Warnings(cfg)
	if len(w) != 1 || !strings.Contains(w[0], "routes[0] and routes[1] may both match some requests") {
		t.Errorf("Warnings() = %q, want the partial overlap of routes[0] and routes[1]", w)
	}
}
