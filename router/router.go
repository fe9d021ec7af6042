package router

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/aperio-dev/aperio/internal/hostname"
	"github.com/aperio-dev/aperio/tunnel"
)

// Config configures a Router.
type Config struct {
	// MaxBodyBytes bounds a request body (max_body_size); larger bodies get
	// 413. Zero means no bound.
	MaxBodyBytes int64
	// Logger receives routing diagnostics; nil discards them.
	Logger *slog.Logger
}

// Router routes visitor requests to connected clients. It implements
// http.Handler for visitors and tunnel.Registry for the tunnel server, and
// is safe for concurrent use.
type Router struct {
	cfg Config
	log *slog.Logger

	table atomic.Pointer[table] // read lock-free on every request

	mu       sync.Mutex // guards the following fields and table swaps
	sessions map[Conn][]memberBind
	lastAnn  map[Conn]*tunnel.Announcement
}

// New returns a Router with no clients.
func New(cfg Config) *Router {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rt := &Router{
		cfg:      cfg,
		log:      log,
		sessions: make(map[Conn][]memberBind),
		lastAnn:  make(map[Conn]*tunnel.Announcement),
	}
	rt.table.Store(buildTable(nil, nil))
	return rt
}

// Attach implements tunnel.Registry.
func (rt *Router) Attach(s *tunnel.Session) error { return nil }

// Update implements tunnel.Registry: it re-indexes the session's binds when
// its announcement changed and does nothing otherwise.
func (rt *Router) Update(s *tunnel.Session) []string {
	return rt.update(s, s.Announcement())
}

// update applies ann as conn's announcement.
func (rt *Router) update(s Conn, ann *tunnel.Announcement) []string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if prev := rt.lastAnn[s]; prev != nil && sameRouting(prev, ann) {
		rt.lastAnn[s] = ann
		return nil
	}
	rt.lastAnn[s] = ann
	rt.sessions[s] = membersOf(s, ann)
	rt.rebuildLocked()
	return nil
}

// Detach implements tunnel.Registry.
func (rt *Router) Detach(s *tunnel.Session) { rt.detach(s) }

func (rt *Router) detach(s Conn) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	delete(rt.sessions, s)
	delete(rt.lastAnn, s)
	rt.rebuildLocked()
}

func (rt *Router) rebuildLocked() {
	rt.table.Store(buildTable(rt.sessions, rt.table.Load()))
}

// ConnectedClients returns the number of attached sessions.
func (rt *Router) ConnectedClients() int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return len(rt.sessions)
}

// membersOf turns an announcement into binds.
func membersOf(s Conn, ann *tunnel.Announcement) []memberBind {
	var out []memberBind
	for _, svc := range ann.Services {
		m := &member{
			conn:          s,
			service:       svc.ID,
			maxConcurrent: svc.MaxConcurrent,
			priority:      svc.Priority,
			healthy:       svc.Healthy,
			draining:      ann.Draining,
		}
		for _, h := range svc.Hostnames {
			out = append(out, memberBind{pattern: hostname.Normalize(h), path: svc.Path, m: m})
		}
	}
	return out
}

// sameRouting reports whether two announcements route identically.
func sameRouting(a, b *tunnel.Announcement) bool {
	if a.Draining != b.Draining || len(a.Services) != len(b.Services) {
		return false
	}
	for i := range a.Services {
		x, y := &a.Services[i], &b.Services[i]
		if x.ID != y.ID || x.Path != y.Path || x.MaxConcurrent != y.MaxConcurrent ||
			x.Priority != y.Priority || x.Healthy != y.Healthy || x.Resilience != y.Resilience ||
			len(x.Hostnames) != len(y.Hostnames) {
			return false
		}
		for j := range x.Hostnames {
			if x.Hostnames[j] != y.Hostnames[j] {
				return false
			}
		}
	}
	return true
}

// errNoRoute and friends are the visitor-facing failures; writeError maps
// them to statuses in one place.
var (
	errNoRoute    = errors.New("router: no client serves this hostname")
	errNoRoutable = errors.New("router: no client can take the request")
)
