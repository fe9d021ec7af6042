package router

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/aperio-dev/aperio/internal/hostname"
)

// Ownership is which organization owns which hostname patterns, as the
// router enforces it on binds (see SetOwnership).
type Ownership struct {
	// Patterns maps each owned pattern (an exact name or a "*." wildcard)
	// to the ID of its organization. No two organizations' patterns
	// overlap; the store guarantees it.
	Patterns map[string]string
	// DefaultOrg is the ID of the default organization, the one the master
	// token's clients belong to. While it owns no pattern it may bind any
	// hostname that overlaps no other organization's pattern.
	DefaultOrg string
}

// ownership is Ownership indexed for the control plane.
type ownership struct {
	owners     *hostname.Owners
	counts     map[string]int // patterns per organization
	defaultOrg string
}

// refusal returns why a client of organization org may not bind host (an
// exact name or a wildcard), or "" when it may: an organization with
// patterns binds only inside them; the default organization without
// patterns binds anything no other organization's pattern overlaps; any
// other organization without patterns binds nothing. A nil ownership (never
// set) refuses nothing.
func (o *ownership) refusal(org, host string) string {
	if o == nil {
		return ""
	}
	switch {
	case o.counts[org] > 0:
		if who, _, ok := o.owners.Owner(host); ok && who == org {
			return ""
		}
		return fmt.Sprintf("hostname %s is not among the hostnames of this client's organization", host)
	case org == o.defaultOrg:
		if _, _, taken := o.owners.Overlap(host); !taken {
			return ""
		}
		return fmt.Sprintf("hostname %s is owned by another organization", host)
	}
	return fmt.Sprintf("hostname %s: this client's organization owns no hostnames", host)
}

// Owns reports whether organization org may bind host under the hostname
// ownership last set (everything, before SetOwnership is first called).
// Armed scaling records are judged with it too, so that a record declared
// before its hostname was assigned to another organization never drives
// that organization's pool. It is safe for concurrent use.
func (rg *Registry) Owns(org, host string) bool {
	return rg.owners.Load().refusal(org, host) == ""
}

// SetOwnership replaces the hostname ownership binds are checked against,
// and re-applies every connected client's announcement under it: binds it
// no longer allows are dropped (the client is told on its next
// heartbeat), binds it now allows are added. Until it is first called
// ownership is not enforced (every bind the token allows is accepted);
// binds into a pool that already has members of another organization are
// refused either way. It is safe for concurrent use.
func (rg *Registry) SetOwnership(o Ownership) {
	counts := make(map[string]int)
	for _, org := range o.Patterns {
		counts[org]++
	}
	rg.owners.Store(&ownership{owners: hostname.NewOwners(o.Patterns), counts: counts, defaultOrg: o.DefaultOrg})
	rg.mu.Lock()
	conns := make([]Conn, 0, len(rg.clients))
	for c := range rg.clients {
		conns = append(conns, c)
	}
	rg.mu.Unlock()
	for _, c := range conns {
		rg.reapply(c)
	}
	// The catch-all serving a hostname depends on who owns it.
	rg.mu.Lock()
	rg.rebuildTableLocked(time.Now())
	rg.mu.Unlock()
}

// reapply applies conn's current announcement again, as if it had changed,
// with its rights. The announcement is read and re-applied under one hold
// of the lock, so that a heartbeat's newer one is never replaced by an
// older.
func (rg *Registry) reapply(conn Conn) {
	rg.mu.Lock()
	var touched []*pool
	if e := rg.clients[conn]; e != nil {
		_, touched = rg.updateLocked(conn, e.ann, e.rights, true)
	}
	rg.mu.Unlock()
	rg.syncTable()
	for _, p := range touched {
		p.wake(rg.strategy)
	}
}

// rights are what a client may bind: the token's hostnames (all when
// master), its organization, and the visitors its routes admit.
type rights struct {
	allowed    []string
	allowedIPs []netip.Prefix
	master     bool
	org        string
	// catchAll is set when the token may serve a catch-all (the master
	// token, or allow_catch_all).
	catchAll bool
	// tokenID is the token's ID; "" for the master token.
	tokenID string
	// paths are the path prefixes the token may bind; empty: any.
	paths []string
	// maxRPS is the token's max_rps; 0: no limit.
	maxRPS float64
}

// pathOrRoot names a bind's path: "/" for the whole hostname.
func pathOrRoot(path string) string {
	if path == "" {
		return "/"
	}
	return path
}

// sameRights reports whether a and b allow the same binds and limits.
func sameRights(a, b rights) bool {
	return a.master == b.master && a.org == b.org && a.catchAll == b.catchAll && a.tokenID == b.tokenID &&
		a.maxRPS == b.maxRPS && slices.Equal(a.allowed, b.allowed) && slices.Equal(a.paths, b.paths) &&
		slices.Equal(a.allowedIPs, b.allowedIPs)
}

// mayBindPath reports whether a token limited to prefixes may bind path:
// path is one of them or below one ("/api" allows "/api" and "/api/v1",
// not "/apix"). No prefixes allow every path; "/" allows every path.
func mayBindPath(prefixes []string, path string) bool {
	if len(prefixes) == 0 {
		return true
	}
	if path == "" {
		path = "/"
	}
	for _, p := range prefixes {
		if p == "/" || path == p || (strings.HasPrefix(path, p) && path[len(p)] == '/') {
			return true
		}
	}
	return false
}

// refusalLocked returns why e (of rights r) may not bind host at path, or
// "": the token's hostnames, then ownership, then the pool's members, which
// must all be of e's organization.
func (rg *Registry) refusalLocked(e *clientEntry, r rights, host, path string) string {
	if why := r.refusal(rg.owners.Load(), host, path); why != "" {
		return why
	}
	return rg.poolRefusalLocked(e, r, host, path)
}

// refusal returns why rights r may not bind host at path whoever else
// serves it (the token's hostnames and paths, the hostname ownership o of
// organizations; nil: not enforced), or "": a refusal that lasts until an
// operator changes the token or the ownership. It reads no Router state.
func (r rights) refusal(o *ownership, host, path string) string {
	if !r.master && !mayBind(r.allowed, host) {
		return "may not bind " + host + ": not one of the token's hostnames"
	}
	if !r.master && !mayBindPath(r.paths, path) {
		return "may not bind " + host + pathOrRoot(path) + ": not under the token's paths"
	}
	return o.refusal(r.org, host)
}

// poolRefusalLocked returns why e (of rights r) may not join the pool of
// host at path now, or "": another organization's clients serve it, a
// refusal that passes once they leave.
func (rg *Registry) poolRefusalLocked(e *clientEntry, r rights, host, path string) string {
	// A connection that names no organization (only tests make them)
	// shares any pool.
	for other := range rg.members[poolKey{pattern: hostname.Normalize(host), path: path}] {
		if other != e && other.rights.org != r.org && other.rights.org != "" && r.org != "" {
			return fmt.Sprintf("bind %s%s is served by another organization's clients", host, path)
		}
	}
	return ""
}
