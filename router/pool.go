package router

import (
	"github.com/aperio-dev/aperio/internal/visitor/policy"
	"golang.org/x/time/rate"

	"context"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// service is one client's service: the unit that owns a concurrency
// limiter. It outlives announcements (a health flip or a new limit updates
// it in place), so permits taken before a change are returned to the same
// counter after it. Hot-path fields are atomics; the rest is written only
// under Registry.mu.
type service struct {
	conn     Conn
	id       string // service id within its client
	instance string // the client process (Announcement.InstanceID)

	limit    atomic.Int64 // announced max_concurrent; 0 = unbounded
	inflight atomic.Int64 // permits held
	priority atomic.Int64 // 0 = primary tier, >0 = standby
	healthy  atomic.Bool
	draining atomic.Bool
	gone     atomic.Bool // the session ended
	// rate is the max_rps bucket of the client's token, shared by every
	// client of the token; nil when the token has no max_rps (and for the
	// master token).
	rate atomic.Pointer[rate.Limiter]
	// disabled is set while an operator disabled the client (the kill
	// switch): no new requests, in-flight ones finish.
	disabled atomic.Bool
	// resilience is set when the service allows serve-stale copies.
	resilience atomic.Bool
	// allowConnect is set when the service takes CONNECT requests.
	allowConnect atomic.Bool
	// passthrough is set when the service takes TLS connections for its
	// hostnames untouched (tls_passthrough); written under Registry.mu
	// through setPassthroughLocked, which keeps Registry.passthroughs.
	passthrough atomic.Bool
	// allowedIPs are the visitors its token admits; empty admits all. Set
	// under Registry.mu before the service is published in a pool.
	allowedIPs []netip.Prefix
	// tokenID and org are the session's token ("" for the master token)
	// and organization, which usage is counted against; set before the
	// service is published.
	tokenID, org string
	// counted caches the usage counter of the last bind pattern served
	// (usually the service's only one), so that a request finds it with a
	// pointer load and a string comparison instead of the meter's lookup,
	// which hashes the token, organization and hostname. Counters live as
	// long as their meter, so a cached one never goes stale.
	counted atomic.Pointer[boundCounter]
	// affinity is the value of the aperio_affinity cookie that sticks a
	// visitor to this service's client instance (see affinityValue), and
	// cookie the Set-Cookie line that issues it over http; set before the
	// service is published.
	affinity, cookie string

	weight   atomic.Int64 // announced weight, 1..1000
	override atomic.Int32 // announced lb_strategy + 1; 0 = the server's

	// Passive outlier ejection (see outlier.go): consecutive 5xx answers,
	// the end of the current ejection (unix ns, 0 when never ejected or
	// since reinstated by a good answer), and how many ejections in a row
	// it has had without a good answer in between.
	fails        atomic.Int64
	ejectedUntil atomic.Int64
	ejections    atomic.Int64

	pools atomic.Pointer[[]*pool] // pools this service serves, for permit hand-off
	// gate is the service's access gate, rebuilt under Registry.mu only when
	// its announced access block changes.
	gate atomic.Pointer[gateEntry]
	// headers are the response header rules the service announced, as
	// the server checked them; nil when none.
	headers atomic.Pointer[policy.ServiceRules]
}

// routable reports whether the service may take new requests.
func (s *service) routable() bool {
	return s.healthy.Load() && !s.draining.Load() && !s.gone.Load() && !s.disabled.Load() && !s.ejected()
}

// free reports whether the service has a permit free now.
func (s *service) free() bool {
	limit := s.limit.Load()
	return limit <= 0 || s.inflight.Load() < limit
}

// tryTake takes a permit if one is free.
func (s *service) tryTake() bool {
	limit := s.limit.Load()
	for {
		cur := s.inflight.Load()
		if limit > 0 && cur >= limit {
			return false
		}
		if s.inflight.CompareAndSwap(cur, cur+1) {
			return true
		}
	}
}

// pool is the set of services behind one bind (hostname pattern + path
// prefix), with the FIFO queue of requests waiting for a permit. Pools are
// stable across route-table rebuilds, so waiters survive them.
type pool struct {
	seq     uint64 // creation order; pools are locked in seq order
	pattern string
	path    string
	// catchAll is set for the pool of services that name no hostname, of
	// organization org: it serves what no other bind matches (pattern is
	// "").
	catchAll bool
	org      string

	members atomic.Pointer[[]*service] // sorted oldest first; swapped on change
	// armed is set while the bind has armed scaling records, one per org.
	armed atomic.Pointer[armedSet]
	// restricted is set when some member's token limits its visitors
	// (allowed_ips), so unrestricted pools skip the check.
	restricted atomic.Bool
	// gate decides every visitor's access: its members' gate (they agree),
	// kept after the last member leaves so that a bind waiting for its
	// client's return stays as closed as it was.
	gate atomic.Pointer[gateEntry]
	next atomic.Uint64 // round-robin cursor
	// override is the bind's own lb_strategy + 1, from its oldest member
	// that announces one; 0 = the server's.
	override atomic.Int32
	// weighted is set when some member's weight is not 1: round-robin is
	// then smooth weighted round-robin (see pickWeighted).
	weighted atomic.Bool

	wrrMu  sync.Mutex  // guards the following fields
	wrrFor *[]*service // the member list wrrCW belongs to
	wrrCW  []int64     // smooth WRR current weights, by member index

	// emptiedAt is when the last member left (unix ns), 0 while it has
	// members. A pool emptied within client_down_threshold still holds
	// requests for its client's return.
	emptiedAt atomic.Int64

	mu      sync.Mutex // guards the following fields
	waiters []*waiter  // oldest first

	// waiting is len(waiters) plus the requests between counting
	// themselves in (under mu, before their last look for a permit) and
	// queueing or leaving: release reads it without a lock, so a service
	// in many pools (one per hostname) frees a permit without locking
	// them all when nobody waits.
	waiting atomic.Int32
}

// anyWaiting reports whether a request waits, or is about to, in one of ps.
func anyWaiting(ps []*pool) bool {
	for _, p := range ps {
		if p.waiting.Load() > 0 {
			return true
		}
	}
	return false
}

// admits reports whether the service's token admits the visitor ip (an
// invalid ip, from a test or a pipe, is admitted only when nothing is
// restricted).
func (s *service) admits(ip netip.Addr) bool {
	return len(s.allowedIPs) == 0 || prefixesContain(s.allowedIPs, ip)
}

func prefixesContain(ps []netip.Prefix, ip netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// admitsAny reports whether some member's token admits the visitor. A
// pool without members (its client just left) admits everyone: there is
// nothing to check against yet.
func (p *pool) admitsAny(ip netip.Addr) bool {
	ms := *p.members.Load()
	if len(ms) == 0 {
		if a := p.driver(); a != nil && len(a.allowed) > 0 {
			return prefixesContain(a.allowed, ip)
		}
		return true
	}
	if !p.restricted.Load() {
		return true
	}
	for _, s := range ms {
		if s.admits(ip) {
			return true
		}
	}
	return false
}

// waiter is a request waiting for a permit.
type waiter struct {
	ip       netip.Addr // the visitor, checked against allowed_ips
	enq      time.Time
	instance string // when set, only this client instance may serve it
	exclude  Conn   // when set, never this connection (a failed one)
	// affinity is the visitor's aperio_affinity cookie, when it sent one
	// of the right length; a sticky pool tries its instance first.
	affinity string
	abort    <-chan struct{} // when closed, stop waiting (a failed cold start)
	// held marks a request held for a cold start; maxHeld (when > 0)
	// replaces maxWaiters as its queue's bound (scaling_max_held).
	held    bool
	maxHeld int
	ch      chan *service // receives the service whose permit it now holds
}

// accepts reports whether s may serve w.
func (w *waiter) accepts(s *service) bool {
	return (w.instance == "" || s.instance == w.instance) && (w.exclude == nil || s.conn != w.exclude) && s.admits(w.ip)
}

// maxWaiters bounds each pool's queue. A request that finds it full is
// answered 429 client-concurrency at once.
const maxWaiters = 1000

// Errors of admission; acquireRefusal maps them to refusals.
var (
	errQueueFull    = errors.New("router: wait queue full")
	errHeldFull     = errors.New("router: too many requests held for a cold start")
	errQueueTimeout = errors.New("router: no permit within gateway_timeout")
	errAllAtLimit   = errors.New("router: every client at its limit")
)

// strategy picks among candidates; see Config.Strategy.
type strategy int

const (
	roundRobin strategy = iota
	leastInflight
	primaryStandby
	sticky
)

// effective returns the strategy p balances with: its own override, else
// the server's st.
func (p *pool) effective(st strategy) strategy {
	if o := p.override.Load(); o > 0 {
		return strategy(o - 1)
	}
	return st
}

// candidates returns the routable members of the first tier that has any:
// standby clients (priority > 0) serve only while no primary is routable,
// whether or not the primaries have free permits.
func (p *pool) candidates(buf []*service) []*service {
	ms := *p.members.Load()
	best := int64(-1)
	for _, s := range ms {
		if !s.routable() {
			continue
		}
		pr := s.priority.Load()
		switch {
		case best < 0 || pr < best:
			best = pr
			buf = append(buf[:0], s)
		case pr == best:
			buf = append(buf, s)
		}
	}
	return buf
}

// tryAcquire takes a permit on a candidate by strategy. It reports whether
// any candidate was routable at all.
func (p *pool) tryAcquire(st strategy, w *waiter) (s *service, routable bool) {
	var arr [16]*service
	cands := p.candidates(arr[:0])
	n := len(cands)
	if n == 0 {
		return nil, false
	}
	usable := 0
	for _, c := range cands {
		if w == nil || w.accepts(c) {
			usable++
		}
	}
	if usable == 0 {
		return nil, false
	}
	switch p.effective(st) {
	case leastInflight:
		var best *service
		for _, c := range cands {
			if w != nil && !w.accepts(c) {
				continue
			}
			if best == nil || c.inflight.Load() < best.inflight.Load() {
				best = c
			}
		}
		// The least loaded may fill between the look and the take; then
		// fall back to any free permit in order.
		if best != nil && best.tryTake() {
			return best, true
		}
		return takeInOrder(cands, w), true
	case primaryStandby:
		return takeInOrder(cands, w), true
	case sticky:
		// The visitor's instance first, if it is in the serving tier and
		// has a permit; else the base strategy, and the answer re-issues
		// the cookie.
		if w != nil && w.affinity != "" {
			for _, c := range cands {
				if c.affinity == w.affinity && w.accepts(c) && c.tryTake() {
					return c, true
				}
			}
		}
	}
	if p.weighted.Load() {
		if c := p.pickWeighted(cands, w); c != nil && c.tryTake() {
			return c, true
		}
	}
	// Each attempt advances the shared cursor, so members that are
	// skipped do not hand their turns to their neighbour.
	for range n {
		c := cands[p.next.Add(1)%uint64(n)]
		if (w == nil || w.accepts(c)) && c.tryTake() {
			return c, true
		}
	}
	return nil, true
}

// takeInOrder takes a permit on the first candidate that accepts w and
// has one free, or returns nil.
func takeInOrder(cands []*service, w *waiter) *service {
	for _, c := range cands {
		if (w == nil || w.accepts(c)) && c.tryTake() {
			return c
		}
	}
	return nil
}

// acquire returns a service holding a permit for the request, waiting in
// the pool's FIFO queue up to timeout when every candidate is at its
// limit, or when wait is set, also while no candidate is routable (a client
// that just dropped, an instance to come back). It never holds a global
// slot while it waits.
func (p *pool) acquire(ctx context.Context, st strategy, timeout time.Duration, wait bool, w *waiter) (*service, error) {
	if s, routable := p.tryAcquire(st, w); s != nil {
		return s, nil
	} else if !routable && !wait {
		return nil, errNoRoutable
	}
	if timeout <= 0 {
		return nil, errAllAtLimit
	}
	// Only a request that queues needs a waiter on the heap: the queue
	// keeps a copy, and the caller's (usually on its stack) learns when
	// it queued.
	q := new(waiter)
	if w != nil {
		*q = *w
		defer func() { w.enq = q.enq }()
	}
	q.ch = make(chan *service, 1)
	p.mu.Lock()
	// Count in, then check again: a release that frees a permit after
	// this look sees the count and hands the permit over (release), so
	// none is missed.
	p.waiting.Add(1)
	if s, routable := p.tryAcquire(st, q); s != nil {
		p.waiting.Add(-1)
		p.mu.Unlock()
		return s, nil
	} else if !routable && !wait {
		p.waiting.Add(-1)
		p.mu.Unlock()
		return nil, errNoRoutable
	}
	bound := maxWaiters
	if q.held && q.maxHeld > 0 {
		bound = q.maxHeld
	}
	if len(p.waiters) >= bound {
		p.waiting.Add(-1)
		p.mu.Unlock()
		if q.held {
			return nil, errHeldFull
		}
		return nil, errQueueFull
	}
	q.enq = time.Now()
	p.waiters = append(p.waiters, q)
	p.mu.Unlock()

	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case s := <-q.ch:
		return s, nil
	case <-ctx.Done():
		p.abandon(q)
		return nil, context.Cause(ctx)
	case <-q.abort:
		p.abandon(q)
		return nil, errColdStartFailed
	case <-t.C:
		p.abandon(q)
		return nil, errQueueTimeout
	}
}

// abandon removes w from the queue; a permit granted meanwhile is passed on.
func (p *pool) abandon(w *waiter) {
	p.mu.Lock()
	for i, x := range p.waiters {
		if x == w {
			p.waiters = append(p.waiters[:i], p.waiters[i+1:]...)
			p.waiting.Add(-1)
			break
		}
	}
	p.mu.Unlock()
	select {
	case s := <-w.ch:
		s.release()
	default:
	}
}

// release returns a permit. If a waiter of one of the service's pools can
// use it, the permit passes to the oldest such waiter directly, so a
// service never has more in flight than its limit, even while a backlog
// drains.
func (s *service) release() {
	pools := s.pools.Load()
	if pools == nil || !s.routable() {
		s.inflight.Add(-1)
		return
	}
	ps := *pools
	if !anyWaiting(ps) {
		s.inflight.Add(-1)
		// A request that counted itself in since the look above looks for
		// a permit after it, so it finds this one; or it shows now, and
		// the permit, taken back if no one else took it, goes to the
		// oldest waiter below.
		if !anyWaiting(ps) || !s.tryTake() {
			return
		}
	}
	for _, p := range ps {
		p.mu.Lock()
	}
	var best *pool
	bestIdx := -1
	for _, p := range ps {
		for i, w := range p.waiters {
			if w.accepts(s) {
				if best == nil || w.enq.Before(best.waiters[bestIdx].enq) {
					best, bestIdx = p, i
				}
				break
			}
		}
	}
	var w *waiter
	if best != nil && s.limitAllowsHandoff() {
		w = best.waiters[bestIdx]
		best.waiters = append(best.waiters[:bestIdx], best.waiters[bestIdx+1:]...)
		best.waiting.Add(-1)
	} else {
		s.inflight.Add(-1)
	}
	for _, p := range ps {
		p.mu.Unlock()
	}
	if w != nil {
		w.ch <- s // buffered; the permit moves with it
	}
}

// limitAllowsHandoff reports whether the permit being released may go to a
// waiter: not when the limit was lowered below what is in flight.
func (s *service) limitAllowsHandoff() bool {
	limit := s.limit.Load()
	return limit <= 0 || s.inflight.Load() <= limit
}

// wake hands free permits to waiters after capacity appeared (a client
// joined, became healthy, or raised its limit), oldest waiter first.
func (p *pool) wake(st strategy) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := 0; i < len(p.waiters); {
		w := p.waiters[i]
		s, _ := p.tryAcquire(st, w)
		if s == nil {
			if w.instance == "" && w.exclude == nil {
				break // no permit for anyone; later waiters fare no better
			}
			i++
			continue
		}
		p.waiters = append(p.waiters[:i], p.waiters[i+1:]...)
		p.waiting.Add(-1)
		w.ch <- s
	}
}

// queued returns the number of waiting requests.
func (p *pool) queued() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.waiters)
}
