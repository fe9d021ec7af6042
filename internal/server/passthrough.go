package server

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/aperio-dev/aperio/internal/edge/listen"
	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/internal/recovery"
	"github.com/aperio-dev/aperio/router"
	"github.com/aperio-dev/aperio/tunnel"
)

// TLS passthrough by SNI. Every connection of the TLS port is a
// listen.HelloConn that records what the visitor sent until crypto/tls has
// parsed the ClientHello and called GetConfigForClient. There the SNI is
// looked up (router.PassthroughFor): a hostname whose service takes
// passthrough gets the connection as it is, the recorded bytes first,
// over a raw stream to its client; every other handshake goes on
// untouched. The relay runs inside GetConfigForClient, on the
// connection's own goroutine, so nothing waits on it and http.Server's
// shutdown, which closes the connection, ends it.

// errPassedThrough ends the handshake of a connection that was passed
// through; errPassthroughRefused that of one refused.
var (
	errPassedThrough      = errors.New("gateway: connection passed through to its client")
	errPassthroughRefused = errors.New("gateway: passthrough refused")
)

// passthrough passes TLS connections through by SNI, as above.
type passthrough struct {
	router   *router.Router
	registry *router.Registry
	// edge is the gateway's current edge (Reload replaces it): its
	// denied_ips refuse a visitor here too.
	edge *atomic.Pointer[edge]
	// idle ends a relay that moved nothing for this long
	// (visitor_idle_timeout).
	idle time.Duration
	log  *slog.Logger
}

// wrap returns cfg with the SNI lookup in front of its own
// GetConfigForClient (none today).
func (p passthrough) wrap(cfg *tls.Config) *tls.Config {
	next := cfg.GetConfigForClient
	cfg.GetConfigForClient = func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
		if err := p.hello(hi); err != nil {
			return nil, err
		}
		if next != nil {
			return next(hi)
		}
		return nil, nil
	}
	return cfg
}

// hello passes hi's connection through when its SNI routes to
// a passthrough service, and returns an error that ends the handshake;
// nil lets the handshake go on.
func (p passthrough) hello(hi *tls.ClientHelloInfo) error {
	c, ok := hi.Conn.(*listen.HelloConn)
	if !ok {
		return nil
	}
	if !p.registry.AnyPassthrough() || hi.ServerName == "" {
		c.Stop()
		return nil
	}
	visitor := addrPortOf(c.RemoteAddr())
	route, outcome := p.router.PassthroughFor(hi.ServerName, visitor.Addr())
	switch outcome {
	case router.PassthroughNo:
		c.Stop()
		return nil
	case router.PassthroughOK:
	default:
		c.Stop()
		return errPassthroughRefused
	}
	defer route.Release()
	if e := p.edge.Load(); len(e.denied) > 0 && inAny(e.denied, visitor.Addr()) {
		return errPassthroughRefused
	}
	rec, ok := c.Take()
	if !ok {
		return errPassthroughRefused
	}
	sess, ok := route.Conn.(*tunnel.Session)
	if !ok {
		c.Conn.Close()
		return errPassthroughRefused
	}
	p.relay(c, sess, route, hi.ServerName, visitor, rec)
	return errPassedThrough
}

// relay opens the raw stream, sends the recorded hello and
// relays until either side ends; it closes the visitor's connection.
func (p passthrough) relay(c *listen.HelloConn, sess *tunnel.Session, route router.PassthroughRoute, sni string, visitor netip.AddrPort, rec []byte) {
	defer c.Conn.Close()
	defer recovery.Recover(p.log, "tls passthrough")
	c.Conn.SetDeadline(time.Time{})
	ctx, cancel := context.WithTimeout(context.Background(), tunnel.RawOpenTimeout)
	h := tunnel.RawHeader{Kind: tunnel.RawTLS, Name: route.Service, Hostname: sni}
	if visitor.IsValid() {
		h.Visitor = visitor.String()
	}
	if local := addrPortOf(c.LocalAddr()); local.IsValid() {
		h.Local = local.String()
	}
	raw, err := sess.OpenRaw(ctx, h)
	cancel()
	if err != nil {
		p.log.Info("tls passthrough failed", logkey.Hostname, sni, logkey.Err, err)
		return
	}
	if _, err := raw.Write(rec); err != nil {
		raw.Close()
		return
	}
	opts := tunnel.RelayOptions{Idle: p.idle, Log: p.log}
	var cut atomic.Bool
	if u := route.Usage; u != nil {
		// Charged as they flow: a connection opened under a byte quota
		// ends once the quota is reached and it has more to move.
		u.Charge(int64(len(rec)), 0)
		opts.Charge = func(in, out int64) bool {
			if u.TryCharge(in, out) {
				return true
			}
			cut.Store(true)
			return false
		}
	}
	tunnel.Relay(c.Conn, raw, opts)
	if u := route.Usage; u != nil {
		u.Record(0, 0)
		if cut.Load() {
			u.Cut(u.Check())
			p.log.Info("tls passthrough cut at quota", logkey.Hostname, sni)
		}
	}
}

// addrPortOf returns a connection address as an AddrPort, unmapped; the
// zero value for addresses that are not TCP (pipes in tests).
func addrPortOf(a net.Addr) netip.AddrPort {
	if ta, ok := a.(*net.TCPAddr); ok {
		ap := ta.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return netip.AddrPort{}
}
