package benchproc

import (
	"net"
	"os/exec"
	"strconv"
	"testing"
)

func TestFreePort(t *testing.T) {
	port, err := FreePort()
	if err != nil || port <= 0 {
		t.Fatalf("FreePort() = %d, %v", port, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatalf("the free port %d cannot be listened on: %v", port, err)
	}
	ln.Close()
}

func TestKillGroup(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "sleep 60")
	Isolate(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start: %v", err)
	}
	KillGroup(cmd.Process.Pid)
	if err := cmd.Wait(); err == nil {
		t.Fatal("the killed process exited cleanly")
	}
}
