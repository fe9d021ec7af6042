package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/aperio-dev/aperio/autoscale"
	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/control/events"
	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/internal/recovery"
	"github.com/aperio-dev/aperio/router"
	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/tunnel"
)

// scalingRegistry passes the announced scaling block to the controller,
// one declaration per service bind, and tells it when sessions end: the
// "scaling" session hook, the first after the router.
//
// A block is declared only for the binds the router accepted for the
// session (router.Registry.Bound), checked on every announcement, heartbeats
// included: never for a hostname the token may not bind, nor for a
// wildcard wider than the token's patterns. Refused binds, invalid blocks
// and declarations over the record caps are answered with a notice to the
// client (at most maxScalingNotices of them, then a count) and a log line
// at most every refusalLogInterval; the rest of the client keeps working.
//
// The declarations write to the store, so they run on a per-session
// declarer rather than on the session's control loop: the routing update
// is applied before the chain's Update returns, the store writes at most wait later,
// and a slow store delays no heartbeat's ack past wait. Their audit
// entries write nothing there: they are offered to the events queue.
type scalingRegistry struct {
	ctl *autoscale.Controller
	reg *router.Registry
	// arm reloads the router's armed binds from the store; concurrent
	// callers share reloads (see armLoader).
	arm func(ctx context.Context) error
	log *slog.Logger

	// armed remembers, per session, the binds whose arming it already
	// checked, so a bind that stays unarmed (disarmed by the breaker)
	// does not reload the records on every heartbeat.
	armed *sessionBinds
	// refusals rate-limits the log line of refused declarations.
	refusals *refusalLog
	// events queues the audit entries of refused declarations, each once
	// per session, bind and reason (audited), within a per-token budget
	// (auditBudget). Its Run writes them: a declaration never waits for
	// the audit log, so neither does the ack that waits for it.
	events      *events.Emitter
	audited     *sessionBinds
	auditBudget *refusalBudget
	// declarers runs each session's declarations off its control loop.
	declarers *declarers
	// wait is how long Update waits for an announcement's declarations
	// before the ack goes without their notices.
	wait time.Duration
}

// newScalingRegistry builds the scaling declarations of g's controller
// over the router's registry.
func (g *Gateway) newScalingRegistry(reg *router.Registry, log *slog.Logger) scalingRegistry {
	r := scalingRegistry{ctl: g.ctl, reg: reg, arm: g.armed.reload, log: log, armed: &sessionBinds{},
		refusals: newRefusalLog(), declarers: &declarers{log: log, m: make(map[string]*declarer)},
		events: g.events, audited: &sessionBinds{}, auditBudget: newRefusalBudget(time.Now),
		wait: declareWait(g.cfg.Tunnel.DownThreshold)}
	r.declarers.declare = r.declare
	g.declares = &r.declarers.stats
	return r
}

// hook returns the scaling declarations' part in a session's life.
func (r scalingRegistry) hook() sessionHook {
	return sessionHook{name: "scaling", updated: r.update, left: r.leave}
}

// declareWait is how long an ack waits for the scaling declarations of
// its announcement: half the heartbeat interval the tunnel server asks of
// clients (a third of client_down_threshold), so that a slow store delays
// no ack past the next heartbeat.
func declareWait(downThreshold time.Duration) time.Duration {
	return downThreshold / 6
}

// maxScalingNotices bounds the scaling notices of one announcement: a
// client announcing a thousand refused names gets this many, then a count.
const maxScalingNotices = 8

// refusalLogInterval is the least time between two log lines of refused
// scaling declarations, server-wide.
const refusalLogInterval = 10 * time.Second

// refusalLog writes at most one line per refusalLogInterval, counting the
// refusals it kept quiet about. It is safe for concurrent use.
type refusalLog struct {
	every      rate.Sometimes
	suppressed atomic.Int64
}

func newRefusalLog() *refusalLog {
	return &refusalLog{every: rate.Sometimes{Interval: refusalLogInterval}}
}

// refused logs the n refused declarations of one announcement of session
// (first is the first refused hostname, err its reason), or counts them
// while the interval runs.
func (l *refusalLog) refused(log *slog.Logger, id tunnel.Identity, session string, n int, first string, err error) {
	logged := false
	l.every.Do(func() {
		logged = true
		log.Warn("scaling declarations refused", logkey.SessionID, session, logkey.TokenID, id.TokenID,
			logkey.OrgID, id.OrgID, logkey.Count, n, logkey.First, first, logkey.Err, err,
			logkey.Suppressed, l.suppressed.Swap(0))
	})
	if !logged {
		l.suppressed.Add(int64(n))
	}
}

// sessionBinds is a set of binds per session, safe for concurrent use.
type sessionBinds struct {
	mu sync.Mutex // guards m
	m  map[string]map[string]bool
}

// first reports whether bind is new for session, and records it.
func (sb *sessionBinds) first(session, bind string) bool {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.m == nil {
		sb.m = make(map[string]map[string]bool)
	}
	if sb.m[session] == nil {
		sb.m[session] = make(map[string]bool)
	}
	if sb.m[session][bind] {
		return false
	}
	sb.m[session][bind] = true
	return true
}

// firstWithin is first, except that it records nothing and reports false
// once session holds limit entries: what a session can make the set hold
// stays bounded whatever it announces.
func (sb *sessionBinds) firstWithin(session, key string, limit int) bool {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.m == nil {
		sb.m = make(map[string]map[string]bool)
	}
	set := sb.m[session]
	if set == nil {
		set = make(map[string]bool)
		sb.m[session] = set
	}
	if set[key] || len(set) >= limit {
		return false
	}
	set[key] = true
	return true
}

func (sb *sessionBinds) forget(session string) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	delete(sb.m, session)
}

// errNotBound refuses a declaration for a bind the router did not accept
// for the session.
var errNotBound = errors.New("the hostname is not bound by this session")

// update, once the router applied the announcement, hands its
// declarations to the session's declarer and waits for them at most
// r.wait, so a slow store never holds up the heartbeat's ack. Their
// notices go with this ack when they are done in time, and with a later
// one otherwise: each ack carries the notices of the latest declarations
// that ran.
func (r scalingRegistry) update(ctx context.Context, s *tunnel.Session) []string {
	job := r.plan(s)
	if job == nil {
		return nil
	}
	d := r.declarers.get(ctx, s.ID())
	done := d.submit(job)
	t := time.NewTimer(r.wait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		r.declarers.stats.late.Add(1)
	case <-ctx.Done():
	}
	return d.lastNotices()
}

// declareBind is one distinct bind of an announcement, and whether the
// router accepted it for the session when the announcement was applied.
type declareBind struct {
	hostname, path string
	bound          bool
}

// declareJob is the scaling declarations of one announcement, planned on
// the session's goroutine against the router's binds of that announcement.
type declareJob struct {
	id      tunnel.Identity
	session string
	armer   string
	block   autoscale.Declaration
	binds   []declareBind
	// done is closed once the job, or a newer one that replaced it before
	// it started, has run.
	done chan struct{}
}

// plan returns the declarations of s's announcement, or nil when it
// declares no scaling block. It reads only the router.
func (r scalingRegistry) plan(s *tunnel.Session) *declareJob {
	ann := s.Announcement()
	if ann.Scaling == nil {
		return nil
	}
	id := s.Identity()
	armer := id.TokenID
	if armer == "" {
		armer = apitype.Master
	}
	sc := ann.Scaling
	job := &declareJob{id: id, session: s.ID(), armer: armer, block: *sc}
	seen := map[string]bool{}
	for _, svc := range ann.Services {
		for _, h := range svc.Hostnames {
			key := h + "\x00" + svc.Path
			if seen[key] {
				continue
			}
			seen[key] = true
			job.binds = append(job.binds, declareBind{hostname: h, path: svc.Path, bound: r.reg.Bound(s, h, svc.Path)})
		}
	}
	return job
}

// declareTimeout bounds the store I/O of one job: its declarations, and
// the reload of the armed binds they may call for.
const declareTimeout = 5 * time.Second

// declare runs job: it declares each bound bind to the controller and
// returns the notices for the client. It blocks on the store, at most
// declareTimeout.
func (r scalingRegistry) declare(ctx context.Context, job *declareJob) []string {
	ctx, cancel := context.WithTimeout(ctx, declareTimeout)
	defer cancel()
	var notices []string
	refused, firstRefused, arm := 0, "", false
	var firstErr error
	for _, b := range job.binds {
		err := errNotBound
		if b.bound {
			err = r.ctl.Declare(ctx, autoscale.SessionDeclaration{OrgID: job.id.OrgID, Hostname: b.hostname, Path: b.path,
				Session: job.session, Armer: job.armer, Block: job.block})
		}
		if err != nil {
			r.auditRefusal(job, b, err)
			if refused == 0 {
				firstRefused, firstErr = b.hostname, err
			}
			refused++
			if refused <= maxScalingNotices {
				notices = append(notices, "scaling declaration for "+b.hostname+" refused: "+err.Error())
			}
			continue
		}
		// A bind declared for the first time is armed at once rather
		// than at the next debounced reload, so a client that declares
		// and leaves straight away can still be cold started. One
		// reload covers every new bind of the announcement.
		if r.armed.first(job.session, b.hostname+"\x00"+b.path) && !r.reg.ArmedBy(job.id.OrgID, b.hostname, b.path) {
			arm = true
		}
	}
	if refused > maxScalingNotices {
		notices = append(notices, fmt.Sprintf("%d more scaling declarations refused", refused-maxScalingNotices))
	}
	if refused > 0 {
		r.refusals.refused(r.log, job.id, job.session, refused, firstRefused, firstErr)
	}
	if arm {
		if err := r.arm(ctx); err != nil {
			r.log.Error("arming new scaling records failed", logkey.SessionID, job.session, logkey.Err, err)
		}
	}
	return notices
}

// eventScalingRefused is the audit event of a scaling declaration the
// server refused: an invalid block (max below min, a URL the outbound
// policy refuses, …), a bind the session may not arm, another
// organization's bind, or a record cap.
const eventScalingRefused = "scaling_refused"

// maxRefusalAuditsPerSession bounds the distinct refusals (bind and
// reason) audited for one session: a client that changes its block on
// every heartbeat cannot grow the audit log, or the memory that
// deduplicates it, without bound.
const maxRefusalAuditsPerSession = 64

// auditRefusal audits the refusal of b's declaration, once per session,
// bind and reason (a heartbeat repeats its declarations), within the
// token's budget of refusal audits. The entry is offered to the events
// queue, not written: it never blocks on the store. An entry the full
// queue drops is counted there and reported by the next entry written;
// the client still has its notice.
func (r scalingRegistry) auditRefusal(job *declareJob, b declareBind, err error) {
	if !r.audited.firstWithin(job.session, "refused\x00"+b.hostname+"\x00"+b.path+"\x00"+err.Error(), maxRefusalAuditsPerSession) {
		return
	}
	actor := store.ClientActor(job.id.TokenID)
	if ok, _, _ := r.auditBudget.admit(actor.String()); !ok {
		return
	}
	detail := "scaling declaration refused: " + err.Error()
	if b.path != "" {
		detail = "scaling declaration for path " + b.path + " refused: " + err.Error()
	}
	r.events.Offer(events.Event{Kind: eventScalingRefused, OrgID: job.id.OrgID, Actor: actor,
		Hostname: b.hostname, Path: b.path, Detail: detail})
}

// declarer runs the declarations of one session on a goroutine of its
// own, one job at a time and in the order of the session's announcements.
// Its queue holds one job: a newer announcement replaces the one waiting,
// since each declares the session's whole scaling state, so a session
// costs the store at most one job in flight and one waiting, however fast
// it announces and however slow the store is.
type declarer struct {
	// ctx is the session's, the declarer's lifetime: it ends after
	// Detach, which waits for the declarer's jobs, so it is live for
	// every job.
	ctx     context.Context
	declare func(context.Context, *declareJob) []string // runs one job, returns its notices
	stats   *declareStats                               // counts the jobs replaced; nil counts nothing
	log     *slog.Logger                                // receives recovered panics
	wg      sync.WaitGroup                              // the running goroutine, if any

	mu      sync.Mutex // guards the following fields
	next    *declareJob
	running bool
	closed  bool
	notices []string // of the last job run
}

// submit queues job in place of the one waiting, if any, starts the
// goroutine when none runs, and returns a channel closed once job, or a
// newer one, has run. After close it returns a closed channel and drops
// job. It does not block on the store.
func (d *declarer) submit(job *declareJob) <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		done := make(chan struct{})
		close(done)
		return done
	}
	if d.next != nil {
		job.done = d.next.done
		if d.stats != nil {
			d.stats.coalesced.Add(1)
		}
	} else {
		job.done = make(chan struct{})
	}
	d.next = job
	if !d.running {
		d.running = true
		d.wg.Add(1)
		go d.run()
	}
	return job.done
}

// run runs the queued jobs until the queue is empty.
func (d *declarer) run() {
	defer d.wg.Done()
	for {
		d.mu.Lock()
		job := d.next
		d.next = nil
		if job == nil {
			d.running = false
			d.mu.Unlock()
			return
		}
		d.mu.Unlock()
		notices := d.runJob(job)
		d.mu.Lock()
		d.notices = notices
		d.mu.Unlock()
		close(job.done)
	}
}

// runJob runs one job. A panic in it is a defect reached by one client:
// it is recovered and logged, and the declarer goes on with the next job.
func (d *declarer) runJob(job *declareJob) (notices []string) {
	defer recovery.Recover(d.log, "scaling declarations")
	return d.declare(d.ctx, job)
}

// lastNotices returns the notices of the last job run.
func (d *declarer) lastNotices() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.notices
}

// close refuses further jobs and waits for the job in flight and the one
// waiting, so that their records are written before the session leaves
// the controller. It blocks for at most two jobs' declareTimeout.
func (d *declarer) close() {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.wg.Wait()
}

// declarers holds the declarer of each attached session. It is safe for
// concurrent use.
type declarers struct {
	declare func(context.Context, *declareJob) []string // each declarer's
	stats   declareStats                                // every declarer's
	log     *slog.Logger                                // each declarer's

	mu sync.Mutex // guards m
	m  map[string]*declarer
}

// declareStats counts, for the metrics, what the declarers did so as not
// to hold up acks. It is safe for concurrent use.
type declareStats struct {
	coalesced atomic.Int64 // jobs replaced by a newer one before they ran
	late      atomic.Int64 // acks sent before their announcement's jobs were done
}

// get returns the declarer of session, created on first use with ctx, the
// session's context, as its lifetime.
func (ds *declarers) get(ctx context.Context, session string) *declarer {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	d := ds.m[session]
	if d == nil {
		d = &declarer{ctx: ctx, declare: ds.declare, stats: &ds.stats, log: ds.log}
		ds.m[session] = d
	}
	return d
}

// close forgets the declarer of session, after waiting for its jobs (see
// declarer.close).
func (ds *declarers) close(session string) {
	ds.mu.Lock()
	d := ds.m[session]
	delete(ds.m, session)
	ds.mu.Unlock()
	if d != nil {
		d.close()
	}
}

// leave, once the router has taken the session out, waits for its
// declarations (see declarer.close) before it leaves the controller, so a
// declaration still running cannot bring a departed session back.
func (r scalingRegistry) leave(_ context.Context, s *tunnel.Session) {
	r.declarers.close(s.ID())
	r.ctl.Leave(s.ID())
	r.armed.forget(s.ID())
	r.audited.forget(s.ID())
}

// poolView gives the controller the live figures of the router's registry.
type poolView struct{ reg *router.Registry }

// Pool reports the figures of the pool only to the organization whose
// record drives it (router.Registry.Drives): another organization's record, armed
// over overlapping token scopes, must not scale on, nor learn, the load of
// a pool it does not serve. To it the pool looks empty and unmeasurable,
// so it is never scaled out or in.
func (v poolView) Pool(orgID, hostname, path string) autoscale.PoolStats {
	if !v.reg.Drives(orgID, hostname, path) {
		return autoscale.PoolStats{}
	}
	st := v.reg.Stats(hostname, path)
	return autoscale.PoolStats{Instances: st.Instances, Capacity: st.Capacity, Inflight: st.Inflight, Routable: st.Routable}
}

// lazyScaler hands the router's cold starts to the controller, which is
// built after the router (it reads the router's pools).
type lazyScaler struct{ g *Gateway }

func (l lazyScaler) ColdStart(ctx context.Context, org, host, path string) (router.ColdStart, error) {
	st, err := l.g.ctl.ColdStart(ctx, org, host, path)
	if err != nil {
		return nil, err
	}
	return st, nil
}

// PlanColdStart lets the router explain a cold start without starting one
// (router.ColdStartPlanner).
func (l lazyScaler) PlanColdStart(ctx context.Context, org, host, path string) (bool, string, error) {
	p := l.g.ctl.PlanColdStart(ctx, org, host, path)
	var detail []string
	if !p.NextAllowed.IsZero() {
		detail = append(detail, "cooldown or backoff until "+p.NextAllowed.UTC().Format(time.RFC3339))
	}
	if p.ConsecutiveFailures > 0 {
		detail = append(detail, fmt.Sprintf("%d consecutive failed calls", p.ConsecutiveFailures))
	}
	return p.Join, strings.Join(detail, ", "), p.Err
}

// newController builds the autoscaling controller: hooks go out through
// the outbound fence with the operator's policy, and its events go to the
// subscribed webhooks through the same fence.
func (g *Gateway) newController() error {
	var err error
	g.expiry = newArmerExpiry()
	g.armed = &armLoader{load: g.loadArmed}
	sc := g.cfg.Scaling
	sc.Store, sc.Pool, sc.Logger = g.db, poolView{g.registry}, g.log
	sc.Events = streamEvents{next: g.hooks, hub: g.hub, stats: g.stats}
	sc.Caller = observedCaller{next: autoscale.NewHTTPCaller(g.fence), counts: g.calls, tracer: g.tracer}
	sc.DeclareRefresh = declareRefresh(sc.DeclareRefresh, g.cfg.ScalingRecordTTL)
	sc.DefaultOrgID, sc.Policy = g.defaultOrg, g.fence
	g.ctl, err = autoscale.New(sc)
	return err
}

// declareRefresh is how often an unchanged declaration is written again:
// the controller's setting (its default when zero), or half of
// scaling_record_ttl when that is shorter, so a live client's record is
// never old enough to be swept.
func declareRefresh(refresh, ttl time.Duration) time.Duration {
	if refresh <= 0 {
		refresh = autoscale.DefaultConfig().DeclareRefresh
	}
	if ttl > 0 && ttl/2 < refresh {
		return max(ttl/2, time.Millisecond)
	}
	return refresh
}

// armLoader runs loads of the router's armed binds one at a time and lets
// concurrent callers share them: reload returns after a load that began
// after it was called, so any number of concurrent callers costs at most
// two loads. A load reads every record and its armers' tokens, so this is
// what keeps a burst of new binds from costing O(records) each.
type armLoader struct {
	load  func(ctx context.Context) error
	asked atomic.Uint64 // reload calls so far
	loads atomic.Int64  // loads run so far
	// known holds the IDs of the records the last load read, so that the
	// change feed can tell a record it has never seen (reloaded at once)
	// from an update of one it has (left to the debounced reload).
	known atomic.Pointer[map[string]bool]

	mu   sync.Mutex // serializes loads and guards the following fields
	done uint64     // the reload calls the last load began after
	err  error      // the last load's result
}

// knows reports whether the last load read record id.
func (l *armLoader) knows(id string) bool {
	m := l.known.Load()
	return m != nil && (*m)[id]
}

// reload makes sure a load of the armed binds begins after the call, and
// returns that load's error. It blocks while a load runs.
func (l *armLoader) reload(ctx context.Context) error {
	ticket := l.asked.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done >= ticket {
		return l.err
	}
	covered := l.asked.Load()
	l.loads.Add(1)
	l.err = l.load(ctx)
	l.done = covered
	return l.err
}

// loadArmed replaces the router's armed binds with the store's armed records,
// each admitting the visitors its armers' tokens admit, and hands the
// expiry of every token that arms a record, disarmed ones included, to
// g.expiry.
func (g *Gateway) loadArmed(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	recs, err := g.db.ListScalingRecords(ctx, "")
	if err != nil {
		return err
	}
	// Records share armers: read each token once per load.
	tokens := make(map[string]store.Token)
	token := func(id string) (store.Token, error) {
		if t, ok := tokens[id]; ok {
			return t, nil
		}
		t, err := g.db.Token(ctx, "", id)
		if err != nil {
			return store.Token{}, err
		}
		tokens[id] = t
		return t, nil
	}
	// The first record declared for a bind takes precedence in the router.
	slices.SortStableFunc(recs, func(a, b store.ScalingRecord) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	var binds []router.ArmedBind
	expiring := make(map[string]time.Time)
	known := make(map[string]bool, len(recs))
	for _, rec := range recs {
		known[rec.ID] = true
	}
	for _, rec := range recs {
		for _, armer := range rec.ArmedBy {
			if armer == apitype.Master || autoscale.OperatorArmer(armer) {
				continue // no token, no expiry
			}
			t, err := token(armer)
			if err != nil {
				return err
			}
			if t.ExpiresAt != nil {
				expiring[armer] = *t.ExpiresAt
			}
		}
		if rec.Disarmed || !g.registry.Owns(rec.OrgID, rec.Hostname) {
			continue
		}
		// A record none of whose armers may bind the hostname (declared
		// before declarations were checked, or by a token since narrowed)
		// stays unarmed: it must never hold, nor cold start, anyone's
		// visitors.
		entitled, err := armersEntitled(rec, token)
		if err != nil {
			return err
		}
		if !entitled {
			continue
		}
		allowed, err := armersAllowedIPs(rec, token)
		if err != nil {
			return err
		}
		binds = append(binds, router.ArmedBind{OrgID: rec.OrgID, Pattern: rec.Hostname, Path: rec.Path,
			ColdStart: rec.ColdStart, AllowedIPs: allowed})
	}
	g.registry.SetArmed(binds)
	g.armed.known.Store(&known)
	g.expiry.set(expiring)
	return nil
}

// armersEntitled reports whether some armer of rec may arm it: the master
// token, an admin API caller (autoscale.OperatorArmer: POST /scaling
// checked that the record's organization may bind the hostname, and
// loadArmed checks that it still does), or a token of the record's
// organization whose hostnames allow the record's hostname.
func armersEntitled(rec store.ScalingRecord, token func(id string) (store.Token, error)) (bool, error) {
	for _, armer := range rec.ArmedBy {
		if armer == apitype.Master || autoscale.OperatorArmer(armer) {
			return true, nil
		}
		t, err := token(armer)
		if err != nil {
			return false, err
		}
		if t.OrgID == rec.OrgID && router.MayArm(t.Hostnames, rec.Hostname) {
			return true, nil
		}
	}
	return false, nil
}

// armersAllowedIPs returns the visitors the record's armers admit: the
// union of their tokens' allowed_ips, or nil (everyone) as soon as one
// armer is unrestricted (the master token, an admin API caller, or a
// token without the list).
func armersAllowedIPs(rec store.ScalingRecord, token func(id string) (store.Token, error)) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, armer := range rec.ArmedBy {
		if armer == apitype.Master || autoscale.OperatorArmer(armer) {
			return nil, nil
		}
		t, err := token(armer)
		if err != nil {
			return nil, err
		}
		if len(t.AllowedIPs) == 0 {
			return nil, nil
		}
		for _, s := range t.AllowedIPs {
			if p, err := netip.ParsePrefix(s); err == nil {
				out = append(out, p)
			}
		}
	}
	return out, nil
}
