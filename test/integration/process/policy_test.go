package process_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/aperio-dev/aperio/internal/testkit/procs"
)

// TestProcessesTrafficPolicy runs the real binaries with a traffic
// policy: a redirect and a fixed answer served without any client, a
// route's rate limit answering 429 with the entry to raise, header rules
// both ways, the security preset, and a client service's own response
// rule, which the server's rule overrides.
func TestProcessesTrafficPolicy(t *testing.T) {
	t.Parallel()
	bin := procs.Binaries(t)
	backend := http.NewServeMux()
	backend.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Server", "backend/1.0")
		io.WriteString(w, "env="+r.Header.Get("X-Env")+" cookie="+r.Header.Get("Cookie"))
	})
	srv := httptest.NewServer(backend)
	t.Cleanup(srv.Close)
	origin := srv.URL

	serverDir := t.TempDir()
	writeFile(t, filepath.Join(serverDir, "aperio-server.yaml"), `
server: {token: proc-token-0123456789abcdef0123456789}
host: 127.0.0.1
port: 0
routes:
  - host: old.test
    redirect: {to: "https://new.test", status: 301, preserve_path: true}
  - host: status.test
    path: /healthz
    respond: {status: 200, body: "all good", headers: {Cache-Control: no-store}}
  - host: proc.test
    path: /api
    policy: {rate_limit: api}
rate_limits:
  - {name: api, key: ip, rate: 0.01, burst: 2}
headers:
  - host: proc.test
    request: {set: {X-Env: prod}, remove: [Cookie]}
    response: {remove: [Server], set: {X-Frame-Options: DENY}}
security_headers: true
`)
	server := exec.Command(filepath.Join(bin, "aperio-server"))
	server.Dir = serverDir
	server.Env = append(os.Environ(), "APERIO_DATA_DIR="+filepath.Join(serverDir, "data"))
	addr := startAndFind(t, server, regexp.MustCompile(`msg="server listening" addr=(\S+)`))
	base := "http://" + addr

	do := func(method, host, path string, header http.Header) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		for k, vv := range header {
			req.Header[k] = vv
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(b)
	}

	// No client is connected yet: route rules answer by themselves.
	resp, _ := do("GET", "old.test", "/docs/a?x=1", nil)
	if resp.StatusCode != 301 || resp.Header.Get("Location") != "https://new.test/docs/a?x=1" {
		t.Errorf("redirect = %d to %q, want 301 to https://new.test/docs/a?x=1", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, body := do("GET", "status.test", "/healthz", nil)
	if resp.StatusCode != 200 || body != "all good" || resp.Header.Get("Cache-Control") != "no-store" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("respond = %d %q, headers %v; want 200 \"all good\" with Cache-Control and the preset", resp.StatusCode, body, resp.Header)
	}

	clientDir := t.TempDir()
	writeFile(t, filepath.Join(clientDir, "aperio.yaml"), `
server: {url: `+base+`, token: proc-token-0123456789abcdef0123456789}
services:
  - target: `+origin+`
    hostname: proc.test
    headers: {set: {X-Frame-Options: SAMEORIGIN, X-App: yes}}
`)
	client := exec.Command(filepath.Join(bin, "aperio-client"))
	client.Dir = clientDir
	client.Env = append(os.Environ(), "HOME="+clientDir)
	startAndFind(t, client, regexp.MustCompile(`msg="tunnel connected"`))
	waitFor(t, "proc.test answers 200", func() bool { r, _ := do("GET", "proc.test", "/", nil); return r.StatusCode == 200 })

	resp, body = do("GET", "proc.test", "/", http.Header{"Cookie": {"session=secret"}})
	if body != "env=prod cookie=" {
		t.Errorf("the backend saw %q, want env=prod and no cookie", body)
	}
	h := resp.Header
	if h.Get("Server") != "" || h.Get("X-Frame-Options") != "DENY" || h.Get("X-App") != "yes" ||
		h.Get("Referrer-Policy") != "strict-origin-when-cross-origin" || h.Get("Strict-Transport-Security") != "" {
		t.Errorf("answer's headers = %v; want no Server, the server's X-Frame-Options DENY over the client's, X-App, the preset without HSTS over http", h)
	}

	for i := range 2 {
		if r, _ := do("GET", "proc.test", "/api/x", nil); r.StatusCode != 200 {
			t.Fatalf("request %d to /api = %d, want 200", i, r.StatusCode)
		}
	}
	resp, _ = do("GET", "proc.test", "/api/x", nil)
	if resp.StatusCode != 429 || resp.Header.Get("X-Aperio-Limit") != "route; setting=rate_limits[0]" || resp.Header.Get("Retry-After") == "" {
		t.Errorf("third request to /api = %d, x-aperio-limit %q, Retry-After %q; want 429 route; setting=rate_limits[0] with Retry-After",
			resp.StatusCode, resp.Header.Get("X-Aperio-Limit"), resp.Header.Get("Retry-After"))
	}
}

// noRedirect is a client that returns redirects instead of following them.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
