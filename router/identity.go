package router

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/aperio-dev/aperio/internal/headerrule"
)

// Visitor is who sent a request, as the edge resolved it once at the
// gateway: everything that keys on the visitor (the per-IP bucket, a
// token's allowed_ips, denied_ips, admin_allowed_ips, the access log, the
// forwarding headers) reads it rather than the request's headers.
type Visitor struct {
	// Addr is the visitor's address, unmapped: the peer itself, or, when the
	// peer is a trusted proxy, the address it names. The zero Addr means
	// the peer's address could not be parsed (not a TCP peer).
	Addr netip.Addr
	// Peer is the address the connection came from (after PROXY protocol,
	// the address its header named).
	Peer netip.Addr
	// Trusted reports whether Peer is inside trusted_proxies.
	Trusted bool
	// Proto is "https" or "http": what a trusted proxy said in
	// X-Forwarded-Proto, else the connection's own scheme.
	Proto string
	// RequestID is the request's id (X-Request-Id): a trusted proxy's when
	// it sent a valid one, else one generated here.
	RequestID string

	// chain is the X-Forwarded-For entries from the visitor up to the
	// peer, exclusive, all of them trusted hops ("" when the peer is the
	// visitor). Forwarded on, with the peer appended.
	chain string
}

// Edge resolves each request's Visitor from its peer address and, for
// peers inside the trusted proxies, the headers those proxies set. It is
// safe for concurrent use.
type Edge struct {
	trusted []netip.Prefix
	header  string // canonical real_ip_header
	xff     bool   // header is X-Forwarded-For: walk it rightmost-untrusted first
	prefix  [17]byte
	seq     atomic.Uint64
}

// Canonical header names of the forwarding headers.
const (
	headerXFF       = "X-Forwarded-For"
	headerXFProto   = "X-Forwarded-Proto"
	headerXFHost    = "X-Forwarded-Host"
	headerForwarded = "Forwarded"
	// HeaderRequestID carries the request's id to the backend and back
	// to the visitor.
	HeaderRequestID = "X-Request-Id"
)

// Bounds on what a trusted proxy may hand on.
const (
	// maxForwardedHops bounds the X-Forwarded-For entries examined from
	// the right; the walk stops there as at an unparsable entry.
	maxForwardedHops = 32
	// maxRequestIDLen bounds an inbound X-Request-Id; longer ones are
	// replaced.
	maxRequestIDLen = 128
)

// NewEdge returns an Edge that believes the forwarding headers of peers
// inside trusted (none when empty) and reads the visitor from header
// (X-Forwarded-For when empty).
func NewEdge(trusted []netip.Prefix, header string) *Edge {
	if header == "" {
		header = headerXFF
	}
	e := &Edge{trusted: trusted, header: http.CanonicalHeaderKey(header)}
	e.xff = e.header == headerXFF
	var b [8]byte
	rand.Read(b[:])
	hex.Encode(e.prefix[:16], b[:])
	e.prefix[16] = '-'
	return e
}

// Trusts reports whether a is inside the trusted proxies.
func (e *Edge) Trusts(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range e.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

type (
	visitorKey  struct{}
	settingsKey struct{}
	contextKey  struct{} // the *visitorContext itself, for Pin
)

// visitorContext carries a request's Visitor in one allocation with the
// context that holds it, and the router settings the request was pinned
// to (Pin).
type visitorContext struct {
	context.Context
	v   Visitor
	set *settings
	// reqID backs the X-Request-Id value Resolve sets: the header's
	// slice shares this allocation instead of one of its own (#43).
	reqID [1]string
}

func (c *visitorContext) Value(key any) any {
	switch key {
	case visitorKey{}:
		return &c.v
	case contextKey{}:
		return c
	case settingsKey{}:
		if c.set != nil {
			return c.set
		}
	}
	return c.Context.Value(key)
}

// Snapshot is the router's live settings at one moment (Router.Snapshot):
// what a request pinned to it (Pin) sees at every stage, whatever
// Reconfigure publishes meanwhile.
type Snapshot struct{ set *settings }

// Snapshot returns the live settings now.
func (rt *Router) Snapshot() Snapshot { return Snapshot{rt.cur.Load()} }

// Pin makes r, which Edge.Resolve returned, see s at every stage of the
// router instead of the settings live when each stage runs: a caller
// that swaps its own settings with the router's (the gateway's edge lists
// on a reload) pins the router's that go with its own, so one request
// sees all of one configuration. It costs no allocation; a request
// that did not go through Resolve is left alone.
func Pin(r *http.Request, s Snapshot) {
	if vc, ok := r.Context().Value(contextKey{}).(*visitorContext); ok && s.set != nil {
		vc.set = s.set
	}
}

// settingsOf is the settings r was pinned to, else the live ones.
func (rt *Router) settingsOf(r *http.Request) *settings {
	if s, ok := r.Context().Value(settingsKey{}).(*settings); ok {
		return s
	}
	return rt.cur.Load()
}

// Resolve resolves r's Visitor and returns r carrying it. When a trusted
// proxy named the visitor, the returned request's RemoteAddr is the
// visitor's address (port 0), so that what logs or audits RemoteAddr names
// the visitor. It sets X-Request-Id on r's header to the request's id.
func (e *Edge) Resolve(r *http.Request) *http.Request {
	vc := &visitorContext{Context: r.Context()}
	v := &vc.v
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err == nil {
		v.Peer = peer.Addr().Unmap()
	}
	v.Addr = v.Peer
	v.Trusted = v.Peer.IsValid() && e.Trusts(v.Peer)
	v.Proto = connProto(r)
	h := r.Header
	if !e.xff {
		// Nothing vouches for an untrusted peer's real_ip_header: the
		// backend must not read it; nor for its underscore spellings,
		// which CGI-style backends read as the same name, from anyone.
		for k := range h {
			if headerrule.SameName(k, e.header) && (!v.Trusted || k != e.header) {
				delete(h, k)
			}
		}
	}
	if v.Trusted {
		if e.xff {
			v.Addr, v.chain = e.walkForwardedFor(h[headerXFF], v.Peer)
		} else if vv := h[e.header]; len(vv) == 1 {
			if a, err := netip.ParseAddr(strings.TrimSpace(vv[0])); err == nil && a.Zone() == "" {
				v.Addr, v.chain = a.Unmap(), strings.TrimSpace(vv[0])
			}
		}
		if vv := h[headerXFProto]; len(vv) == 1 {
			switch {
			case strings.EqualFold(vv[0], "https"):
				v.Proto = "https"
			case strings.EqualFold(vv[0], "http"):
				v.Proto = "http"
			}
		}
		if vv := h[HeaderRequestID]; len(vv) == 1 && validRequestID(vv[0]) {
			v.RequestID = vv[0]
		}
	}
	if v.RequestID == "" {
		v.RequestID = e.newRequestID()
		vc.reqID[0] = v.RequestID
		h[HeaderRequestID] = vc.reqID[:]
	}
	r = r.WithContext(vc)
	if v.Addr != v.Peer {
		r.RemoteAddr = netip.AddrPortFrom(v.Addr, 0).String()
	}
	return r
}

// walkForwardedFor finds the visitor in X-Forwarded-For lines by the
// rightmost-untrusted rule: from the right, skip the entries inside the
// trusted proxies; the first one outside is the visitor. An unparsable
// entry, or the hop bound, ends the walk at the last trusted hop seen,
// which is then the visitor. It returns the visitor and the entries from
// it to the right end, as sent.
func (e *Edge) walkForwardedFor(lines []string, peer netip.Addr) (netip.Addr, string) {
	visitor, chain := peer, ""
	hops := 0
	for i := len(lines) - 1; i >= 0; i-- {
		line := lines[i]
		for end := len(line); end >= 0; {
			start := strings.LastIndexByte(line[:end], ',') + 1
			entry := strings.TrimSpace(line[start:end])
			if hops++; hops > maxForwardedHops {
				return visitor, chain
			}
			if entry != "" {
				a, err := netip.ParseAddr(entry)
				if err != nil || a.Zone() != "" {
					return visitor, chain
				}
				visitor, chain = a.Unmap(), joinChain(lines, i, line, start)
				if !e.Trusts(visitor) {
					return visitor, chain
				}
			}
			end = start - 1
		}
	}
	return visitor, chain
}

// joinChain returns the X-Forwarded-For text from offset start of
// lines[i] (which is line) to the end of the last line. One line, the
// common case, costs no allocation.
func joinChain(lines []string, i int, line string, start int) string {
	s := strings.TrimSpace(line[start:])
	if i == len(lines)-1 {
		return s
	}
	return s + ", " + strings.Join(lines[i+1:], ", ")
}

// validRequestID reports whether id may be handed on as it came: 1 to
// maxRequestIDLen characters of letters, digits and -_.:+/=@.
func validRequestID(id string) bool {
	if id == "" || len(id) > maxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-' || c == '_' || c == '.' || c == ':' || c == '+' || c == '/' || c == '=' || c == '@':
		default:
			return false
		}
	}
	return true
}

// newRequestID returns a process-unique id: a random per-process prefix
// and a counter, in hex. One allocation, no fmt.
func (e *Edge) newRequestID() string {
	var b [len(e.prefix) + 16]byte
	n := copy(b[:], e.prefix[:])
	return string(strconv.AppendUint(b[:n], e.seq.Add(1), 16))
}

// VisitorOf returns r's Visitor as the Edge resolved it. A request that
// did not pass through an Edge (the router used on its own) gets its peer
// as visitor, trusted by nobody.
func VisitorOf(r *http.Request) Visitor {
	if v, ok := r.Context().Value(visitorKey{}).(*Visitor); ok {
		return *v
	}
	var v Visitor
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		v.Peer = ap.Addr().Unmap()
	}
	v.Addr, v.Proto = v.Peer, connProto(r)
	return v
}

func connProto(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	return "http"
}

// setForwarded sets the forwarding headers the backend sees, as
// httputil.ProxyRequest.SetXForwarded does but with the trust check:
// X-Forwarded-For is the trusted chain with the peer appended (only the
// peer when it is not trusted), X-Forwarded-Proto the resolved scheme,
// X-Forwarded-Host the Host routed on. An untrusted peer's other
// visitor-naming headers (Forwarded, X-Real-Ip, every X-Forwarded-*...)
// are removed, since nothing vouches for them; every X-Aperio-* header a visitor sent is removed, since only the
// server sets them (the tunnel adds its own after this), and so is every
// spelling of a server-owned name with "_" for "-", and under act drop
// every name with an underscore (dropVisitorHeaders).
func setForwarded(h http.Header, v *Visitor, host string, act underscoreAction) {
	dropVisitorHeaders(h, v.Trusted, act)
	// X-Forwarded-Host and X-Forwarded-For share one backing array: one
	// allocation for both values.
	vals := make([]string, 2)
	vals[0] = host
	h[headerXFHost] = vals[0:1:1]
	switch {
	case !v.Peer.IsValid():
		delete(h, headerXFF)
	case v.chain != "":
		vals[1] = v.chain + ", " + v.Peer.String()
		h[headerXFF] = vals[1:2:2]
	default:
		vals[1] = v.Peer.String()
		h[headerXFF] = vals[1:2:2]
	}
	if v.Proto == "https" {
		h[headerXFProto] = protoHTTPS
	} else {
		h[headerXFProto] = protoHTTP
	}
}

// hasAperioPrefix reports whether canonical header key k is X-Aperio-*.
func hasAperioPrefix(k string) bool {
	return len(k) > len("X-Aperio-") && strings.EqualFold(k[:len("X-Aperio-")], "X-Aperio-")
}

// Shared, never-modified header values: setting them allocates nothing.
var (
	protoHTTP  = []string{"http"}
	protoHTTPS = []string{"https"}
)
