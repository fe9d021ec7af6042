package router

import (
	"net/netip"
	"sync"

	"github.com/aperio-dev/aperio/internal/hostname"
	"github.com/aperio-dev/aperio/internal/visitor/access"
	"github.com/aperio-dev/aperio/internal/visitor/usage"
)

// TLS passthrough: a service announced with tls_passthrough takes the TLS
// connections whose SNI names one of its hostnames as they are, so its
// backend holds its own certificate. The server sees no request, so of
// the request path only what needs none applies: the route (hostname
// only, at the bind's root), maintenance, the token's allowed_ips, the
// service's allowed_ips and denied_ips, and a gate that is open (public,
// or default_access allow); a gate that asks for credentials cannot be
// satisfied without reading the request, so it refuses (fail closed).
// Each connection holds one of the service's max_concurrent permits.

// HTTP never reaches a passthrough backend: its port speaks TLS to the
// visitor, not HTTP to the server. A request whose bind's members all take
// passthrough, arriving on a connection the server decrypted (another
// SNI, no SNI) or over plain HTTP, is answered 421 Misdirected Request
// (checkRoute), never sent as plaintext to the backend's TLS port; the
// client refuses the same (agent.forward) for a bind that mixes both.

// allPassthrough reports whether p has members and every one of them takes
// TLS passthrough. It allocates nothing.
func (p *pool) allPassthrough() bool {
	ms := *p.members.Load()
	for _, s := range ms {
		if !s.passthrough.Load() {
			return false
		}
	}
	return len(ms) > 0
}

// PassthroughRoute is where one passed-through TLS connection goes.
type PassthroughRoute struct {
	// Conn is the client's session and Service the ID of its service.
	Conn    Conn
	Service string
	// Bind is the bind's hostname pattern.
	Bind string
	// Usage counts the connection's bytes against the client's token and
	// organization; nil when usage is not counted.
	Usage   *usage.Counter
	release func()
}

// Release returns the connection's permit; call it once, when the
// connection ends.
func (r *PassthroughRoute) Release() {
	if r.release != nil {
		r.release()
	}
}

// Passthrough outcomes (PassthroughFor).
const (
	// PassthroughNo: the hostname is not passed through; terminate TLS
	// and serve HTTP as usual.
	PassthroughNo = iota
	// PassthroughOK: the route says where the connection goes.
	PassthroughOK
	// PassthroughRefused: the hostname is passed through, but nothing
	// may take this visitor's connection now (maintenance, refused by its
	// address, every client busy or gone, quota): close it.
	PassthroughRefused
)

// AnyPassthrough reports whether some attached service takes TLS
// passthrough; while none does, handshakes skip PassthroughFor.
func (rg *Registry) AnyPassthrough() bool { return rg.passthroughs.Load() > 0 }

// setPassthroughLocked sets s's tls_passthrough flag and keeps the count.
func (rg *Registry) setPassthroughLocked(s *service, on bool) {
	if s.passthrough.Swap(on) != on {
		if on {
			rg.passthroughs.Add(1)
		} else {
			rg.passthroughs.Add(-1)
		}
	}
}

// PassthroughFor decides a TLS connection with SNI host from visitor ip:
// PassthroughNo when host's bind has no passthrough service (the
// handshake goes on), else PassthroughOK with a route holding a permit,
// or PassthroughRefused. Only the members that announce tls_passthrough
// are candidates; the lowest priority tier with a free permit wins,
// round-robin within it.
func (rt *Router) PassthroughFor(host string, ip netip.Addr) (PassthroughRoute, int) {
	if !rt.reg.AnyPassthrough() || host == "" {
		return PassthroughRoute{}, PassthroughNo
	}
	host = hostname.Normalize(host)
	p := rt.reg.table.Load().match(host, "/")
	if p == nil {
		return PassthroughRoute{}, PassthroughNo
	}
	ms := *p.members.Load()
	any := false
	for _, s := range ms {
		if s.passthrough.Load() {
			any = true
			break
		}
	}
	if !any {
		return PassthroughRoute{}, PassthroughNo
	}
	set := rt.cur.Load()
	if rt.inMaintenance(set, host, rt.now()) != nil {
		return PassthroughRoute{}, PassthroughRefused
	}
	ge := p.gate.Load()
	if ge == nil {
		ge = set.defaultGate
	} else {
		ge = ge.gateFor(set.cfg.Access.Default)
	}
	if !ge.gate.Open() {
		return PassthroughRoute{}, PassthroughRefused
	}
	// An open gate decides by the visitor's address alone.
	if d := ge.gate.Check(nil, access.Visitor{Addr: ip, HTTPS: true, Host: host, Path: "/"}); !d.Admitted {
		return PassthroughRoute{}, PassthroughRefused
	}
	tier := int64(-1)
	for _, s := range ms {
		if s.passthrough.Load() && s.routable() && s.admits(ip) && s.free() {
			if pr := s.priority.Load(); tier < 0 || pr < tier {
				tier = pr
			}
		}
	}
	if tier < 0 {
		return PassthroughRoute{}, PassthroughRefused
	}
	start := p.next.Add(1)
	for i := range ms {
		s := ms[(start+uint64(i))%uint64(len(ms))]
		if !s.passthrough.Load() || !s.routable() || !s.admits(ip) || s.priority.Load() != tier {
			continue
		}
		if !s.tryTake() {
			continue
		}
		route := PassthroughRoute{Conn: s.conn, Service: s.id, Bind: p.pattern, release: sync.OnceFunc(s.release)}
		if m := rt.cfg.Usage; m != nil {
			c := m.Counter(s.tokenID, s.org, p.pattern)
			if c.Check() != usage.Allowed {
				route.Release()
				return PassthroughRoute{}, PassthroughRefused
			}
			route.Usage = c
		}
		return route, PassthroughOK
	}
	return PassthroughRoute{}, PassthroughRefused
}
