package router

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aperio-dev/aperio/internal/hostname"
	"github.com/aperio-dev/aperio/tunnel"
)

// Registry is the control-plane side of the router: the connected
// clients, the pools their services form, the route table built from
// them, and what operators set on them (hostname ownership, armed binds,
// disabled clients, maintenance entries). It implements tunnel.Registry
// for the tunnel server and answers the pool queries of metrics, the
// admin API and autoscaling. The Router reads it on every request,
// without its lock: the table is an immutable snapshot behind an atomic
// pointer. It is safe for concurrent use; get one from Router.Registry.
type Registry struct {
	// What New fixed; never changed after.
	strategy      strategy      // the server's lb_strategy, for waking queued requests
	affinityKey   []byte        // signs aperio_affinity values
	downThreshold time.Duration // client_down_threshold
	catchAll      bool          // Config.CatchAll
	access        AccessConfig  // builds the gates of announced access blocks
	log           *slog.Logger

	table atomic.Pointer[table] // read lock-free on every request
	// A change of the pool set bumps tableWant (under mu); syncTable
	// builds a table of it outside mu, one builder at a time (tableMu), so
	// that the changes which pile up while one table is built (a thousand
	// clients connecting) share the next build instead of each paying
	// O(pools) under mu. tableBuilt is the newest change a stored table
	// holds (under mu).
	tableMu               sync.Mutex
	tableWant, tableBuilt uint64
	maintenance           atomic.Pointer[hostMap[*maintenanceEntry]] // the entries of maintenance mode
	owners                atomic.Pointer[ownership]                  // nil until SetOwnership: not enforced

	mu      sync.Mutex // guards the following fields and table swaps
	clients map[Conn]*clientEntry
	pools   map[poolKey]*pool
	members map[poolKey]map[*clientEntry][]*service // who serves each pool
	poolSeq uint64
	rates   tokenRates // max_rps buckets by token ID, while a client of the token is attached

	// passthroughs counts the attached services with tls_passthrough, so
	// that a TLS handshake skips the passthrough lookup while there is
	// none (AnyPassthrough).
	passthroughs atomic.Int64
}

// newRegistry returns a Registry with no clients, an empty table and no
// maintenance, for a Router of cfg balancing with st.
func newRegistry(cfg Config, st strategy, log *slog.Logger) *Registry {
	rg := &Registry{
		strategy:      st,
		affinityKey:   cfg.AffinityKey,
		downThreshold: cfg.DownThreshold,
		catchAll:      cfg.CatchAll,
		access:        cfg.Access,
		log:           log,
		clients:       make(map[Conn]*clientEntry),
		pools:         make(map[poolKey]*pool),
		members:       make(map[poolKey]map[*clientEntry][]*service),
		rates:         make(tokenRates),
	}
	if len(rg.affinityKey) == 0 {
		rg.affinityKey = make([]byte, 32)
		rand.Read(rg.affinityKey) // never fails (crypto/rand)
	}
	rg.table.Store(buildTable(nil, nil))
	rg.maintenance.Store(&hostMap[*maintenanceEntry]{})
	return rg
}

// clientEntry is the control-plane record of one connected client.
type clientEntry struct {
	ann      *tunnel.Announcement
	rights   rights // the token's, replaced when the token is edited
	services map[string]*service
	keys     map[poolKey]bool // the pools its services are in
	notices  []string         // repeated to the client on every heartbeat
	// refused lists the binds of the announcement its rights refuse
	// (hostname and path, or catchAllBind), at most one per announced
	// hostname or service.
	refused []string
	// disabled is set while an operator disabled the client (SetDisabled).
	disabled bool
	// retry is set when a bind was refused for disagreeing access: the
	// next announcement is applied again even if it is the same, so that
	// the bind is taken once the clients serving it agree or leave.
	retry bool
	// rateToken is the token whose max_rps bucket (Registry.rates) the
	// client holds a reference on; "" for none.
	rateToken string
}

// poolKey names a pool: a hostname pattern and a path. It needs no
// organization, unlike autoscale's bindKey: the router refuses binds into
// another organization's pool, so every pool has one.
type poolKey struct {
	pattern, path string
	// catchAll keys a catch-all pool, one per organization (org), with an
	// empty pattern; org is "" for every other pool.
	catchAll bool
	org      string
}

// Attach implements tunnel.Registry: a session none of whose binds may be
// taken is refused, with the reasons: hostnames its token may not bind,
// hostnames its organization may not bind (see SetOwnership), binds whose
// pool has members of another organization, a service with no hostname
// where no catch-all is allowed. A session with at least one bind it may
// take is attached; the binds it may not take are left out with a notice
// (see Update). A session announcing no service is attached.
func (rg *Registry) Attach(_ context.Context, s *tunnel.Session) error {
	return rg.attachRefusal(s.Identity().Name, sessionRights(s), s.Announcement())
}

// attachRefusal is Attach's verdict on ann, announced with rights r by a
// token called name.
func (rg *Registry) attachRefusal(name string, r rights, ann *tunnel.Announcement) error {
	probe := &clientEntry{rights: r}
	var why []string
	accepted, refused := 0, 0
	rg.mu.Lock()
	for i := range ann.Services {
		keys, bad, reasons := rg.bindsLocked(probe, r, &ann.Services[i])
		accepted += len(keys)
		refused += len(bad)
		for _, reason := range reasons {
			if !slices.Contains(why, reason) && len(why) <= maxRefusalReasons {
				why = append(why, reason)
			}
		}
	}
	permanent := accepted == 0 && refused > 0 && !rg.poolRefusedLocked(probe, r, ann)
	rg.mu.Unlock()
	if accepted > 0 || refused == 0 {
		return nil
	}
	if len(why) > maxRefusalReasons {
		why = append(why[:maxRefusalReasons], fmt.Sprintf("and %d more", refused-maxRefusalReasons))
	}
	reason := fmt.Sprintf("token %q refused: %s", name, strings.Join(why, "; "))
	if permanent {
		return tunnel.PermanentRefusal(tunnel.RefusalHostname, reason)
	}
	return errors.New(reason)
}

// poolRefusedLocked reports whether a bind of ann that rights r allow is
// refused only because another organization's clients serve its pool: a
// refusal that passes once they leave, so the session's is not permanent.
func (rg *Registry) poolRefusedLocked(e *clientEntry, r rights, ann *tunnel.Announcement) bool {
	for i := range ann.Services {
		sa := &ann.Services[i]
		hosts := sa.Hostnames
		if len(hosts) == 0 {
			hosts = exactPatterns(r.allowed)
		}
		for _, h := range hosts {
			if r.refusal(rg.owners.Load(), h, sa.Path) == "" && rg.poolRefusalLocked(e, r, h, sa.Path) != "" {
				return true
			}
		}
	}
	return false
}

// catchAllBind names a refused catch-all in a client's refused binds.
const catchAllBind = "(catch-all)"

// bindsLocked returns the pools sa may join with rights r (e is the
// client, for the pool-membership check), the binds it may not take and
// why. A service with no hostname binds the token's exact hostnames when
// it lists some (auto-bind, never its wildcards), else the catch-all of
// r's organization when r and the server allow it.
func (rg *Registry) bindsLocked(e *clientEntry, r rights, sa *tunnel.Service) (keys []poolKey, refused, why []string) {
	hosts := sa.Hostnames
	if len(hosts) == 0 {
		hosts = exactPatterns(r.allowed)
	}
	if len(hosts) == 0 {
		switch {
		case !r.catchAll:
			why = append(why, fmt.Sprintf("service %s names no hostname, and its token lists no exact hostname to bind and may not serve a catch-all (allow_catch_all)", sa.ID))
		case !rg.catchAll:
			why = append(why, fmt.Sprintf("service %s names no hostname, and this server refuses catch-all services (require_hostname_bind)", sa.ID))
		case !r.master && !mayBindPath(r.paths, sa.Path):
			why = append(why, fmt.Sprintf("service %s: may not bind the catch-all at %s: not under the token's paths", sa.ID, pathOrRoot(sa.Path)))
		default:
			return []poolKey{{path: sa.Path, catchAll: true, org: r.org}}, nil, nil
		}
		return nil, []string{catchAllBind + sa.Path}, why
	}
	for _, h := range hosts {
		if reason := rg.refusalLocked(e, r, h, sa.Path); reason != "" {
			refused = append(refused, h+sa.Path)
			why = append(why, reason)
			continue
		}
		keys = append(keys, poolKey{pattern: hostname.Normalize(h), path: sa.Path})
	}
	return keys, refused, why
}

// exactPatterns returns the exact hostnames among a token's patterns.
func exactPatterns(patterns []string) []string {
	var out []string
	for _, p := range patterns {
		if !strings.HasPrefix(p, "*") {
			out = append(out, p)
		}
	}
	return out
}

// maxRefusalReasons bounds the reasons a refusal spells out, so that the
// message (sent to the client and audited) stays short whatever the
// announcement.
const maxRefusalReasons = 5

// sessionRights returns what s may bind.
func sessionRights(s *tunnel.Session) rights {
	id := s.Identity()
	master := id.TokenID == ""
	return rights{allowed: id.Hostnames, allowedIPs: id.AllowedIPs, master: master, org: id.OrgID, catchAll: master || id.AllowCatchAll,
		tokenID: id.TokenID, paths: id.Paths, maxRPS: id.MaxRPS}
}

// Update implements tunnel.Registry: it applies the session's announcement
// when it changed anything routing depends on, and does nothing otherwise.
// Hostnames the token may not bind (added after the handshake) are left
// out, and the client is told.
func (rg *Registry) Update(_ context.Context, s *tunnel.Session) []string {
	return rg.updateAs(s, s.Announcement(), sessionRights(s))
}

// mayBind reports whether a token with patterns may bind host. An exact
// pattern allows that name; "*.example.com" allows every name below
// example.com (not example.com itself) and every wildcard at or below it.
func mayBind(patterns []string, host string) bool {
	host = hostname.Normalize(host)
	for _, p := range patterns {
		p = hostname.Normalize(p)
		if p == host {
			return true
		}
		suffix, ok := strings.CutPrefix(p, "*") // ".example.com"
		if !ok {
			continue
		}
		name := strings.TrimPrefix(host, "*") // "a.example.com" or ".a.example.com"
		if len(name) > len(suffix) && strings.HasSuffix(name, suffix) {
			return true
		}
	}
	return false
}

// update applies ann as the announcement of a client with every right
// (the master token).
func (rg *Registry) update(conn Conn, ann *tunnel.Announcement) []string {
	return rg.updateAs(conn, ann, rights{master: true, catchAll: true, org: connOrg(conn)})
}

// updateAs applies ann as conn's announcement, binding only the hostnames
// r allows (see refusalLocked) and admitting only visitors in
// r.allowedIPs (all when empty). Only the pools conn joins or leaves are
// touched, so a server with many clients pays per change for the pools of
// one client, not for all of them.
func (rg *Registry) updateAs(conn Conn, ann *tunnel.Announcement, r rights) []string {
	rg.mu.Lock()
	notices, touched := rg.updateLocked(conn, ann, r, false)
	rg.mu.Unlock()
	rg.syncTable()
	for _, p := range touched {
		p.wake(rg.strategy)
	}
	return notices
}

// updateLocked is updateAs with rg.mu held: it returns the notices and the
// pools to wake once the lock is released. With force it re-applies ann
// even when it routes as the one in place (ownership changed).
func (rg *Registry) updateLocked(conn Conn, ann *tunnel.Announcement, r rights, force bool) ([]string, []*pool) {
	allowedIPs := r.allowedIPs
	e := rg.clients[conn]
	if e != nil && !sameRights(e.rights, r) {
		// The token was edited (PATCH /tokens/{id}): its binds are judged
		// again under the new rights. The visitor allowed_ips of services
		// already published stay until the client reconnects: the hot
		// path reads them without a lock.
		e.rights = r
		force = true
	}
	if e != nil && !force && !e.retry && sameRouting(e.ann, ann) {
		e.ann = ann
		return e.notices, nil
	}
	if e == nil {
		e = &clientEntry{services: make(map[string]*service), rights: r}
		rg.clients[conn] = e
	}
	e.ann = ann
	seen := make(map[string]bool, len(ann.Services))
	keys := make(map[poolKey][]*service)
	var notices, refused []string
	retry := false
	for _, sa := range ann.Services {
		seen[sa.ID] = true
		s := e.services[sa.ID]
		if s == nil {
			// allowedIPs is the session's token's, fixed for its life: it is
			// set once, before the service is published, because the hot
			// path reads it without a lock.
			s = &service{conn: conn, id: sa.ID, instance: ann.InstanceID, allowedIPs: allowedIPs, tokenID: r.tokenID, org: r.org}
			s.affinity = affinityValue(rg.affinityKey, ann.InstanceID)
			s.cookie = affinityCookieLine(s.affinity)
			e.services[sa.ID] = s
		}
		s.limit.Store(int64(sa.MaxConcurrent))
		s.priority.Store(int64(sa.Priority))
		s.healthy.Store(sa.Healthy)
		s.draining.Store(ann.Draining || sa.Draining)
		s.disabled.Store(e.disabled)
		s.resilience.Store(sa.Resilience)
		s.allowConnect.Store(sa.AllowConnect)
		rg.setPassthroughLocked(s, sa.TLSPassthrough)
		notices = append(notices, storeServiceHeaders(s, sa)...)
		wt, clamped := clampWeight(sa.Weight)
		if clamped {
			notices = append(notices, fmt.Sprintf("service %s: weight %d is outside %d..%d; using %d", sa.ID, sa.Weight, minWeight, maxWeight, wt))
		}
		s.weight.Store(wt)
		s.override.Store(0)
		if sa.LBStrategy != "" {
			if i := slices.Index(Strategies, sa.LBStrategy); i >= 0 {
				s.override.Store(int32(i) + 1)
			} else {
				notices = append(notices, fmt.Sprintf("service %s: unknown lb_strategy %.32q; using the server's", sa.ID, sa.LBStrategy))
			}
		}
		ge := s.gate.Load()
		if ge == nil || !sameAccess(ge.spec, sa.Access) {
			ng, err := rg.access.buildGate(sa.Access)
			if err != nil {
				notices = append(notices, accessNotice(sa.ID, err))
				continue
			}
			s.gate.Store(ng)
			ge = ng
		}
		ks, bad, whys := rg.bindsLocked(e, e.rights, &sa)
		refused = append(refused, bad...)
		for _, why := range whys {
			notices = append(notices, why+tunnel.NotRouted)
		}
		for _, k := range ks {
			if why := rg.accessConflictLocked(e, k, ge); why != "" {
				notices = append(notices, why)
				retry = true
				continue
			}
			keys[k] = append(keys[k], s)
		}
	}
	e.retry = retry
	lim := rg.rates.holdLocked(e, e.rights)
	for id, s := range e.services {
		if !seen[id] {
			s.gone.Store(true)
			rg.setPassthroughLocked(s, false)
			delete(e.services, id)
			continue
		}
		s.rate.Store(lim)
	}
	e.notices = notices
	e.refused = refused
	return notices, rg.rebindLocked(e, keys)
}

// accessConflictLocked returns why e may not serve the bind k with gate
// ge: another client serves it with other access settings. The members
// of a bind must agree, or a visitor's access would depend on which
// client the balancer picks; the client already serving wins, and the
// newcomer is refused for that bind until they agree.
func (rg *Registry) accessConflictLocked(e *clientEntry, k poolKey, ge *gateEntry) string {
	for other, ss := range rg.members[k] {
		if other == e {
			continue
		}
		for _, s := range ss {
			if g := s.gate.Load(); g != nil && !sameAccess(g.spec, ge.spec) {
				return fmt.Sprintf("%s%s is served by another client with other access settings (public, auth, allowed_ips, denied_ips, identity_jwt): they must agree", k.pattern, k.path) + tunnel.NotRouted
			}
		}
	}
	return ""
}

// Detach implements tunnel.Registry.
func (rg *Registry) Detach(_ context.Context, s *tunnel.Session) { rg.detach(s) }

// detach forgets conn; its in-flight requests release their permits into
// services nobody routes to any more.
func (rg *Registry) detach(conn Conn) {
	rg.mu.Lock()
	e := rg.clients[conn]
	if e == nil {
		rg.mu.Unlock()
		return
	}
	left := make([]*pool, 0, len(e.keys))
	for k := range e.keys {
		if p := rg.pools[k]; p != nil {
			left = append(left, p)
		}
	}
	for _, s := range e.services {
		s.gone.Store(true)
		rg.setPassthroughLocked(s, false)
	}
	rg.rates.releaseLocked(e)
	rg.rebindLocked(e, nil)
	delete(rg.clients, conn)
	rg.mu.Unlock()
	rg.syncTable()
	// Requests queued for it may be served by the clients left (the
	// standby tier, when it was the last primary); no release of its own
	// permits hands them on any more, so wake them here.
	for _, p := range left {
		p.wake(rg.strategy)
	}
}

// rebindLocked moves e's services from the pools they were in to the pools
// in keys, refreshes those pools' member lists and, when a pool appeared
// or may go, the table. It returns the pools e's services are in now.
func (rg *Registry) rebindLocked(e *clientEntry, keys map[poolKey][]*service) []*pool {
	now := time.Now()
	affected := make(map[poolKey]bool, len(e.keys)+len(keys))
	for k := range e.keys {
		affected[k] = true
		delete(rg.members[k], e)
	}
	tableDirty := false
	servicePools := make(map[*service][]*pool)
	var touched []*pool
	for k, ss := range keys {
		affected[k] = true
		if rg.members[k] == nil {
			rg.members[k] = make(map[*clientEntry][]*service)
		}
		rg.members[k][e] = ss
		p := rg.pools[k]
		if p == nil {
			rg.poolSeq++
			p = &pool{seq: rg.poolSeq, pattern: k.pattern, path: k.path, catchAll: k.catchAll, org: k.org}
			rg.pools[k] = p
			tableDirty = true
		}
		for _, s := range ss {
			servicePools[s] = append(servicePools[s], p)
		}
		touched = append(touched, p)
	}
	e.keys = make(map[poolKey]bool, len(keys))
	for k := range keys {
		e.keys[k] = true
	}
	for k := range affected {
		p := rg.pools[k]
		var ms []*service
		for _, ss := range rg.members[k] {
			ms = append(ms, ss...)
		}
		sortServices(ms)
		restricted := false
		for _, s := range ms {
			restricted = restricted || len(s.allowedIPs) > 0
		}
		p.restricted.Store(restricted)
		override, weighted := int32(0), false
		for _, s := range ms {
			if override == 0 {
				override = s.override.Load() // the oldest member's wins
			}
			weighted = weighted || s.weight.Load() != 1
		}
		p.override.Store(override)
		p.weighted.Store(weighted)
		if len(ms) > 0 {
			p.gate.Store(ms[0].gate.Load())
		}
		if len(ms) == 0 {
			delete(rg.members, k)
			if p.emptiedAt.Load() == 0 {
				p.emptiedAt.Store(now.UnixNano())
			}
			tableDirty = true // a candidate for removal once DownThreshold has passed
		} else {
			p.emptiedAt.Store(0)
		}
		p.members.Store(&ms)
	}
	for s, ps := range servicePools {
		sort.Slice(ps, func(i, j int) bool { return ps[i].seq < ps[j].seq })
		s.pools.Store(&ps)
	}
	if tableDirty {
		rg.tableWant++ // the caller runs syncTable once it has let go of mu
	}
	return touched
}

// rebuildTableLocked swaps in a table of every pool that may still serve,
// dropping pools emptied longer than DownThreshold ago with nobody waiting.
func (rg *Registry) rebuildTableLocked(now time.Time) {
	rg.tableWant++
	rg.table.Store(buildTable(rg.livePoolsLocked(now), rg.owners.Load()))
	rg.tableBuilt = rg.tableWant
}

// livePoolsLocked returns the pools a table holds, and forgets those
// emptied longer than DownThreshold ago with nobody waiting.
func (rg *Registry) livePoolsLocked(now time.Time) []*pool {
	live := make([]*pool, 0, len(rg.pools))
	for k, p := range rg.pools {
		if at := p.emptiedAt.Load(); at != 0 && now.Sub(time.Unix(0, at)) >= rg.downThreshold && p.queued() == 0 && p.armed.Load() == nil {
			delete(rg.pools, k)
			continue
		}
		live = append(live, p)
	}
	return live
}

// syncTable stores a table holding every change made before it was
// called. Call it without mu, after the change (its caller returns once
// the change is routable). The build runs outside mu; concurrent callers
// wait for one build and share it when it holds their change.
func (rg *Registry) syncTable() {
	rg.mu.Lock()
	want, done := rg.tableWant, rg.tableBuilt >= rg.tableWant
	rg.mu.Unlock()
	if done {
		return
	}
	rg.tableMu.Lock()
	defer rg.tableMu.Unlock()
	rg.mu.Lock()
	if rg.tableBuilt >= want { // a build since covered it
		rg.mu.Unlock()
		return
	}
	gen := rg.tableWant
	live, owners := rg.livePoolsLocked(time.Now()), rg.owners.Load()
	rg.mu.Unlock()
	t := buildTable(live, owners) // a pool's pattern, path and org never change
	rg.mu.Lock()
	if gen > rg.tableBuilt {
		rg.table.Store(t)
		rg.tableBuilt = gen
	}
	rg.mu.Unlock()
}

// sortServices orders a pool's members oldest connection first, so
// round-robin and primary-standby see a stable order.
func sortServices(ms []*service) {
	sort.Slice(ms, func(i, j int) bool {
		a, b := ms[i].conn.ConnectedAt(), ms[j].conn.ConnectedAt()
		if !a.Equal(b) {
			return a.Before(b)
		}
		if ms[i].conn.ID() != ms[j].conn.ID() {
			return ms[i].conn.ID() < ms[j].conn.ID()
		}
		return ms[i].id < ms[j].id
	})
}

// ConnectedClients returns the number of attached sessions.
func (rg *Registry) ConnectedClients() int {
	rg.mu.Lock()
	defer rg.mu.Unlock()
	return len(rg.clients)
}

// sameRouting reports whether two announcements route identically.
func sameRouting(a, b *tunnel.Announcement) bool {
	if a.Draining != b.Draining || a.InstanceID != b.InstanceID || len(a.Services) != len(b.Services) {
		return false
	}
	for i := range a.Services {
		x, y := &a.Services[i], &b.Services[i]
		if x.ID != y.ID || x.Path != y.Path || x.MaxConcurrent != y.MaxConcurrent ||
			x.Priority != y.Priority || x.Healthy != y.Healthy || x.Draining != y.Draining || x.Resilience != y.Resilience || x.AllowConnect != y.AllowConnect || x.Weight != y.Weight || x.LBStrategy != y.LBStrategy || !sameAccess(x.Access, y.Access) || !sameHeaders(x.Headers, y.Headers) ||
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

// errNoRoutable is acquire's answer when no client can take requests;
// acquireRefusal maps it to its refusal.
var errNoRoutable = errors.New("router: no client can take the request")

// Inflight returns the requests in flight on one client's service.
func (rg *Registry) Inflight(conn Conn, serviceID string) int64 {
	rg.mu.Lock()
	defer rg.mu.Unlock()
	if e := rg.clients[conn]; e != nil {
		if s := e.services[serviceID]; s != nil {
			return s.inflight.Load()
		}
	}
	return 0
}

// Queued returns the requests waiting in every pool's queue for a
// client's permit, for metrics. It locks each pool briefly.
func (rg *Registry) Queued() int {
	return rg.QueuedOn(func(string) bool { return true })
}

// QueuedOn returns the requests waiting now (queued for a permit or held
// for a cold start) in the pools whose hostname pattern keep accepts; a
// catch-all pool's pattern is "". It locks each pool briefly, for the
// admin API's figures.
func (rg *Registry) QueuedOn(keep func(pattern string) bool) int {
	rg.mu.Lock()
	pools := make([]*pool, 0, len(rg.pools))
	for k, p := range rg.pools {
		if keep(k.pattern) {
			pools = append(pools, p)
		}
	}
	rg.mu.Unlock()
	n := 0
	for _, p := range pools {
		n += p.queued()
	}
	return n
}

// PoolStats are the live figures autoscaling reads for one bind.
type PoolStats struct {
	// Instances counts client processes (distinct instance ids) with a
	// routable primary-tier service in the pool.
	Instances int
	// Capacity sums those services' max_concurrent (a learnt limit is
	// announced as max_concurrent, so it counts). It is 0 when any of them
	// announces none: an unlimited service takes any share of the load, so
	// the pool's utilization is not measurable, and a sum over the limited
	// ones alone would count the unlimited one's in-flight against
	// capacity it does not add.
	Capacity int
	// Inflight sums the permits those services hold: exactly the work the
	// pool is doing, the numerator of utilization.
	Inflight int
	// Held counts requests waiting in the pool's queue.
	Held int
	// Routable counts services of any tier that could take a request now.
	Routable int
}

// Stats returns the figures of the pool bound to pattern (a hostname or
// "*." wildcard) and path. Standby (priority > 0), draining, unhealthy and
// disconnected services are not capacity.
func (rg *Registry) Stats(pattern, path string) PoolStats {
	rg.mu.Lock()
	p := rg.pools[poolKey{pattern: hostname.Normalize(pattern), path: path}]
	rg.mu.Unlock()
	var st PoolStats
	if p == nil {
		return st
	}
	instances := map[string]bool{}
	unlimited := false
	for _, s := range *p.members.Load() {
		if !s.routable() {
			continue
		}
		st.Routable++
		if s.priority.Load() > 0 {
			continue
		}
		instances[s.instance] = true
		limit := s.limit.Load()
		unlimited = unlimited || limit <= 0
		st.Capacity += int(limit)
		st.Inflight += int(s.inflight.Load())
	}
	if unlimited {
		st.Capacity = 0
	}
	st.Instances = len(instances)
	st.Held = p.queued()
	return st
}

// announced returns, for Explain, the name each of ms's clients announced
// and the path each service forwards escaped as (trim_bind); a client
// that left since is not named.
func (rg *Registry) announced(ms []*service, escaped string) (names map[Conn]string, forwarded map[*service]string) {
	names = make(map[Conn]string, len(ms))
	forwarded = make(map[*service]string, len(ms))
	rg.mu.Lock()
	defer rg.mu.Unlock()
	for _, s := range ms {
		e := rg.clients[s.conn]
		if e == nil {
			continue
		}
		names[s.conn] = e.ann.Name
		for i := range e.ann.Services {
			if as := &e.ann.Services[i]; as.ID == s.id {
				if fwd, _, err := as.ForwardedPath(escaped); err == nil {
					forwarded[s] = fwd
				}
			}
		}
	}
	return names, forwarded
}
