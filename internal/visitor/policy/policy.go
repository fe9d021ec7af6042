package policy

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strings"

	"github.com/aperio-dev/aperio/internal/headerrule"
	"github.com/aperio-dev/aperio/internal/hostname"
)

// RuleError is a problem of one entry of a policy list: routes,
// rate_limits or headers.
type RuleError struct {
	// Key is the list: "routes", "rate_limits" or "headers".
	Key string
	// Index is the entry's place in the list, from 0.
	Index int
	// Line is where the entry starts in the config file; 0 when unknown.
	Line int
	// Msg says what is wrong.
	Msg string
}

func (e *RuleError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s[%d] (line %d): %s", e.Key, e.Index, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s[%d]: %s", e.Key, e.Index, e.Msg)
}

// Policy is a compiled Config. A nil *Policy is no policy: it matches no
// route and changes no header. It is immutable once built and safe for
// concurrent use; only its rate limiters' buckets change.
type Policy struct {
	rules  []Rule
	index  index
	limits []*limiter // by rate_limits index
	hosts  headerIndex
	// security turns the security_headers preset on.
	security bool
	// responseRules is set when some answer's headers may change: header
	// rules, a route with headers, or the preset.
	responseRules bool
	requestRules  bool
}

// New compiles cfg, or reports every problem of it, each a *RuleError,
// joined. Overlapping rules are not its concern: Check reports them.
func New(cfg Config) (*Policy, error) {
	var errs []error
	bad := func(key string, i, line int, format string, args ...any) {
		errs = append(errs, &RuleError{Key: key, Index: i, Line: line, Msg: fmt.Sprintf(format, args...)})
	}
	if len(cfg.Routes) > MaxRoutes {
		return nil, &RuleError{Key: "routes", Index: MaxRoutes, Msg: fmt.Sprintf("%d rules, at most %d", len(cfg.Routes), MaxRoutes)}
	}
	if len(cfg.RateLimits) > MaxRateLimits {
		return nil, &RuleError{Key: "rate_limits", Index: MaxRateLimits, Msg: fmt.Sprintf("%d limits, at most %d", len(cfg.RateLimits), MaxRateLimits)}
	}
	p := &Policy{}
	names := map[string]int{}
	// failed holds the names of the rate limits refused above: a route
	// that names one is not refused again for it (its error would send
	// the reader to the route instead of the limit).
	failed := map[string]bool{}
	for i, rl := range cfg.RateLimits {
		l, msg := newLimiter(i, rl)
		if msg != "" {
			bad("rate_limits", i, 0, "%s", msg)
			failed[rl.Name] = true
			continue
		}
		if _, dup := names[rl.Name]; dup {
			bad("rate_limits", i, 0, "name %q is used by rate_limits[%d] too", rl.Name, names[rl.Name])
			continue
		}
		names[rl.Name] = i
		p.limits = append(p.limits, l)
	}
	entries := 0
	for i, hr := range cfg.Headers {
		entries += hr.Request.entries() + hr.Response.entries()
		if entries > MaxHeaderRules {
			bad("headers", i, hr.Line, "more than %d header entries in headers and routes", MaxHeaderRules)
			break
		}
		host, err := hostPattern(hr.Host)
		if err != nil {
			bad("headers", i, hr.Line, "host: %v", err)
			continue
		}
		req, err := compileOps(&hr.Request)
		if err != nil {
			bad("headers", i, hr.Line, "request: %v", err)
			continue
		}
		resp, err := compileOps(&hr.Response)
		if err != nil {
			bad("headers", i, hr.Line, "response: %v", err)
			continue
		}
		p.hosts.add(host, hostOps{req: req, resp: resp})
		p.requestRules = p.requestRules || req != nil
		p.responseRules = p.responseRules || resp != nil
	}
	for i, r := range cfg.Routes {
		if r.Policy != nil {
			entries += r.Policy.Headers.entries()
			if entries > MaxHeaderRules {
				bad("routes", i, r.Line, "more than %d header entries in headers and routes", MaxHeaderRules)
				break
			}
		}
		rule, err := compileRoute(i, r, names, failed, p.limits)
		if err != nil {
			bad("routes", i, r.Line, "%v", err)
			continue
		}
		p.rules = append(p.rules, rule)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	for i := range p.rules {
		r := &p.rules[i]
		p.index.add(r)
		p.requestRules = p.requestRules || r.reqHeaders != nil
		p.responseRules = p.responseRules || r.respHeaders != nil
	}
	if cfg.SecurityHeaders {
		p.security = true
		p.responseRules = true
	}
	return p, nil
}

// Rules returns the number of route rules.
func (p *Policy) Rules() int {
	if p == nil {
		return 0
	}
	return len(p.rules)
}

// hostPattern validates and normalizes a rule's host: "" (every
// hostname), an exact name or a "*." wildcard.
func hostPattern(h string) (string, error) {
	h = strings.TrimSpace(h)
	if h == "" {
		return "", nil
	}
	if err := hostname.Validate(h); err != nil {
		return "", err
	}
	return hostname.Normalize(h), nil
}

// compileRoute checks r and builds its Rule; i is its index in routes.
// names maps the valid rate limits' names to their index; failed holds
// those of the refused ones, which a route may name without a second
// error.
func compileRoute(i int, r Route, names map[string]int, failed map[string]bool, limits []*limiter) (Rule, error) {
	rule := Rule{Index: i, Name: fmt.Sprintf("routes[%d]", i)}
	var err error
	if rule.host, err = hostPattern(r.Host); err != nil {
		return rule, fmt.Errorf("host: %w", err)
	}
	rule.path = strings.TrimSpace(r.Path)
	if rule.path == "/" {
		rule.path = ""
	}
	if rule.path != "" {
		if rule.path[0] != '/' {
			return rule, fmt.Errorf("path %q must start with /", rule.path)
		}
		if i := strings.IndexAny(rule.path, "*?[\\"); i >= 0 && strings.ContainsAny(rule.path, "*?[") {
			rule.glob, rule.lit = true, rule.path[:i]
			// path.Match checks the whole pattern: a malformed one fails
			// here, whatever it is matched against.
			if _, err := path.Match(rule.path, ""); err != nil {
				return rule, fmt.Errorf("path %q is not a valid glob: %w", rule.path, err)
			}
		} else if strings.ContainsAny(rule.path, "\\") {
			return rule, fmt.Errorf("path %q is not a valid glob: a backslash escapes nothing in a prefix", rule.path)
		}
	}
	for _, m := range r.Methods {
		m = strings.ToUpper(strings.TrimSpace(m))
		if m == "" || strings.ContainsFunc(m, func(c rune) bool { return c < 'A' || c > 'Z' }) {
			return rule, fmt.Errorf("method %q is not a method", m)
		}
		rule.methods = append(rule.methods, m)
	}
	actions := 0
	if r.Redirect != nil {
		actions++
		if rule.redirect, err = compileRedirect(r.Redirect); err != nil {
			return rule, fmt.Errorf("redirect: %w", err)
		}
	}
	if r.Respond != nil {
		actions++
		if rule.respond, err = compileRespond(r.Respond); err != nil {
			return rule, fmt.Errorf("respond: %w", err)
		}
	}
	if r.Policy != nil {
		actions++
		pol := r.Policy
		if pol.Timeout < 0 {
			return rule, fmt.Errorf("policy.timeout must not be negative, got %s", pol.Timeout)
		}
		if pol.MaxBodySize < 0 {
			return rule, fmt.Errorf("policy.max_body_size must not be negative")
		}
		rule.Timeout, rule.MaxBodyBytes = pol.Timeout, int64(pol.MaxBodySize)
		if pol.RateLimit != "" {
			li, ok := names[pol.RateLimit]
			if !ok && !failed[pol.RateLimit] {
				return rule, fmt.Errorf("policy.rate_limit %q names no entry of rate_limits", pol.RateLimit)
			}
			for _, l := range limits {
				if ok && l.index == li {
					rule.limit = l
				}
			}
		}
		if pol.Headers != nil {
			if rule.reqHeaders, err = compileOps(&pol.Headers.Request); err != nil {
				return rule, fmt.Errorf("policy.headers.request: %w", err)
			}
			if rule.respHeaders, err = compileOps(&pol.Headers.Response); err != nil {
				return rule, fmt.Errorf("policy.headers.response: %w", err)
			}
		}
	}
	if actions != 1 {
		return rule, errors.New("needs exactly one of redirect, respond and policy")
	}
	return rule, nil
}

// redirectStatuses are the statuses a redirect may answer with.
var redirectStatuses = []int{http.StatusMovedPermanently, http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect}

func compileRedirect(r *Redirect) (*redirect, error) {
	status := r.Status
	if status == 0 {
		status = http.StatusFound
	}
	ok := false
	for _, s := range redirectStatuses {
		ok = ok || s == status
	}
	if !ok {
		return nil, fmt.Errorf("status %d is not 301, 302, 307 or 308", r.Status)
	}
	to := strings.TrimSpace(r.To)
	if strings.ContainsAny(to, "\r\n\x00") {
		return nil, errors.New("to holds a control character")
	}
	u, err := url.Parse(to)
	switch {
	case to == "":
		return nil, errors.New("to is required")
	case err != nil:
		return nil, fmt.Errorf("to %q is not a URL", to)
	case u.Scheme == "" && (!strings.HasPrefix(to, "/") || strings.HasPrefix(to, "//")):
		return nil, fmt.Errorf("to %q must be an http or https URL or a path starting with /", to)
	case u.Scheme != "" && (u.Scheme != "http" && u.Scheme != "https" || u.Host == ""):
		return nil, fmt.Errorf("to %q must be an http or https URL or a path starting with /", to)
	case r.PreservePath && (u.RawQuery != "" || u.Fragment != ""):
		return nil, fmt.Errorf("to %q has a query or fragment: preserve_path appends the request's own", to)
	}
	if r.PreservePath {
		to = strings.TrimSuffix(to, "/")
	}
	return &redirect{to: to, status: status, preserve: r.PreservePath, location: []string{to}}, nil
}

func compileRespond(r *Respond) (*respond, error) {
	status := r.Status
	if status == 0 {
		status = http.StatusOK
	}
	if status < 200 || status > 599 {
		return nil, fmt.Errorf("status %d is not between 200 and 599", r.Status)
	}
	if len(r.Body) > MaxBodyBytes {
		return nil, fmt.Errorf("body of %d bytes, at most %d", len(r.Body), MaxBodyBytes)
	}
	if r.Body != "" && (status == http.StatusNoContent || status == http.StatusNotModified) {
		return nil, fmt.Errorf("status %d has no body", status)
	}
	ct := strings.TrimSpace(r.ContentType)
	if ct == "" {
		ct = "text/plain; charset=utf-8"
	}
	if err := headerrule.CheckValue(ct); err != nil {
		return nil, fmt.Errorf("content_type: %w", err)
	}
	if len(r.Headers) > MaxServiceHeaders {
		return nil, fmt.Errorf("%d headers, at most %d", len(r.Headers), MaxServiceHeaders)
	}
	h := http.Header{"Content-Type": {ct}}
	for k, v := range r.Headers {
		if err := CheckField(k, v); err != nil {
			return nil, fmt.Errorf("headers: %w", err)
		}
		h[http.CanonicalHeaderKey(k)] = []string{v}
	}
	h["Content-Length"] = []string{fmt.Sprint(len(r.Body))}
	return &respond{status: status, body: []byte(r.Body), header: h}, nil
}
