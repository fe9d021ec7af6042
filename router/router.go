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

	"go.opentelemetry.io/otel/trace"

	"github.com/aperio-dev/aperio/internal/hostname"
	"github.com/aperio-dev/aperio/internal/visitor/inspect"
	"github.com/aperio-dev/aperio/internal/visitor/policy"
	"github.com/aperio-dev/aperio/internal/visitor/stale"
	"github.com/aperio-dev/aperio/internal/visitor/usage"
	"github.com/aperio-dev/aperio/tunnel"
)

// Config configures a Router. The zero value routes with round-robin, no
// limits and no waiting; DefaultConfig holds the server's defaults.
type Config struct {
	// MaxBodyBytes bounds a request body (max_body_size); larger bodies get
	// 413. Zero means no bound.
	MaxBodyBytes int64
	// GatewayTimeout is how long a request may wait for a client or for a
	// client's permit (gateway_timeout). Zero means no waiting.
	GatewayTimeout time.Duration
	// DownThreshold is how long after its last client left a hostname
	// still waits for one to return instead of answering 502 at once
	// (client_down_threshold).
	DownThreshold time.Duration
	// Strategy is lb_strategy: "round-robin" (default), "least-inflight",
	// "primary-standby" or "sticky". A client service may announce its
	// own for its binds.
	Strategy string
	// AffinityKey signs the aperio_affinity cookies of lb_strategy sticky.
	// Nil means a random key per Router: cookies stop matching when the
	// server restarts, and visitors are balanced anew (and re-issued one).
	AffinityKey []byte
	// OutlierConsecutive5xx is how many 5xx answers in a row take a client
	// service out of rotation (outlier_consecutive_5xx); zero turns
	// ejection off. OutlierEjectionTime is how long the first ejection
	// lasts (outlier_ejection_time), doubling with each ejection in a row
	// up to ten times; OutlierMaxEjectedPercent bounds the share of a
	// pool's members ejected at once (outlier_max_ejected_percent, 0..100).
	OutlierConsecutive5xx    int
	OutlierEjectionTime      time.Duration
	OutlierMaxEjectedPercent int
	// MaxConcurrentRequests bounds proxied requests in flight across the
	// server (max_concurrent_requests). Zero means unbounded.
	MaxConcurrentRequests int
	// MaxStreamsPerIP bounds the proxied requests in flight of one
	// visitor address (max_streams_per_ip, the real client address behind
	// trusted proxies); beyond it: 429 streams-per-ip with Retry-After: 1.
	// Zero means no bound. Default 256.
	MaxStreamsPerIP int
	// MaxWSConnections bounds the WebSocket (and other upgraded)
	// relays open at once (max_ws_connections), counted from the upgrade
	// request until the relay ends; beyond it: 503 with Retry-After.
	// Zero means no bound. Default 10000.
	MaxWSConnections int
	// IPLimitMax and IPLimitRefill are the per-visitor token bucket
	// (ip_limit_max burst, ip_limit_refill tokens per second). A zero
	// IPLimitMax disables it.
	IPLimitMax    int
	IPLimitRefill float64
	// UnderscoreHeaders is underscore_headers: what becomes of a visitor's
	// header whose name holds an underscore: "allow" (the default, "" too)
	// passes it on, "drop" removes it, "refuse" answers the request 400.
	// Whatever it says, a name that is one of the server's own once "_" is
	// read as "-" (X_Aperio_User, X_Forwarded_For: see serverOwnedHeader)
	// is always removed. Applied by Reconfigure.
	UnderscoreHeaders string
	// Failover is "fail" (default), "retry", "wait" or "retry-wait";
	// FailoverAllMethods lifts the idempotent-methods rule; FailoverMaxJumps
	// and FailoverWindow bound re-dispatch.
	Failover           string
	FailoverAllMethods bool
	FailoverMaxJumps   int
	FailoverWindow     time.Duration
	// FailoverReplayMaxBody (failover_replay_max_body, bytes) is the
	// largest request body kept so that failover may send it again, and
	// also the bound on the bytes kept across all requests at once; a body
	// beyond either streams and cannot fail over. Zero keeps none.
	FailoverReplayMaxBody int64
	// RetryOn5xx lists statuses (500..599, at most 16) on which an
	// idempotent request is sent once more, to another client
	// (retry_on_5xx). Empty means never.
	RetryOn5xx []int
	// Fallbacks are the redirects visitors get when no client can serve
	// their hostname (fallbacks); at most one per hostname pattern, see
	// Fallback.
	Fallbacks []Fallback
	// ErrorPages are the operator's HTML pages (error_pages); nil means
	// the built-in page for every status and hostname. See ErrorPage.
	ErrorPages []ErrorPage
	// MaintenanceWindows are the recurring maintenance windows
	// (maintenance_windows), applied beside the entries of SetMaintenance.
	MaintenanceWindows []MaintenanceWindow
	// Now is the clock of maintenance (entries' ends, windows); nil means
	// time.Now. Tests inject one.
	Now func() time.Time
	// Scaler, when set, starts instances for armed binds (cold start).
	Scaler Scaler
	// MaxHeld bounds the requests held for one bind's cold start
	// (scaling_max_held); beyond it the answer is 503 with Retry-After.
	// Zero means the wait queue's own bound.
	MaxHeld int
	// Cache, when set, keeps the last good GET responses of services that
	// announce resilience and serves them stale when nothing can serve.
	Cache *stale.Cache
	// VisitorIdleTimeout ends a request whose visitor makes no progress
	// reading its response or sending its body for this long
	// (visitor_idle_timeout); VisitorMinRate, in bytes per second, ends
	// one slower than that once it waited VisitorIdleTimeout on the
	// visitor in total (visitor_min_bytes_per_second). Zero turns each
	// off. See deadline.go.
	VisitorIdleTimeout time.Duration
	VisitorMinRate     int64
	// Logger receives routing diagnostics; nil discards them.
	Logger *slog.Logger
	// Tracer, when set, records each request's route selection, queue
	// wait, cold-start hold and dispatch as spans under the span in the
	// request's context, and sends the dispatch span's traceparent to the
	// backend. Nil means tracing is off: no span, no clock read for one.
	Tracer trace.Tracer

	// Policy is the traffic policy (routes, rate_limits, headers,
	// security_headers), compiled by New. The zero value is none.
	Policy policy.Config
	// CatchAll lets services that name no hostname serve the hostnames no
	// other bind matches, for the master token and tokens minted with
	// allow_catch_all (require_hostname_bind false). False, the zero
	// value, refuses such services, unless their token lists exact
	// hostnames (auto-bind).
	CatchAll bool

	// Access is the server's side of visitor access control
	// (default_access, the identity signer, share links, the outbound
	// client of jwt and forward).
	Access AccessConfig

	// Inspector, when set, holds the request inspector's captures: the
	// requests of a hostname it captures are recorded on their way
	// (docs/inspector.md). Nil captures nothing.
	Inspector *inspect.Inspector
	// Usage counts each dispatched request's visitor bytes against its
	// client's token, organization and bind hostname, and refuses a
	// request whose token or organization is over its byte quota (429
	// token-quota or org-quota). Nil counts nothing.
	Usage *usage.Meter
}

// Router routes visitor requests to connected clients. It implements
// http.Handler for visitors and tunnel.Registry for the tunnel server, and
// is safe for concurrent use.
type Router struct {
	cfg      Config
	log      *slog.Logger
	strategy strategy
	failover failoverPolicy
	limits   *admissionLimits // max_concurrent_requests, max_streams_per_ip, max_ws_connections, the 429 counts
	held     atomic.Int64     // requests held for a cold start
	tracer   trace.Tracer     // nil when tracing is off
	// cur is the configuration Reconfigure replaces (limits, policy,
	// pages, windows, fallbacks, default_access); never nil after New.
	cur atomic.Pointer[settings]

	now func() time.Time // cfg.Now, or time.Now

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

	affinityKey []byte       // signs aperio_affinity values
	replayKept  atomic.Int64 // request body bytes kept for replay
	outliers    *outliers    // passive outlier ejection

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
	// rateToken is the token whose max_rps bucket (Router.rates) the
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

// New returns a Router with no clients, or an error naming a bad setting.
func New(cfg Config) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rt := &Router{
		cfg:      cfg,
		log:      log,
		tracer:   cfg.Tracer,
		clients:  make(map[Conn]*clientEntry),
		pools:    make(map[poolKey]*pool),
		members:  make(map[poolKey]map[*clientEntry][]*service),
		rates:    make(tokenRates),
		limits:   newAdmissionLimits(cfg),
		outliers: newOutliers(cfg, log),
	}
	switch cfg.Strategy {
	case "", "round-robin":
		rt.strategy = roundRobin
	case "least-inflight":
		rt.strategy = leastInflight
	case "primary-standby":
		rt.strategy = primaryStandby
	case "sticky":
		rt.strategy = sticky
	default:
		return nil, fmt.Errorf("router: unknown lb_strategy %q", cfg.Strategy)
	}
	fp, err := parseFailover(cfg.Failover)
	if err != nil {
		return nil, err
	}
	rt.failover = fp
	rt.affinityKey = cfg.AffinityKey
	if len(rt.affinityKey) == 0 {
		rt.affinityKey = make([]byte, 32)
		rand.Read(rt.affinityKey) // never fails (crypto/rand)
	}
	set, err := rt.buildSettings(cfg, nil)
	if err != nil {
		return nil, err
	}
	rt.cur.Store(set)
	rt.table.Store(buildTable(nil, nil))
	rt.maintenance.Store(&hostMap[*maintenanceEntry]{})
	rt.now = cfg.Now
	if rt.now == nil {
		rt.now = time.Now
	}
	return rt, nil
}

// Attach implements tunnel.Registry: a session none of whose binds may be
// taken is refused, with the reasons: hostnames its token may not bind,
// hostnames its organization may not bind (see SetOwnership), binds whose
// pool has members of another organization, a service with no hostname
// where no catch-all is allowed. A session with at least one bind it may
// take is attached; the binds it may not take are left out with a notice
// (see Update). A session announcing no service is attached.
func (rt *Router) Attach(_ context.Context, s *tunnel.Session) error {
	return rt.attachRefusal(s.Identity().Name, sessionRights(s), s.Announcement())
}

// attachRefusal is Attach's verdict on ann, announced with rights r by a
// token called name.
func (rt *Router) attachRefusal(name string, r rights, ann *tunnel.Announcement) error {
	probe := &clientEntry{rights: r}
	var why []string
	accepted, refused := 0, 0
	rt.mu.Lock()
	for i := range ann.Services {
		keys, bad, reasons := rt.bindsLocked(probe, r, &ann.Services[i])
		accepted += len(keys)
		refused += len(bad)
		for _, reason := range reasons {
			if !slices.Contains(why, reason) && len(why) <= maxRefusalReasons {
				why = append(why, reason)
			}
		}
	}
	permanent := accepted == 0 && refused > 0 && !rt.poolRefusedLocked(probe, r, ann)
	rt.mu.Unlock()
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
func (rt *Router) poolRefusedLocked(e *clientEntry, r rights, ann *tunnel.Announcement) bool {
	for i := range ann.Services {
		sa := &ann.Services[i]
		hosts := sa.Hostnames
		if len(hosts) == 0 {
			hosts = exactPatterns(r.allowed)
		}
		for _, h := range hosts {
			if r.refusal(rt.owners.Load(), h, sa.Path) == "" && rt.poolRefusalLocked(e, r, h, sa.Path) != "" {
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
func (rt *Router) bindsLocked(e *clientEntry, r rights, sa *tunnel.Service) (keys []poolKey, refused, why []string) {
	hosts := sa.Hostnames
	if len(hosts) == 0 {
		hosts = exactPatterns(r.allowed)
	}
	if len(hosts) == 0 {
		switch {
		case !r.catchAll:
			why = append(why, fmt.Sprintf("service %s names no hostname, and its token lists no exact hostname to bind and may not serve a catch-all (allow_catch_all)", sa.ID))
		case !rt.cfg.CatchAll:
			why = append(why, fmt.Sprintf("service %s names no hostname, and this server refuses catch-all services (require_hostname_bind)", sa.ID))
		case !r.master && !mayBindPath(r.paths, sa.Path):
			why = append(why, fmt.Sprintf("service %s: may not bind the catch-all at %s: not under the token's paths", sa.ID, pathOrRoot(sa.Path)))
		default:
			return []poolKey{{path: sa.Path, catchAll: true, org: r.org}}, nil, nil
		}
		return nil, []string{catchAllBind + sa.Path}, why
	}
	for _, h := range hosts {
		if reason := rt.refusalLocked(e, r, h, sa.Path); reason != "" {
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
func (rt *Router) Update(_ context.Context, s *tunnel.Session) []string {
	return rt.updateAs(s, s.Announcement(), sessionRights(s))
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
func (rt *Router) update(conn Conn, ann *tunnel.Announcement) []string {
	return rt.updateAs(conn, ann, rights{master: true, catchAll: true, org: connOrg(conn)})
}

// updateAs applies ann as conn's announcement, binding only the hostnames
// r allows (see refusalLocked) and admitting only visitors in
// r.allowedIPs (all when empty). Only the pools conn joins or leaves are
// touched, so a server with many clients pays per change for the pools of
// one client, not for all of them.
func (rt *Router) updateAs(conn Conn, ann *tunnel.Announcement, r rights) []string {
	rt.mu.Lock()
	notices, touched := rt.updateLocked(conn, ann, r, false)
	rt.mu.Unlock()
	rt.syncTable()
	for _, p := range touched {
		p.wake(rt.strategy)
	}
	return notices
}

// updateLocked is updateAs with rt.mu held: it returns the notices and the
// pools to wake once the lock is released. With force it re-applies ann
// even when it routes as the one in place (ownership changed).
func (rt *Router) updateLocked(conn Conn, ann *tunnel.Announcement, r rights, force bool) ([]string, []*pool) {
	allowedIPs := r.allowedIPs
	e := rt.clients[conn]
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
		rt.clients[conn] = e
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
			s.affinity = affinityValue(rt.affinityKey, ann.InstanceID)
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
		rt.setPassthroughLocked(s, sa.TLSPassthrough)
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
			ng, err := rt.cfg.Access.buildGate(sa.Access)
			if err != nil {
				notices = append(notices, accessNotice(sa.ID, err))
				continue
			}
			s.gate.Store(ng)
			ge = ng
		}
		ks, bad, whys := rt.bindsLocked(e, e.rights, &sa)
		refused = append(refused, bad...)
		for _, why := range whys {
			notices = append(notices, why+tunnel.NotRouted)
		}
		for _, k := range ks {
			if why := rt.accessConflictLocked(e, k, ge); why != "" {
				notices = append(notices, why)
				retry = true
				continue
			}
			keys[k] = append(keys[k], s)
		}
	}
	e.retry = retry
	lim := rt.rates.holdLocked(e, e.rights)
	for id, s := range e.services {
		if !seen[id] {
			s.gone.Store(true)
			rt.setPassthroughLocked(s, false)
			delete(e.services, id)
			continue
		}
		s.rate.Store(lim)
	}
	e.notices = notices
	e.refused = refused
	return notices, rt.rebindLocked(e, keys)
}

// accessConflictLocked returns why e may not serve the bind k with gate
// ge: another client serves it with other access settings. The members
// of a bind must agree, or a visitor's access would depend on which
// client the balancer picks; the client already serving wins, and the
// newcomer is refused for that bind until they agree.
func (rt *Router) accessConflictLocked(e *clientEntry, k poolKey, ge *gateEntry) string {
	for other, ss := range rt.members[k] {
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
func (rt *Router) Detach(_ context.Context, s *tunnel.Session) { rt.detach(s) }

// detach forgets conn; its in-flight requests release their permits into
// services nobody routes to any more.
func (rt *Router) detach(conn Conn) {
	rt.mu.Lock()
	e := rt.clients[conn]
	if e == nil {
		rt.mu.Unlock()
		return
	}
	left := make([]*pool, 0, len(e.keys))
	for k := range e.keys {
		if p := rt.pools[k]; p != nil {
			left = append(left, p)
		}
	}
	for _, s := range e.services {
		s.gone.Store(true)
		rt.setPassthroughLocked(s, false)
	}
	rt.rates.releaseLocked(e)
	rt.rebindLocked(e, nil)
	delete(rt.clients, conn)
	rt.mu.Unlock()
	rt.syncTable()
	// Requests queued for it may be served by the clients left (the
	// standby tier, when it was the last primary); no release of its own
	// permits hands them on any more, so wake them here.
	for _, p := range left {
		p.wake(rt.strategy)
	}
}

// rebindLocked moves e's services from the pools they were in to the pools
// in keys, refreshes those pools' member lists and, when a pool appeared
// or may go, the table. It returns the pools e's services are in now.
func (rt *Router) rebindLocked(e *clientEntry, keys map[poolKey][]*service) []*pool {
	now := time.Now()
	affected := make(map[poolKey]bool, len(e.keys)+len(keys))
	for k := range e.keys {
		affected[k] = true
		delete(rt.members[k], e)
	}
	tableDirty := false
	servicePools := make(map[*service][]*pool)
	var touched []*pool
	for k, ss := range keys {
		affected[k] = true
		if rt.members[k] == nil {
			rt.members[k] = make(map[*clientEntry][]*service)
		}
		rt.members[k][e] = ss
		p := rt.pools[k]
		if p == nil {
			rt.poolSeq++
			p = &pool{seq: rt.poolSeq, pattern: k.pattern, path: k.path, catchAll: k.catchAll, org: k.org}
			rt.pools[k] = p
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
		p := rt.pools[k]
		var ms []*service
		for _, ss := range rt.members[k] {
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
			delete(rt.members, k)
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
		rt.tableWant++ // the caller runs syncTable once it has let go of mu
	}
	return touched
}

// rebuildTableLocked swaps in a table of every pool that may still serve,
// dropping pools emptied longer than DownThreshold ago with nobody waiting.
func (rt *Router) rebuildTableLocked(now time.Time) {
	rt.tableWant++
	rt.table.Store(buildTable(rt.livePoolsLocked(now), rt.owners.Load()))
	rt.tableBuilt = rt.tableWant
}

// livePoolsLocked returns the pools a table holds, and forgets those
// emptied longer than DownThreshold ago with nobody waiting.
func (rt *Router) livePoolsLocked(now time.Time) []*pool {
	live := make([]*pool, 0, len(rt.pools))
	for k, p := range rt.pools {
		if at := p.emptiedAt.Load(); at != 0 && now.Sub(time.Unix(0, at)) >= rt.cfg.DownThreshold && p.queued() == 0 && p.armed.Load() == nil {
			delete(rt.pools, k)
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
func (rt *Router) syncTable() {
	rt.mu.Lock()
	want, done := rt.tableWant, rt.tableBuilt >= rt.tableWant
	rt.mu.Unlock()
	if done {
		return
	}
	rt.tableMu.Lock()
	defer rt.tableMu.Unlock()
	rt.mu.Lock()
	if rt.tableBuilt >= want { // a build since covered it
		rt.mu.Unlock()
		return
	}
	gen := rt.tableWant
	live, owners := rt.livePoolsLocked(time.Now()), rt.owners.Load()
	rt.mu.Unlock()
	t := buildTable(live, owners) // a pool's pattern, path and org never change
	rt.mu.Lock()
	if gen > rt.tableBuilt {
		rt.table.Store(t)
		rt.tableBuilt = gen
	}
	rt.mu.Unlock()
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
func (rt *Router) ConnectedClients() int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return len(rt.clients)
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
func (rt *Router) Inflight(conn Conn, serviceID string) int64 {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if e := rt.clients[conn]; e != nil {
		if s := e.services[serviceID]; s != nil {
			return s.inflight.Load()
		}
	}
	return 0
}

// Queued returns the requests waiting in every pool's queue for a
// client's permit, for metrics. It locks each pool briefly.
func (rt *Router) Queued() int {
	rt.mu.Lock()
	pools := make([]*pool, 0, len(rt.pools))
	for _, p := range rt.pools {
		pools = append(pools, p)
	}
	rt.mu.Unlock()
	n := 0
	for _, p := range pools {
		n += p.queued()
	}
	return n
}

// QueuedOn returns the requests waiting now (queued for a permit or held
// for a cold start) in the pools whose hostname pattern keep accepts; a
// catch-all pool's pattern is "". It locks each pool briefly, for the
// admin API's figures.
func (rt *Router) QueuedOn(keep func(pattern string) bool) int {
	rt.mu.Lock()
	pools := make([]*pool, 0, len(rt.pools))
	for k, p := range rt.pools {
		if keep(k.pattern) {
			pools = append(pools, p)
		}
	}
	rt.mu.Unlock()
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
func (rt *Router) Stats(pattern, path string) PoolStats {
	rt.mu.Lock()
	p := rt.pools[poolKey{pattern: hostname.Normalize(pattern), path: path}]
	rt.mu.Unlock()
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
