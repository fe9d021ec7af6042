package acmetest

import (
	"errors"
	"net"
	"testing"
)

// errNoRange says the machine's ephemeral port range cannot be read
// (FreePort reads it from Linux's /proc), so FreePort falls back to a
// port of the kernel's.
var errNoRange = errors.New("acmetest: ephemeral port range unknown")

// FreePort returns a port for t to listen on, on 127.0.0.1 or every
// address, with TCP, UDP or both; the number stays reserved for t until
// t's cleanup. It fails t if no port is left. It is safe for concurrent
// use.
//
// A port of the kernel's (listen on port 0, close, return the number)
// is free only at the time of the call: every listener on port 0 and
// every outgoing connection on the machine takes a port from the same
// ephemeral range (Linux's net.ipv4.ip_local_port_range, 32768 to 60999
// by default), so before the test binds it another test or program may
// hold it, and the test fails with "address already in use" or talks to
// a stranger. On Linux FreePort therefore hands out ports from 20000 to
// 65535 outside the ephemeral range and the reserved ports
// (ip_local_reserved_ports), which the kernel never picks on its own.
// Below 20000 are the usual fixed ports of a developer's services.
//
// Among those, test processes (go test runs packages in parallel)
// reserve a port by holding an flock on a file named after it in a
// directory of the user's under os.TempDir(); the lock is released at
// t's cleanup, or by the kernel if the process dies. The files stay, as
// removing a lock file would let two processes lock different files of
// one name. A port is locked before it is tried, so a process never
// touches a port another test holds: the holder then binds TCP and UDP
// on every address of that port once, and a port some other program
// holds (on any address) is skipped. Each call starts at a random port
// so that processes do not all contend for the same first ports. The
// locks are per user: another user's tests are kept off only a port
// already bound when the trial bind runs.
//
// Elsewhere, or when the range cannot be read, FreePort returns a port
// of the kernel's as before, with the race above.
func FreePort(t testing.TB) int {
	t.Helper()
	port, release, err := reservePort()
	if errors.Is(err, errNoRange) {
		return kernelPort(t)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	return port
}

// kernelPort returns a TCP port free on 127.0.0.1 at the time of the
// call, picked by the kernel from the ephemeral range.
func kernelPort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
