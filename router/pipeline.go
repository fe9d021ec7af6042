package router

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/internal/telemetry"
	"github.com/aperio-dev/aperio/internal/visitor/access"
	"github.com/aperio-dev/aperio/internal/visitor/inspect"
	"github.com/aperio-dev/aperio/internal/visitor/policy"
	"github.com/aperio-dev/aperio/internal/visitor/usage"
	"github.com/aperio-dev/aperio/tunnel"
)

// A request's way through the server is an ordered list of stages. The
// proxy runs them for real; Explain runs the same stages in a dry run that
// reads state and changes nothing (no token, permit, slot, queue place or
// cold start is taken). Each stage decides once, for both, and returns a
// verdict: it passes or refuses. Only what follows differs: Explain
// records the verdict as a step (dryRun.record renders its detail), the
// proxy stops at its refusal, and answer turns every refusal into the
// visitor's response. No stage asks which of the two runs it: what it
// would consume (a token, a slot, the gate, the scaler) it asks of the
// admission's mode, chosen once where the admission is made; what a dry
// run lacks (a body, a visitor address, headers) is absent from its input.
//
// The admission stages, in order, are listed in admissionStages; the
// stages after them (pool and cold start, permits and queue, global slots,
// dispatch, failover) wait or exchange, so the proxy runs them in dispatch
// and Explain after admit (explain): cold start, CONNECT and the global
// slot return verdicts as the admission stages do; the pool survey is
// Explain's alone, and the permit stage's wait in the pool's queue is
// predicted from that survey. Every stage refuses through the same refusal
// kinds. Stale copies and fallback redirects end every refusal of the
// "nothing can serve" kinds, in both modes.

// stage names one admission stage.
type stage uint8

const (
	stageReserved    stage = iota // reserved paths and the path's normal form
	stageIPLimit                  // the visitor's token bucket
	stageMaintenance              // hostnames in maintenance
	stageHostField                // an HTTP/2 host field other than :authority
	stageHeaderNames              // underscore_headers refuse: a header name with an underscore
	stageRouteRule                // routes: a redirect or fixed answer, or a route's policy
	stageRoute                    // the bind matching host and path, and its liveness
	stageBody                     // max_body_size, and the body's pacing
	stageAccess                   // visitor access control: the bind's gate
	stageAllowedIPs               // some client's token admits the visitor
	stageRateLimit                // the route's rate limit (rate_limits), keyed by the admitted user too
)

// admissionStages is the order in which a request meets the admission
// stages, in the proxy and in Explain alike.
var admissionStages = [...]stage{
	stageReserved,
	stageIPLimit,
	stageMaintenance,
	stageHostField,
	stageHeaderNames,
	stageRouteRule,
	stageRoute,
	stageBody,
	stageAccess,
	stageAllowedIPs,
	stageRateLimit,
}

// refusalKind is what a refusal is; refusalInfo says how each is answered.
type refusalKind uint8

const (
	passed                   refusalKind = iota // no refusal
	refusedReserved                             // the path is aperio-server's own
	refusedBadPath                              // the path has no safe normal form
	refusedAmbiguousPath                        // another reading of the path names another guarded bind or route rule
	refusedIP                                   // the visitor's token bucket is empty
	refusedMaintenance                          // the hostname is in maintenance
	refusedHostField                            // the host field differs from :authority
	refusedUnderscoreHeader                     // a header name with an underscore, under underscore_headers refuse
	refusedNoRoute                              // no bind, a dead one, or no token admits the visitor
	refusedMisdirected                          // the bind takes TLS passthrough only: no HTTP request reaches it
	refusedBodyTooLarge                         // Content-Length above max_body_size
	refusedHeldFull                             // too many requests held for a cold start
	refusedClientConcurrency                    // every client that could serve is at its limit
	refusedServerConcurrency                    // max_concurrent_requests in flight
	refusedNoRoutable                           // clients are there, none can take requests
	refusedQueueTimeout                         // no client came within the wait
	refusedColdStartFailed                      // the cold start failed
	refusedConnect                              // CONNECT to a backend that does not allow it
	refusedExchange                             // the exchange failed; the error says how
	refusedAccess                               // the gate refused; its decision is the answer
	refusedAccessHidden                         // the gate refused unseen: answered like no route
	answeredByRule                              // a route rule answers itself: redirect or fixed answer
	refusedRouteLimit                           // the route's rate limit bucket is empty
	refusedTokenRate                            // the max_rps bucket of the chosen client's token is empty
	refusedTokenQuota                           // the client's token is over daily_max_bytes
	refusedOrgQuota                             // the client's organization is over monthly_max_bytes
	numRefusalKinds
)

// refusalInfo is how each refusal kind is answered: status, the limit it
// counts as (a 429, with x-aperio-limit), extra headers, and the reason
// visitors read, around the hostname. A reason never names a setting, an
// address or a client: the operator reads those in explainText and
// setting. A kind with nothing set is answered in answer.
var refusalInfo = [numRefusalKinds]struct {
	status      int
	limit       limitKind // meaningful for 429s only
	retryAfter  []string  // Retry-After, if any
	allow       []string  // Allow, if any
	before      string    // the visitor's reason before the hostname
	after       string    // and after it
	host        bool      // the reason names the hostname between before and after
	nothing     bool      // stale copy, then fallback redirect, come first
	explainText string    // Explain's verdict for it
	setting     string    // the setting to raise (or change) for another answer; "" when none
}{
	refusedReserved:          {status: http.StatusBadRequest, before: "bad request path", explainText: "answered by aperio-server itself, not proxied"},
	refusedBadPath:           {status: http.StatusBadRequest, before: "bad request path", explainText: "refused with 400 before routing"},
	refusedAmbiguousPath:     {status: http.StatusBadRequest, before: "ambiguous request path", explainText: "refused with 400: backends read the path (its ;parameters or encoded slashes) in ways that name different binds or route rules"},
	refusedIP:                {status: http.StatusTooManyRequests, limit: limitIP, explainText: "429 ip: the visitor's token bucket is empty", setting: "ip_limit_max"},
	refusedMaintenance:       {status: http.StatusServiceUnavailable, host: true, after: " is down for maintenance", explainText: "503 maintenance"},
	refusedHostField:         {status: http.StatusBadRequest, before: "the host field differs from :authority", explainText: "400 host field differs from :authority"},
	refusedUnderscoreHeader:  {status: http.StatusBadRequest, before: "a header name holds an underscore", explainText: "400 a header name holds an underscore", setting: "underscore_headers"},
	refusedNoRoute:           {status: http.StatusBadGateway, host: true, before: "no client is serving ", nothing: true, explainText: "502 no client"},
	refusedMisdirected:       {status: http.StatusMisdirectedRequest, host: true, after: " takes TLS connections only: connect with TLS and the hostname in SNI", explainText: "421 misdirected: the bind takes TLS passthrough only"},
	refusedBodyTooLarge:      {status: http.StatusRequestEntityTooLarge, explainText: "413 request body larger than max_body_size", setting: "max_body_size"},
	refusedHeldFull:          {status: http.StatusServiceUnavailable, retryAfter: []string{"5"}, host: true, before: "too many requests are waiting for ", after: " to start", explainText: "503 too many requests held for the cold start (Retry-After: 5)", setting: "scaling_max_held"},
	refusedClientConcurrency: {status: http.StatusTooManyRequests, limit: limitClientConcurrency, explainText: "429 client-concurrency", setting: "max_concurrent"},
	refusedServerConcurrency: {status: http.StatusTooManyRequests, limit: limitServerConcurrency, explainText: "429 server-concurrency", setting: "max_concurrent_requests"},
	refusedNoRoutable:        {status: http.StatusBadGateway, host: true, before: "no client of ", after: " can take requests now", nothing: true, explainText: "502 no routable client"},
	refusedQueueTimeout:      {status: http.StatusGatewayTimeout, host: true, before: "no client of ", after: " became available in time", nothing: true, explainText: "504 no client in time", setting: "gateway_timeout"},
	refusedColdStartFailed:   {status: http.StatusGatewayTimeout, host: true, before: "", after: " could not be started", nothing: true, explainText: "504 cold start failed", setting: "cold_start"},
	refusedConnect:           {status: http.StatusMethodNotAllowed, allow: []string{"GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"}, host: true, before: "CONNECT is not allowed for ", explainText: "405 CONNECT not allowed", setting: "allow_connect"},
	refusedExchange:          {status: http.StatusBadGateway, explainText: "502 bad gateway"},
	refusedAccess:            {explainText: "refused by the service's access control"},
	// Like refusedNoRoute, but never a stale copy: the cache must not
	// answer for a service the visitor may not reach. An unclaimed
	// hostname has no copy either, so the answers still match.
	refusedAccessHidden: {status: http.StatusBadGateway, host: true, before: "no client is serving ", explainText: "502 no client (refused by access control, answered as no route)"},
	// Both are answered from the rule; their setting is the rule's.
	answeredByRule:    {explainText: "answered by a route rule"},
	refusedRouteLimit: {status: http.StatusTooManyRequests, limit: limitRoute, explainText: "429 route: the route's rate limit bucket is empty"},
	refusedTokenRate:  {status: http.StatusTooManyRequests, limit: limitTokenRate, explainText: "429 token-rate: the token's max_rps bucket is empty", setting: "token.max_rps"},
	refusedTokenQuota: {status: http.StatusTooManyRequests, limit: limitTokenQuota, explainText: "429 token-quota", setting: "token.daily_max_bytes"},
	refusedOrgQuota:   {status: http.StatusTooManyRequests, limit: limitOrgQuota, explainText: "429 org-quota", setting: "org.monthly_max_bytes"},
}

// refusal is the refusing part of a stage's verdict: the zero refusal
// passes. err carries the cause of refusedBodyTooLarge and
// refusedExchange, dec the gate's answer of refusedAccess, maint the
// maintenance of refusedMaintenance, rule the route rule of answeredByRule
// and refusedRouteLimit (with retry, when its bucket has a token again).
type refusal struct {
	kind  refusalKind
	err   error
	dec   *access.Decision
	rule  *policy.Rule
	retry time.Duration
	maint *maintenanceEntry
}

func refuseWith(k refusalKind) refusal { return refusal{kind: k} }

// status is the status the visitor gets for ref, before any stale copy or
// fallback redirect.
func (ref refusal) status() int {
	if ref.kind == refusedAccess && ref.dec != nil {
		return ref.dec.Status
	}
	if ref.kind == answeredByRule {
		return ref.rule.Status()
	}
	return refusalInfo[ref.kind].status
}

// admission is one request on its way through the stages, which are its
// methods (admit runs the admission stages, takeClient the dispatch
// stages of one attempt). In a dry run (mode a *dryRun) there is no
// request: r and w are nil. The request's record is
// passed beside it, not kept in it: escape analysis does not tell fields
// apart, and a record kept here would leave the caller's stack.
type admission struct {
	rt   *Router // the router the request came to; its stages read it
	w    http.ResponseWriter
	r    *http.Request
	v    Visitor
	body *countingBody

	mode      mode         // what the stages take, wait for and call: the proxy's (proxyMode) or a dry run's (*dryRun)
	now       time.Time    // a dry run's clock; zero: the proxy's, read when a stage needs it
	method    string       // the request's method; empty: GET
	authority string       // the request's host as it came (Request.Host), before its normal form
	host      string       // normal form
	path      string       // the path's key once stageReserved passed (urlpath.Key)
	other     []string     // the keys of the path's other readings (urlpath.Readings); nil for nearly every path
	u         *url.URL     // the request's URL in its normal form, once stageReserved passed; nil for CONNECT
	ip        netip.Addr   // the visitor; the zero Addr when unknown
	p         *pool        // once stageRoute passed
	rule      *policy.Rule // the route rule matched at stageRouteRule; nil: none
	header    http.Header  // the request's headers; nil: a dry run given none

	set  *settings       // the router's configuration when the request came: one for all its stages
	gate *gateEntry      // the bind's gate, once stageAccess ran
	dec  access.Decision // the gate's admission, for the backend request

	routeStart time.Time // when tracing: when routing began

	ins *inspect.Recording // the inspector's recording of the request; nil: not captured
}

// mode is what an admission does with what it would consume: the proxy
// (proxyMode) takes tokens and a slot, asks the gate and the scaler; a dry
// run (*dryRun, explain.go) only reads them, calls out to nobody and
// narrates. It is chosen once, where the
// admission is made (Router.proxy, Router.explain): that is the one place
// where the proxy and a dry run part. The stages have one body each and
// ask the mode only for the act that differs. Beyond these acts a dry run
// differs in what it runs, in dryRun alone: it stands for the server in
// front of the router (dryRun.front), it has no body to judge, and it
// predicts the permit stage from a survey of the pool instead of queueing
// (dryRun.permit).
//
// Its methods take nothing that lives on the proxy's stack (not the
// admission, not the request's record): an interface call would move it
// to the heap.
type mode interface {
	// judges reports whether the stages that judge the visitor's address
	// can judge ip: the proxy judges any, the unknown one too.
	judges(ip netip.Addr) bool
	// ipToken takes a token of ip's bucket in l, reporting whether it had
	// one and the tokens it had (a dry run's; the proxy reports 0).
	ipToken(l *ipLimiter, ip netip.Addr, now time.Time) (left float64, ok bool)
	// routeToken takes a token of vis's bucket of rule's rate limit,
	// reporting whether it had one, the wait until it has one again (the
	// proxy's) or its tokens, burst and refill (a dry run's).
	routeToken(rule *policy.Rule, now time.Time, vis policy.Visitor) (n [3]float64, retry time.Duration, ok bool)
	// slot takes a server-wide slot under limit, reporting whether one was
	// free and the slots taken (a dry run's; the proxy reports 0).
	slot(l *admissionLimits, limit int) (inFlight int64, ok bool)
	// consult asks gate ge about the visitor of r; a verdict with an
	// outcome is the mode's own answer, given without asking the gate.
	consult(ge *gateEntry, r *http.Request, vis access.Visitor) (access.Decision, verdict)
	// coldStart starts (or plans) an instance for p, armed by arm, and
	// returns the permit stage's wait (wait: the usual one, kept when no
	// start is made) and the start the request is held for (nil: none).
	// It takes no waiter: one passed through an interface would move
	// every proxied request's waiter to the heap.
	coldStart(ctx context.Context, rt *Router, set *settings, p *pool, arm *armedInfo, wait time.Duration) (time.Duration, verdict, ColdStart)
}

// proxyMode is the proxy's mode: it takes, waits and calls. Its zero
// size makes it free to put in the mode interface.
type proxyMode struct{}

func (proxyMode) judges(netip.Addr) bool { return true }

func (proxyMode) ipToken(l *ipLimiter, ip netip.Addr, _ time.Time) (float64, bool) {
	return 0, l.allow(ip, time.Now())
}

func (proxyMode) routeToken(rule *policy.Rule, _ time.Time, vis policy.Visitor) ([3]float64, time.Duration, bool) {
	retry, ok := rule.Allow(time.Now(), vis)
	return [3]float64{}, retry, ok
}

func (proxyMode) slot(l *admissionLimits, limit int) (int64, bool) {
	return 0, l.takeGlobal(limit)
}

func (proxyMode) consult(ge *gateEntry, r *http.Request, vis access.Visitor) (access.Decision, verdict) {
	return ge.gate.Check(r, vis), verdict{}
}

func (proxyMode) coldStart(ctx context.Context, rt *Router, _ *settings, p *pool, arm *armedInfo, wait time.Duration) (time.Duration, verdict, ColdStart) {
	st, err := rt.cfg.Scaler.ColdStart(ctx, arm.org, p.pattern, p.path)
	if err != nil {
		rt.log.Debug("no cold start", logkey.Hostname, p.pattern, logkey.Path, p.path, logkey.Err, err)
		return wait, verdict{}, nil // a disarmed record: the usual wait applies
	}
	return arm.coldStart, verdict{}, st
}

// admit runs the admission stages in order for the proxy and returns the
// first refusal. A dry run runs the same stages through the same run, and
// records each verdict as a step (dryRun.admit).
func (a *admission) admit(ctx context.Context, rec *telemetry.Request) refusal {
	for _, s := range admissionStages {
		if v := a.run(ctx, s, rec); v.kind != passed {
			return v.refusal
		}
	}
	return refusal{}
}

// run runs the admission stage s and returns its verdict, the same for
// the proxy and a dry run; rec is nil in a dry run. It switches on the
// stage rather than calling through a table of funcs: an indirect call
// would move the admission to the heap, one allocation per request.
func (a *admission) run(ctx context.Context, s stage, rec *telemetry.Request) verdict {
	switch s {
	case stageReserved:
		return a.checkPath()
	case stageIPLimit:
		return a.checkIPLimit(rec)
	case stageMaintenance:
		return a.checkMaintenance()
	case stageHostField:
		return a.checkHostField()
	case stageHeaderNames:
		return a.checkHeaderNames()
	case stageRouteRule:
		return a.checkRouteRule()
	case stageRoute:
		return a.checkRoute(ctx, rec)
	case stageBody:
		return a.checkBody()
	case stageAccess:
		return a.checkAccess(rec)
	case stageAllowedIPs:
		return a.checkAllowedIPs()
	case stageRateLimit:
		return a.checkRateLimit(rec)
	}
	return verdict{}
}

// verdict is what a stage decided, the same in the proxy and in a dry
// run: the stage's rule is written once, in the stage. Only what follows
// differs: the proxy answers the refusal (the zero refusal passes), and a
// dry run records a step with the verdict's outcome and a detail that
// dryRun.record renders from why. The proxy builds no text: the
// values a detail names ride in the verdict (n, name, q, other, wait), so
// that its verdicts cost no formatting and no allocation
// (TestAdmitAllocatesNothing).
type verdict struct {
	refusal
	outcome string        // a dry run's step outcome; "": the stage records no step
	why     why           // what the step's detail says
	n       [3]float64    // the figures the detail names (tokens left, burst, refill)
	name    string        // a name the detail names (a header, another reading of the path)
	q       *pool         // another bind the detail names
	other   *policy.Rule  // another route rule the detail names
	wait    time.Duration // a wait the detail names
}

// why is what a verdict's detail says; dryRun.record renders it.
type why uint8

const (
	whyNone              why = iota // no detail
	whyHostFieldDiffers             // the host field differs from :authority
	whyHostFieldSame                // no host field, or :authority's
	whyNoVisitorIP                  // a dry run given no visitor address
	whyNoTokenAdmits                // no client's token admits the visitor
	whyTokenAdmits                  // a client's token admits the visitor
	whyNotInMaintenance             // the hostname is not in maintenance
	whyInMaintenance                // the hostname is in maintenance (refusal.maint)
	whyNoIPLimit                    // no per-visitor limit
	whyIPTokens                     // the tokens left in the visitor's bucket (n[0])
	whyUnderscoreRefused            // header name's underscore refused (name)
	whyHeadersDropped               // a step for each header name removed before the backend
	whyNoRule                       // no route rule matches
	whyRuleMatches                  // a.rule matches
	whyRuleAmbiguous                // another reading (name) matches another rule (other)
	whyRouteTokens                  // the tokens left in a.rule's bucket, its burst and refill (n)
	whyConnectPath                  // CONNECT has no path
	whyReservedPath                 // a dry run's path is the server's own
	whyBadPath                      // the path (a.path) has no safe normal form
	whyPathNormal                   // the path as sent (name), its normal form (a.u) and key (a.path)
	whyNoBind                       // no bind matches
	whyBindDown                     // a.p lost its last client past client_down_threshold
	whyBindAmbiguous                // another reading of the path names bind q
	whyPassthroughOnly              // a.p takes TLS passthrough only
	whyBindMatches                  // a.p serves the request
	whyGateOpen                     // the gate is open, without IP rules
	whyGateIPs                      // the gate's IP rules refuse the visitor
	whyGateOpenIPs                  // the gate is open, and its IP rules admit the visitor
	whyGateRemote                   // the gate's methods call out: a dry run assumes it admits
	whyGateAdmits                   // the gate admits, for a reason (name)
	whyGateHides                    // the gate refuses unseen, for a reason (name)
	whyGateRefuses                  // the gate refuses (refusal.dec)
	whyNoConnect                    // the predicted pick takes no CONNECT
	whySlots                        // the requests in flight server-wide (n[0])
	whyArmedElsewhere               // armed only by organizations whose clients do not serve the bind
	whyNotArmed                     // no armed scaling record
	whyClientCanServe               // armed, but a client can serve the visitor
	whyNoScaler                     // armed, but autoscaling is off
	whyScalerWouldRefuse            // the scaler would refuse (name: why)
	whyHeldFull                     // the held places are taken (n: queued, bound)
	whyColdStartHold                // a start would be made or joined (n[2] 1), holding the request (name: detail; n: queued, bound; wait)
	numWhys
)

// pass is a verdict that passes with a step of the given outcome.
func pass(outcome string, w why) verdict { return verdict{outcome: outcome, why: w} }

// stop is a verdict that refuses with k.
func stop(k refusalKind, w why) verdict {
	return verdict{refusal: refusal{kind: k}, outcome: OutcomeStop, why: w}
}

// stageSteps is each admission stage's step name in a dry run.
var stageSteps = [...]string{
	stageReserved:    StepReserved,
	stageIPLimit:     StepIPLimit,
	stageMaintenance: StepMaintenance,
	stageHostField:   stepHostField,
	stageHeaderNames: stepHeaderNames,
	stageRouteRule:   StepRouteRule,
	stageRoute:       StepRoute,
	stageBody:        "", // a dry run has no body
	stageAccess:      StepAccess,
	stageAllowedIPs:  StepAllowedIPs,
	stageRateLimit:   StepRateLimit,
}

// checkPath refuses paths that are aperio-server's own and paths with no
// safe normal form, and leaves the request's URL, rewritten to the normal
// form, in a.u, its key in a.path and the keys of its other readings in
// a.other. CONNECT has no path: it matches "/" binds.
//
// The server answers its own paths before the router (a dry run does so
// in dryRun.front, standing for the whole server): the proxy is handed
// them only when called directly, and refuses them here as bad paths.
func (a *admission) checkPath() verdict {
	if a.method == http.MethodConnect {
		return pass(OutcomePass, whyConnectPath)
	}
	r := a.r
	if r == nil {
		// A dry run's path is a request target as a visitor sends it.
		u, err := url.ParseRequestURI(a.path)
		if err != nil || u.Host != "" || u.Scheme != "" {
			return stop(refusedBadPath, whyBadPath)
		}
		r = &http.Request{URL: u}
	}
	key, other, err := normalizePath(r)
	if err != nil || Reserved(key) || anyReserved(other) {
		return stop(refusedBadPath, whyBadPath)
	}
	v := pass(OutcomePass, whyPathNormal)
	v.name = a.path // as the visitor sent it
	a.path, a.other, a.u = key, other, r.URL
	return v
}

// checkIPLimit takes a token of the visitor's bucket (a dry run reads the
// tokens left, which its step names: mode.ipToken) and refuses when it has
// none. A visitor the mode cannot judge (a dry run given no address) skips
// it.
func (a *admission) checkIPLimit(rec *telemetry.Request) verdict {
	l := a.set.ips
	switch {
	case l == nil:
		return pass(OutcomeSkip, whyNoIPLimit)
	case !a.mode.judges(a.ip):
		return pass(OutcomeSkip, whyNoVisitorIP)
	}
	v := pass(OutcomePass, whyIPTokens)
	var ok bool
	if v.n[0], ok = a.mode.ipToken(l, a.ip, a.now); ok {
		return v
	}
	if rec != nil {
		// Only refusals pay for the match: it names the hostname in metrics.
		rec.Routed = a.rt.reg.table.Load().match(a.host, a.path) != nil
	}
	v.kind, v.outcome = refusedIP, OutcomeStop
	return v
}

// checkMaintenance refuses a hostname in maintenance: an entry of the
// admin API's that has not ended, or an open window.
func (a *admission) checkMaintenance() verdict {
	if m := a.rt.reg.maintenance.Load(); m.empty() && len(a.set.windows) == 0 {
		return pass(OutcomePass, whyNotInMaintenance) // no clock read when nothing is in maintenance
	}
	now := a.now
	if now.IsZero() {
		now = a.rt.now()
	}
	e := a.rt.inMaintenance(a.set, a.host, now)
	if e == nil {
		return pass(OutcomePass, whyNotInMaintenance)
	}
	v := stop(refusedMaintenance, whyInMaintenance)
	v.maint = e
	return v
}

// maintenanceDetail describes e for Explain: its reason and its end.
func maintenanceDetail(e *maintenanceEntry, now time.Time) string {
	var b strings.Builder
	if e.reason != "" {
		b.WriteString(" (reason: " + strconv.Quote(e.reason) + ")")
	}
	if e.until.IsZero() {
		b.WriteString(" until it is turned off (Retry-After: " + retryAfter(now, e.until) + ")")
	} else {
		b.WriteString(" until " + e.until.UTC().Format(time.RFC3339) + " (Retry-After: " + retryAfter(now, e.until) + ")")
	}
	return b.String()
}

// checkHostField refuses a request whose host field differs from its
// :authority. A dry run given no headers passes without a step.
func (a *admission) checkHostField() verdict {
	switch {
	case a.header == nil:
		return verdict{}
	case hostFieldConflicts(a.authority, a.header):
		return stop(refusedHostField, whyHostFieldDiffers)
	}
	return pass(OutcomePass, whyHostFieldSame)
}

// hostFieldConflicts reports whether an HTTP/2 request carries a host field
// other than its :authority, which RFC 9113 §8.3.1 makes malformed: a
// backend or cache could take the other one. net/http moves an HTTP/1
// Host header into Request.Host, so only HTTP/2 requests keep one in
// Header. authority is the request's Host and h its header.
func hostFieldConflicts(authority string, h http.Header) bool {
	v, ok := h["Host"]
	if !ok {
		return false
	}
	return len(v) != 1 || !strings.EqualFold(v[0], authority)
}

// checkRoute matches the bind and refuses when nobody serves it, or its
// last client left more than client_down_threshold ago and it is not
// armed; then when another reading of the path names another bind not
// open to the visitor (disagreeingBind), and when the bind takes TLS
// passthrough only. rec is nil in a dry run, which records no telemetry.
func (a *admission) checkRoute(ctx context.Context, rec *telemetry.Request) verdict {
	p := a.rt.reg.table.Load().match(a.host, a.path)
	a.p = p
	if rec != nil {
		rec.Routed = p != nil
		if a.rt.tracer != nil {
			_, sp := a.rt.tracer.Start(ctx, telemetry.SpanRoute, trace.WithTimestamp(a.routeStart))
			if p != nil {
				sp.SetAttributes(attribute.String("aperio.bind", p.pattern+p.path))
			}
			sp.End()
		}
	}
	switch {
	case p == nil:
		return stop(refusedNoRoute, whyNoBind)
	case !a.rt.reg.live(p):
		return stop(refusedNoRoute, whyBindDown)
	}
	if a.other != nil {
		if q := a.disagreeingBind(p); q != nil {
			v := stop(refusedAmbiguousPath, whyBindAmbiguous)
			v.q = q
			return v
		}
	}
	if a.rt.reg.AnyPassthrough() && p.allPassthrough() {
		return stop(refusedMisdirected, whyPassthroughOnly)
	}
	return pass(OutcomePass, whyBindMatches)
}

// disagreeingBind returns a bind that another reading of a's path names
// (a.other), other than p, the bind its key names, and not open to the
// visitor; nil when there is none. A backend reading the path that way
// would serve what that bind guards, through p's gate: such a request is
// refused. Another reading that names no bind, or an open one, takes
// nothing away (p's gate is at least as strict as open). Only paths
// with a ";" or an encoded slash have other readings.
func (a *admission) disagreeingBind(p *pool) *pool {
	t := a.rt.reg.table.Load()
	for _, k := range a.other {
		if q := t.match(a.host, k); q != nil && q != p && !a.openTo(q) {
			return q
		}
	}
	return nil
}

// openTo reports whether q admits a's visitor without a credential: its
// gate is open with no IP rules, and a client's token admits the
// visitor's address.
func (a *admission) openTo(q *pool) bool {
	ge := q.gate.Load()
	if ge == nil {
		ge = a.set.defaultGate
	} else {
		ge = ge.gateFor(a.set.cfg.Access.Default)
	}
	return ge.simple && q.admitsAny(a.ip)
}

// checkBody refuses a declared body above max_body_size and wraps the
// body so that it is bounded, paced and known to have been read. Explain
// is given no body: a dry run does not run this stage (dryRun.admit), the
// one stage with nothing to judge in a dry run.
func (a *admission) checkBody() verdict {
	r := a.r
	maxBody := a.set.cfg.MaxBodyBytes
	if a.rule != nil && a.rule.MaxBodyBytes > 0 {
		maxBody = a.rule.MaxBodyBytes // the route's max_body_size
	}
	if maxBody > 0 && r.ContentLength > maxBody {
		return verdict{refusal: refusal{kind: refusedBodyTooLarge, err: &http.MaxBytesError{Limit: maxBody}}}
	}
	if r.Body != nil && r.Body != http.NoBody {
		rc := r.Body
		if maxBody > 0 {
			rc = http.MaxBytesReader(a.w, rc, maxBody)
		}
		a.body = &countingBody{ReadCloser: a.rt.paceBody(a.set, a.w, rc, r.ContentLength)}
		r.Body = a.body
	}
	return verdict{}
}

// checkAccess asks the bind's gate (built once per announcement, see
// gateEntry) about the visitor. A hidden refusal is answered like no
// route, so that a closed service cannot be discovered; any other is the
// gate's own answer (401, 403, a redirect, 503 when a method could not
// decide). An open gate without IP rules costs one load and a branch.
// rec is nil in a dry run, which keeps no decision and reports no denial.
// The gate is consulted through the mode: a dry run never calls out, and
// may tell what the gate decides without asking it (dryRun.consult).
func (a *admission) checkAccess(rec *telemetry.Request) verdict {
	ge := a.p.gate.Load()
	if ge == nil {
		ge = a.set.defaultGate
	} else {
		ge = ge.gateFor(a.set.cfg.Access.Default)
	}
	a.gate = ge
	if ge.simple {
		return pass(OutcomePass, whyGateOpen)
	}
	d, told := a.mode.consult(ge, a.gateRequest(), a.accessVisitor())
	if told.outcome != "" {
		return told // decided without asking the gate
	}
	if d.Admitted {
		v := pass(OutcomePass, whyGateAdmits)
		v.name = d.Reason
		if rec != nil {
			a.dec = d
			if d.Method != "" {
				rec.AuthMethod, rec.AuthOutcome = d.Method, "admitted"
			}
		}
		return v
	}
	// A copy for the refusal: taking d's address would move every
	// request's decision to the heap, admitted ones too.
	dp := new(access.Decision)
	*dp = d
	if rec != nil {
		a.denied(ge, dp, rec)
	}
	if d.Hidden {
		v := stop(refusedAccessHidden, whyGateHides)
		v.name = d.Reason
		return v
	}
	v := stop(refusedAccess, whyGateRefuses)
	v.dec = dp
	return v
}

// gateRequest is the request the gate judges: the proxy's, or for a dry
// run one made of what it was given, its path in the normal form, as the
// proxy's gate sees it.
func (a *admission) gateRequest() *http.Request {
	if a.r != nil {
		return a.r
	}
	h := a.header
	if h == nil {
		h = http.Header{}
	}
	method := a.method
	if method == "" {
		method = http.MethodGet
	}
	u := &url.URL{Path: a.path}
	if a.u != nil {
		if nu, err := url.ParseRequestURI(a.u.EscapedPath()); err == nil {
			u = nu
		}
	}
	return &http.Request{Method: method, Host: a.host, URL: u, Header: h}
}

// escapedPath is a dry run's path as the backend receives it: its normal
// form, or for CONNECT (no path) its key escaped.
func (a *admission) escapedPath() string {
	if a.u != nil {
		return a.u.EscapedPath()
	}
	// The key keeps an encoded slash as "%2F": escaping it again must
	// not turn it into "%252F".
	return strings.ReplaceAll((&url.URL{Path: a.path}).EscapedPath(), "%252F", "%2F")
}

// accessVisitor is what the gate knows of the visitor.
func (a *admission) accessVisitor() access.Visitor {
	return access.Visitor{Addr: a.ip, HTTPS: a.v.Proto == "https", Host: a.host, Path: a.path}
}

// checkAllowedIPs refuses a visitor that no client's token admits, as if
// the route did not exist, so that a blocked address learns nothing.
//
// A visitor the mode cannot judge (a dry run given no address) skips it;
// the proxy judges the unknown address like any other.
func (a *admission) checkAllowedIPs() verdict {
	switch {
	case !a.mode.judges(a.ip):
		return pass(OutcomeSkip, whyNoVisitorIP)
	case !a.p.admitsAny(a.ip):
		return stop(refusedNoRoute, whyNoTokenAdmits)
	}
	return pass(OutcomePass, whyTokenAdmits)
}

// answer is the one place where a refusal becomes the visitor's response:
// status, headers (x-aperio-limit, Retry-After, Allow) and the page, in
// the format the visitor accepts (writePage). A refusal of the "nothing
// can serve" kinds is answered with a stale copy if the cache has one,
// else a fallback redirect if the hostname has one. A visitor that left
// gets nothing. 429s are counted and recorded in rec.
func (rt *Router) answer(w http.ResponseWriter, r *http.Request, rec *telemetry.Request, host string, ref refusal) {
	info := &refusalInfo[ref.kind]
	if ir := inspect.RecordingOf(w); ir != nil {
		ir.Fail(refusalReason(ref))
	}
	if info.nothing {
		if r.Context().Err() == nil && rt.serveStale(w, r) {
			return
		}
		if f := rt.fallbackFor(rt.settingsOf(r), host); f != nil {
			f.redirect(w, r)
			return
		}
	}
	switch ref.kind {
	case refusedIP, refusedClientConcurrency, refusedServerConcurrency, refusedTokenRate, refusedTokenQuota, refusedOrgQuota:
		rt.refuse(w, r, rec, info.limit)
		return
	case refusedBodyTooLarge, refusedExchange:
		rt.answerError(w, r, host, ref.err)
		return
	case refusedAccess:
		rt.answerDecision(w, r, host, ref.dec)
		return
	case answeredByRule:
		rt.settingsOf(r).policy.Answer(w, r, host, ref.rule, VisitorOf(r).Proto == "https")
		return
	case refusedRouteLimit:
		rt.refuseRoute(w, r, rec, host, ref)
		return
	case refusedAccessHidden:
		// The fallback redirect of no route, without its stale copy.
		if f := rt.fallbackFor(rt.settingsOf(r), host); f != nil {
			f.redirect(w, r)
			return
		}
	}
	h := w.Header()
	if info.retryAfter != nil {
		h["Retry-After"] = info.retryAfter
	}
	if info.allow != nil {
		h["Allow"] = info.allow
	}
	ans := visitorAnswer{status: info.status, reason: info.before}
	if info.host {
		ans.reason = info.before + host + info.after
	}
	if e := ref.maint; e != nil {
		h["Retry-After"] = []string{retryAfter(rt.now(), e.until)}
		if e.reason != "" {
			ans.reason += ": " + e.reason
		}
		ans.until = e.until
	}
	rt.writePage(w, r, host, ans)
}

// answerDecision writes a gate's refusal: its status and headers, and its
// body, or a page when it has none.
func (rt *Router) answerDecision(w http.ResponseWriter, r *http.Request, host string, d *access.Decision) {
	h := w.Header()
	for k, vv := range d.Header {
		h[k] = vv
	}
	if d.Body == nil {
		rt.writePage(w, r, host, visitorAnswer{status: d.Status, reason: strings.ToLower(http.StatusText(d.Status))})
		return
	}
	w.WriteHeader(d.Status)
	w.Write(d.Body)
}

// answerError answers a failed exchange or an oversized body, choosing the
// status from the error. The log names the cause; the visitor's reason
// names no setting.
func (rt *Router) answerError(w http.ResponseWriter, r *http.Request, host string, err error) {
	if berr := bodyFailure(r); berr != nil {
		err = berr
	}
	var mbe *http.MaxBytesError
	var vbe *visitorBodyError
	var ans visitorAnswer
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) && r.Context().Err() != nil:
		return // the visitor left; nobody reads an answer
	case errors.As(err, &mbe):
		ans = visitorAnswer{http.StatusRequestEntityTooLarge, "request body too large (at most " + strconv.FormatInt(mbe.Limit, 10) + " bytes)", time.Time{}}
	case errors.As(err, &vbe):
		// The visitor's fault: debug only, so that bad bodies cannot flood
		// the log.
		rt.log.Debug("bad visitor request body", logkey.Hostname, host, logkey.Err, err)
		if vbe.slow() {
			ans = visitorAnswer{http.StatusRequestTimeout, "request body sent too slowly", time.Time{}}
		} else {
			ans = visitorAnswer{http.StatusBadRequest, "malformed request body", time.Time{}}
		}
	case errors.Is(err, tunnel.ErrResponseTimeout):
		rt.log.Debug("no response head within gateway_response_timeout", logkey.Hostname, host, logkey.Err, err)
		ans = visitorAnswer{http.StatusGatewayTimeout, host + " did not answer in time", time.Time{}}
	case errors.Is(err, tunnel.ErrSessionClosed):
		rt.log.Debug("client went away mid-request", logkey.Hostname, host, logkey.Err, err)
		ans = visitorAnswer{http.StatusBadGateway, "the client serving " + host + " disconnected", time.Time{}}
	default:
		rt.log.Warn("proxy error", logkey.Hostname, host, logkey.Err, err)
		ans = visitorAnswer{http.StatusBadGateway, "bad gateway", time.Time{}}
	}
	rt.writePage(w, r, host, ans)
}

// acquireRefusal maps an error of pool.acquire to its refusal. After a
// queue timeout, clients that were there but all busy make it a 429,
// none a 504.
func acquireRefusal(p *pool, err error) refusal {
	switch {
	case errors.Is(err, errHeldFull):
		return refuseWith(refusedHeldFull)
	case errors.Is(err, errQueueFull), errors.Is(err, errAllAtLimit):
		return refuseWith(refusedClientConcurrency)
	case errors.Is(err, errQueueTimeout):
		var arr [16]*service
		if len(p.candidates(arr[:0])) > 0 {
			return refuseWith(refusedClientConcurrency) // clients were there, all busy
		}
		return refuseWith(refusedQueueTimeout)
	case errors.Is(err, errNoRoutable):
		return refuseWith(refusedNoRoutable)
	case errors.Is(err, errColdStartFailed):
		return refuseWith(refusedColdStartFailed)
	default:
		return refusal{kind: refusedExchange, err: err}
	}
}

// The dispatch stages follow the admission stages: pool (a dry run's
// survey), cold start, permit and queue, CONNECT, global slot. dispatch
// runs them for real, again after a failover; a dry run predicts them
// (Router.explain), reading what it needs from its survey of the pool
// (dryRun.survey).

// checkColdStart starts an instance for an armed bind with nobody to
// serve, at once (no gateway_timeout first), and makes wt a held waiter
// bounded by cold_start. The request was never dispatched, so holding is
// safe for every method. It returns how long the permit stage may wait.
// Whether a start is due (the bind armed for this server, no client that
// accepts wt, a scaler) is decided here for both modes; then the mode
// starts it: the proxy asks the scaler (proxyMode.coldStart), a dry run
// its ColdStartPlanner what the start would do (dryRun.coldStart).
func (a *admission) checkColdStart(ctx context.Context, wt *waiter) (time.Duration, verdict) {
	p, wait := a.p, a.set.cfg.GatewayTimeout
	d := p.driver()
	switch {
	case d == nil && p.armed.Load() != nil:
		return wait, pass(OutcomeSkip, whyArmedElsewhere)
	case d == nil:
		return wait, pass(OutcomeSkip, whyNotArmed)
	case acceptsAny(p, wt):
		return wait, pass(OutcomeSkip, whyClientCanServe)
	case a.rt.cfg.Scaler == nil:
		return wait, pass(OutcomeSkip, whyNoScaler)
	}
	next, v, st := a.mode.coldStart(ctx, a.rt, a.set, p, d, wait)
	if st != nil {
		wt.abort = st.Failed()
		wt.held, wt.maxHeld = true, a.set.cfg.MaxHeld
	}
	return next, v
}

// acceptsAny reports whether a client of p's serving tier accepts w.
func acceptsAny(p *pool, w *waiter) bool {
	var arr [16]*service
	for _, c := range p.candidates(arr[:0]) {
		if w.accepts(c) {
			return true
		}
	}
	return false
}

// takePermit takes a permit on a client of the pool, waiting in the
// pool's FIFO queue up to timeout when all are busy or (with wait) none
// is routable, and records the wait in rec. It never holds a global slot
// while it waits. Only the proxy takes a permit: a dry run never waits,
// and predicts this stage from its survey of the pool (dryRun.permit).
func (a *admission) takePermit(ctx context.Context, wt *waiter, timeout time.Duration, wait bool, rec *telemetry.Request) (*service, refusal) {
	if wt.held {
		a.rt.held.Add(1)
	}
	s, err := a.p.acquire(ctx, a.rt.strategy, timeout, wait, wt)
	if wt.held {
		a.rt.held.Add(-1)
	}
	a.rt.recordWait(ctx, wt, rec)
	if err != nil {
		return nil, acquireRefusal(a.p, err)
	}
	return s, refusal{}
}

// takeClient runs the dispatch stages of one attempt after the cold
// start, in order: permit and queue (takePermit; s, when set, is a permit
// already taken, for a retry on 5xx), the max_rps of the client's token,
// CONNECT, the byte quotas (which leave the usage counter in *counted),
// the global slot. It returns the service whose permit the request holds
// and a global slot, or the first refusal, having released the permit a
// stage after takePermit refused with. Only the proxy runs it: a dry run
// predicts these stages one by one (explain).
func (a *admission) takeClient(ctx context.Context, s *service, wt *waiter, timeout time.Duration, wait bool, rec *telemetry.Request, counted **usage.Counter) (*service, refusal) {
	var ref refusal
	if s == nil {
		s, ref = a.takePermit(ctx, wt, timeout, wait, rec)
	}
	if ref.kind == passed {
		ref = checkTokenRate(s)
	}
	if ref.kind == passed {
		ref = a.checkConnect(s).refusal
	}
	if ref.kind == passed {
		ref = a.checkQuota(s, counted)
	}
	if ref.kind == passed {
		ref = a.takeSlot().refusal
	}
	if ref.kind != passed {
		if s != nil {
			s.release() // the permit a stage after takePermit refused with
		}
		return nil, ref
	}
	return s, ref
}

// checkTokenRate takes a request of the max_rps bucket of the token of the
// client s, whose permit the request holds; an empty bucket refuses with
// 429 token-rate. Only the proxy runs it: Explain does not predict it.
func checkTokenRate(s *service) refusal {
	if lim := s.rate.Load(); lim != nil && !lim.Allow() {
		return refuseWith(refusedTokenRate)
	}
	return refusal{}
}

// checkConnect refuses a CONNECT to a backend that does not take it (a
// backend that is a forward proxy would be an open proxy). s is the
// service whose permit the request holds, a dry run's the predicted
// pick's (nil: it left since the survey, and takes nothing).
func (a *admission) checkConnect(s *service) verdict {
	if a.method != http.MethodConnect || s != nil && s.allowConnect.Load() {
		return verdict{}
	}
	return stop(refusedConnect, whyNoConnect)
}

// takeSlot takes a server-wide slot for the request (a dry run reads the
// count, which its step names: mode.slot), or refuses when
// max_concurrent_requests are in flight.
func (a *admission) takeSlot() verdict {
	v := pass(OutcomePass, whySlots)
	n, ok := a.mode.slot(a.rt.limits, a.set.cfg.MaxConcurrentRequests)
	v.n[0] = float64(n)
	if !ok {
		v.kind, v.outcome = refusedServerConcurrency, OutcomeStop
	}
	return v
}

// boundCounter is a service's usage counter for one bind pattern.
type boundCounter struct {
	pattern string
	c       *usage.Counter
}

// checkQuota finds the usage counter of s's token, organization and a's
// bind (cached on s, else one map lookup in the meter's snapshot) into
// *counted, and refuses the request when the token is over its
// daily_max_bytes or the organization over its monthly_max_bytes. Without
// a meter it passes.
func (a *admission) checkQuota(s *service, counted **usage.Counter) refusal {
	if a.rt.cfg.Usage == nil {
		return refusal{}
	}
	var c *usage.Counter
	if b := s.counted.Load(); b != nil && b.pattern == a.p.pattern {
		c = b.c
	} else {
		c = a.rt.cfg.Usage.Counter(s.tokenID, s.org, a.p.pattern)
		s.counted.Store(&boundCounter{pattern: a.p.pattern, c: c})
	}
	*counted = c
	kind := passed
	switch c.Check() {
	case usage.TokenQuota:
		kind = refusedTokenQuota
	case usage.OrgQuota:
		kind = refusedOrgQuota
	}
	if kind == passed {
		return refusal{}
	}
	*counted = nil
	return refusal{kind: kind}
}

// refusalReason is what the inspector records of ref: Explain's verdict
// for its kind, with the error of a failed exchange. Only captured
// requests pay for it.
func refusalReason(ref refusal) string {
	reason := refusalInfo[ref.kind].explainText
	if ref.err != nil {
		reason += ": " + ref.err.Error()
	}
	return reason
}
