// Package sdnotify tells systemd how the service is doing: the sd_notify
// protocol, one datagram of newline-separated KEY=VALUE assignments to the
// Unix socket systemd names in NOTIFY_SOCKET, for a unit of Type=notify.
// The server sends READY=1 once its store is open and its listeners are
// bound, and STOPPING=1 when it begins to shut down. Outside systemd
// (NOTIFY_SOCKET unset) every call does nothing.
package sdnotify

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// The states the server sends.
const (
	Ready    = "READY=1"
	Stopping = "STOPPING=1"
)

// writeTimeout bounds one notification: systemd reads its socket at once,
// and a service must not hang on a manager that does not.
const writeTimeout = time.Second

// maxMessage bounds a notification; systemd reads datagrams of up to a
// page or so, and the states sent here are a few dozen bytes.
const maxMessage = 4096

// maxSocketPath is the room in a Unix socket address (sun_path), with the
// leading byte of an abstract name.
const maxSocketPath = 107

// Notify sends state (such as Ready, or "STATUS=…") to the service manager
// named by $NOTIFY_SOCKET. It reports whether a manager was asked: false
// with a nil error when the variable is unset (not run by systemd, or a
// unit without Type=notify).
func Notify(state string) (bool, error) {
	return send(os.Getenv("NOTIFY_SOCKET"), state)
}

// send writes state to the socket named by socket (NOTIFY_SOCKET's value):
// a path, or an abstract name starting with @.
func send(socket, state string) (bool, error) {
	if socket == "" {
		return false, nil
	}
	if len(state) == 0 || len(state) > maxMessage {
		return false, fmt.Errorf("sdnotify: a state of %d bytes: want 1 to %d", len(state), maxMessage)
	}
	if len(socket) > maxSocketPath || strings.IndexByte(socket, 0) >= 0 {
		return false, errors.New("sdnotify: NOTIFY_SOCKET is not a usable socket address")
	}
	name := socket
	switch socket[0] {
	case '/':
	case '@':
		name = "\x00" + socket[1:] // Linux's abstract namespace
	default:
		// systemd also knows vsock:, which needs a VM socket; a relative
		// path would depend on the working directory.
		return false, fmt.Errorf("sdnotify: NOTIFY_SOCKET %q: want an absolute path or @name", socket)
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return false, fmt.Errorf("sdnotify: %w", err)
	}
	defer conn.Close()
	if err := conn.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil {
		return false, fmt.Errorf("sdnotify: %w", err)
	}
	if _, err := conn.Write([]byte(state)); err != nil {
		return false, fmt.Errorf("sdnotify: %w", err)
	}
	return true, nil
}
