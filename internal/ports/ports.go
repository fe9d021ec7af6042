// Package ports owns the server's public TCP and UDP ports: the admission
// of the ports clients ask for in their announcement (Expose), the
// listener of each open port, and the relay of every visitor connection
// or UDP flow over a raw stream to one of the sessions serving the port.
package ports

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/internal/portspec"
	"github.com/aperio-dev/aperio/tunnel"
)

// Audit actions of public ports (Config.Audit).
const (
	ActionOpened  = "port_opened"
	ActionClosed  = "port_closed"
	ActionRefused = "port_refused"
)

// Defaults of Config.
const (
	DefaultMaxTCPConnections = 100
	DefaultTCPIdle           = 10 * time.Minute
	DefaultUDPIdle           = 60 * time.Second
	DefaultMaxUDPFlows       = 1024
	DefaultMaxUDPFlowsPerIP  = 64
	// DefaultTCPFirstByte is how long a visitor connection to a TCP port
	// may stay without sending its first byte. Clients of every common
	// TCP protocol speak within a second of connecting, or of the
	// server's greeting (SSH, TLS, databases, SMTP); a connection that
	// says nothing for this long only holds a slot.
	DefaultTCPFirstByte = 30 * time.Second
)

// maxAllocateTries bounds the binds one allocation (remote_port 0) tries
// before it gives up, so that a range held by other processes costs a
// bounded number of syscalls per heartbeat.
const maxAllocateTries = 64

// udpQueue bounds the datagrams waiting for one flow's stream; over it
// datagrams are dropped and counted.
const udpQueue = 64

// ErrDisabled is the refusal of every expose entry on a server without a
// tcp_port_range.
var ErrDisabled = errors.New("tcp ports are disabled on this server")

// Session is what the Manager needs of a tunnel session; *tunnel.Session
// provides the first two, the gateway adapts OpenRaw.
type Session interface {
	Identity() tunnel.Identity
	Announcement() *tunnel.Announcement
	// OpenRaw opens a raw stream for h (tunnel.Session.OpenRaw).
	OpenRaw(ctx context.Context, h tunnel.RawHeader) (net.Conn, error)
}

// Counter counts a connection's bytes against its token and organization
// (the gateway's usage meter). Allow reports whether a new connection is
// within the quotas. Charge counts bytes as they flow (in from the
// visitor, out to it), one call per copy chunk or datagram, and reports
// false, counting nothing, once a quota was reached: the connection (or
// flow) is then ended without them and Cut records why. Record counts
// one connection or flow as it ends, with the bytes not charged.
type Counter interface {
	Allow() bool
	Charge(in, out int64) bool
	Cut()
	Record(in, out int64)
}

// AuditEntry is one audited port event.
type AuditEntry struct {
	OrgID   string
	TokenID string // "" for the master token
	Action  string // ActionOpened, ActionClosed, ActionRefused
	Detail  string
}

// Config configures a Manager. The zero value has the feature off.
type Config struct {
	// Range is the server's tcp_port_range; empty turns the feature off
	// and refuses every entry with ErrDisabled.
	Range []portspec.Range
	// MaxTCPConnections bounds the open visitor connections of one TCP
	// port; zero means DefaultMaxTCPConnections.
	MaxTCPConnections int
	// MaxTCPConnectionsPerIP bounds the open connections of one visitor
	// address (an IPv6 address's /64) on one TCP port, so that one
	// address cannot hold every slot of MaxTCPConnections; zero means a
	// quarter of MaxTCPConnections, at least 1
	// (port_max_connections_per_ip).
	MaxTCPConnectionsPerIP int
	// TCPIdle closes a TCP connection with no byte either way for this
	// long; zero means DefaultTCPIdle.
	TCPIdle time.Duration
	// TCPFirstByte closes a TCP connection whose visitor has sent no byte
	// this long after connecting, whatever the backend sent; zero means
	// DefaultTCPFirstByte. A value at or above TCPIdle leaves TCPIdle the
	// only bound (port_first_byte_timeout).
	TCPFirstByte time.Duration
	// UDPIdle expires a UDP flow with no datagram either way for this
	// long; zero means DefaultUDPIdle.
	UDPIdle time.Duration
	// MaxUDPFlows bounds the flows of one UDP port, MaxUDPFlowsPerIP those
	// of one visitor IP on it; zero means the defaults.
	MaxUDPFlows      int
	MaxUDPFlowsPerIP int
	// MaxDatagram bounds a visitor's datagram; larger ones are dropped.
	// Zero means tunnel.MaxDatagram, the most a stream carries.
	MaxDatagram int
	// ListenHost is the host the ports listen on ("" for every address).
	ListenHost string
	// Logger receives lifecycle lines; nil discards them.
	Logger *slog.Logger
	// Audit, when set, is called for every port opened, closed or
	// refused, outside the Manager's lock; it must bound its own time.
	Audit func(ctx context.Context, e AuditEntry)
	// Usage, when set, returns the counter of a connection to a port
	// (name is "tcp:PORT" or "udp:PORT"); nil counts nothing.
	Usage func(tokenID, orgID, name string) Counter
}

func (c Config) withDefaults() Config {
	if c.MaxTCPConnections <= 0 {
		c.MaxTCPConnections = DefaultMaxTCPConnections
	}
	if c.MaxTCPConnectionsPerIP <= 0 {
		c.MaxTCPConnectionsPerIP = max(1, c.MaxTCPConnections/4)
	}
	if c.TCPIdle <= 0 {
		c.TCPIdle = DefaultTCPIdle
	}
	if c.TCPFirstByte <= 0 {
		c.TCPFirstByte = DefaultTCPFirstByte
	}
	if c.UDPIdle <= 0 {
		c.UDPIdle = DefaultUDPIdle
	}
	if c.MaxUDPFlows <= 0 {
		c.MaxUDPFlows = DefaultMaxUDPFlows
	}
	if c.MaxUDPFlowsPerIP <= 0 {
		c.MaxUDPFlowsPerIP = DefaultMaxUDPFlowsPerIP
	}
	if c.MaxDatagram <= 0 || c.MaxDatagram > tunnel.MaxDatagram {
		c.MaxDatagram = tunnel.MaxDatagram
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

type portKey struct {
	proto string
	num   int
}

// member is one session's entry serving a port.
type member struct {
	sessionID string
	sess      Session
	name      string
	allowed   []netip.Prefix // the entry's allowed_ips; empty admits all
	tokenIPs  []netip.Prefix // the token's allowed_ips; empty admits all
	tokenID   string
}

func (mb *member) admits(ip netip.Addr) bool {
	return admitsAll(mb.allowed, ip) && admitsAll(mb.tokenIPs, ip)
}

func admitsAll(ps []netip.Prefix, ip netip.Addr) bool {
	if len(ps) == 0 {
		return true
	}
	for _, p := range ps {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// held is one entry of a session and the port it holds.
type held struct {
	key portKey
}

// Manager admits, opens and closes public ports. Create it with New and
// call Close when the server stops. It is safe for concurrent use.
type Manager struct {
	cfg Config
	log *slog.Logger

	owners atomic.Pointer[ownership] // nil until SetOwnership

	mu       sync.Mutex // guards the following fields
	ports    map[portKey]*port
	sessions map[string]map[string]held   // session ID → entry name → port
	refusals map[string]map[string]string // session ID → entry name → last refusal
	closed   bool
}

// New returns a Manager for cfg.
func New(cfg Config) (*Manager, error) {
	for _, r := range cfg.Range {
		if r.Lo < 1 || r.Hi > 65535 || r.Lo > r.Hi {
			return nil, fmt.Errorf("ports: tcp_port_range %d-%d invalid", r.Lo, r.Hi)
		}
	}
	cfg = cfg.withDefaults()
	return &Manager{cfg: cfg, log: cfg.Logger, ports: map[portKey]*port{}, sessions: map[string]map[string]held{}, refusals: map[string]map[string]string{}}, nil
}

// Enabled reports whether the server has a tcp_port_range.
func (m *Manager) Enabled() bool { return len(m.cfg.Range) > 0 }

func parsePrefixes(ss []string) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(ss))
	for _, s := range ss {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
		} else if a, err := netip.ParseAddr(s); err == nil {
			a = a.Unmap()
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	return out
}

// event is an audit entry to emit once the lock is released.
type event struct {
	e AuditEntry
}

// Apply admits the Expose entries of s's current announcement (on Attach
// and every Update), opening, joining and leaving ports as they changed,
// and returns the answer for each entry and notices for the client: one
// per refusal that differs from the last one of its entry. Entries no
// longer announced leave their ports; a port left by its last session is
// closed with its connections. Apply never fails the session.
func (m *Manager) Apply(ctx context.Context, id string, s Session) ([]tunnel.ExposeStatus, []string) {
	ann := s.Announcement()
	ident := s.Identity()
	var entries []tunnel.Expose
	if ann != nil {
		entries = ann.Expose
	}
	var events []event
	var closing []*port
	var notices []string
	statuses := make([]tunnel.ExposeStatus, 0, len(entries))

	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, nil
	}
	mine := m.sessions[id]
	if mine == nil {
		mine = map[string]held{}
		m.sessions[id] = mine
	}
	lastRefused := m.refusals[id]
	if lastRefused == nil {
		lastRefused = map[string]string{}
		m.refusals[id] = lastRefused
	}
	want := make(map[string]tunnel.Expose, len(entries))
	for _, e := range entries {
		want[e.Name] = e
	}
	// Leave what is no longer asked for, or asked for differently, or no
	// longer the organization's to hold (admission below then refuses it
	// with the reason).
	owners := m.owners.Load()
	for name, h := range mine {
		e, ok := want[name]
		why := owners.refusal(ident.OrgID, h.key.num)
		if ok && why == "" && e.Protocol == h.key.proto && (e.RemotePort == 0 || e.RemotePort == h.key.num) {
			continue
		}
		delete(mine, name)
		if p := m.leaveLocked(h.key, id); p != nil {
			closing = append(closing, p)
			reason := "its last session stopped asking for it"
			if why != "" {
				reason = "closed: " + why
			}
			events = append(events, event{AuditEntry{OrgID: p.org, TokenID: ident.TokenID, Action: ActionClosed, Detail: p.describe(name, reason)}})
		}
	}
	for name := range lastRefused {
		if _, ok := want[name]; !ok {
			delete(lastRefused, name)
		}
	}
	for _, e := range entries {
		mb := &member{sessionID: id, sess: s, name: e.Name, allowed: parsePrefixes(e.AllowedIPs), tokenIPs: ident.AllowedIPs, tokenID: ident.TokenID}
		if h, ok := mine[e.Name]; ok {
			m.ports[h.key].replace(mb)
			statuses = append(statuses, tunnel.ExposeStatus{Name: e.Name, Protocol: e.Protocol, Port: h.key.num})
			delete(lastRefused, e.Name)
			continue
		}
		key, opened, err := m.admitLocked(ident, e, mb)
		if err != nil {
			statuses = append(statuses, tunnel.ExposeStatus{Name: e.Name, Protocol: e.Protocol, Error: err.Error()})
			msg := fmt.Sprintf("expose %s (%s %d) refused: %v", e.Name, e.Protocol, e.RemotePort, err)
			if lastRefused[e.Name] != msg {
				lastRefused[e.Name] = msg
				notices = append(notices, msg)
				events = append(events, event{AuditEntry{OrgID: ident.OrgID, TokenID: ident.TokenID, Action: ActionRefused, Detail: msg}})
			}
			continue
		}
		delete(lastRefused, e.Name)
		mine[e.Name] = held{key: key}
		statuses = append(statuses, tunnel.ExposeStatus{Name: e.Name, Protocol: e.Protocol, Port: key.num})
		if opened {
			events = append(events, event{AuditEntry{OrgID: ident.OrgID, TokenID: ident.TokenID, Action: ActionOpened, Detail: m.ports[key].describe(e.Name, "opened")}})
		}
	}
	m.mu.Unlock()

	for _, p := range closing {
		p.close()
	}
	m.emit(ctx, events)
	return statuses, notices
}

// Release removes every entry of session id (Detach) and closes the
// ports it was the last session of.
func (m *Manager) Release(ctx context.Context, id string, ident tunnel.Identity) {
	var closing []*port
	var events []event
	m.mu.Lock()
	for name, h := range m.sessions[id] {
		if p := m.leaveLocked(h.key, id); p != nil {
			closing = append(closing, p)
			events = append(events, event{AuditEntry{OrgID: p.org, TokenID: ident.TokenID, Action: ActionClosed, Detail: p.describe(name, "its last session ended")}})
		}
	}
	delete(m.sessions, id)
	delete(m.refusals, id)
	m.mu.Unlock()
	for _, p := range closing {
		p.close()
	}
	m.emit(ctx, events)
}

func (m *Manager) emit(ctx context.Context, events []event) {
	for _, ev := range events {
		m.log.Info("public port "+ev.e.Action, logkey.OrgID, ev.e.OrgID, logkey.Reason, ev.e.Detail)
		if m.cfg.Audit != nil {
			m.cfg.Audit(ctx, ev.e)
		}
	}
}

// leaveLocked removes session id from the port of key and returns the
// port when it has no session left (removed from the table, to be closed
// by the caller outside the lock).
func (m *Manager) leaveLocked(key portKey, id string) *port {
	p := m.ports[key]
	if p == nil {
		return nil
	}
	if p.leave(id) > 0 {
		return nil
	}
	delete(m.ports, key)
	return p
}

// admitLocked checks and opens or joins the port of e, and returns its key
// and whether a listener was opened.
func (m *Manager) admitLocked(ident tunnel.Identity, e tunnel.Expose, mb *member) (portKey, bool, error) {
	if len(m.cfg.Range) == 0 {
		return portKey{}, false, ErrDisabled
	}
	owners := m.owners.Load()
	allowed := func(n int) bool {
		return (ident.AnyTCPPort || portspec.AnyContains(ident.AllowTCPPorts, n)) && owners.refusal(ident.OrgID, n) == ""
	}
	if e.RemotePort == 0 {
		return m.allocateLocked(ident, e, mb, allowed)
	}
	n := e.RemotePort
	inRange := portspec.AnyContains(m.cfg.Range, n)
	switch {
	case n < 1024 && !inRange:
		return portKey{}, false, fmt.Errorf("port %d is privileged and not in the server's tcp_port_range", n)
	case !inRange:
		return portKey{}, false, fmt.Errorf("port %d is outside the server's tcp_port_range", n)
	case !ident.AnyTCPPort && !portspec.AnyContains(ident.AllowTCPPorts, n):
		return portKey{}, false, fmt.Errorf("the token does not allow port %d (allow_tcp_ports)", n)
	}
	if why := owners.refusal(ident.OrgID, n); why != "" {
		return portKey{}, false, errors.New(why)
	}
	key := portKey{e.Protocol, n}
	if p := m.ports[key]; p != nil {
		if p.org != ident.OrgID {
			return portKey{}, false, fmt.Errorf("port %d/%s is held by another organization", n, e.Protocol)
		}
		if !p.join(mb) {
			return portKey{}, false, fmt.Errorf("port %d/%s is already exposed by another entry of this client", n, e.Protocol)
		}
		return key, false, nil
	}
	p, err := m.openLocked(key, ident.OrgID, mb)
	if err != nil {
		return portKey{}, false, err
	}
	m.ports[key] = p
	return key, true, nil
}

func (m *Manager) allocateLocked(ident tunnel.Identity, e tunnel.Expose, mb *member, allowed func(int) bool) (portKey, bool, error) {
	tries := 0
	var last error
	for _, r := range m.cfg.Range {
		for n := r.Lo; n <= r.Hi; n++ {
			key := portKey{e.Protocol, n}
			if m.ports[key] != nil || !allowed(n) {
				continue
			}
			if tries >= maxAllocateTries {
				return portKey{}, false, fmt.Errorf("no free port allocated after %d tries: %w", tries, last)
			}
			tries++
			p, err := m.openLocked(key, ident.OrgID, mb)
			if err != nil {
				last = err
				continue
			}
			m.ports[key] = p
			return key, true, nil
		}
	}
	if last != nil {
		return portKey{}, false, fmt.Errorf("no free port in the range the token allows: %w", last)
	}
	return portKey{}, false, errors.New("no free port in the range the token allows (allow_tcp_ports) and the client's organization owns")
}

// openLocked binds the port of key and starts serving it.
func (m *Manager) openLocked(key portKey, org string, mb *member) (*port, error) {
	addr := net.JoinHostPort(m.cfg.ListenHost, strconv.Itoa(key.num))
	p := newPort(m, key, org, mb)
	switch key.proto {
	case tunnel.ExposeTCP:
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("bind: %w", err)
		}
		p.ln = ln
		p.wg.Add(1)
		go p.acceptLoop()
	case tunnel.ExposeUDP:
		ua, err := net.ResolveUDPAddr("udp", addr)
		if err != nil {
			return nil, fmt.Errorf("bind: %w", err)
		}
		pc, err := net.ListenUDP("udp", ua)
		if err != nil {
			return nil, fmt.Errorf("bind: %w", err)
		}
		p.pc = pc
		p.flows = map[netip.AddrPort]*flow{}
		p.wg.Add(2)
		go p.readLoop()
		go p.expireLoop()
	default:
		return nil, fmt.Errorf("protocol %q unknown", key.proto)
	}
	return p, nil
}

// Close closes every port and waits for their goroutines. It is
// idempotent.
func (m *Manager) Close() error {
	m.mu.Lock()
	m.closed = true
	ps := make([]*port, 0, len(m.ports))
	for _, p := range m.ports {
		ps = append(ps, p)
	}
	clear(m.ports)
	clear(m.sessions)
	m.mu.Unlock()
	for _, p := range ps {
		p.close()
	}
	return nil
}

// PortInfo describes one open port (Snapshot).
type PortInfo struct {
	Port     int    `json:"port"`
	Protocol string `json:"protocol"`
	OrgID    string `json:"org_id"`
	// OwnerOrgID is the organization that owns the port's number (org
	// ports); "" while none does (the default organization's first come).
	OwnerOrgID string   `json:"owner_org_id"`
	Names      []string `json:"names"`    // the entries serving it, one per session
	Sessions   []string `json:"sessions"` // the IDs of the sessions serving it
	// Open is the visitor connections (TCP) or flows (UDP) open now.
	Open int64 `json:"open"`
	// BytesIn and BytesOut are the visitor bytes in and out since the port
	// opened.
	BytesIn  int64 `json:"bytes_in"`
	BytesOut int64 `json:"bytes_out"`
	// Refused counts visitor connections or flows refused (limits,
	// allowed_ips, no session able), Dropped datagrams dropped.
	Refused int64 `json:"refused"`
	Dropped int64 `json:"dropped"`
}

// Snapshot lists the open ports, by port then protocol.
// Admitting returns the open port num/proto and the names of its entries
// whose allowed_ips (and their tokens') admit ip, in order; every entry
// when ip is not valid. ok is false when the port is not open.
func (m *Manager) Admitting(num int, proto string, ip netip.Addr) (info PortInfo, names []string, ok bool) {
	m.mu.Lock()
	p := m.ports[portKey{proto: proto, num: num}]
	m.mu.Unlock()
	if p == nil {
		return PortInfo{}, nil, false
	}
	p.mu.Lock()
	for _, mb := range p.members {
		if !ip.IsValid() || mb.admits(ip) {
			names = append(names, mb.name)
		}
	}
	p.mu.Unlock()
	info = p.info()
	info.OwnerOrgID = m.owners.Load().owner(num)
	return info, names, true
}

func (m *Manager) Snapshot() []PortInfo {
	m.mu.Lock()
	ps := make([]*port, 0, len(m.ports))
	for _, p := range m.ports {
		ps = append(ps, p)
	}
	m.mu.Unlock()
	out := make([]PortInfo, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.info())
	}
	owners := m.owners.Load()
	for i := range out {
		out[i].OwnerOrgID = owners.owner(out[i].Port)
	}
	slices.SortFunc(out, func(a, b PortInfo) int {
		if a.Port != b.Port {
			return a.Port - b.Port
		}
		if a.Protocol < b.Protocol {
			return -1
		}
		if a.Protocol > b.Protocol {
			return 1
		}
		return 0
	})
	return out
}

// port is one open public port and the sessions serving it.
type port struct {
	m     *Manager
	key   portKey
	org   string
	ln    net.Listener
	pc    *net.UDPConn
	ctx   context.Context // the port's lifetime: cancelled by close
	stop  context.CancelFunc
	once  sync.Once
	wg    sync.WaitGroup
	next  atomic.Uint64
	open  atomic.Int64
	in    atomic.Int64
	out   atomic.Int64
	refus atomic.Int64
	drops atomic.Int64

	mu      sync.Mutex // guards the following fields
	members []*member
	conns   map[net.Conn]netip.Addr // TCP: each connection and its visitorKey
	flows   map[netip.AddrPort]*flow
	perIP   map[netip.Addr]int // open connections (TCP) or flows (UDP) per visitor
}

func newPort(m *Manager, key portKey, org string, mb *member) *port {
	ctx, stop := context.WithCancel(context.Background())
	return &port{m: m, key: key, org: org, ctx: ctx, stop: stop, members: []*member{mb}, conns: map[net.Conn]netip.Addr{}, perIP: map[netip.Addr]int{}}
}

func (p *port) describe(name, what string) string {
	return fmt.Sprintf("port %d/%s (entry %s): %s", p.key.num, p.key.proto, name, what)
}

// join adds mb; false when its session already serves the port.
func (p *port) join(mb *member) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, o := range p.members {
		if o.sessionID == mb.sessionID {
			return false
		}
	}
	p.members = append(p.members, mb)
	return true
}

// replace updates the member of mb's session (its allowed_ips changed).
func (p *port) replace(mb *member) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, o := range p.members {
		if o.sessionID == mb.sessionID {
			p.members[i] = mb
		}
	}
}

// leave removes session id and returns the members left.
func (p *port) leave(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.members = slices.DeleteFunc(p.members, func(mb *member) bool { return mb.sessionID == id })
	return len(p.members)
}

// pick returns a member that admits ip, round-robin; nil when none.
func (p *port) pick(ip netip.Addr) *member {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pickLocked(ip)
}

func (p *port) pickLocked(ip netip.Addr) *member {
	n := len(p.members)
	start := int(p.next.Add(1) % uint64(max(n, 1)))
	for i := range n {
		mb := p.members[(start+i)%n]
		if mb.admits(ip) {
			return mb
		}
	}
	return nil
}

func (p *port) info() PortInfo {
	p.mu.Lock()
	pi := PortInfo{Port: p.key.num, Protocol: p.key.proto, OrgID: p.org}
	for _, mb := range p.members {
		pi.Names = append(pi.Names, mb.name)
		pi.Sessions = append(pi.Sessions, mb.sessionID)
	}
	p.mu.Unlock()
	pi.Open, pi.BytesIn, pi.BytesOut, pi.Refused, pi.Dropped = p.open.Load(), p.in.Load(), p.out.Load(), p.refus.Load(), p.drops.Load()
	return pi
}

// close stops the listener, closes every connection and flow, and waits
// for the port's goroutines. It is idempotent.
func (p *port) close() {
	p.once.Do(func() {
		p.stop()
		if p.ln != nil {
			p.ln.Close()
		}
		if p.pc != nil {
			p.pc.Close()
		}
		p.mu.Lock()
		for c := range p.conns {
			c.Close()
		}
		for _, f := range p.flows {
			f.stop()
		}
		p.mu.Unlock()
	})
	p.wg.Wait()
}

func (p *port) counter(mb *member) Counter {
	if p.m.cfg.Usage == nil {
		return nil
	}
	return p.m.cfg.Usage(mb.tokenID, p.org, p.key.proto+":"+strconv.Itoa(p.key.num))
}

func addrOf(a net.Addr) netip.AddrPort {
	switch v := a.(type) {
	case *net.TCPAddr:
		ap := v.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	case *net.UDPAddr:
		ap := v.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}
