package main

import (
	"bufio"
	"context"
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
)

// TestProcessesDrainOnSIGTERM runs the real binaries: a SIGTERMed client
// stops taking requests, finishes the one in flight and exits 0; a
// SIGTERMed server exits 0.
func TestProcessesDrainOnSIGTERM(t *testing.T) {
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

	server := exec.Command(filepath.Join(bin, "aperio-server"))
	server.Dir = t.TempDir()
	server.Env = append(os.Environ(), "APERIO_SERVER_TOKEN=proc-token-0123456789", "APERIO_HOST=127.0.0.1", "APERIO_PORT=0",
		"APERIO_DATA_DIR="+filepath.Join(server.Dir, "data"), "APERIO_LOG_LEVEL=info",
		// While the only client drains, a new request waits this long for
		// another client, then gets 504.
		"APERIO_GATEWAY_TIMEOUT=200ms")
	addr := startAndFind(t, server, regexp.MustCompile(`msg="server listening" addr=(\S+)`))
	base := "http://" + addr

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

	if err := server.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, server); code != 0 {
		t.Fatalf("server exit code after SIGTERM = %d, want 0", code)
	}
}

// buildBinaries builds aperio-server and aperio-client into a temporary
// directory and returns it.
func buildBinaries(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+string(os.PathSeparator), "../aperio-server", ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startAndFind starts cmd and returns the first submatch of re in its
// stderr, waiting up to 20 s. Later stderr is drained into the test log.
func startAndFind(t *testing.T, cmd *exec.Cmd, re *regexp.Regexp) string {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			if m := re.FindStringSubmatch(line); m != nil && !sent {
				sent = true
				if len(m) > 1 {
					found <- m[1]
				} else {
					found <- m[0]
				}
			}
		}
	}()
	select {
	case s := <-found:
		return s
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not log %q within 20s", filepath.Base(cmd.Path), re)
		return ""
	}
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
