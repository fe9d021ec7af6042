package listen

import (
	"net"
	"net/netip"
	"sync"
)

// connLimitConfig configures the per-address connection cap of the public
// listener.
type connLimitConfig struct {
	// MaxPerIP bounds the concurrent connections of one remote address
	// (max_connections_per_ip). Zero means no cap.
	MaxPerIP int
	// Exempt reports whether an address is exempt from the cap (trusted
	// proxies, which carry many visitors on few addresses). Nil exempts
	// none.
	Exempt func(netip.Addr) bool
}

// connLimitListener closes, at accept, every connection beyond MaxPerIP
// from one remote address. Each accepted connection holds its count until
// it is closed, hijacked connections included (they close through the
// returned wrapper). Safe for concurrent use.
type connLimitListener struct {
	net.Listener
	cfg connLimitConfig

	mu   sync.Mutex // guards open
	open map[netip.Addr]int
}

// limitConns wraps ln with cfg's cap; with no cap it returns ln itself.
func limitConns(ln net.Listener, cfg connLimitConfig) net.Listener {
	if cfg.MaxPerIP <= 0 {
		return ln
	}
	return &connLimitListener{Listener: ln, cfg: cfg, open: make(map[netip.Addr]int)}
}

// Accept returns the next connection within the cap. Connections over it
// are closed here and never reach the server: they cost no goroutine.
func (l *connLimitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip, ok := remoteAddr(c)
		if !ok || (l.cfg.Exempt != nil && l.cfg.Exempt(ip)) {
			return c, nil
		}
		if !l.take(ip) {
			c.Close()
			continue
		}
		return &limitedConn{Conn: c, release: func() { l.give(ip) }}, nil
	}
}

func (l *connLimitListener) take(ip netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[ip] >= l.cfg.MaxPerIP {
		return false
	}
	l.open[ip]++
	return true
}

func (l *connLimitListener) give(ip netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[ip] <= 1 {
		delete(l.open, ip) // the map holds only addresses with connections
		return
	}
	l.open[ip]--
}

// remoteAddr returns c's remote IP address, IPv4-mapped addresses unmapped
// so that one visitor has one key.
func remoteAddr(c net.Conn) (netip.Addr, bool) {
	ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap(), true
}

// limitedConn gives its address's count back once, on the first Close.
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
