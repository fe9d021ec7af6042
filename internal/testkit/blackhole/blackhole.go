// Package blackhole gives tests a loopback TCP address whose handshake
// never completes: a listener whose accept queue is full, so the kernel
// drops every further SYN and a dial waits until its own timeout. Only
// tests import it.
package blackhole

import (
	"errors"
	"net"
	"testing"
	"time"
)

// probeTimeout is how long Addr's own check dial waits before it counts
// the address as silent.
const probeTimeout = 200 * time.Millisecond

// Addr returns host:port on 127.0.0.1 that takes no connection until the
// test ends: a dial to it neither fails nor succeeds before its timeout.
// Addr checks that with a dial of its own and fails the test when the
// platform completes or refuses it (its accept queue is not bounded by
// the listen backlog). It costs probeTimeout.
func Addr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("blackhole: listen: %v", err)
	}
	tb.Cleanup(func() { ln.Close() })
	// A second listen(2) on a listening socket sets its backlog: with 0
	// the accept queue holds one connection, which the filler takes.
	rc, err := ln.(*net.TCPListener).SyscallConn()
	if err != nil {
		tb.Fatalf("blackhole: %v", err)
	}
	var lerr error
	if err := rc.Control(func(fd uintptr) { lerr = relisten(fd) }); err != nil || lerr != nil {
		tb.Fatalf("blackhole: listen with backlog 0: %v", errors.Join(err, lerr))
	}
	addr := ln.Addr().String()
	filler, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		tb.Fatalf("blackhole: fill the accept queue: %v", err)
	}
	tb.Cleanup(func() { filler.Close() })
	c, err := net.DialTimeout("tcp", addr, probeTimeout)
	if err == nil {
		c.Close()
		tb.Fatalf("blackhole: a dial to %s beyond the full accept queue connected, want it to hang (no SYN dropping on this platform)", addr)
	}
	if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		tb.Fatalf("blackhole: a dial to %s beyond the full accept queue = %v, want a timeout", addr, err)
	}
	return addr
}

// Refused returns host:port on 127.0.0.1 where nothing listens: a port
// just released, so a dial to it is refused at once (unless another
// process takes the port meanwhile, which a test on loopback does not
// expect).
func Refused(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("blackhole: listen: %v", err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
