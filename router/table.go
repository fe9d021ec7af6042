package router

import (
	"net/http"
	"sort"
	"strings"
	"time"
)

// Conn is what the router needs of a connected client: *tunnel.Session in
// production, fakes in tests.
type Conn interface {
	ID() string
	ConnectedAt() time.Time
	RoundTrip(req *http.Request, service string) (*http.Response, error)
}

// hostPools are the pools of one hostname pattern, longest path first.
type hostPools []*pool

// table is an immutable snapshot of every pool by hostname. Readers load it
// through an atomic pointer and never lock; the router builds a new one
// and swaps it when binds change. Pools themselves are shared between
// snapshots.
type table struct {
	exact    map[string]hostPools
	wildcard map[string]hostPools // by suffix: "*.example.com" is ".example.com"
	// catchAll holds the pools of services that name no hostname, by
	// organization; they serve what no exact or wildcard bind matches.
	catchAll map[string]hostPools
	// owners is the hostname ownership at build time, which picks the
	// organization whose catch-all serves a hostname; nil when ownership
	// is not enforced (anyOrg's catch-all serves then).
	owners *ownership
	anyOrg string
}

// match returns the pool serving host (normalized) and path, or nil.
func (t *table) match(host, path string) *pool {
	if t == nil {
		return nil
	}
	if ps, ok := t.exact[host]; ok {
		if p := ps.match(path); p != nil {
			return p
		}
	}
	if len(t.wildcard) == 0 {
		return t.matchCatchAll(host, path)
	}
	// Try every suffix that starts at a dot, longest first, so the most
	// specific wildcard wins; a wildcard needs a label in front of it.
	for i := 1; i < len(host); i++ {
		if host[i] != '.' {
			continue
		}
		if ps, ok := t.wildcard[host[i:]]; ok {
			if p := ps.match(path); p != nil {
				return p
			}
		}
	}
	return t.matchCatchAll(host, path)
}

// matchCatchAll returns the catch-all pool serving host and path, or nil:
// the one of the organization that may bind host under the ownership (see
// ownership.refusal), any one when ownership is not enforced.
func (t *table) matchCatchAll(host, path string) *pool {
	if len(t.catchAll) == 0 {
		return nil
	}
	org := t.anyOrg
	if o := t.owners; o != nil {
		if who, _, ok := o.owners.Owner(host); ok {
			org = who
		} else if o.counts[o.defaultOrg] == 0 {
			org = o.defaultOrg
		} else {
			return nil
		}
	}
	return t.catchAll[org].match(path)
}

// match returns the pool with the longest path prefix that matches path.
// A prefix matches at a segment boundary: "/api" matches "/api" and
// "/api/x" but not "/apix".
func (ps hostPools) match(path string) *pool {
	for _, p := range ps {
		if pathMatch(p.path, path) {
			return p
		}
	}
	return nil
}

func pathMatch(prefix, path string) bool {
	if prefix == "" || prefix == "/" {
		return true
	}
	return strings.HasPrefix(path, prefix) &&
		(len(path) == len(prefix) || path[len(prefix)] == '/' || prefix[len(prefix)-1] == '/')
}

// buildTable indexes pools by hostname pattern, with o the ownership in
// force (nil: not enforced).
func buildTable(pools []*pool, o *ownership) *table {
	t := &table{exact: make(map[string]hostPools), wildcard: make(map[string]hostPools), owners: o}
	for _, p := range pools {
		if p.catchAll {
			if t.catchAll == nil {
				t.catchAll = make(map[string]hostPools)
			}
			t.catchAll[p.org] = append(t.catchAll[p.org], p)
			continue
		}
		if suffix, ok := strings.CutPrefix(p.pattern, "*"); ok {
			t.wildcard[suffix] = append(t.wildcard[suffix], p)
		} else {
			t.exact[p.pattern] = append(t.exact[p.pattern], p)
		}
	}
	for _, ps := range t.exact {
		sortPools(ps)
	}
	for _, ps := range t.wildcard {
		sortPools(ps)
	}
	first := true
	for org, ps := range t.catchAll {
		sortPools(ps)
		if first || org < t.anyOrg {
			t.anyOrg, first = org, false
		}
	}
	return t
}

func sortPools(ps hostPools) {
	sort.Slice(ps, func(i, j int) bool { return len(ps[i].path) > len(ps[j].path) })
}

// live reports whether p may still serve: it has members, or lost its last
// one less than DownThreshold ago (requests then wait for its return).
func (rg *Registry) live(p *pool) bool {
	if len(*p.members.Load()) > 0 || p.armed.Load() != nil {
		return true
	}
	at := p.emptiedAt.Load()
	return at != 0 && time.Since(time.Unix(0, at)) < rg.downThreshold
}
