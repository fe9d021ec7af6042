package router

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/hostname"
	"github.com/aperio-dev/aperio/internal/visitor/access"
	"github.com/aperio-dev/aperio/internal/visitor/policy"
	"github.com/aperio-dev/aperio/tunnel"
)

// Explain step names, in the order a request meets them; see
// apitype.Explanation, the wire form of the answer.
const (
	StepReserved    = apitype.StepReserved
	StepIPLimit     = apitype.StepIPLimit
	StepMaintenance = apitype.StepMaintenance
	StepRoute       = apitype.StepRoute
	StepAccess      = apitype.StepAccess
	StepAllowedIPs  = apitype.StepAllowedIPs
	StepPool        = apitype.StepPool
	StepColdStart   = apitype.StepColdStart
	StepPermit      = apitype.StepPermit
	StepGlobal      = apitype.StepGlobal
	StepFallback    = apitype.StepFallback
)

// Explain step outcomes, as wire documents them.
const (
	OutcomePass = apitype.OutcomePass
	OutcomeStop = apitype.OutcomeStop
	OutcomeWait = apitype.OutcomeWait
	OutcomeSkip = apitype.OutcomeSkip
	OutcomeInfo = apitype.OutcomeInfo
)

// Explanation is what Explain found: the steps a request would take, the
// clients of its pool and the verdict. It is the admin API's wire type,
// declared in wire so that the API's Go client need not link the router.
type Explanation = apitype.Explanation

// ExplainStep is one check of the request path.
type ExplainStep = apitype.ExplainStep

// ExplainClient is one service of one client in the explained bind, as the
// router sees it now.
type ExplainClient = apitype.ExplainClient

// explanation is an Explanation being built: the builder methods cannot be
// declared on the alias of another package's type.
type explanation Explanation

// ColdStartPlanner is implemented by a Scaler that can say what a cold
// start would do without starting one. Explain uses it; a Scaler without
// it is explained as "would ask the scaler".
type ColdStartPlanner interface {
	// PlanColdStart reports whether a request now would join a cold start
	// already under way (join) rather than make a call, or why the scaler
	// would refuse (err), plus a detail for people. It must not change
	// anything.
	// It may block until ctx ends (while the scaler loads its state).
	PlanColdStart(ctx context.Context, orgID, hostname, path string) (join bool, detail string, err error)
}

// Explain walks what the router would do now with a request for host and
// path from visitor ip (the zero Addr: unknown), running the proxy's
// stages in their dry run, and says why. It takes no permit, no token of the
// visitor's bucket, no global slot and no place in a queue, starts no cold
// start and moves no counter: the answer is a snapshot, and a real request
// an instant later may fare otherwise. It blocks only while the scaler's
// ColdStartPlanner does, until ctx ends. Safe for concurrent use.
func (rt *Router) Explain(ctx context.Context, host, path string, ip netip.Addr) Explanation {
	return rt.explain(ctx, explainQuery{host: host, path: path, ip: ip})
}

// explainQuery is what a dry run knows of a request. The admin API gives
// host, path and ip; method (empty: GET) and header (nil: none) let the
// dry run also check what the proxy checks of a request beyond those: a
// CONNECT's backend, an HTTP/2 host field.
type explainQuery struct {
	host, path string
	ip         netip.Addr
	method     string
	header     http.Header
}

// stepHostField is the step that checks an HTTP/2 host field against
// :authority. Only an explanation given headers has it.
const stepHostField = "host-field"

// stepHeaderNames is the step that judges header names with an
// underscore (underscore_headers). Only an explanation given headers has
// it.
const stepHeaderNames = "header-names"

func (rt *Router) explain(ctx context.Context, q explainQuery) Explanation {
	host, path, ip := q.host, q.path, q.ip
	now := rt.now()
	host = hostname.Normalize(host)
	if path == "" {
		path = "/"
	}
	ex := explanation{Host: host, Path: path, OrgIDs: []string{}, Clients: []ExplainClient{}}
	if ip.IsValid() {
		ip = ip.Unmap()
		ex.IP = ip.String()
	}

	dr := &dryRun{ex: &ex, plan: poolPlan{waitFor: "gateway_timeout"}}
	a := admission{rt: rt, set: rt.cur.Load(), mode: dr, now: now, host: host, path: path, ip: ip, method: q.method, authority: q.host, header: q.header}
	if ref := dr.admit(ctx, &a); ref.kind != passed {
		if refusalInfo[ref.kind].nothing {
			return rt.explainNothing(&ex, a.path, ref, q.header)
		}
		if f := rt.fallbackFor(a.set, ex.Host); f != nil && ref.kind == refusedAccessHidden {
			ex.step(StepFallback, OutcomeStop, "fallbacks has "+f.Hostname+" (answered as no route: never a stale copy)")
			return ex.end(fallbackVerdict(f, path), f.status())
		}
		return rt.explainRefusal(&ex, ref, q.header)
	}
	path = a.path

	// The dispatch stages, dry: they predict what dispatch would do.
	pl := &dr.plan
	dr.survey(&a)
	timeout, v := a.checkColdStart(ctx, &waiter{ip: ip})
	dr.record(&a, StepColdStart, &v)
	ref := v.refusal
	if ref.kind == passed && ex.Verdict == "" {
		ref = dr.permit(&a, timeout)
		if ref.kind == passed && pl.pick != nil {
			v := a.checkConnect(a.p.serviceOf(pl.pick))
			dr.record(&a, StepPermit, &v)
			if ref = v.refusal; ref.kind == passed {
				v = a.takeSlot()
				dr.record(&a, StepGlobal, &v)
				ref = v.refusal
			}
		}
	}
	if ref.kind != passed {
		return rt.explainRefusal(&ex, ref, q.header)
	}
	if pick := pl.pick; pick != nil {
		return ex.end(fmt.Sprintf("dispatch to client %s (%s)", pick.Name, pick.ID), 0)
	}
	ex.Setting = pl.waitFor
	if ex.AfterWait != "" {
		return ex.end(ex.Verdict, 0) // queued behind busy clients
	}
	// Waiting for a client to appear: what the visitor gets if none does.
	if pl.candidates > 0 {
		ex.AfterWait = "429 client-concurrency (clients are connected, none can serve the visitor)"
	} else {
		ex.AfterWait = rt.fallbackText(host, path, pl.waitFor, timeout)
	}
	return ex.end(ex.Verdict, 0)
}

// dryRun is Explain's mode: it reads what the proxy would take, waits
// for nothing, calls out to nobody and records every verdict as a step of
// ex (record). plan is its survey of the pool, made at its pool step.
type dryRun struct {
	ex   *explanation
	plan poolPlan
}

// poolPlan is what a dry run learns of the pool at its pool step: the
// client services by what they can do for the visitor, the queue, the
// wait that applies, and the client the permit stage would pick.
type poolPlan struct {
	routable, candidates, usable, free int
	queued, held                       int
	waitFor                            string // the setting that bounds the wait
	pick                               *ExplainClient
}

// admit runs the admission stages as the proxy does (admission.run), in
// front of them what the server does before the router (front), and
// records each verdict as a step; it returns the first refusal.
func (d *dryRun) admit(ctx context.Context, a *admission) refusal {
	if v := d.front(a); v.kind != passed {
		d.record(a, stageSteps[stageReserved], &v)
		return v.refusal
	}
	for _, s := range admissionStages {
		if s == stageBody {
			continue // a dry run is given no body: nothing to judge
		}
		v := a.run(ctx, s, nil)
		d.record(a, stageSteps[s], &v)
		if v.kind != passed {
			return v.refusal
		}
	}
	return refusal{}
}

// front is what the server does before the router, for which a dry run
// stands: it answers its own paths (/aperio/…) itself, never proxied. The
// proxy is handed them only when called directly (checkPath).
func (d *dryRun) front(a *admission) verdict {
	if a.method != http.MethodConnect && Reserved(a.path) {
		return stop(refusedReserved, whyReservedPath)
	}
	return verdict{}
}

// judges reports whether ip was given: a dry run without a visitor
// address has no bucket to read and nobody to judge.
func (d *dryRun) judges(ip netip.Addr) bool { return ip.IsValid() }

// ipToken reads the tokens in ip's bucket, taking none.
func (d *dryRun) ipToken(l *ipLimiter, ip netip.Addr, now time.Time) (float64, bool) {
	left := l.tokens(ip, now)
	return left, left >= 1
}

// routeToken reads the tokens, burst and refill of vis's bucket of rule's
// rate limit, taking none.
func (d *dryRun) routeToken(rule *policy.Rule, now time.Time, vis policy.Visitor) ([3]float64, time.Duration, bool) {
	var n [3]float64
	n[0], n[1], n[2] = rule.Tokens(now, vis)
	return n, 0, n[0] >= 1
}

// slot reads the server-wide slots in flight, taking none.
func (d *dryRun) slot(l *admissionLimits, limit int) (int64, bool) {
	n := l.global.Load()
	return n, limit <= 0 || n < int64(limit)
}

// consult never calls out: a gate whose methods would (jwt, forward) is
// described, not consulted, and the dry run goes on as if it admitted;
// what the gate's IP rules or an open gate decide it tells without asking
// the gate. Local methods (basic, bearer) judge the headers it was given.
func (d *dryRun) consult(ge *gateEntry, r *http.Request, vis access.Visitor) (access.Decision, verdict) {
	switch {
	case !ge.ips.Admits(vis.Addr):
		return access.Decision{}, stop(refusedAccessHidden, whyGateIPs)
	case ge.gate.Open():
		return access.Decision{}, pass(OutcomePass, whyGateOpenIPs)
	case ge.remote:
		return access.Decision{}, pass(OutcomeInfo, whyGateRemote)
	}
	return ge.gate.Check(r, vis), verdict{}
}

// coldStart is checkColdStart's dry run once a start is due: it asks
// the scaler's ColdStartPlanner (a Scaler without one is taken to start),
// and refuses when the held places are taken. wait is the usual wait.
func (d *dryRun) coldStart(ctx context.Context, rt *Router, set *settings, p *pool, arm *armedInfo, wait time.Duration) (time.Duration, verdict, ColdStart) {
	join, detail, err := false, "", error(nil)
	if planner, ok := rt.cfg.Scaler.(ColdStartPlanner); ok {
		join, detail, err = planner.PlanColdStart(ctx, arm.org, p.pattern, p.path)
	}
	if detail != "" {
		detail = " (" + detail + ")"
	}
	if err != nil {
		v := pass(OutcomeInfo, whyScalerWouldRefuse)
		v.name = err.Error() + detail
		return wait, v, nil
	}
	bound := maxWaiters
	if set.cfg.MaxHeld > 0 {
		bound = set.cfg.MaxHeld
	}
	queued := d.plan.queued
	if queued >= bound {
		v := stop(refusedHeldFull, whyHeldFull)
		v.n[0], v.n[1] = float64(queued), float64(bound)
		return 0, v, nil
	}
	v := pass(OutcomeWait, whyColdStartHold)
	v.name, v.n[0], v.n[1], v.wait = detail, float64(queued), float64(bound), arm.coldStart
	d.ex.Verdict = "cold start: would call provider"
	if join {
		v.n[2] = 1
		d.ex.Verdict = "cold start: would join the start under way"
	}
	d.plan.waitFor = "cold_start"
	return arm.coldStart, v, nil // a dry run starts nothing: nobody is held
}

// survey is a dry run's pool step: it counts the client services by what
// they can do for the visitor and the pool's queue into plan, and narrates
// them, with the outliers ejected.
func (d *dryRun) survey(a *admission) {
	ex, pl, p := d.ex, &d.plan, a.p
	for i := range ex.Clients {
		c := &ex.Clients[i]
		pl.routable += b2i(c.Routable)
		pl.candidates += b2i(c.Candidate)
		pl.usable += b2i(c.Candidate && c.Admits)
		pl.free += b2i(c.Candidate && c.Admits && c.Free)
	}
	p.mu.Lock()
	pl.queued = len(p.waiters)
	for _, w := range p.waiters {
		pl.held += b2i(w.held)
	}
	p.mu.Unlock()
	ex.step(StepPool, OutcomeInfo, fmt.Sprintf("%d client services, %d routable, %d in the serving tier, %d of those admit the visitor, %d with a free permit; %d waiting in the queue (%d held for a cold start)",
		len(ex.Clients), pl.routable, pl.candidates, pl.usable, pl.free, pl.queued, pl.held))
	for _, s := range *p.members.Load() {
		if s.ejected() {
			ex.step(StepPool, OutcomeInfo, fmt.Sprintf("client %s service %s is ejected as an outlier until %s (outlier_consecutive_5xx answers of 5xx in a row)",
				s.conn.ID(), s.id, time.Unix(0, s.ejectedUntil.Load()).UTC().Format(time.RFC3339)))
		}
	}
}

// permit is a dry run's permit stage, which the proxy takes in takePermit
// and may wait for: it predicts from the survey the pick (plan.pick), or
// the wait the proxy would make (ex.Verdict, ex.AfterWait), or the
// refusal.
func (d *dryRun) permit(a *admission, timeout time.Duration) refusal {
	ex, pl := d.ex, &d.plan
	switch {
	case pl.free > 0:
		pl.pick = a.rt.predictPick(ex, a.p)
		ex.step(StepPermit, OutcomePass, fmt.Sprintf("client %s has a free permit (%d of %s in flight; lb_strategy %s; serving tier: priority %d)", pl.pick.Name, pl.pick.Inflight, limitText(pl.pick.Limit), strategyName(a.p.effective(a.rt.strategy)), pl.pick.Priority))
	case pl.usable > 0 && timeout <= 0:
		ex.step(StepPermit, OutcomeStop, "every client that could serve is at its limit and gateway_timeout is 0: no waiting")
		return refuseWith(refusedClientConcurrency)
	case pl.usable > 0 && pl.queued >= maxWaiters:
		ex.step(StepPermit, OutcomeStop, fmt.Sprintf("every client is at its limit and the queue is full (%d of %d)", pl.queued, maxWaiters))
		return refuseWith(refusedClientConcurrency)
	case pl.usable > 0:
		ex.step(StepPermit, OutcomeWait, fmt.Sprintf("every client that could serve is at its limit: would queue behind %d of at most %d, up to gateway_timeout %s", pl.queued, maxWaiters, timeout))
		ex.Verdict = fmt.Sprintf("queue behind %d", pl.queued)
		ex.AfterWait = "429 client-concurrency when no permit frees within gateway_timeout"
	case timeout <= 0:
		ex.step(StepPermit, OutcomeStop, "no client can take the request and gateway_timeout is 0: no waiting")
		return refuseWith(refusedClientConcurrency)
	default:
		ex.step(StepPermit, OutcomeWait, fmt.Sprintf("no client can take the request now: would wait up to gateway_timeout %s for one (behind %d)", timeout, pl.queued))
		ex.Verdict = fmt.Sprintf("wait for a client behind %d", pl.queued)
	}
	return refusal{}
}

// explainNothing ends ex the way answer answers a refusal of the "nothing
// can serve" kinds at once: stale copy, fallback redirect, else ref.
func (rt *Router) explainNothing(ex *explanation, path string, ref refusal, header http.Header) Explanation {
	if rt.staleFor(ex.Host, path) {
		ex.step(StepFallback, OutcomeStop, "the serve-stale cache has a copy of GET "+ex.Host+path)
		return ex.end("serve stale copy from cache", http.StatusOK)
	}
	if f := rt.fallbackFor(rt.cur.Load(), ex.Host); f != nil {
		ex.step(StepFallback, OutcomeStop, "fallbacks has "+f.Hostname)
		return ex.end(fallbackVerdict(f, path), f.status())
	}
	ex.step(StepFallback, OutcomeSkip, "no stale copy and no fallback for "+ex.Host)
	return rt.explainRefusal(ex, ref, header)
}

// fallbackVerdict is Explain's verdict for f's redirect of path.
func fallbackVerdict(f *Fallback, path string) string {
	return strconv.Itoa(f.status()) + " fallback redirect to " + f.target(path)
}

// explainRefusal ends ex with ref, and says in ErrorPage which page answers it:
// the format the Accept header of header picks, and for html whose page.
// A gate's refusal with a body of its own and a reserved path have none.
func (rt *Router) explainRefusal(ex *explanation, ref refusal, header http.Header) Explanation {
	if status := ref.status(); ref.kind != refusedReserved && (ref.kind != refusedAccess || ref.dec == nil || ref.dec.Body == nil) {
		format := negotiate(header["Accept"])
		detail := format.String() + " (by the Accept header)"
		if header == nil {
			detail = "text (no Accept header given; a browser gets html, an API client json)"
		}
		if _, operator := rt.cur.Load().pages.page(status, ex.Host); operator {
			detail += fmt.Sprintf("; the html page is error_pages' for %d on %s", status, ex.Host)
		} else {
			detail += fmt.Sprintf("; the html page is the built-in one for %d", status)
		}
		ex.ErrorPage = detail
	}
	if e := ref.maint; ref.kind == refusedMaintenance && e != nil {
		v := "503 maintenance"
		if e.reason != "" {
			v += ": " + e.reason
		}
		if !e.until.IsZero() {
			v += ", until " + e.until.UTC().Format(time.RFC3339)
		}
		v += " (Retry-After: " + retryAfter(rt.now(), e.until) + ")"
		return ex.end(v, http.StatusServiceUnavailable)
	}
	return ex.refuse(ref)
}

// fallbackText says what a request that waited for timeout and got no
// client would be answered.
func (rt *Router) fallbackText(host, path, setting string, timeout time.Duration) string {
	switch f := rt.fallbackFor(rt.cur.Load(), host); {
	case rt.staleFor(host, path):
		return "stale copy from cache after " + setting + " (" + timeout.String() + ")"
	case f != nil:
		return fallbackVerdict(f, path) + " after " + setting + " (" + timeout.String() + ")"
	default:
		return "504 after " + setting + " (" + timeout.String() + ")"
	}
}

// staleFor reports whether the cache holds a copy for a GET of host and
// path, without touching it.
func (rt *Router) staleFor(host, path string) bool {
	if rt.cfg.Cache == nil {
		return false
	}
	r, err := http.NewRequest(http.MethodGet, "http://"+host+path, nil)
	if err != nil {
		return false
	}
	return rt.cfg.Cache.Has(r)
}

// explainClients fills ex.Clients and ex.OrgIDs from p's members;
// escaped is the request's normal path, as the backend receives it.
func (rt *Router) explainClients(ex *explanation, p *pool, ip netip.Addr, escaped string) {
	ms := *p.members.Load()
	var arr [16]*service
	cands := p.candidates(arr[:0])
	w := &waiter{ip: ip}
	names, forwarded := rt.reg.announced(ms, escaped)
	orgs := map[string]bool{}
	if a := p.driver(); a != nil && a.org != "" {
		orgs[a.org] = true
	}
	for _, s := range ms {
		c := ExplainClient{
			ID: s.conn.ID(), Name: names[s.conn], Service: s.id,
			Priority: s.priority.Load(), Healthy: s.healthy.Load(), Draining: s.draining.Load(), Disabled: s.disabled.Load(),
			Inflight: s.inflight.Load(), Limit: s.limit.Load(), Routable: s.routable(),
			Admits: w.accepts(s), ForwardedPath: forwarded[s],
		}
		c.Tier = "primary"
		if c.Priority > 0 {
			c.Tier = "standby"
		}
		if c.Name == "" {
			c.Name = c.ID
		}
		for _, x := range cands {
			c.Candidate = c.Candidate || x == s
		}
		c.Free = c.Limit <= 0 || c.Inflight < c.Limit
		if id, ok := s.conn.(interface{ Identity() tunnel.Identity }); ok {
			c.OrgID = id.Identity().OrgID
			if id.Identity().TokenID != "" && c.OrgID != "" {
				orgs[c.OrgID] = true
			}
		}
		ex.Clients = append(ex.Clients, c)
	}
	for o := range orgs {
		ex.OrgIDs = append(ex.OrgIDs, o)
	}
	slices.Sort(ex.OrgIDs)
}

// predictPick returns the client of p the strategy would pick now among
// the usable clients with a free permit, without moving p's round-robin
// cursor.
func (rt *Router) predictPick(ex *explanation, p *pool) *ExplainClient {
	var usable []*ExplainClient
	for i := range ex.Clients {
		if c := &ex.Clients[i]; c.Candidate {
			usable = append(usable, c)
		}
	}
	ok := func(c *ExplainClient) bool { return c.Admits && c.Free }
	switch p.effective(rt.strategy) {
	case leastInflight:
		var best *ExplainClient
		for _, c := range usable {
			if c.Admits && (best == nil || c.Inflight < best.Inflight) {
				best = c
			}
		}
		if best != nil && best.Free {
			return best
		}
	case roundRobin:
		if len(usable) > 0 {
			next := p.next.Load()
			for i := range uint64(len(usable)) {
				if c := usable[(next+1+i)%uint64(len(usable))]; ok(c) {
					return c
				}
			}
		}
	}
	for _, c := range usable {
		if ok(c) {
			return c
		}
	}
	return nil // unreachable: Explain calls it only with a free client
}

// whyText is the detail of each why that names nothing but itself;
// record renders the others.
var whyText = [numWhys]string{
	whyHostFieldSame:  "no host field, or the same as :authority",
	whyNoVisitorIP:    "no visitor ip given",
	whyNoIPLimit:      "ip_limit_max is 0: no per-visitor limit",
	whyConnectPath:    "CONNECT has no path: it matches / binds",
	whyGateOpen:       "open: no auth methods, and default_access allow or public: true",
	whyGateIPs:        "the service's allowed_ips or denied_ips refuse the visitor: answered as if the bind did not exist",
	whyGateOpenIPs:    "open, and the service's IP rules admit the visitor",
	whyGateRemote:     "the service's auth methods include jwt or forward, which call out: explain does not consult them; the rest assumes the visitor is admitted",
	whyArmedElsewhere: "armed only by organizations whose clients do not serve the bind",
	whyNotArmed:       "the bind has no armed scaling record",
	whyClientCanServe: "armed, but a client can serve the visitor",
	whyNoScaler:       "armed, but autoscaling is off on this server",
}

// record is the one place where a stage's verdict v becomes a dry run's
// step: the stage's step name, v's outcome, and the detail rendered here
// from v.why, in the state a is in once the stage ran. A verdict without
// an outcome records nothing.
func (d *dryRun) record(a *admission, step string, v *verdict) {
	ex, rt := d.ex, a.rt
	if v.outcome == "" {
		return
	}
	switch v.why {
	case whyBindDown, whyPassthroughOnly, whyBindMatches:
		// The bind's survey, before its step.
		ex.Bind = a.p.pattern + a.p.path
		rt.explainClients(ex, a.p, a.ip, a.escapedPath())
	}
	detail := whyText[v.why]
	switch v.why {
	case whyHostFieldDiffers:
		detail = "the host field differs from :authority " + a.host
	case whyNoTokenAdmits:
		detail = "no client's token admits " + ex.IP + ": answered as if the bind did not exist"
	case whyTokenAdmits:
		detail = "a client's token admits " + ex.IP
	case whyIPTokens:
		l := a.set.ips
		detail = fmt.Sprintf("%.1f of %d tokens left (ip_limit_max %d, ip_limit_refill %g/s)", v.n[0], l.burst, l.burst, float64(l.refill))
	case whyUnderscoreRefused:
		detail = "header " + v.name + " holds an underscore and underscore_headers is refuse"
	case whyHeadersDropped:
		for k := range a.header {
			switch {
			case !hasUnderscore(k):
			case serverOwnedHeader(k):
				ex.step(step, v.outcome, "header "+k+" is a spelling of a name the server owns: removed before the backend")
			case a.set.underscore == underscoreDrop:
				ex.step(step, v.outcome, "header "+k+" holds an underscore: removed before the backend (underscore_headers drop)")
			}
		}
		return
	case whyNoRule:
		detail = fmt.Sprintf("none of %d route rules matches", a.set.policy.Rules())
	case whyRuleMatches:
		detail = a.rule.Describe()
	case whyRuleAmbiguous:
		detail = "the path matches " + describeRule(a.rule) + ", but a backend that reads it as " + v.name + " gets " + v.other.Describe() + ": refused with 400"
	case whyRouteTokens:
		rule := a.rule
		detail = fmt.Sprintf("%s of %s, keyed by %s: %.1f of %g tokens left (refill %g/s)", rule.LimitName(), rule.Name, rule.KeyName(), v.n[0], v.n[1], v.n[2])
	case whyReservedPath:
		detail = a.path + " is aperio-server's own path on every hostname (/aperio/…): never proxied"
	case whyBadPath:
		detail = a.path + " is refused: it climbs above / or holds a dot segment (plain, encoded, with a ;parameter or an encoded slash around it), or a reading of it is aperio-server's own"
	case whyPathNormal:
		norm := a.u.EscapedPath()
		detail = "not under /aperio/"
		if norm != v.name || a.path != norm {
			detail += "; the backend receives " + norm + ", matched as " + a.path
		}
		if len(a.other) > 0 {
			detail += "; other backends read it as " + strings.Join(a.other, " or ") + ", which must name the same bind and route rule"
		}
	case whyNoBind:
		detail = "no bind matches " + a.host + a.path
	case whyBindDown:
		detail = fmt.Sprintf("bind %s lost its last client more than client_down_threshold (%s) ago and is not armed", ex.Bind, rt.cfg.DownThreshold)
	case whyBindAmbiguous:
		p, q := a.p, v.q
		detail = fmt.Sprintf("%s%s matches bind %s%s, but a backend that reads the path otherwise names bind %s%s, which is not open to the visitor: refused with 400", a.host, a.path, p.pattern, p.path, q.pattern, q.path)
	case whyPassthroughOnly:
		detail = fmt.Sprintf("every client service of bind %s takes TLS passthrough: only a TLS connection whose SNI names the hostname reaches it, never an HTTP request (421)", ex.Bind)
	case whyBindMatches:
		detail = fmt.Sprintf("bind %s, %d client services, owned by %s", ex.Bind, len(ex.Clients), owners(ex.OrgIDs))
	case whyGateAdmits:
		detail = "admitted: " + v.name
	case whyGateHides:
		detail = v.name + ": answered as if the bind did not exist"
	case whyGateRefuses:
		detail = fmt.Sprintf("%d: %s", v.dec.Status, v.dec.Reason)
	case whyNoConnect:
		detail = "client " + d.plan.pick.Name + " does not take CONNECT requests"
	case whySlots:
		max := int64(a.set.cfg.MaxConcurrentRequests)
		if v.kind != passed {
			detail = fmt.Sprintf("%d of max_concurrent_requests %d in flight", int64(v.n[0]), max)
		} else {
			detail = fmt.Sprintf("%d of %s in flight", int64(v.n[0]), limitText(max))
		}
	case whyScalerWouldRefuse:
		detail = "armed, but the scaler would refuse: " + v.name + "; the usual wait applies"
	case whyHeldFull:
		detail = fmt.Sprintf("%d requests waiting, scaling_max_held %d", int(v.n[0]), int(v.n[1]))
	case whyColdStartHold:
		what := "would call the provider"
		if v.n[2] == 1 {
			what = "would join the cold start under way"
		}
		detail = fmt.Sprintf("%s%s and hold the request up to cold_start %s (%d of %d held places taken)", what, v.name, v.wait, int(v.n[0]), int(v.n[1]))
	case whyNotInMaintenance:
		detail = a.host + " is not in maintenance"
	case whyInMaintenance:
		detail = a.host + " is in maintenance" + maintenanceDetail(v.maint, a.now)
	}
	ex.step(step, v.outcome, detail)
}

func (ex *explanation) step(name, outcome, detail string) {
	ex.Steps = append(ex.Steps, ExplainStep{Name: name, Outcome: outcome, Detail: detail})
}

// refuse ends ex with ref's verdict and the status the proxy answers it
// with. A reserved path is answered by aperio-server before the router, so
// its status is 0: not proxied.
func (ex *explanation) refuse(ref refusal) Explanation {
	status := ref.status()
	if ref.kind == refusedReserved {
		status = 0
	}
	ex.Setting = refusalInfo[ref.kind].setting
	verdict := refusalInfo[ref.kind].explainText
	switch ref.kind {
	case answeredByRule:
		ex.Setting, verdict = ref.rule.Name, fmt.Sprintf("%d from %s", status, ref.rule.Describe())
	case refusedRouteLimit:
		ex.Setting = ref.rule.LimitName()
	}
	return ex.end(verdict, status)
}

func (ex *explanation) end(verdict string, status int) Explanation {
	ex.Verdict, ex.Status = verdict, status
	return Explanation(*ex)
}

func owners(orgs []string) string {
	if len(orgs) == 0 {
		return "the master token"
	}
	return "organization " + strings.Join(orgs, ", ")
}

func limitText(n int64) string {
	if n <= 0 {
		return "unbounded"
	}
	return fmt.Sprint(n)
}

func strategyName(st strategy) string {
	switch st {
	case leastInflight:
		return "least-inflight"
	case primaryStandby:
		return "primary-standby"
	case sticky:
		return "sticky"
	default:
		return "round-robin"
	}
}

// serviceOf returns the service of p that c describes; nil when it left.
func (p *pool) serviceOf(c *ExplainClient) *service {
	for _, s := range *p.members.Load() {
		if s.conn.ID() == c.ID && s.id == c.Service {
			return s
		}
	}
	return nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// tokens returns the tokens in ip's bucket at now without taking one: a
// visitor with no bucket yet has a full one.
func (l *ipLimiter) tokens(ip netip.Addr, now time.Time) float64 {
	l.mu.Lock()
	b := l.buckets[ip]
	l.mu.Unlock()
	if b == nil {
		return float64(l.burst)
	}
	return b.TokensAt(now)
}
