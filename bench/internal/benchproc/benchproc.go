// Package benchproc is what the bench harnesses (bench/scaling,
// bench/scaleclients, bench/soak) do with the processes they start and the
// ports they pick, so that no run leaves a process behind.
package benchproc

import "net"

// FreePort returns a port nothing on 127.0.0.1 listened on a moment ago.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
