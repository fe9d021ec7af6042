package listen

import (
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"
)

// acceptAll accepts from ln until it closes and hands each conn to out.
func acceptAll(ln net.Listener, out chan<- net.Conn) {
	for {
		c, err := ln.Accept()
		if err != nil {
			close(out)
			return
		}
		out <- c
	}
}

func TestConnLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		exempt   func(netip.Addr) bool
		accepted int // of three connections with a cap of one
	}{
		{"guard/flood/capped", nil, 1},
		{"guard/flood/trusted-exempt", func(a netip.Addr) bool { return a == netip.MustParseAddr("127.0.0.1") }, 3},
		{"guard/flood/other-not-exempt", func(a netip.Addr) bool { return a == netip.MustParseAddr("10.0.0.1") }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ln := limitConns(raw, connLimitConfig{MaxPerIP: 1, Exempt: tc.exempt})
			accepted := make(chan net.Conn, 3)
			go acceptAll(ln, accepted)
			var dialed []net.Conn
			for range 3 {
				c, err := net.Dial("tcp", raw.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				dialed = append(dialed, c)
			}
			// Refused connections are closed by the server: reading them
			// ends at once. Accepted ones stay open.
			open := 0
			for _, c := range dialed {
				if err := c.SetReadDeadline(time.Now().Add(500 * time.Millisecond)); err != nil {
					t.Fatal(err)
				}
				_, err := c.Read(make([]byte, 1))
				var ne net.Error
				switch {
				case err == nil:
					t.Fatal("read returned data nobody sent")
				case errors.As(err, &ne) && ne.Timeout():
					open++
				}
			}
			if open != tc.accepted {
				t.Errorf("%d of 3 connections stayed open, want %d", open, tc.accepted)
			}
			ln.Close()
			for c := range accepted {
				c.Close()
			}
			for _, c := range dialed {
				c.Close()
			}
		})
	}
}

func TestConnLimitReleasesOnClose(t *testing.T) {
	t.Parallel()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := limitConns(raw, connLimitConfig{MaxPerIP: 1}).(*connLimitListener)
	defer l.Close()
	ip := netip.MustParseAddr("127.0.0.1")
	if !l.take(ip) || l.take(ip) {
		t.Fatal("take: want the first to succeed and the second to fail")
	}
	c := &limitedConn{Conn: nopConn{}, release: func() { l.give(ip) }}
	c.Close()
	c.Close() // a second Close gives nothing back
	if len(l.open) != 0 {
		t.Errorf("after Close: open = %v, want empty", l.open)
	}
	if !l.take(ip) {
		t.Error("take after Close failed")
	}
}

// nopConn is a net.Conn whose Close does nothing.
type nopConn struct{ net.Conn }

func (nopConn) Close() error { return nil }
