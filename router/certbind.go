package router

import (
	"github.com/aperio-dev/aperio/internal/hostname"
)

// BoundOrg reports whether a connected client binds host now by its
// exact name or a wildcard pattern covering it, with a live member in
// the pool (a catch-all bind names no hostname and does not count), and
// that client's organization. Automatic TLS asks it before obtaining a
// certificate on demand. It takes the router's lock.
func (rt *Router) BoundOrg(host string) (string, bool) {
	host = hostname.Normalize(host)
	t := rt.table.Load()
	if t == nil {
		return "", false
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if org, ok := rt.liveOrgLocked(t.exact[host]); ok {
		return org, true
	}
	for i := 1; i < len(host); i++ {
		if host[i] != '.' {
			continue
		}
		if org, ok := rt.liveOrgLocked(t.wildcard[host[i:]]); ok {
			return org, true
		}
	}
	return "", false
}

// liveOrgLocked returns the organization of a client serving one of ps.
func (rt *Router) liveOrgLocked(ps hostPools) (string, bool) {
	for _, p := range ps {
		for e, ss := range rt.members[poolKey{pattern: p.pattern, path: p.path}] {
			if len(ss) > 0 && !e.disabled {
				return e.rights.org, true
			}
		}
	}
	return "", false
}

// BoundPatterns returns the hostname patterns conn's services are bound
// to now (exact names and wildcards; no catch-all), and conn's
// organization; nothing when conn is not attached.
func (rt *Router) BoundPatterns(conn Conn) (string, []string) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	e := rt.clients[conn]
	if e == nil {
		return "", nil
	}
	seen := make(map[string]bool, len(e.keys))
	var out []string
	for k := range e.keys {
		if !k.catchAll && !seen[k.pattern] {
			seen[k.pattern] = true
			out = append(out, k.pattern)
		}
	}
	return e.rights.org, out
}
