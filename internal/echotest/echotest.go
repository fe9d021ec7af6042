// Package echotest is a TCP echo server for tests of raw streams and
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
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
				c.(*net.TCPConn).CloseWrite()
			}()
		}
	}()
	return ln.Addr().String()
}
