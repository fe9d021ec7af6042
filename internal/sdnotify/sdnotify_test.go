package sdnotify

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// listen opens a datagram socket as systemd does for a Type=notify unit.
func listen(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func receive(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 8192)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return string(buf[:n])
}

// TestNotify: the state reaches the socket NOTIFY_SOCKET names, a path or
// an abstract name, as one datagram.
func TestNotify(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	c := listen(t, path)
	t.Setenv("NOTIFY_SOCKET", path)
	if sent, err := Notify(Ready + "\nSTATUS=serving"); !sent || err != nil {
		t.Fatalf("Notify = %v, %v; want sent", sent, err)
	}
	if got := receive(t, c); got != "READY=1\nSTATUS=serving" {
		t.Errorf("the manager received %q", got)
	}

	abstract := "@aperio-sdnotify-test-" + strings.ReplaceAll(t.Name(), "/", "-")
	a := listen(t, "\x00"+abstract[1:])
	t.Setenv("NOTIFY_SOCKET", abstract)
	if sent, err := Notify(Stopping); !sent || err != nil {
		t.Fatalf("Notify to %s = %v, %v", abstract, sent, err)
	}
	if got := receive(t, a); got != Stopping {
		t.Errorf("the manager received %q, want %q", got, Stopping)
	}
}

// TestNotifyUnset: outside systemd nothing is sent and nothing fails.
func TestNotifyUnset(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	if sent, err := Notify(Ready); sent || err != nil {
		t.Errorf("Notify without NOTIFY_SOCKET = %v, %v; want false, nil", sent, err)
	}
}

// TestNotifyHostile: a NOTIFY_SOCKET that is relative, too long, holds a
// NUL, names vsock or nothing listening is an error, quickly, never a
// panic or a hang; so is an empty or oversized state.
func TestNotifyHostile(t *testing.T) {
	dir := t.TempDir()
	for _, socket := range []string{
		"notify", "./notify", "vsock:2:1234", "/" + strings.Repeat("a", 200), "/tmp/x\x00y",
		filepath.Join(dir, "nobody-listens"), "@",
	} {
		start := time.Now()
		if sent, err := send(socket, Ready); sent || err == nil {
			t.Errorf("send(%q) = %v, %v; want an error", socket, sent, err)
		}
		if d := time.Since(start); d > 2*writeTimeout {
			t.Errorf("send(%q) took %v", socket, d)
		}
	}
	path := filepath.Join(dir, "ok")
	listen(t, path)
	for _, state := range []string{"", strings.Repeat("x", maxMessage+1)} {
		if sent, err := send(path, state); sent || err == nil {
			t.Errorf("send of a %d-byte state = %v, %v; want an error", len(state), sent, err)
		}
	}
}
