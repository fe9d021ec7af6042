package main

import (
	"bufio"
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
	"time"

	"github.com/aperio-dev/aperio/internal/hangup"
)

// watched is a started binary whose stderr lines are handed to the test.
type watched struct {
	cmd   *exec.Cmd
	lines chan string // every stderr line, in order; closed at EOF
}

// startWatched starts cmd and streams its stderr lines; the process is
// killed when t ends if it is still running.
func startWatched(t *testing.T, cmd *exec.Cmd) *watched {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &watched{cmd: cmd, lines: make(chan string, 1024)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(w.lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			select {
			case w.lines <- sc.Text():
			default: // the test stopped reading: drop, never block the process
			}
		}
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		<-done
	})
	return w
}

// find waits up to 20 s for a line matching re and returns its first
// submatch (or the whole match).
func (w *watched) find(t *testing.T, re *regexp.Regexp) string {
	t.Helper()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for {
		select {
		case line, ok := <-w.lines:
			if !ok {
				t.Fatalf("%s exited without logging %q", filepath.Base(w.cmd.Path), re)
			}
			if m := re.FindStringSubmatch(line); m != nil {
				return m[len(m)-1]
			}
		case <-deadline.C:
			t.Fatalf("%s did not log %q within 20s", filepath.Base(w.cmd.Path), re)
		}
	}
}

// TestProcessesIgnoreSIGHUP: SIGHUP makes neither binary exit; each logs
// that it ignored it, the tunnel keeps serving, and SIGTERM still ends
// both with exit 0. The server also warns at startup about its weak (under
// 32 characters) master token.
func TestProcessesIgnoreSIGHUP(t *testing.T) {
	bin := buildBinaries(t)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "up")
	}))
	t.Cleanup(backend.Close)

	const token = "hup-master-token-0123456789"
	server := exec.Command(filepath.Join(bin, "aperio-server"))
	server.Dir = t.TempDir()
	server.Env = append(os.Environ(), "APERIO_SERVER_TOKEN="+token, "APERIO_HOST=127.0.0.1", "APERIO_PORT=0",
		"APERIO_DATA_DIR="+filepath.Join(server.Dir, "data"), "APERIO_LOG_LEVEL=info")
	srv := startWatched(t, server)
	// A 27-character master token starts the server, with a warning.
	srv.find(t, regexp.MustCompile(`level=WARN msg="weak configuration" problem="server.token: 27 characters, at least 32 recommended`))
	base := "http://" + srv.find(t, regexp.MustCompile(`msg="server listening" addr=(\S+)`))

	client := exec.Command(filepath.Join(bin, "aperio-client"), strings.TrimPrefix(backend.URL, "http://"),
		"--hostname", "hup.test", "--server-url", base, "--server-token", token)
	client.Dir = t.TempDir()
	client.Env = append(os.Environ(), "HOME="+client.Dir)
	cli := startWatched(t, client)
	cli.find(t, regexp.MustCompile(`msg="tunnel connected"`))

	get := func() int {
		req, err := http.NewRequest("GET", base+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "hup.test"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return 0
		}
		return resp.StatusCode
	}
	waitFor(t, "the hostname answers 200", func() bool { return get() == 200 })

	ignored := regexp.MustCompile(`level=INFO msg="` + regexp.QuoteMeta(hangup.Message) + `"`)
	for _, p := range []*watched{srv, cli} {
		if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		p.find(t, ignored)
	}
	if code := get(); code != 200 {
		t.Fatalf("GET after SIGHUP to both = %d, want 200 (both still running)", code)
	}
	for _, p := range []*watched{cli, srv} {
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := waitExit(t, p.cmd); code != 0 {
			t.Fatalf("%s exit code after SIGHUP then SIGTERM = %d, want 0", filepath.Base(p.cmd.Path), code)
		}
	}
}
