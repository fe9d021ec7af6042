package apitype

// Explain step names, in the order a request meets them.
const (
	StepReserved    = "reserved_prefix"
	StepIPLimit     = "ip_rate_limit"
	StepMaintenance = "maintenance"
	StepRouteRule   = "route_rule" // routes: the first rule that matches
	StepRoute       = "route"
	StepAccess      = "access"
	StepAllowedIPs  = "allowed_ips"
	StepRateLimit   = "rate_limit" // rate_limits: the matched route's bucket
	StepPool        = "pool"
	StepColdStart   = "cold_start"
	StepPermit      = "permit"
	StepGlobal      = "global_concurrency"
	StepFallback    = "fallback"
)

// Explain step outcomes.
const (
	// OutcomePass: the request would go on to the next step.
	OutcomePass = "pass"
	// OutcomeStop: the request would end here, with the verdict.
	OutcomeStop = "stop"
	// OutcomeWait: the request would wait here; the verdict says for what.
	OutcomeWait = "wait"
	// OutcomeSkip: the step does not apply (not configured, no ip given).
	OutcomeSkip = "skip"
	// OutcomeInfo: what the step saw, for the reader; it decides nothing.
	OutcomeInfo = "info"
)

// Explanation is the answer to GET /explain, as the server's router builds
// it: the steps a request would take, the clients of its pool and the
// verdict.
type Explanation struct {
	// Host and Path are the request explained (host normalized); IP is the
	// visitor, "" when none was given (then the ip-dependent steps are
	// skipped).
	Host string `json:"host"`
	Path string `json:"path"`
	IP   string `json:"ip"`
	// Bind is the matched bind, hostname pattern and path prefix
	// ("app.example.com/api"); "" when none matched.
	Bind string `json:"bind"`
	// OrgIDs are the organizations of the tokens of the bind's clients and
	// of its armed scaling record, sorted, without duplicates. Clients of
	// the master token add none.
	OrgIDs []string `json:"org_ids"`
	// Steps are the checks in the order the request would meet them; the
	// last one that stops or waits decides the verdict.
	Steps []ExplainStep `json:"steps"`
	// Clients are the bind's clients (one entry per service), never nil.
	Clients []ExplainClient `json:"clients"`
	// Verdict says what would happen, in a few words ("dispatch to client
	// web-1 (conn_…)", "queue behind 3", "503 maintenance").
	Verdict string `json:"verdict"`
	// Status is the status aperio-server itself would answer; 0 when the
	// request would reach a client (the backend answers) or wait (see
	// AfterWait).
	Status int `json:"status"`
	// AfterWait is what the visitor gets when a wait runs out (its
	// timeout, or a failed cold start); "" when nothing waits.
	AfterWait string `json:"after_wait"`
	// Setting names the setting that decides the verdict: for a refusal,
	// the limit that refused the request (raise it, or for allow_connect
	// turn it on, for another answer); for a wait, the one that bounds the
	// wait (gateway_timeout or cold_start). "" when no setting decides:
	// dispatch, a stale copy or redirect, a bad path, no route.
	Setting string `json:"setting"`
	// ErrorPage says which page a refusal by aperio-server would be
	// answered with: the format (html, json or text, chosen by the Accept
	// header given; text without one) and whether the html page is the
	// operator's (error_pages) or the built-in one. "" when aperio-server
	// writes no page (dispatch, a wait, a redirect, a stale copy, a gate's
	// own answer).
	ErrorPage string `json:"error_page"`
}

// ExplainStep is one check of the request path.
type ExplainStep struct {
	// Name is one of the Step constants.
	Name string `json:"name"`
	// Outcome is one of the Outcome constants.
	Outcome string `json:"outcome"`
	// Detail says what the step saw, with the figures.
	Detail string `json:"detail"`
}

// ExplainClient is one service of one client in the explained bind, as
// the router sees it now.
type ExplainClient struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	OrgID   string `json:"org_id"`
	Service string `json:"service"`
	// Tier is "primary" (priority 0) or "standby".
	Tier     string `json:"tier"`
	Priority int64  `json:"priority"`
	Healthy  bool   `json:"healthy"`
	Draining bool   `json:"draining"`
	// Disabled is set while an operator disabled the client (POST
	// /clients/{id}/disable): it takes no new requests.
	Disabled bool  `json:"disabled"`
	Inflight int64 `json:"inflight"`
	// Limit is the announced max_concurrent; 0 means unbounded.
	Limit int64 `json:"limit"`
	// Routable: healthy, not draining, still connected.
	Routable bool `json:"routable"`
	// Candidate: routable and in the tier that serves now (standby only
	// while no primary is routable).
	Candidate bool `json:"candidate"`
	// Admits: its token admits the visitor (always, when it restricts
	// nobody).
	Admits bool `json:"admits"`
	// Free: it has a permit free now.
	Free bool `json:"free"`
	// ForwardedPath is the path its backend would receive, the client's
	// trim_bind applied ("/api/x" under the /api bind: "/x"); "" when the
	// client would refuse the path (400).
	ForwardedPath string `json:"forwarded_path"`
}
