package router

import (
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"time"
)

// Conn is what the router needs of a connected client: *tunnel.Session in
// production, fakes in tests.
type Conn interface {
	ID() string
	ConnectedAt() time.Time
	RoundTrip(req *http.Request, service string) (*http.Response, error)
}

// member is one client's service in a pool.
type member struct {
	conn          Conn
	service       string // the service id within its client
	maxConcurrent int
	priority      int
	healthy       bool
	draining      bool
}

// routable reports whether the member may take new requests.
func (m *member) routable() bool { return m.healthy && !m.draining }

// bind is one hostname pattern + path prefix and the clients serving it.
type bind struct {
	pattern string // exact name or "*.suffix"
	path    string // "" or a prefix starting with '/'
	members []*member
	next    atomic.Uint64 // round-robin cursor
}

// hostBinds are the binds of one hostname pattern, longest path first.
type hostBinds []*bind

// table is an immutable snapshot of every bind. Readers load it through an
// atomic pointer and never lock; writers build a new one and swap it.
type table struct {
	exact    map[string]hostBinds
	wildcard []wildcardEntry // longest suffix first
}

type wildcardEntry struct {
	suffix string // ".example.com"
	binds  hostBinds
}

// match returns the bind serving host and path, or nil.
func (t *table) match(host, path string) *bind {
	if t == nil {
		return nil
	}
	if bs, ok := t.exact[host]; ok {
		if b := bs.match(path); b != nil {
			return b
		}
	}
	for i := range t.wildcard {
		w := &t.wildcard[i]
		if len(host) > len(w.suffix) && strings.HasSuffix(host, w.suffix) {
			if b := w.binds.match(path); b != nil {
				return b
			}
		}
	}
	return nil
}

// match returns the bind with the longest path prefix that matches path.
// A prefix matches at a segment boundary: "/api" matches "/api" and
// "/api/x" but not "/apix".
func (bs hostBinds) match(path string) *bind {
	for _, b := range bs {
		if b.path == "" || b.path == "/" {
			return b
		}
		if strings.HasPrefix(path, b.path) && (len(path) == len(b.path) || path[len(b.path)] == '/' || b.path[len(b.path)-1] == '/') {
			return b
		}
	}
	return nil
}

// buildTable indexes the members of every attached session. prev supplies
// round-robin cursors to carry over.
func buildTable(members map[Conn][]memberBind, prev *table) *table {
	type key struct{ pattern, path string }
	binds := make(map[key]*bind)
	for _, ms := range members {
		for _, mb := range ms {
			k := key{mb.pattern, mb.path}
			b := binds[k]
			if b == nil {
				b = &bind{pattern: mb.pattern, path: mb.path}
				if old := prev.find(mb.pattern, mb.path); old != nil {
					b.next.Store(old.next.Load())
				}
				binds[k] = b
			}
			b.members = append(b.members, mb.m)
		}
	}
	t := &table{exact: make(map[string]hostBinds)}
	wild := make(map[string]hostBinds)
	for k, b := range binds {
		// A stable member order keeps round-robin fair across rebuilds.
		sort.Slice(b.members, func(i, j int) bool {
			a, c := b.members[i], b.members[j]
			if !a.conn.ConnectedAt().Equal(c.conn.ConnectedAt()) {
				return a.conn.ConnectedAt().Before(c.conn.ConnectedAt())
			}
			return a.conn.ID() < c.conn.ID()
		})
		if suffix, ok := strings.CutPrefix(k.pattern, "*"); ok {
			wild[suffix] = append(wild[suffix], b)
		} else {
			t.exact[k.pattern] = append(t.exact[k.pattern], b)
		}
	}
	for _, bs := range t.exact {
		sortBinds(bs)
	}
	for suffix, bs := range wild {
		sortBinds(bs)
		t.wildcard = append(t.wildcard, wildcardEntry{suffix: suffix, binds: bs})
	}
	sort.Slice(t.wildcard, func(i, j int) bool {
		if len(t.wildcard[i].suffix) != len(t.wildcard[j].suffix) {
			return len(t.wildcard[i].suffix) > len(t.wildcard[j].suffix)
		}
		return t.wildcard[i].suffix < t.wildcard[j].suffix
	})
	return t
}

func sortBinds(bs hostBinds) {
	sort.Slice(bs, func(i, j int) bool { return len(bs[i].path) > len(bs[j].path) })
}

// find returns the bind with exactly this pattern and path.
func (t *table) find(pattern, path string) *bind {
	if t == nil {
		return nil
	}
	var bs hostBinds
	if suffix, ok := strings.CutPrefix(pattern, "*"); ok {
		for _, w := range t.wildcard {
			if w.suffix == suffix {
				bs = w.binds
			}
		}
	} else {
		bs = t.exact[pattern]
	}
	for _, b := range bs {
		if b.path == path {
			return b
		}
	}
	return nil
}

// memberBind places a member under one pattern and path.
type memberBind struct {
	pattern, path string
	m             *member
}

// pick returns the next routable member in round-robin order, or nil.
func (b *bind) pick() *member {
	n := len(b.members)
	if n == 0 {
		return nil
	}
	// Each attempt advances the shared cursor, so members that are skipped
	// (draining, unhealthy) do not hand their turns to their neighbour.
	for range n {
		m := b.members[b.next.Add(1)%uint64(n)]
		if m.routable() {
			return m
		}
	}
	return nil
}
