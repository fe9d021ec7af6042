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

	"github.com/aperio-dev/aperio/internal/testkit/procs"
)

// TestProcessesReloadOnSIGHUP: SIGHUP makes neither binary exit; the
// server reloads its configuration, the client too without dropping its
// tunnel, the tunnel keeps serving, and SIGTERM still ends both with exit
// 0. The server also warns at startup about its weak (under
// 32 characters) master token.
func TestProcessesReloadOnSIGHUP(t *testing.T) {
	t.Parallel()
	bin := procs.Binaries(t)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "up")
	}))
	t.Cleanup(backend.Close)

	const token = "hup-master-token-0123456789"
	sp := startServer(t, bin, "APERIO_SERVER_TOKEN="+token)
	server, srv, base := sp.cmd, sp.log, sp.url
	// A 27-character master token starts the server, with a warning.
	srv.wait(t, regexp.MustCompile(`level=WARN msg="weak configuration" problem="server.token: 27 characters, at least 32 recommended`))

	client := exec.Command(filepath.Join(bin, "aperio-client"), strings.TrimPrefix(backend.URL, "http://"),
		"--hostname", scalingHost, "--server-url", base, "--server-token", token)
	client.Dir = t.TempDir()
	client.Env = append(os.Environ(), "HOME="+client.Dir)
	cli := startLogged(t, client)
	cli.wait(t, regexp.MustCompile(`msg="tunnel connected"`))

	get := func() int {
		code, _, err := visit(http.DefaultClient, base, "GET", "/", nil)
		if err != nil {
			return 0
		}
		return code
	}
	waitFor(t, "the hostname answers 200", func() bool { return get() == 200 })

	// Both reload their configuration on SIGHUP (cmd/aperio-server and
	// the client's reload tests check what each applies).
	procs := []struct {
		cmd  *exec.Cmd
		log  *processLog
		line *regexp.Regexp
	}{
		{server, srv, regexp.MustCompile(`level=INFO msg="configuration reloaded" reason=SIGHUP `)},
		{client, cli, regexp.MustCompile(`level=INFO msg="config reloaded" reason=SIGHUP`)},
	}
	for _, p := range procs {
		if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		p.log.wait(t, p.line)
	}
	if n := cli.count(0, regexp.MustCompile(`msg="tunnel connected"`)); n != 1 {
		t.Fatalf("client tunnel connections after SIGHUP = %d, want 1 (a reload keeps the tunnel)", n)
	}
	if code := get(); code != 200 {
		t.Fatalf("GET after SIGHUP to both = %d, want 200 (both still running)", code)
	}
	for _, p := range []*exec.Cmd{client, server} {
		if err := p.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := waitExit(t, p); code != 0 {
			t.Fatalf("%s exit code after SIGHUP then SIGTERM = %d, want 0", filepath.Base(p.Path), code)
		}
	}
}
