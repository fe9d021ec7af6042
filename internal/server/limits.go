package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/tunnel"
)

// orgLookupTimeout bounds the read of a token's organization limits at a
// handshake.
const orgLookupTimeout = 5 * time.Second

// admissionHook refuses the handshakes a token's or its
// organization's limits forbid, before the router sees them: a client
// address outside the token's client_allowed_ips, one session more than
// the token's max_connections or the organization's max_clients. The
// counts are this server's sessions (servers sharing a database count
// apart). The master token is never limited. It is the "admission"
// session hook. Safe for concurrent use.
type admissionHook struct {
	db  *store.DB
	log *slog.Logger
	// limits, when set, learns the monthly_max_bytes of the organization
	// of every session admitted.
	limits *usageLimits

	mu      sync.Mutex // guards the following fields
	byToken map[string]int
	byOrg   map[string]int
}

func newAdmissionHook(db *store.DB, log *slog.Logger) *admissionHook {
	return &admissionHook{db: db, log: log, byToken: make(map[string]int), byOrg: make(map[string]int)}
}

// hook returns the admission's part in a session's life: a session is
// counted before the router sees it, and uncounted once the router has
// forgotten it (or refused it).
func (a *admissionHook) hook() sessionHook {
	return sessionHook{name: "admission", admit: a.admit, unadmit: a.uncount,
		left: func(_ context.Context, s *tunnel.Session) { a.uncount(s) }}
}

// admit refuses a session its limits forbid, with a reason the client
// reads, or counts it.
func (a *admissionHook) admit(ctx context.Context, s *tunnel.Session) error {
	id := s.Identity()
	if id.TokenID == "" {
		return nil
	}
	if err := clientIPRefusal(id, s.RemoteAddr()); err != nil {
		return err
	}
	octx, cancel := context.WithTimeout(ctx, orgLookupTimeout)
	org, err := a.db.Org(octx, id.OrgID)
	cancel()
	if err != nil {
		// Unreadable limits must not let a session past them, nor name
		// the store to the client.
		a.log.Error("organization limits unreadable at a handshake", logkey.OrgID, id.OrgID, logkey.Err, err)
		return fmt.Errorf("the organization's limits cannot be checked right now; retry later")
	}
	a.limits.setOrg(org)
	return a.take(id, org.Limits.MaxClients)
}

// uncount forgets the session's place in the counts.
func (a *admissionHook) uncount(s *tunnel.Session) {
	if id := s.Identity(); id.TokenID != "" {
		a.release(id)
	}
}

// take counts one session of id's token and organization, or refuses it.
func (a *admissionHook) take(id tunnel.Identity, maxClients int) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if id.MaxConnections > 0 && a.byToken[id.TokenID] >= id.MaxConnections {
		return fmt.Errorf("token %q has its max_connections %d sessions on this server; close one or raise token.max_connections", id.Name, id.MaxConnections)
	}
	if maxClients > 0 && a.byOrg[id.OrgID] >= maxClients {
		return fmt.Errorf("org-quota: the organization has its max_clients %d sessions on this server; close one or raise the organization's max_clients", maxClients)
	}
	a.byToken[id.TokenID]++
	a.byOrg[id.OrgID]++
	return nil
}

func (a *admissionHook) release(id tunnel.Identity) {
	a.mu.Lock()
	defer a.mu.Unlock()
	decrement(a.byToken, id.TokenID)
	decrement(a.byOrg, id.OrgID)
}

// decrement counts one less for k, forgetting it at zero so the map holds
// only keys with sessions.
func decrement(m map[string]int, k string) {
	if m[k] <= 1 {
		delete(m, k)
		return
	}
	m[k]--
}

// clientIPRefusal refuses a tunnel from remote (the client's address as
// the edge resolved it) outside the token's client_allowed_ips.
func clientIPRefusal(id tunnel.Identity, remote string) error {
	if len(id.ClientAllowedIPs) == 0 {
		return nil
	}
	ip := addrOf(remote)
	if ip.IsValid() && slices.ContainsFunc(id.ClientAllowedIPs, func(p netip.Prefix) bool { return p.Contains(ip) }) {
		return nil
	}
	return fmt.Errorf("token %q may not connect from %s: not in its client_allowed_ips", id.Name, ip)
}

// addrOf parses "ip:port" or a bare address, unmapped; the zero Addr when
// it is neither.
func addrOf(remote string) netip.Addr {
	if ap, err := netip.ParseAddrPort(remote); err == nil {
		return ap.Addr().Unmap()
	}
	if a, err := netip.ParseAddr(remote); err == nil {
		return a.Unmap()
	}
	return netip.Addr{}
}
