package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"time"

	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/tunnel"
)

// rawDialTimeout bounds dialing the target of a raw stream: the server
// waits for the client's answer (tunnel.RawOpenTimeout) longer than this.
const rawDialTimeout = 5 * time.Second

// ForwardRaw implements tunnel.RawForwarder: it connects a visitor's
// connection to an exposed port (RawTCP, RawUDP) to the entry's target,
// and a passed-through TLS connection (RawTLS) to its service's target.
// The server names the entry or service; the client trusts nothing else
// of the header but the addresses it passes on in a PROXY header.
func (a *Agent) ForwardRaw(ctx context.Context, h tunnel.RawHeader) (io.ReadWriteCloser, error) {
	switch h.Kind {
	case tunnel.RawTCP, tunnel.RawUDP:
		e, ok := a.exposeEntry(h.Name)
		if !ok {
			return nil, fmt.Errorf("no expose entry %q", h.Name)
		}
		if e.Protocol != h.Kind {
			return nil, fmt.Errorf("expose entry %q is %s, the stream %s", h.Name, e.Protocol, h.Kind)
		}
		if h.Kind == tunnel.RawUDP {
			c, err := a.dialRaw(ctx, "udp", e.Target)
			if err != nil {
				return nil, err
			}
			return a.rawDone(newUDPFlow(c)), nil
		}
		c, err := a.dialRaw(ctx, "tcp", e.Target)
		if err != nil {
			return nil, err
		}
		if e.ProxyProtocol == config.ProxyProtocolV2 {
			c.SetWriteDeadline(time.Now().Add(rawDialTimeout))
			if _, err := c.Write(proxyV2Header(false, h.Visitor, h.Local)); err != nil {
				c.Close()
				return nil, fmt.Errorf("target %s: PROXY header: %w", e.Target, err)
			}
			c.SetWriteDeadline(time.Time{})
		}
		return a.rawDone(c), nil
	case tunnel.RawTLS:
		svc := a.service(h.Name)
		if svc == nil || !svc.cfg.TLSPassthrough {
			return nil, fmt.Errorf("no tls_passthrough service %q", h.Name)
		}
		c, err := a.dialRaw(ctx, "tcp", hostPort(svc.target))
		if err != nil {
			return nil, err
		}
		a.served.Add(1)
		return a.rawDone(c), nil
	}
	return nil, fmt.Errorf("raw stream of kind %q not served", h.Kind)
}

// exposeEntry returns the expose entry named name of the current state.
func (a *Agent) exposeEntry(name string) (config.Expose, bool) {
	for _, e := range a.state.Load().expose {
		if e.Name == name {
			return e, true
		}
	}
	return config.Expose{}, false
}

func (a *Agent) dialRaw(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: rawDialTimeout, KeepAlive: 30 * time.Second}
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, fmt.Errorf("target %s: %w", addr, err)
	}
	return c, nil
}

// hostPort is the host:port a passed-through connection is dialed on:
// the target's, with its scheme's port when it names none.
func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	port := "80"
	if u.Scheme == "https" {
		port = "443"
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// rawDone wraps the connection of a raw stream so that its end counts as
// activity for idle_timeout, as a request's end does.
func (a *Agent) rawDone(c io.ReadWriteCloser) io.ReadWriteCloser {
	return &rawEnd{ReadWriteCloser: c, done: func() { a.lastRequest.Store(time.Now().UnixNano()) }}
}

// rawEnd is a raw stream's target connection that reports its close. It
// passes CloseWrite and SetWriteDeadline on to a connection that has
// them (TCP), so the relay half-closes it and can release a blocked
// write; for one that has not (a UDP flow) they fail, and the relay
// closes it whole instead.
type rawEnd struct {
	io.ReadWriteCloser
	once sync.Once
	done func()
}

var errNoHalfClose = errors.New("agent: the target's connection cannot be half-closed or given a write deadline")

func (c *rawEnd) CloseWrite() error {
	if cw, ok := c.ReadWriteCloser.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errNoHalfClose
}

func (c *rawEnd) SetWriteDeadline(t time.Time) error {
	if d, ok := c.ReadWriteCloser.(interface{ SetWriteDeadline(time.Time) error }); ok {
		return d.SetWriteDeadline(t)
	}
	return errNoHalfClose
}

func (c *rawEnd) Close() error {
	c.once.Do(c.done)
	return c.ReadWriteCloser.Close()
}

// udpFlow adapts a connected UDP socket to the byte stream of a RawUDP
// stream: each datagram from the target is read out framed (a 2-byte
// length and the payload, tunnel.WriteDatagram's framing), and the framed
// bytes written to it, in whatever pieces they arrive, are sent on as
// one datagram per frame. It has no CloseWrite: when the server ends the
// flow, the relay closes it, which ends the reading side too.
type udpFlow struct {
	c net.Conn
	// in holds the framed bytes from the stream not yet sent: less than
	// one frame once Write returns.
	in []byte
	// out holds the framed datagram from the target not yet read out,
	// from off.
	out []byte
	off int
	buf []byte
}

func newUDPFlow(c net.Conn) *udpFlow {
	return &udpFlow{c: c, buf: make([]byte, 2+tunnel.MaxDatagram)}
}

// Read returns framed datagrams from the target.
func (f *udpFlow) Read(p []byte) (int, error) {
	if f.off >= len(f.out) {
		n, err := f.c.Read(f.buf[2:])
		if err != nil {
			return 0, err
		}
		f.buf[0], f.buf[1] = byte(n>>8), byte(n)
		f.out, f.off = f.buf[:2+n], 0
	}
	n := copy(p, f.out[f.off:])
	f.off += n
	return n, nil
}

// errUDPFrame is a frame length over tunnel.MaxDatagram: the stream is
// out of step and the flow ends.
var errUDPFrame = errors.New("agent: udp flow: frame over the datagram limit")

// Write takes framed datagrams from the stream and sends each whole one.
// A datagram the target refuses (ECONNREFUSED of an earlier send, a
// full buffer) is dropped, as UDP would drop it; the flow goes on.
func (f *udpFlow) Write(p []byte) (int, error) {
	f.in = append(f.in, p...)
	i := 0
	for len(f.in)-i >= 2 {
		n := int(f.in[i])<<8 | int(f.in[i+1])
		if n > tunnel.MaxDatagram {
			return 0, errUDPFrame
		}
		if len(f.in)-i < 2+n {
			break
		}
		f.c.Write(f.in[i+2 : i+2+n]) // a lost datagram is UDP's to lose
		i += 2 + n
	}
	f.in = f.in[:copy(f.in, f.in[i:])]
	return len(p), nil
}

func (f *udpFlow) Close() error { return f.c.Close() }
