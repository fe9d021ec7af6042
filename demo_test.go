package aperio_test

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestDemoRefusesATakenPort runs make demo's first step, scripts/demo.sh
// --check-port: with the port held by a listener it exits 1 at once and
// says so, with python3 on PATH (a bind) and without (a connect); with the
// port free it exits 0 and starts nothing.
func TestDemoRefusesATakenPort(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("bash: %v (the demo script needs it)", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	taken := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	t.Cleanup(func() { ln.Close() })

	run := func(port, path string) (int, string) {
		t.Helper()
		cmd := exec.Command(bash, "scripts/demo.sh", "--check-port")
		cmd.Env = append(os.Environ(), "PORT="+port, "PATH="+path)
		out, err := cmd.CombinedOutput()
		if _, ok := err.(*exec.ExitError); err != nil && !ok {
			t.Fatalf("demo.sh --check-port: %v", err)
		}
		return cmd.ProcessState.ExitCode(), string(out)
	}
	// Without python3: PATH names a directory holding only dirname (the
	// script's first command), so the check falls back to bash's /dev/tcp.
	bare := t.TempDir()
	dirname, err := exec.LookPath("dirname")
	if err != nil {
		t.Fatalf("dirname: %v (the demo script needs it)", err)
	}
	if err := os.Symlink(dirname, filepath.Join(bare, "dirname")); err != nil {
		t.Fatal(err)
	}
	paths := map[string]string{"with python3 (if installed)": os.Getenv("PATH"), "without python3": bare}
	for name, path := range paths {
		t.Run(name, func(t *testing.T) {
			code, out := run(taken, path)
			if code != 1 || !strings.Contains(out, "port "+taken+" on 127.0.0.1 is in use") || !strings.Contains(out, "PORT=9000 make demo") {
				t.Errorf("demo.sh --check-port on a taken port = exit %d %q, want 1 naming the port and PORT=", code, out)
			}
		})
	}
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(free.Addr().(*net.TCPAddr).Port)
	free.Close()
	if code, out := run(port, os.Getenv("PATH")); code != 0 || out != "" {
		t.Errorf("demo.sh --check-port on a free port = exit %d %q, want 0 and silence", code, out)
	}
}
