package process_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/testkit/procs"
)

// TestProcessesErrorPagesAndMaintenanceTTL runs the real binaries: the
// operator's error page answers a browser and JSON an API client while a
// wildcard maintenance entry set with `api maintenance on --reason --ttl`
// holds, and the entry ends by itself.
func TestProcessesErrorPagesAndMaintenanceTTL(t *testing.T) {
	t.Parallel()
	bin := procs.Binaries(t)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "app "+r.URL.Path)
	}))
	t.Cleanup(backend.Close)

	const token = "proc-token-0123456789"
	dir := t.TempDir()
	conf := filepath.Join(dir, "aperio-server.yaml")
	yml := "error_pages:\n" +
		"  - status: 503\n" +
		"    hostname: \"*.proc.test\"\n" +
		"    html: \"<h1>{hostname} rests</h1><p>{reason}</p><i>{request_id}</i><style>p { color: red }</style>\"\n"
	if err := os.WriteFile(conf, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	base := startServer(t, bin, "APERIO_SERVER_TOKEN="+token, "APERIO_SERVER_CONFIG="+conf).url

	client := exec.Command(filepath.Join(bin, "aperio-client"), strings.TrimPrefix(backend.URL, "http://"),
		"--hostname", "web.proc.test", "--server-url", base, "--server-token", token)
	client.Dir = t.TempDir()
	client.Env = append(os.Environ(), "HOME="+client.Dir)
	startAndFind(t, client, regexp.MustCompile(`msg="tunnel connected"`))

	get := func(accept string) (int, http.Header, string) {
		req, err := http.NewRequest("GET", base+"/x", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "web.proc.test"
		req.Header.Set("Accept", accept)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil, err.Error()
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return 0, nil, err.Error()
		}
		return resp.StatusCode, resp.Header, string(b)
	}
	waitFor(t, "the hostname answers 200", func() bool { code, _, _ := get("*/*"); return code == 200 })

	api := exec.Command(filepath.Join(bin, "aperio-client"), "api", "maintenance", "on", "*.proc.test", "--reason", "db <upgrade>", "--ttl", "3s")
	api.Env = append(os.Environ(), "HOME="+t.TempDir(), "APERIO_SERVER_URL="+base, "APERIO_API_KEY="+token)
	if out, err := api.CombinedOutput(); err != nil {
		t.Fatalf("api maintenance on: %v\n%s", err, out)
	}
	waitFor(t, "the wildcard maintenance applies", func() bool { code, _, _ := get("*/*"); return code == 503 })

	code, h, body := get("text/html,application/xhtml+xml,*/*;q=0.8")
	id := h.Get("X-Request-Id")
	want := "<h1>web.proc.test rests</h1><p>web.proc.test is down for maintenance: db &lt;upgrade&gt;</p><i>" + id + "</i><style>p { color: red }</style>"
	if code != 503 || body != want || h.Get("Content-Type") != "text/html; charset=utf-8" || h.Get("Retry-After") == "" || id == "" {
		t.Errorf("browser in maintenance = %d %v %q, want 503 with the operator's page %q", code, h, body, want)
	}
	code, h, body = get("application/json")
	var js struct {
		Error     string `json:"error"`
		Status    int    `json:"status"`
		RequestID string `json:"request_id"`
	}
	if err := json.Unmarshal([]byte(body), &js); err != nil || code != 503 || js.Status != 503 || js.RequestID != h.Get("X-Request-Id") ||
		js.Error != "web.proc.test is down for maintenance: db <upgrade>" {
		t.Errorf("API client in maintenance = %d %q (%v), want 503 JSON with the reason and request id", code, body, err)
	}
	// The entry ends by itself, with no call to turn it off.
	waitFor(t, "the maintenance entry ends by itself", func() bool { code, _, _ := get("*/*"); return code == 200 })
}
