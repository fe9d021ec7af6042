// Package listen owns the public listeners' chain: what a connection
// passes through between accept and the HTTP server, before any request
// is read. In order: the per-address connection cap (connlimit.go), PROXY
// protocol from trusted proxies, then, on a plain listener, the HTTP/1
// framing guard against request smuggling (framing.go), or, on a TLS
// listener, the recording of the ClientHello that SNI passthrough needs
// (hello.go). It also holds the public port's TLS configuration
// (tlsconfig.go). Nothing here knows routes or sessions: the gateway
// decides what to do with a HelloConn.
package listen

import (
	"net"
	"net/netip"
	"time"

	"github.com/pires/go-proxyproto"
)

// proxyHeaderTimeout bounds the wait for a PROXY protocol header on a new
// connection; a peer that sends none in time is dropped.
const proxyHeaderTimeout = 5 * time.Second

// Config configures Chain. The zero value adds nothing: Chain returns the
// listener itself.
type Config struct {
	// MaxPerIP bounds the concurrent connections of one remote address
	// (max_connections_per_ip); connections beyond it are closed at
	// accept. Zero means no cap.
	MaxPerIP int
	// Trusted reports whether a TCP peer is a trusted proxy
	// (trusted_proxies): it is exempt from MaxPerIP (it carries many
	// visitors on few addresses) and, with ProxyProtocol, its PROXY
	// header names the connection's source. Nil trusts none.
	Trusted func(netip.Addr) bool
	// ProxyProtocol accepts PROXY protocol (v1 and v2) headers from
	// Trusted peers (proxy_protocol).
	ProxyProtocol bool
	// Framing follows each connection's HTTP/1 framing, so that handlers
	// can refuse smuggled requests (RefuseSmuggled); for a listener
	// served without TLS. The server's ConnContext must be
	// FramingContext.
	Framing bool
	// Hello makes each connection a *HelloConn, which records the
	// ClientHello for SNI passthrough; for a listener served with TLS.
	// At most one of Framing and Hello may be set.
	Hello bool
}

// Chain wraps ln in cfg's chain. Connections are counted per TCP peer
// before anything reads from them (a PROXY header from a trusted proxy may
// take seconds to come), and the framing follower sees the bytes after the
// PROXY header. It panics when cfg sets both Framing and Hello. Closing
// the returned listener closes ln.
func Chain(ln net.Listener, cfg Config) net.Listener {
	if cfg.Framing && cfg.Hello {
		panic("listen: Chain with both Framing and Hello")
	}
	ln = limitConns(ln, connLimitConfig{MaxPerIP: cfg.MaxPerIP, Exempt: cfg.Trusted})
	if cfg.ProxyProtocol {
		ln = proxyProtocol(ln, cfg.Trusted)
	}
	switch {
	case cfg.Framing:
		ln = framingListener{ln}
	case cfg.Hello:
		ln = helloListener{ln}
	}
	return ln
}

// proxyProtocol puts PROXY protocol (v1 and v2) on ln. A trusted peer's
// header, when it sends one, names the connection's source; it must
// arrive in one piece within proxyHeaderTimeout, and a malformed one
// closes the connection. Any other peer's connection is not examined at
// all (no read, no wait): a PROXY header from it is just a malformed HTTP
// request, answered 400 and closed, so it can never name a source, and no
// untrusted peer can make RemoteAddr block.
func proxyProtocol(ln net.Listener, trusted func(netip.Addr) bool) net.Listener {
	return &proxyproto.Listener{
		Listener:          ln,
		ReadHeaderTimeout: proxyHeaderTimeout,
		ConnPolicy: func(o proxyproto.ConnPolicyOptions) (proxyproto.Policy, error) {
			if ta, ok := o.Upstream.(*net.TCPAddr); ok && trusted != nil && trusted(ta.AddrPort().Addr().Unmap()) {
				return proxyproto.USE, nil
			}
			return proxyproto.SKIP, nil
		},
	}
}
