package process_test

import (
	"bufio"
	"bytes"
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
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/testkit/poll"
	"github.com/aperio-dev/aperio/internal/testkit/procs"
)

// startAndFind starts cmd and returns the first submatch of re in its
// stderr, waiting up to 20 s (startLogged and wait).
func startAndFind(t *testing.T, cmd *exec.Cmd, re *regexp.Regexp) string {
	t.Helper()
	return startLogged(t, cmd).wait(t, re)
}

// waitFor polls cond (poll.Until) for up to 20 s, what naming it in the
// failure.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, 20*time.Second, what, cond)
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
	return fleet{bin: procs.Binaries(t), master: master, http: &http.Client{Transport: tr, Timeout: time.Minute}}
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

// processLog is a started process (by startLogged) and its stderr, line
// by line.
type processLog struct {
	cmd   *exec.Cmd
	mu    sync.Mutex // guards lines
	lines []string
	ended chan struct{} // closed once stderr is read to its end
}

// startLogged starts cmd, records its stderr, and kills it at cleanup if
// it is still running; a failed test's log shows the stderr.
func startLogged(t *testing.T, cmd *exec.Cmd) *processLog {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	l := &processLog{cmd: cmd, ended: make(chan struct{})}
	scanned := l.ended
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			l.mu.Lock()
			l.lines = append(l.lines, sc.Text())
			l.mu.Unlock()
		}
		io.Copy(io.Discard, stderr) // a line past the scanner's bound: keep the pipe flowing
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			if err := cmd.Process.Kill(); err != nil {
				t.Errorf("kill %s: %v", filepath.Base(cmd.Path), err)
			}
			<-scanned // Wait closes the pipe: read it to the end first
			cmd.Wait()
		}
		if t.Failed() {
			l.mu.Lock()
			t.Logf("%s stderr:\n%s", filepath.Base(cmd.Path), strings.Join(l.lines, "\n"))
			l.mu.Unlock()
		}
	})
	return l
}

// wait returns the first submatch of re (or the match, if re has no
// group) in the earliest line that matches, waiting for one up to 20 s.
func (l *processLog) wait(t *testing.T, re *regexp.Regexp) string {
	t.Helper()
	m := l.waitLine(t, 0, re)
	return m[len(m)-1]
}

// mark is the number of lines read so far: waitLine(t, l.mark(), re)
// waits for a line written after now.
func (l *processLog) mark() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lines)
}

// waitLine waits up to 20 s for a line at index from or later that
// matches re and returns its submatches; it fails at once if the process
// ends its stderr without one.
func (l *processLog) waitLine(t *testing.T, from int, re *regexp.Regexp) []string {
	t.Helper()
	var m []string
	ended := false
	waitFor(t, fmt.Sprintf("a log line matching %q", re), func() bool {
		select {
		case <-l.ended:
			ended = true
		default:
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, line := range l.lines[min(from, len(l.lines)):] {
			if m = re.FindStringSubmatch(line); m != nil {
				return true
			}
		}
		return ended
	})
	if m == nil {
		t.Fatalf("%s ended without a log line matching %s", filepath.Base(l.cmd.Path), re)
	}
	return m
}

// count is the number of lines at index from or later that match re.
func (l *processLog) count(from int, re *regexp.Regexp) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines[min(from, len(l.lines)):] {
		if re.MatchString(line) {
			n++
		}
	}
	return n
}

// writeFile writes content to the file name, readable by its owner only.
func writeFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// replaceFile writes content to a hidden temporary file beside name and
// renames it over name, as editors and ConfigMap updates do: a reader
// never sees it half written.
func replaceFile(t *testing.T, name, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(name), "."+filepath.Base(name)+".tmp")
	writeFile(t, tmp, content)
	if err := os.Rename(tmp, name); err != nil {
		t.Fatal(err)
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p to the buffer.
func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startLogging starts cmd with its stderr captured into w.
func startLogging(t *testing.T, cmd *exec.Cmd, w io.Writer) {
	t.Helper()
	cmd.Stderr = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
}

// processEnv is the test's environment without APERIO_* settings (nor
// the aliases HOST, PORT and LOG_LEVEL), so that only the test's file
// configures the server.
func processEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "APERIO_") || k == "HOST" || k == "PORT" || k == "LOG_LEVEL" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// reloadServer is an aperio-server run by a process test from a config
// file of its own.
type reloadServer struct {
	*processLog
	dir, file string
	base      string // http://127.0.0.1:PORT or https://…
}

// reloadMaster is the master token of the process tests' servers.
const reloadMaster = "reload-master-token-0123456789abcdef"

// serverHead is the part of every test server's file that does not
// change: loopback, a port of its own, the visitor bucket raised for the
// tests' polling.
func serverHead(dataDir string) string {
	return "server: {token: " + reloadMaster + "}\nhost: 127.0.0.1\nport: 0\nip_limit_max: 100000\ndata_dir: " + dataDir + "\n"
}

// newReloadServer prepares a server's directory; write its files, then
// start it.
func newReloadServer(t *testing.T) *reloadServer {
	dir := t.TempDir()
	return &reloadServer{dir: dir, file: filepath.Join(dir, "aperio-server.yaml")}
}

// startReloadServer writes body (after serverHead) to aperio-server.yaml
// in a directory of its own, starts the server on it, and returns once it
// listens. scheme is http or https.
func startReloadServer(t *testing.T, bin, scheme, body string) *reloadServer {
	t.Helper()
	s := newReloadServer(t)
	s.write(t, "aperio-server.yaml", body)
	s.start(t, bin, scheme)
	return s
}

// start starts the server on its file and returns once it listens.
func (s *reloadServer) start(t *testing.T, bin, scheme string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "aperio-server"), "--config", s.file)
	cmd.Dir = s.dir
	cmd.Env = processEnv()
	s.processLog = startLogged(t, cmd)
	s.base = scheme + "://" + s.wait(t, listening)
}

// write replaces the file name of the server's directory the way an
// editor does (replaceFile). The server's own file gets serverHead first.
func (s *reloadServer) write(t *testing.T, name, content string) {
	t.Helper()
	if name == "aperio-server.yaml" {
		content = serverHead(filepath.Join(s.dir, "data")) + content
	}
	replaceFile(t, filepath.Join(s.dir, name), content)
}

// reloaded matches the line of a reload applied; its groups are the
// reason, the keys applied and those that need a restart. It is at INFO,
// or at WARN when a key needs a restart (reloadLevel checks which).
var reloaded = regexp.MustCompile(`level=(?:INFO|WARN) msg="configuration reloaded" reason="?([^"]*?)"? applied="?([^"]*?)"? restart_needed="?([^"]*?)"?$`)

// reloadLevel fails the test unless the reload line m (a match of
// reloaded) is at WARN exactly when it names a key that needs a restart.
func reloadLevel(t *testing.T, m []string) {
	t.Helper()
	want := "level=INFO"
	if m[3] != "none" {
		want = "level=WARN"
	}
	if !strings.HasPrefix(m[0], want+" ") {
		t.Errorf("reload line %q, want it at %s (restart_needed=%s)", m[0], want, m[3])
	}
}

// reloadedAny matches the line of a reload applied, at any level.
var reloadedAny = regexp.MustCompile(`msg="configuration reloaded"`)

// reloadFailed matches the line of a reload refused; its groups are the
// reason and the error.
var reloadFailed = regexp.MustCompile(`level=ERROR msg="configuration reload failed; running on the previous configuration" reason="?([^"]*?)"? err=(.*)$`)

// get sends method base+path with Host host through c and returns the
// answer with its body read; on a transport error it fails the test.
func get(t *testing.T, c *http.Client, method, url, host string, body io.Reader, header http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for k, vv := range header {
		req.Header[k] = vv
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s (Host %s): %v", method, url, host, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s (Host %s): reading the body: %v", method, url, host, err)
	}
	return resp, string(b)
}
