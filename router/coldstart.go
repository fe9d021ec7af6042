package router

import (
	"context"
	"errors"
	"net/netip"
	"time"

	"github.com/aperio-dev/aperio/internal/hostname"
	"github.com/aperio-dev/aperio/tunnel"
)

// ArmedBind is a bind with an armed scaling record: a request that finds
// its pool without a routable client starts an instance and is held.
type ArmedBind struct {
	OrgID   string
	Pattern string // hostname or "*." wildcard, as declared
	Path    string
	// ColdStart is how long a request may be held while an instance starts.
	ColdStart time.Duration
	// AllowedIPs are the visitors the record's armers admit (empty: all).
	// With no client connected there is nobody else to ask, so it is
	// checked up front: a visitor it refuses never triggers a cold start.
	AllowedIPs []netip.Prefix
}

// Scaler starts instances for armed binds (the autoscale controller).
type Scaler interface {
	// ColdStart asks for a first instance, once per bind however many
	// requests ask (single flight). The result reports a failed call.
	ColdStart(ctx context.Context, orgID, hostname, path string) (ColdStart, error)
}

// ColdStart is a cold start in progress.
type ColdStart interface {
	// Failed is closed when the call failed; held requests then take the
	// fallback chain at once.
	Failed() <-chan struct{}
}

// armedInfo is what a pool knows of one organization's armed record.
type armedInfo struct {
	org       string
	coldStart time.Duration
	allowed   []netip.Prefix
}

// armedSet is every armed record of one bind, keyed by organization. It is
// immutable once published. first is the record that drives the pool while
// it has no member: the earliest of the binds given to SetArmed.
type armedSet struct {
	first *armedInfo
	byOrg map[string]*armedInfo
}

// identified is what a Conn may also offer (a tunnel session does): the
// identity of the token it connected with, which names its organization.
type identified interface {
	Identity() tunnel.Identity
}

// connOrg returns the organization of the client behind conn, or "" when
// conn does not say.
func connOrg(conn Conn) string {
	if c, ok := conn.(identified); ok {
		return c.Identity().OrgID
	}
	return ""
}

// driver returns the record that may cold start p now, or nil. While p
// has members, only the organization whose clients serve it may: its
// oldest member's (a client that does not name its organization counts as
// none, so nothing drives). Without members, the record listed first to
// SetArmed drives it. One organization's record therefore never calls its
// hook for a pool another organization's clients serve.
func (p *pool) driver() *armedInfo {
	set := p.armed.Load()
	if set == nil {
		return nil
	}
	ms := *p.members.Load()
	if len(ms) == 0 {
		return set.first
	}
	return set.byOrg[connOrg(ms[0].conn)]
}

// errColdStartFailed ends a held request whose cold start call failed.
var errColdStartFailed = errors.New("router: cold start failed")

// SetArmed replaces the set of armed binds. Binds are keyed by
// (OrgID, Pattern, Path): several organizations may hold a record for one
// pool, but only one drives a cold start (see pool.driver). Give binds in
// order of precedence, the earliest declared first: for a pool without
// members the first bind listed for it drives, and a later duplicate of
// the same key is ignored. Pools are created for binds no client serves
// (after a restart, or long after the last client left) so their requests
// can be held; pools that are no longer armed fall back to the usual
// rules.
func (rg *Registry) SetArmed(binds []ArmedBind) {
	now := time.Now()
	sets := make(map[poolKey]*armedSet, len(binds))
	for _, b := range binds {
		k := poolKey{pattern: hostname.Normalize(b.Pattern), path: b.Path}
		set := sets[k]
		if set == nil {
			set = &armedSet{byOrg: make(map[string]*armedInfo, 1)}
			sets[k] = set
		}
		if set.byOrg[b.OrgID] != nil {
			continue
		}
		a := &armedInfo{org: b.OrgID, coldStart: b.ColdStart, allowed: b.AllowedIPs}
		set.byOrg[b.OrgID] = a
		if set.first == nil {
			set.first = a
		}
	}
	rg.mu.Lock()
	defer rg.mu.Unlock()
	dirty := false
	for k, set := range sets {
		p := rg.pools[k]
		if p == nil {
			rg.poolSeq++
			p = &pool{seq: rg.poolSeq, pattern: k.pattern, path: k.path}
			none := []*service{}
			p.members.Store(&none)
			p.emptiedAt.Store(now.UnixNano())
			rg.pools[k] = p
			dirty = true
		}
		p.armed.Store(set)
	}
	for k, p := range rg.pools {
		if sets[k] == nil && p.armed.Load() != nil {
			p.armed.Store(nil)
			dirty = true
		}
	}
	if dirty {
		rg.rebuildTableLocked(now)
	}
}

// poolOf returns the pool of pattern and path, or nil.
func (rg *Registry) poolOf(pattern, path string) *pool {
	rg.mu.Lock()
	defer rg.mu.Unlock()
	return rg.pools[poolKey{pattern: hostname.Normalize(pattern), path: path}]
}

// Armed reports whether the bind of pattern and path is armed by any
// organization.
func (rg *Registry) Armed(pattern, path string) bool {
	p := rg.poolOf(pattern, path)
	return p != nil && p.armed.Load() != nil
}

// ArmedBy reports whether orgID holds an armed record for the bind of
// pattern and path.
func (rg *Registry) ArmedBy(orgID, pattern, path string) bool {
	p := rg.poolOf(pattern, path)
	if p == nil {
		return false
	}
	set := p.armed.Load()
	return set != nil && set.byOrg[orgID] != nil
}

// Drives reports whether orgID's record is the one that may cold start the
// bind of pattern and path now (see SetArmed): false when the bind is not
// armed, or armed for another organization's pool.
func (rg *Registry) Drives(orgID, pattern, path string) bool {
	p := rg.poolOf(pattern, path)
	if p == nil {
		return false
	}
	a := p.driver()
	return a != nil && a.org == orgID
}

// Bound reports whether conn's current announcement put it in the pool of
// pattern and path: whether the router accepted that bind for conn (a
// hostname its token may not bind is never accepted). It is safe for
// concurrent use.
func (rg *Registry) Bound(conn Conn, pattern, path string) bool {
	rg.mu.Lock()
	defer rg.mu.Unlock()
	e := rg.clients[conn]
	return e != nil && e.keys[poolKey{pattern: hostname.Normalize(pattern), path: path}]
}

// MayArm reports whether a token with the hostname patterns may arm a
// scaling record for host: exactly when it may bind host (an exact pattern
// allows that name, "*.example.com" every name and wildcard below
// example.com). Empty patterns allow nothing; the master token is the
// caller's case.
func MayArm(patterns []string, host string) bool {
	return mayBind(patterns, host)
}
