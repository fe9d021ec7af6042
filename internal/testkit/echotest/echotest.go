// Package echotest holds TCP and UDP echo servers for tests of raw streams and
// public ports.
package echotest

import (
	"io"
	"net"
	"testing"
)

// TCP starts a loopback server that sends back what it reads and
// half-closes once its peer has (the shape of an interactive session
// that ends when its input does); it returns its address and closes at
// the end of the test.
func TCP(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	Serve(t, ln, func(c net.Conn) {
		io.Copy(c, c)
		c.(*net.TCPConn).CloseWrite()
	})
	return ln.Addr().String()
}

// Serve runs handle on each connection ln accepts, each on a goroutine
// of its own, until ln is closed, which it is at the end of the test;
// each connection is closed when handle returns.
func Serve(t testing.TB, ln net.Listener, handle func(net.Conn)) {
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
}

// UDP starts a loopback UDP server that answers each datagram with
// "echo:" and the datagram, to the address it came from; it returns its
// address and closes at the end of the test.
func UDP(t testing.TB) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 65535)
		for {
			n, addr, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(append([]byte("echo:"), buf[:n]...), addr)
		}
	}()
	return pc.LocalAddr().String()
}
