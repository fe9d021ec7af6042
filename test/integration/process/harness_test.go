package process_test

import (
	"context"
	"encoding/json"
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
	"syscall"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/testkit/procs"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// TestProcessesDrainOnSIGTERM runs the real binaries: a SIGTERMed client
// stops taking requests, finishes the one in flight and exits 0; a
// SIGTERMed server exits 0.
func TestProcessesDrainOnSIGTERM(t *testing.T) {
	t.Parallel()
	bin := buildBinaries(t)

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

// buildBinaries builds aperio-server and aperio-client into a temporary
// directory and returns it.
func buildBinaries(t *testing.T) string {
	t.Helper()
	return procs.Binaries(t)
}

// startAndFind starts cmd and returns the first submatch of re in its
// stderr, waiting up to 20 s (startLogged and wait).
func startAndFind(t *testing.T, cmd *exec.Cmd, re *regexp.Regexp) string {
	t.Helper()
	return startLogged(t, cmd).wait(t, re)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("timed out waiting until %s", what)
		case <-tick.C:
		}
	}
}

func waitExit(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
		return cmd.ProcessState.ExitCode()
	case <-ctx.Done():
		t.Fatalf("%s did not exit within 20s", filepath.Base(cmd.Path))
		return -1
	}
}

// getHost sends GET base+path with Host host through c and returns the
// status and body; on a transport error, 0 and the error's text, so that
// callers may poll with it.
func getHost(t testing.TB, c *http.Client, base, host, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err.Error()
	}
	return resp.StatusCode, string(b)
}

// serverProcess is an aperio-server started by startServer.
type serverProcess struct {
	cmd *exec.Cmd
	log *processLog
	url string // the base URL of its one port: http://127.0.0.1:PORT
}

// listening is the line a server logs once its port is open; its group
// is the address.
var listening = regexp.MustCompile(`msg="server listening" addr=(\S+)`)

// startServer starts bin's aperio-server on a loopback port of its own,
// with a data directory of its own and logging at info, env (APERIO_*
// assignments, the master token among them) laid over that, and returns
// it once it listens. It is killed at cleanup if still running.
func startServer(t *testing.T, bin string, env ...string) *serverProcess {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "aperio-server"))
	cmd.Dir = t.TempDir()
	// exec keeps the last of duplicate keys: env overrides these.
	cmd.Env = append(os.Environ(), "APERIO_HOST=127.0.0.1", "APERIO_PORT=0",
		"APERIO_DATA_DIR="+filepath.Join(cmd.Dir, "data"), "APERIO_LOG_LEVEL=info")
	cmd.Env = append(cmd.Env, env...)
	l := startLogged(t, cmd)
	return &serverProcess{cmd: cmd, log: l, url: "http://" + l.wait(t, listening)}
}

// fleet is the binaries of one process test and the master token shared
// by the servers it starts and the clients it connects to them, with the
// HTTP client of its API calls and visits (no proxy from the environment).
type fleet struct {
	bin, master string
	http        *http.Client
}

// newFleet builds the binaries for a test whose servers take master.
func newFleet(t *testing.T, master string) fleet {
	t.Helper()
	tr := &http.Transport{Proxy: nil}
	t.Cleanup(tr.CloseIdleConnections)
	return fleet{bin: buildBinaries(t), master: master, http: &http.Client{Transport: tr, Timeout: time.Minute}}
}

// startServer starts a server with env beyond startServer's defaults.
// The visitor bucket is raised: the polls of process tests send more
// requests a second from one address than its default allows, and it is
// not what they test.
func (f fleet) startServer(t *testing.T, env ...string) *serverProcess {
	t.Helper()
	return startServer(t, f.bin, append([]string{"APERIO_SERVER_TOKEN=" + f.master, "APERIO_IP_LIMIT_MAX=100000"}, env...)...)
}

// startClient starts a client named name, connected to the server at
// base with the master token, with services (the yaml list of
// services:, indented by two, then any further top-level keys), and
// waits for its tunnel.
func (f fleet) startClient(t *testing.T, base, name, services string) (*exec.Cmd, *processLog) {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "aperio.yaml"), "server: {url: "+base+", token: "+f.master+"}\nname: "+name+"\nservices:\n"+services)
	c := exec.Command(filepath.Join(f.bin, "aperio-client"))
	c.Dir = dir
	c.Env = append(os.Environ(), "HOME="+dir)
	l := startLogged(t, c)
	l.wait(t, regexp.MustCompile(`msg="tunnel connected"`))
	return c, l
}

// clients returns the server's GET /aperio/api/clients: one entry per
// client and service.
func (f fleet) clients(t *testing.T, base string) []apitype.ClientInfo {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+apitype.Prefix+"/clients", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+f.master)
	resp, err := f.http.Do(req)
	if err != nil {
		t.Fatalf("GET /aperio/api/clients: %v, want an answer", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /aperio/api/clients = %d %q, %v, want 200", resp.StatusCode, b, err)
	}
	var list []apitype.ClientInfo
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatalf("GET /aperio/api/clients: %v in %q, want a JSON list", err, b)
	}
	return list
}

// waitHealthy waits until the server at base lists every name: host pair
// of want healthy.
func (f fleet) waitHealthy(t *testing.T, base string, want map[string]string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("GET /aperio/api/clients lists %v (name: hostname) healthy", want), func() bool {
		list := f.clients(t, base)
		for name, host := range want {
			if c, ok := clientEntry(list, name, host); !ok || !c.Healthy {
				return false
			}
		}
		return true
	})
}

// clientEntry returns the entry of list of the client called name bound
// to host alone.
func clientEntry(list []apitype.ClientInfo, name, host string) (apitype.ClientInfo, bool) {
	for _, c := range list {
		if c.Name == name && len(c.Hostnames) == 1 && c.Hostnames[0] == host {
			return c, true
		}
	}
	return apitype.ClientInfo{}, false
}

// statusBackend starts a backend that answers every request with status
// and name, and returns its URL.
func statusBackend(t *testing.T, name string, status int) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status)
		io.WriteString(w, name)
	}))
	t.Cleanup(s.Close)
	return s.URL
}

// refusedAddr returns a loopback host:port nobody listens on any more:
// dials to it are refused (until the test listens on it itself).
func refusedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}
