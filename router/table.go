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
		return nil
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
	return nil
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

// buildTable indexes pools by hostname pattern.
func buildTable(pools []*pool) *table {
	t := &table{exact: make(map[string]hostPools), wildcard: make(map[string]hostPools)}
	for _, p := range pools {
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
	return t
}

func sortPools(ps hostPools) {
	sort.Slice(ps, func(i, j int) bool { return len(ps[i].path) > len(ps[j].path) })
}
