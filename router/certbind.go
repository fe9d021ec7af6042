package router

import (
	"github.com/aperio-dev/aperio/internal/hostname"
)

// BoundOrg reports whether a connected client binds host now by its
// exact name or a wildcard pattern covering it, with a live member in
// the pool (a catch-all bind names no hostname and does not count), and
// that client's organization. Automatic TLS asks it before obtaining a
// certificate on demand. It takes the registry's lock.
func (rg *Registry) BoundOrg(host string) (string, bool) {
	host = hostname.Normalize(host)
	t := rg.table.Load()
	if t == nil {
		return "", false
	}
	rg.mu.Lock()
	defer rg.mu.Unlock()
	if org, ok := rg.liveOrgLocked(t.exact[host]); ok {
		return org, true
	}
	for i := 1; i < len(host); i++ {
		if host[i] != '.' {
			continue
		}
		if org, ok := rg.liveOrgLocked(t.wildcard[host[i:]]); ok {
			return org, true
		}
	}
	return "", false
}

// liveOrgLocked returns the organization of a client serving one of ps.
func (rg *Registry) liveOrgLocked(ps hostPools) (string, bool) {
	for _, p := range ps {
		for e, ss := range rg.members[poolKey{pattern: p.pattern, path: p.path}] {
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
func (rg *Registry) BoundPatterns(conn Conn) (string, []string) {
	rg.mu.Lock()
	defer rg.mu.Unlock()
	e := rg.clients[conn]
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
