package process_test

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/agent"
	"github.com/aperio-dev/aperio/internal/testkit/procs"
)

// TestStatusRequireConnected: a client whose tunnel to a real server is
// up passes `status --require-connected`; once that server is gone, it
// fails.
func TestStatusRequireConnected(t *testing.T) {
	t.Parallel()
	bin := procs.Binaries(t)
	base, stop := startServerProcess(t, bin)

	dir := t.TempDir()
	// The runtime directory is the test's own: the client's socket and
	// any other one stay out of the developer's.
	env := append(processEnv(), "HOME="+dir, "XDG_RUNTIME_DIR="+dir)
	sock := filepath.Join(dir, "c.sock")
	writeFile(t, filepath.Join(dir, "aperio.yaml"), "server: {url: "+base+", token: "+scalingMaster+"}\nname: connected-test\n"+
		"drain_timeout: 0s\nstatus_socket: "+sock+"\nservices:\n  - {target: http://127.0.0.1:1, hostname: connected.test}\n")
	client := exec.Command(filepath.Join(bin, "aperio-client"))
	client.Dir, client.Env = dir, env
	startLogged(t, client)
	connected := func() bool {
		st, err := agent.ReadStatus(t.Context(), sock)
		return err == nil && st.Connected() == 1
	}
	// status runs aperio-client status --socket sock --require-connected
	// and returns its exit code and output.
	status := func() (int, string, string) {
		t.Helper()
		cmd := exec.Command(filepath.Join(bin, "aperio-client"), "status", "--socket", sock, "--require-connected")
		cmd.Dir, cmd.Env = t.TempDir(), env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			if exit := (*exec.ExitError)(nil); !errors.As(err, &exit) {
				t.Fatalf("aperio-client status: %v", err)
			}
		}
		return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
	}
	waitFor(t, "the client's tunnel is up", connected)
	code, stdout, stderr := status()
	if code != 0 || !strings.Contains(stdout, "1/1") {
		t.Fatalf("status --require-connected with the tunnel up = exit %d, stdout %q, stderr %q; want 0 and TUNNELS 1/1", code, stdout, stderr)
	}

	stop()
	waitFor(t, "the client sees its tunnel down", func() bool { return !connected() })
	code, _, stderr = status()
	if code != 1 || !strings.Contains(stderr, "no tunnel up") {
		t.Fatalf("status --require-connected after the server stopped = exit %d, stderr %q; want 1", code, stderr)
	}
}
