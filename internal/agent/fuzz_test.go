package agent

import (
	"net"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/tunnel"
)

// FuzzUDPFlowWrite: whatever bytes a (hostile) server writes to a UDP
// flow, in whatever pieces, the adapter never panics, holds less than one
// frame between writes, and refuses a frame over the datagram limit.
func FuzzUDPFlowWrite(f *testing.F) {
	f.Add([]byte{0, 3, 'a', 'b', 'c', 0, 0}, uint8(1))
	f.Add([]byte{0xff, 0xff, 1}, uint8(2))
	f.Add([]byte{0, 5, 'a'}, uint8(7))
	f.Fuzz(func(t *testing.T, data []byte, step uint8) {
		fl := newUDPFlow(discardConn{})
		defer fl.Close()
		n := int(step)%16 + 1
		for i := 0; i < len(data); i += n {
			_, err := fl.Write(data[i:min(i+n, len(data))])
			if err != nil {
				return // out of step: the flow ends
			}
			if len(fl.in) >= 2+tunnel.MaxDatagram {
				t.Fatalf("holds %d bytes, a whole frame or more", len(fl.in))
			}
		}
	})
}

// discardConn is a UDP socket that takes every datagram.
type discardConn struct{ net.Conn }

func (discardConn) Write(p []byte) (int, error) { return len(p), nil }
func (discardConn) Close() error                { return nil }

// FuzzStaticName: no request path maps to a name that leaves the folder,
// names a hidden file, or holds a backslash or NUL.
func FuzzStaticName(f *testing.F) {
	for _, s := range []string{"/", "/a/b.html", "/../x", "/.env", "/.well-known/x", "/a//b", "/a\\..\\b", "/a/./b", "/%2e%2e"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		name, ok := staticName(p)
		if !ok {
			return
		}
		if name == "." {
			return
		}
		if strings.ContainsAny(name, "\\\x00") || strings.HasPrefix(name, "/") {
			t.Fatalf("staticName(%q) = %q", p, name)
		}
		for _, seg := range strings.Split(name, "/") {
			if seg == "" || seg == ".." || seg == "." || strings.HasPrefix(seg, ".") && seg != ".well-known" {
				t.Fatalf("staticName(%q) = %q: segment %q", p, name, seg)
			}
		}
	})
}
