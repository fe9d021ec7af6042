package process_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/testkit/procs"
)

// TestProcessDrainedByServer: the real binaries; an operator's POST
// /clients/{id}/drain makes the client process log the ask, retire and
// exit 0, and the server lists it no more.
func TestProcessDrainedByServer(t *testing.T) {
	t.Parallel()
	const master = "drain-master-token-0123456789abcdef"
	f := newFleet(t, master)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(backend.Close)
	// A 3 s down threshold: heartbeats, and so the ack carrying the ask,
	// every second.
	base := f.startServer(t, "APERIO_CLIENT_DOWN_THRESHOLD=3s").url
	cmd, log := f.startClient(t, base, "drained", "  - target: "+backend.URL+"\n    hostname: drain.test\n")
	cs := f.clients(t, base)
	if len(cs) != 1 {
		t.Fatalf("GET /clients = %+v, want one client", cs)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+apitype.Prefix+"/clients/"+cs[0].ID+"/drain", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+master)
	resp, err := f.http.Do(req)
	if err != nil {
		t.Fatalf("POST /clients/%s/drain: %v", cs[0].ID, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("POST /clients/%s/drain = %d, want 204", cs[0].ID, resp.StatusCode)
	}
	log.wait(t, regexp.MustCompile(`level=INFO msg="server asked to drain" server_url=`+regexp.QuoteMeta(base)))
	if code := waitExit(t, cmd); code != 0 {
		t.Fatalf("client exit code after the server's drain = %d, want 0", code)
	}
	waitFor(t, "the server lists no client", func() bool { return len(f.clients(t, base)) == 0 })
}

// TestProcessesDrainOnSIGTERM runs the real binaries: a SIGTERMed client
// stops taking requests, finishes the one in flight and exits 0; a
// SIGTERMed server exits 0.
func TestProcessesDrainOnSIGTERM(t *testing.T) {
	t.Parallel()
	bin := procs.Binaries(t)

	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-release
		}
		io.WriteString(w, "done "+r.URL.Path)
	}))
	t.Cleanup(backend.Close)

	server := startServer(t, bin, "APERIO_SERVER_TOKEN=proc-token-0123456789",
		// While the only client drains, a new request waits this long for
		// another client, then gets 504.
		"APERIO_GATEWAY_TIMEOUT=200ms")
	base := server.url

	client := exec.Command(filepath.Join(bin, "aperio-client"), strings.TrimPrefix(backend.URL, "http://"),
		"--hostname", "proc.test", "--server-url", base, "--server-token", "proc-token-0123456789")
	client.Dir = t.TempDir()
	client.Env = append(os.Environ(), "HOME="+client.Dir)
	startAndFind(t, client, regexp.MustCompile(`msg="tunnel connected"`))

	get := func(path string) (int, string) {
		return getHost(t, http.DefaultClient, base, "proc.test", path)
	}
	waitFor(t, "the hostname answers 200", func() bool { code, _ := get("/"); return code == 200 })

	type result struct {
		code int
		body string
	}
	slow := make(chan result, 1)
	go func() {
		code, body := get("/slow")
		slow <- result{code, body}
	}()
	<-entered
	if err := client.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// While it drains, new requests are not sent to it: they wait for
	// another client and time out.
	waitFor(t, "new requests stop reaching the draining client", func() bool { code, _ := get("/"); return code == 504 })
	close(release)
	if r := <-slow; r.code != 200 || r.body != "done /slow" {
		t.Fatalf("in-flight request during drain = %d %q, want 200 %q", r.code, r.body, "done /slow")
	}
	if code := waitExit(t, client); code != 0 {
		t.Fatalf("client exit code after SIGTERM = %d, want 0", code)
	}

	if err := server.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, server.cmd); code != 0 {
		t.Fatalf("server exit code after SIGTERM = %d, want 0", code)
	}
}
