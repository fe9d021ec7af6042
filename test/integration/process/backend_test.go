package process_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/testkit/procs"
)

// TestProcessesBackendSettings runs the real binaries: one client serves
// a path bind with trim_bind (the backend sees the path without the prefix
// and the prefix in X-Forwarded-Prefix) and host_header, a unix socket
// target, and a hostname whose backend refuses connections behind a
// circuit breaker; a second client serves that hostname too. Once the
// breaker opens, the first client announces the service unhealthy and
// every request goes to the second client.
func TestProcessesBackendSettings(t *testing.T) {
	t.Parallel()
	bin := procs.Binaries(t)

	type seen struct{ uri, host, prefix string }
	seenAPI := make(chan seen, 16)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seenAPI <- seen{r.RequestURI, r.Host, r.Header.Get("X-Forwarded-Prefix")}
		io.WriteString(w, "api")
	}))
	t.Cleanup(api.Close)

	sock := filepath.Join(t.TempDir(), "app.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	unixApp := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "unix "+r.URL.Path)
	}))
	unixApp.Listener = ln
	unixApp.Start()
	t.Cleanup(unixApp.Close)

	refused := refusedAddr(t)
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "b") }))
	t.Cleanup(b.Close)

	base := startServer(t, bin, "APERIO_SERVER_TOKEN=proc-token-0123456789", "APERIO_GATEWAY_TIMEOUT=1s").url

	clientA := exec.Command(filepath.Join(bin, "aperio-client"), "--name", "a")
	clientA.Dir = t.TempDir()
	clientA.Env = append(os.Environ(), "HOME="+clientA.Dir, "APERIO_SERVER_URL="+base, "APERIO_SERVER_TOKEN=proc-token-0123456789")
	yaml := fmt.Sprintf(`services:
  - target: %s
    hostname: routing.test
    path: /api
    host_header: vhost.internal
  - target: unix://%s
    hostname: unix.test
  - target: http://%s
    hostname: breaker.test
    circuit_breaker: {failures: 2, open_for: 10m}
`, api.URL, sock, refused)
	if err := os.WriteFile(filepath.Join(clientA.Dir, "aperio.yaml"), []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	logA := startLogged(t, clientA)
	logA.wait(t, regexp.MustCompile(`msg="tunnel connected"`))

	clientB := exec.Command(filepath.Join(bin, "aperio-client"), strings.TrimPrefix(b.URL, "http://"),
		"--hostname", "breaker.test", "--name", "b", "--server-url", base, "--server-token", "proc-token-0123456789")
	clientB.Dir = t.TempDir()
	clientB.Env = append(os.Environ(), "HOME="+clientB.Dir)
	startAndFind(t, clientB, regexp.MustCompile(`msg="tunnel connected"`))

	tr := &http.Transport{Proxy: nil}
	t.Cleanup(tr.CloseIdleConnections)
	visitor := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	get := func(host, path string) (int, string) {
		return getHost(t, visitor, base, host, path)
	}

	if code, body := get("routing.test", "/api/x?q=1"); code != 200 || body != "api" {
		t.Fatalf("GET routing.test/api/x = %d %q, want 200 api", code, body)
	}
	if s := <-seenAPI; s.uri != "/x?q=1" || s.prefix != "/api" || s.host != "vhost.internal" {
		t.Errorf("path-bound backend saw %q, X-Forwarded-Prefix %q, Host %q; want /x?q=1, /api, vhost.internal", s.uri, s.prefix, s.host)
	}
	if code, body := get("unix.test", "/hello"); code != 200 || body != "unix /hello" {
		t.Errorf("GET unix.test/hello = %d %q, want 200 %q", code, body, "unix /hello")
	}

	// Round robin sends some requests to a, whose backend refuses: two
	// failures open its breaker, and from then on b answers everything.
	waitFor(t, "ten requests in a row are answered by b", func() bool {
		for range 10 {
			if code, body := get("breaker.test", "/"); code != 200 || body != "b" {
				return false
			}
		}
		return true
	})
	logA.wait(t, regexp.MustCompile(`msg="circuit breaker open"`))
}
