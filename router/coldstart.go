package router

import (
	"context"
	"errors"
	"net/netip"
	"time"

	"github.com/aperio-dev/aperio/internal/hostname"
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

// armedInfo is what a pool knows of its armed record.
type armedInfo struct {
	org       string
	coldStart time.Duration
	allowed   []netip.Prefix
}

// errColdStartFailed ends a held request whose cold start call failed.
var errColdStartFailed = errors.New("router: cold start failed")

// SetArmed replaces the set of armed binds. Pools are created for binds no
// client serves (after a restart, or long after the last client left) so
// their requests can be held; pools that are no longer armed fall back to
// the usual rules.
func (rt *Router) SetArmed(binds []ArmedBind) {
	now := time.Now()
	rt.mu.Lock()
	defer rt.mu.Unlock()
	armed := make(map[bindKey]bool, len(binds))
	dirty := false
	for _, b := range binds {
		k := bindKey{hostname.Normalize(b.Pattern), b.Path}
		armed[k] = true
		p := rt.pools[k]
		if p == nil {
			rt.poolSeq++
			p = &pool{seq: rt.poolSeq, pattern: k.pattern, path: k.path}
			none := []*service{}
			p.members.Store(&none)
			p.emptiedAt.Store(now.UnixNano())
			rt.pools[k] = p
			dirty = true
		}
		p.armed.Store(&armedInfo{org: b.OrgID, coldStart: b.ColdStart, allowed: b.AllowedIPs})
	}
	for k, p := range rt.pools {
		if !armed[k] && p.armed.Load() != nil {
			p.armed.Store(nil)
			dirty = true
		}
	}
	if dirty {
		rt.rebuildTableLocked(now)
	}
}

// coldStart starts an instance for an armed pool that has no routable
// client the visitor may use, and returns what the hold must watch and how
// long it may last. ok is false when the pool is not armed or the scaler
// refused (a disarmed record): the usual wait applies.
func (rt *Router) coldStart(ctx context.Context, p *pool, w *waiter) (failed <-chan struct{}, budget time.Duration, ok bool) {
	a := p.armed.Load()
	if a == nil || rt.cfg.Scaler == nil {
		return nil, 0, false
	}
	var arr [16]*service
	for _, c := range p.candidates(arr[:0]) {
		if w.accepts(c) {
			return nil, 0, false // someone can serve it: no cold start
		}
	}
	st, err := rt.cfg.Scaler.ColdStart(ctx, a.org, p.pattern, p.path)
	if err != nil {
		rt.log.Debug("no cold start", "hostname", p.pattern, "path", p.path, "err", err)
		return nil, 0, false
	}
	return st.Failed(), a.coldStart, true
}

// Armed reports whether the bind of pattern and path is armed.
func (rt *Router) Armed(pattern, path string) bool {
	rt.mu.Lock()
	p := rt.pools[bindKey{hostname.Normalize(pattern), path}]
	rt.mu.Unlock()
	return p != nil && p.armed.Load() != nil
}
