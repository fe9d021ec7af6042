package process_test

import (
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/testkit/procs"
)

// TestProcessNotifiesSystemd runs the server as systemd runs a Type=notify
// unit, with NOTIFY_SOCKET naming a datagram socket: it sends READY=1 once
// it serves (readyz answers 200 the moment the datagram arrives, without a
// retry) and STOPPING=1 on SIGTERM.
func TestProcessNotifiesSystemd(t *testing.T) {
	bin := procs.Binaries(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "notify")
	manager, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { manager.Close() })
	s := newReloadServer(t)
	s.write(t, "aperio-server.yaml", "")
	cmd := exec.Command(filepath.Join(bin, "aperio-server"), "--config", s.file)
	cmd.Dir = s.dir
	cmd.Env = append(processEnv(), "NOTIFY_SOCKET="+sock)
	p := startLogged(t, cmd)

	read := func() string {
		t.Helper()
		manager.SetReadDeadline(time.Now().Add(20 * time.Second))
		buf := make([]byte, 4096)
		n, err := manager.Read(buf)
		if err != nil {
			t.Fatalf("no notification from the server: %v", err)
		}
		return string(buf[:n])
	}
	ready := read()
	status, ok := strings.CutPrefix(ready, "READY=1\nSTATUS=serving on ")
	if !ok {
		t.Fatalf("first notification %q, want READY=1 with a STATUS", ready)
	}
	resp, err := http.Get("http://" + status + "/aperio/readyz")
	if err != nil {
		t.Fatalf("readyz right after READY=1: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("readyz right after READY=1: %d, want 200", resp.StatusCode)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "STOPPING=1" {
		t.Errorf("notification on SIGTERM %q, want STOPPING=1", got)
	}
	if code := waitExit(t, p.cmd); code != 0 {
		t.Errorf("server exited %d after SIGTERM, want 0", code)
	}
}
