package router

import (
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/telemetry"
	"github.com/aperio-dev/aperio/internal/visitor/policy"
	"github.com/aperio-dev/aperio/tunnel"
)

// The traffic policy's stages (package policy does the matching and keeps
// the buckets): stageRouteRule matches the request against routes, and a
// redirect or fixed answer ends it there, before the route table, so that
// it needs no client; a route with a policy is kept for what follows
// (max_body_size at stageBody, the rate limit at stageRateLimit, the
// timeout and headers at dispatch).

// Explain's step names of the policy stages, as wire documents them.
const (
	StepRouteRule = apitype.StepRouteRule
	StepRateLimit = apitype.StepRateLimit
)

// checkRouteRule matches the route rules, leaving the match in a.rule.
// CONNECT has no path and is never matched.
func (a *admission) checkRouteRule() verdict {
	if a.set.policy.Rules() == 0 {
		return verdict{}
	}
	method := a.method
	if method == "" {
		method = http.MethodGet
	}
	if method == http.MethodConnect {
		return verdict{}
	}
	rule := a.set.policy.Match(a.host, a.path, method)
	a.rule = rule
	// Another reading of the path must not name another rule: a backend
	// reading it that way would get what that rule guards without it
	// (a rate limit on /login skipped by "/login%2F").
	for _, k := range a.other {
		if other := a.set.policy.Match(a.host, k, method); other != nil && other != rule {
			v := stop(refusedAmbiguousPath, whyRuleAmbiguous)
			v.name, v.other = k, other
			return v
		}
	}
	switch {
	case rule == nil:
		return pass(OutcomePass, whyNoRule)
	case rule.Answers():
		v := stop(answeredByRule, whyRuleMatches)
		v.rule = rule
		return v
	}
	return pass(OutcomePass, whyRuleMatches)
}

// describeRule describes rule for explain, nil as no rule.
func describeRule(rule *policy.Rule) string {
	if rule == nil {
		return "no route rule"
	}
	return rule.Describe()
}

// checkRateLimit takes a token of the request's bucket of its route's
// rate limit (a dry run reads the tokens left, which its step names:
// mode.routeToken) and refuses when it has none. It runs after access
// control, so that a limit keyed by user sees the admitted one (a dry run
// admits nobody: a.dec is the proxy's).
func (a *admission) checkRateLimit(rec *telemetry.Request) verdict {
	rule := a.rule
	if rule == nil || !rule.Limited() {
		return verdict{}
	}
	vis := policy.Visitor{Addr: a.ip, Header: a.header, User: a.dec.User}
	v := pass(OutcomePass, whyRouteTokens)
	var ok bool
	if v.n, v.retry, ok = a.mode.routeToken(rule, a.now, vis); ok {
		return v
	}
	if rec != nil {
		rec.Routed = true
	}
	v.kind, v.outcome, v.rule = refusedRouteLimit, OutcomeStop, rule
	return v
}

// refuseRoute answers 429 for a route's rate limit, naming the
// rate_limits entry to raise in x-aperio-limit (the visitor's page names
// no setting), counts it and records it in rec. Retry-After is the wait
// until the visitor's bucket has a token again.
func (rt *Router) refuseRoute(w http.ResponseWriter, r *http.Request, rec *telemetry.Request, host string, ref refusal) {
	rt.limits.count(limitRoute)
	rec.Limit = limitInfo[limitRoute].kind
	h := w.Header()
	h["X-Aperio-Limit"] = []string{"route; setting=" + ref.rule.LimitName()}
	h["Retry-After"] = []string{strconv.FormatInt(max(1, int64(math.Ceil(ref.retry.Seconds()))), 10)}
	rt.writePage(w, r, host, visitorAnswer{status: http.StatusTooManyRequests, reason: "too many requests: try again in a moment"})
}

// responseHeaders is what the response header rules of one proxied
// request need; nil means there are none.
type responseHeaders struct {
	p    *policy.Policy
	host string
	rule *policy.Rule
	tls  bool
	svc  *policy.ServiceRules // the serving service's; nil: none
}

// apply runs the service's response rules on h, then the policy's, which
// so win on conflict (nil-safe).
func (rh *responseHeaders) apply(h http.Header) {
	if rh == nil {
		return
	}
	if rh.svc != nil {
		rh.svc.Apply(h)
	}
	rh.p.Response(h, rh.host, rh.rule, rh.tls)
}

// storeServiceHeaders checks the response header rules sa announces
// again, as a client cannot be trusted to have, keeps those that pass in
// s and returns a notice for each entry dropped.
func storeServiceHeaders(s *service, sa tunnel.Service) []string {
	var h *policy.HeaderOps
	if sa.Headers != nil {
		h = &policy.HeaderOps{Set: sa.Headers.Set, Add: sa.Headers.Add, Remove: sa.Headers.Remove}
	}
	rules, dropped := policy.CheckService(h)
	if rules.Empty() {
		s.headers.Store(nil)
	} else {
		s.headers.Store(&rules)
	}
	for i, d := range dropped {
		dropped[i] = "service " + sa.ID + ": " + d
	}
	return dropped
}

// sameHeaders reports whether two announced header rule sets are equal.
func sameHeaders(a, b *tunnel.HeaderRules) bool {
	if a == nil || b == nil {
		return a == b
	}
	return maps.Equal(a.Set, b.Set) && maps.Equal(a.Add, b.Add) && slices.Equal(a.Remove, b.Remove)
}
