package ports

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/internal/recovery"
	"github.com/aperio-dev/aperio/tunnel"
)

// flow is one visitor address of a UDP port: its own raw stream, a
// bounded queue of datagrams towards it, and the goroutine writing back
// to the visitor what the client sends.
type flow struct {
	p       *port
	visitor netip.AddrPort
	mb      *member
	ctr     Counter
	queue   chan []byte
	last    atomic.Int64 // unix nanoseconds of the last datagram either way
	in, out atomic.Int64
	cut     atomic.Bool     // a quota ended the flow
	ctx     context.Context // the flow's lifetime: cancelled by stop
	cancel  context.CancelFunc

	mu  sync.Mutex // guards raw
	raw net.Conn
}

func (f *flow) stop() {
	f.cancel()
	f.mu.Lock()
	if f.raw != nil {
		f.raw.Close()
	}
	f.mu.Unlock()
}

func (f *flow) touch() { f.last.Store(time.Now().UnixNano()) }

// charge charges a datagram's bytes to the flow's counter as it passes,
// and reports false once a quota was reached: the flow is then stopped
// (both its goroutines end) and the cut is recorded once.
func (f *flow) charge(in, out int64) bool {
	if f.ctr == nil || f.ctr.Charge(in, out) {
		return true
	}
	f.stop()
	if f.cut.CompareAndSwap(false, true) {
		f.ctr.Cut()
		f.p.m.log.Info("public port flow cut at quota", logkey.Port, f.p.key.num, logkey.ExposeName, f.mb.name)
	}
	return false
}

// readLoop reads the visitors' datagrams until the port closes and hands
// each to its flow, creating flows within the bounds.
func (p *port) readLoop() {
	defer p.wg.Done()
	defer recovery.Recover(p.m.log, "public udp port")
	// One byte more than the largest datagram accepted, to see oversize.
	buf := make([]byte, p.m.cfg.MaxDatagram+1)
	for {
		n, from, err := p.pc.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) || p.ctx.Err() != nil {
				return
			}
			continue
		}
		if n > p.m.cfg.MaxDatagram {
			p.drops.Add(1)
			continue
		}
		from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
		f := p.flowFor(from)
		if f == nil {
			p.drops.Add(1)
			continue
		}
		d := make([]byte, n)
		copy(d, buf[:n])
		select {
		case f.queue <- d:
			f.touch()
		default:
			p.drops.Add(1)
		}
	}
}

// flowFor returns the flow of visitor, creating it when the bounds and
// the pool allow; nil drops the datagram.
func (p *port) flowFor(visitor netip.AddrPort) *flow {
	p.mu.Lock()
	defer p.mu.Unlock()
	if f := p.flows[visitor]; f != nil {
		return f
	}
	if p.ctx.Err() != nil || len(p.flows) >= p.m.cfg.MaxUDPFlows || p.perIP[visitor.Addr()] >= p.m.cfg.MaxUDPFlowsPerIP {
		p.refus.Add(1)
		return nil
	}
	mb := p.pickLocked(visitor.Addr())
	if mb == nil {
		p.refus.Add(1)
		return nil
	}
	var ctr Counter
	if p.m.cfg.Usage != nil {
		ctr = p.counter(mb)
		if !ctr.Allow() {
			p.refus.Add(1)
			return nil
		}
	}
	f := &flow{p: p, visitor: visitor, mb: mb, ctr: ctr, queue: make(chan []byte, udpQueue)}
	f.ctx, f.cancel = context.WithCancel(p.ctx)
	f.touch()
	p.flows[visitor] = f
	p.perIP[visitor.Addr()]++
	p.open.Add(1)
	p.wg.Add(1)
	go f.run()
	return f
}

// remove takes f out of the table once its goroutines are done.
func (p *port) remove(f *flow) {
	p.mu.Lock()
	if p.flows[f.visitor] == f {
		delete(p.flows, f.visitor)
		if p.perIP[f.visitor.Addr()]--; p.perIP[f.visitor.Addr()] <= 0 {
			delete(p.perIP, f.visitor.Addr())
		}
		p.open.Add(-1)
	}
	p.mu.Unlock()
	in, out := f.in.Load(), f.out.Load()
	p.in.Add(in)
	p.out.Add(out)
	if f.ctr != nil {
		f.ctr.Record(0, 0) // its datagrams were charged as they passed
	}
}

// run opens the flow's stream, writes the queued datagrams to it and,
// on its own goroutine, the client's datagrams back to the visitor, until
// the flow stops (idle, the stream ends, the port closes).
func (f *flow) run() {
	p := f.p
	defer p.wg.Done()
	defer p.remove(f)
	defer f.stop()
	defer recovery.Recover(p.m.log, "public udp flow")
	h := tunnel.RawHeader{Kind: tunnel.RawUDP, Name: f.mb.name, Port: p.key.num, Visitor: f.visitor.String()}
	if local := addrOf(p.pc.LocalAddr()); local.IsValid() {
		h.Local = local.String()
	}
	ctx, cancel := context.WithTimeout(f.ctx, tunnel.RawOpenTimeout)
	raw, err := f.mb.sess.OpenRaw(ctx, h)
	cancel()
	if err != nil {
		p.m.log.Info("public udp flow failed", logkey.Port, p.key.num, logkey.ExposeName, f.mb.name, logkey.Err, err)
		return
	}
	f.mu.Lock()
	f.raw = raw
	f.mu.Unlock()
	if f.ctx.Err() != nil {
		return
	}
	back := make(chan struct{})
	go func() {
		defer close(back)
		defer f.stop()
		defer recovery.Recover(p.m.log, "public udp flow reader")
		buf := make([]byte, tunnel.MaxDatagram)
		for {
			n, err := tunnel.ReadDatagram(raw, buf)
			if errors.Is(err, tunnel.ErrDatagramTooLarge) {
				continue
			}
			if err != nil {
				return
			}
			f.touch()
			if !f.charge(0, int64(n)) {
				return
			}
			if _, err := p.pc.WriteToUDPAddrPort(buf[:n], f.visitor); err != nil {
				if p.ctx.Err() != nil {
					return
				}
				continue
			}
			f.out.Add(int64(n))
		}
	}()
	defer func() { <-back }()
	for {
		select {
		case <-f.ctx.Done():
			return
		case d := <-f.queue:
			if !f.charge(int64(len(d)), 0) {
				return
			}
			if err := tunnel.WriteDatagram(raw, d); err != nil {
				return
			}
			f.in.Add(int64(len(d)))
		}
	}
}

// expireLoop stops the flows idle for UDPIdle.
func (p *port) expireLoop() {
	defer p.wg.Done()
	idle := p.m.cfg.UDPIdle
	tick := max(idle/4, 10*time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
		}
		cut := time.Now().Add(-idle).UnixNano()
		p.mu.Lock()
		for _, f := range p.flows {
			if f.last.Load() < cut {
				f.stop()
			}
		}
		p.mu.Unlock()
	}
}
