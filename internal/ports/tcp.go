package ports

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/internal/recovery"
	"github.com/aperio-dev/aperio/tunnel"
)

// acceptLoop accepts the visitors of a TCP port until it closes. A
// failing Accept that is not the close backs off briefly (file
// descriptors exhausted, for example) instead of spinning.
func (p *port) acceptLoop() {
	defer p.wg.Done()
	backoff := 5 * time.Millisecond
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || p.ctx.Err() != nil {
				return
			}
			p.m.log.Warn("public port accept failed", logkey.Port, p.key.num, logkey.Err, err)
			t := time.NewTimer(backoff)
			select {
			case <-p.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(backoff*2, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		if !p.track(c) {
			c.Close()
			p.refus.Add(1)
			continue
		}
		p.wg.Add(1)
		go p.serveTCP(c)
	}
}

// track admits c under max_tcp_connections and
// port_max_connections_per_ip and records it so that close ends it;
// false when the port, or the visitor's share of it, is full, or the
// port is closing.
func (p *port) track(c net.Conn) bool {
	key := visitorKey(addrOf(c.RemoteAddr()).Addr())
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx.Err() != nil || len(p.conns) >= p.m.cfg.MaxTCPConnections || p.perIP[key] >= p.m.cfg.MaxTCPConnectionsPerIP {
		return false
	}
	p.conns[c] = key
	p.perIP[key]++
	p.open.Add(1)
	return true
}

func (p *port) untrack(c net.Conn) {
	p.mu.Lock()
	key := p.conns[c]
	delete(p.conns, c)
	if p.perIP[key]--; p.perIP[key] <= 0 {
		delete(p.perIP, key) // the map holds only visitors with connections
	}
	p.mu.Unlock()
	p.open.Add(-1)
}

// visitorKey is what port_max_connections_per_ip counts by: an IPv4
// address, or the /64 of an IPv6 one, since a single host commonly holds
// a whole /64 and picks addresses from it at will.
func visitorKey(a netip.Addr) netip.Addr {
	if a.Is6() && !a.Is4In6() {
		return netip.PrefixFrom(a, 64).Masked().Addr()
	}
	return a.Unmap()
}

// firstByteConn is a visitor's TCP connection that must send a byte
// within a deadline: the read deadline is set when it is made and
// cleared by the first read that returns data, after which only the
// relay's idle bound applies. It keeps CloseWrite, which Relay needs for
// half-closes.
type firstByteConn struct {
	net.Conn
	heard bool // set by the first read with data; Relay reads from one goroutine
}

// awaitFirstByte returns c with a read deadline d from now, lifted by
// the first byte read; with d at or above idle (which already bounds a
// silent connection) it returns c as is.
func awaitFirstByte(c net.Conn, d, idle time.Duration) net.Conn {
	if d >= idle || c.SetReadDeadline(time.Now().Add(d)) != nil {
		return c
	}
	return &firstByteConn{Conn: c}
}

func (c *firstByteConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && !c.heard {
		c.heard = true
		if derr := c.Conn.SetReadDeadline(time.Time{}); derr != nil && err == nil {
			err = derr
		}
	}
	return n, err
}

func (c *firstByteConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported // Relay then closes both ends
}

// serveTCP relays one visitor connection over a raw stream to a session
// of the pool, and closes it.
func (p *port) serveTCP(c net.Conn) {
	defer p.wg.Done()
	defer p.untrack(c)
	defer c.Close()
	defer recovery.Recover(p.m.log, "public tcp port")
	// The first-byte clock starts at accept: opening the stream to the
	// client counts against it.
	visitor := awaitFirstByte(c, p.m.cfg.TCPFirstByte, p.m.cfg.TCPIdle)
	from := addrOf(c.RemoteAddr())
	mb := p.pick(from.Addr())
	if mb == nil {
		p.refus.Add(1)
		return
	}
	ctr := p.counter(mb)
	if ctr != nil && !ctr.Allow() {
		p.refus.Add(1)
		return
	}
	h := tunnel.RawHeader{Kind: tunnel.RawTCP, Name: mb.name, Port: p.key.num}
	if from.IsValid() {
		h.Visitor = from.String()
	}
	if local := addrOf(c.LocalAddr()); local.IsValid() {
		h.Local = local.String()
	}
	ctx, cancel := context.WithTimeout(p.ctx, tunnel.RawOpenTimeout)
	raw, err := mb.sess.OpenRaw(ctx, h)
	cancel()
	if err != nil {
		p.refus.Add(1)
		p.m.log.Info("public port connection failed", logkey.Port, p.key.num, logkey.ExposeName, mb.name, logkey.Err, err)
		return
	}
	opts := tunnel.RelayOptions{Idle: p.m.cfg.TCPIdle, Log: p.m.log}
	var cut atomic.Bool
	if ctr != nil {
		// Charged as they flow: a connection opened under a byte quota
		// ends once the quota is reached and it has more to move.
		opts.Charge = func(in, out int64) bool {
			if ctr.Charge(in, out) {
				return true
			}
			cut.Store(true)
			return false
		}
	}
	in, out := tunnel.Relay(visitor, raw, opts)
	p.in.Add(in)
	p.out.Add(out)
	if ctr != nil {
		ctr.Record(0, 0) // its bytes were charged as they flowed
		if cut.Load() {
			ctr.Cut()
			p.m.log.Info("public port connection cut at quota", logkey.Port, p.key.num, logkey.ExposeName, mb.name)
		}
	}
}
