package process_test

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/testkit/procs"
)

// binaries returns the directory holding aperio-server and aperio-client.
func binaries(t *testing.T) string {
	t.Helper()
	return procs.Binaries(t)
}

// proc is a started process whose stderr lines are kept for waitLine.
type proc struct {
	cmd   *exec.Cmd
	mu    sync.Mutex // guards lines
	lines []string
	ended chan struct{} // closed once stderr is read to its end
}

// startProc starts cmd, keeps its stderr, and kills it at cleanup if it
// still runs; a failed test's log shows the stderr.
func startProc(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, ended: make(chan struct{})}
	scanned := p.ended
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
		}
		io.Copy(io.Discard, stderr) // a line past the scanner's bound: keep the pipe flowing
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-scanned
			cmd.Wait()
		}
		if t.Failed() {
			p.mu.Lock()
			t.Logf("%s stderr:\n%s", filepath.Base(cmd.Path), strings.Join(p.lines, "\n"))
			p.mu.Unlock()
		}
	})
	return p
}

// mark is the number of lines read so far: waitLine(t, p.mark(), re)
// waits for a line written after now.
func (p *proc) mark() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.lines)
}

// waitLine waits up to 20 s for a line at index from or later that
// matches re and returns its submatches.
func (p *proc) waitLine(t *testing.T, from int, re *regexp.Regexp) []string {
	t.Helper()
	var m []string
	ended := false
	waitUntil(t, "a log line matching "+re.String(), func() bool {
		select {
		case <-p.ended:
			ended = true
		default:
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, l := range p.lines[min(from, len(p.lines)):] {
			if m = re.FindStringSubmatch(l); m != nil {
				return true
			}
		}
		return ended
	})
	if m == nil {
		t.Fatalf("%s ended without a log line matching %s", filepath.Base(p.cmd.Path), re)
	}
	return m
}

// count is the number of lines at index from or later that match re.
func (p *proc) count(from int, re *regexp.Regexp) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, l := range p.lines[min(from, len(p.lines)):] {
		if re.MatchString(l) {
			n++
		}
	}
	return n
}

// waitUntil polls cond every 20 ms for up to 20 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond) // polling a process from outside: nothing to wait on
	}
}

// waitExit waits up to 20 s for p to exit and returns its exit code.
func (p *proc) waitExit(t *testing.T) int {
	t.Helper()
	done := make(chan struct{})
	go func() {
		p.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not exit within 20s", filepath.Base(p.cmd.Path))
		return -1
	}
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
	*proc
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
	s.proc = startProc(t, cmd)
	addr := s.waitLine(t, 0, regexp.MustCompile(`msg="server listening" addr=(\S+)`))[1]
	s.base = scheme + "://" + addr
}

// write replaces the file name of the server's directory the way an
// editor does: a new file renamed over the old. The server's own file
// gets serverHead first.
func (s *reloadServer) write(t *testing.T, name, content string) {
	t.Helper()
	if name == "aperio-server.yaml" {
		content = serverHead(filepath.Join(s.dir, "data")) + content
	}
	tmp := filepath.Join(s.dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, name)); err != nil {
		t.Fatal(err)
	}
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
