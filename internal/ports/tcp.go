package ports

import (
	"context"
	"errors"
	"net"
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

// track admits c under max_tcp_connections and records it so that close
// ends it; false when the port is full or closing.
func (p *port) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx.Err() != nil || len(p.conns) >= p.m.cfg.MaxTCPConnections {
		return false
	}
	p.conns[c] = struct{}{}
	p.open.Add(1)
	return true
}

func (p *port) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	p.open.Add(-1)
}

// serveTCP relays one visitor connection over a raw stream to a session
// of the pool, and closes it.
func (p *port) serveTCP(c net.Conn) {
	defer p.wg.Done()
	defer p.untrack(c)
	defer c.Close()
	defer recovery.Recover(p.m.log, "public tcp port")
	visitor := addrOf(c.RemoteAddr())
	mb := p.pick(visitor.Addr())
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
	if visitor.IsValid() {
		h.Visitor = visitor.String()
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
	in, out := tunnel.Relay(c, raw, opts)
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
