package policy

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/aperio-dev/aperio/internal/headerrule"
)

// headerOps are compiled header operations: canonical names, values in
// slices of capacity one, so that a value shared with many requests'
// header maps is never appended to in place.
type headerOps struct {
	remove []string
	set    []headerValue
	add    []headerValue
}

type headerValue struct {
	name  string
	value []string // one value
}

// apply runs o on h: remove, then set, then add.
func (o *headerOps) apply(h http.Header) {
	if o == nil {
		return
	}
	for _, k := range o.remove {
		delete(h, k)
	}
	for _, hv := range o.set {
		h[hv.name] = hv.value
	}
	for _, hv := range o.add {
		h[hv.name] = append(h[hv.name], hv.value[0])
	}
}

// compileOps checks o and compiles it; nil when o has no operation.
func compileOps(o *HeaderOps) (*headerOps, error) {
	if o.entries() == 0 {
		return nil, nil
	}
	c := &headerOps{}
	var errs []error
	for _, k := range slices.Sorted(mapKeys(o.Set)) {
		if err := CheckField(k, o.Set[k]); err != nil {
			errs = append(errs, fmt.Errorf("set: %w", err))
			continue
		}
		c.set = append(c.set, headerValue{http.CanonicalHeaderKey(k), []string{o.Set[k]}})
	}
	for _, k := range slices.Sorted(mapKeys(o.Add)) {
		if err := CheckField(k, o.Add[k]); err != nil {
			errs = append(errs, fmt.Errorf("add: %w", err))
			continue
		}
		c.add = append(c.add, headerValue{http.CanonicalHeaderKey(k), []string{o.Add[k]}})
	}
	for _, k := range o.Remove {
		if err := CheckField(k, ""); err != nil {
			errs = append(errs, fmt.Errorf("remove: %w", err))
			continue
		}
		c.remove = append(c.remove, http.CanonicalHeaderKey(k))
	}
	return c, errors.Join(errs...)
}

func mapKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// CheckField reports what is wrong with a header rule's name and value:
// an empty or non-token name, a hop-by-hop or framing header, X-Aperio-*,
// or a value with a control character (CR, LF, NUL) or longer than 4 KiB.
// The client runs the same check on its services' rules.
func CheckField(name, value string) error { return headerrule.Check(name, value) }

// hostOps are the header operations of one entry of headers:.
type hostOps struct{ req, resp *headerOps }

// headerIndex holds the entries of headers: by hostname, like index:
// every hostname's, then wildcards', then the exact hostname's, each in
// config order.
type headerIndex struct {
	exact    map[string][]hostOps
	wildcard map[string][]hostOps
	any      []hostOps
}

func (x *headerIndex) add(host string, o hostOps) {
	switch {
	case host == "":
		x.any = append(x.any, o)
	case strings.HasPrefix(host, "*."):
		if x.wildcard == nil {
			x.wildcard = map[string][]hostOps{}
		}
		x.wildcard[host[1:]] = append(x.wildcard[host[1:]], o)
	default:
		if x.exact == nil {
			x.exact = map[string][]hostOps{}
		}
		x.exact[host] = append(x.exact[host], o)
	}
}

// each calls f with the entries that apply to host: every hostname's,
// then the wildcards' from the widest suffix to the narrowest, then the
// exact hostname's, so that the most specific rule's set wins.
func (x *headerIndex) each(host string, response bool, h http.Header) {
	run := func(os []hostOps) {
		for _, o := range os {
			if response {
				o.resp.apply(h)
			} else {
				o.req.apply(h)
			}
		}
	}
	run(x.any)
	if len(x.wildcard) > 0 {
		for i := len(host) - 1; i > 0; i-- {
			if host[i] == '.' {
				if os, ok := x.wildcard[host[i:]]; ok {
					run(os)
				}
			}
		}
	}
	if os, ok := x.exact[host]; ok {
		run(os)
	}
}

// Request applies the request rules of host (normalized) and then rule's
// (nil: none) to h, the request the backend gets.
func (p *Policy) Request(h http.Header, host string, rule *Rule) {
	if p == nil || !p.requestRules {
		return
	}
	p.hosts.each(host, false, h)
	if rule != nil {
		rule.reqHeaders.apply(h)
	}
}

// Response applies the response rules of host (normalized), then rule's
// (nil: none), then the security preset (tls: the visitor is served over
// HTTPS) to h, the header of the visitor's answer, before it is written.
func (p *Policy) Response(h http.Header, host string, rule *Rule, tls bool) {
	if p == nil || !p.responseRules {
		return
	}
	p.hosts.each(host, true, h)
	if rule != nil {
		rule.respHeaders.apply(h)
	}
	if p.security {
		applyPreset(h, tls)
	}
}

// HasResponseRules reports whether Response may change an answer's
// headers, so that a caller can skip it.
func (p *Policy) HasResponseRules() bool { return p != nil && p.responseRules }

// The security preset's headers and values.
var (
	hsts           = []string{"max-age=31536000"}
	noSniff        = []string{"nosniff"}
	referrerPolicy = []string{"strict-origin-when-cross-origin"}
	frameOptions   = []string{"SAMEORIGIN"}
)

// applyPreset sets each header of the preset the answer lacks: the
// backend's own choice stands. HSTS only over HTTPS: sent over plain
// HTTP it is ignored by browsers (RFC 6797 §8.1) and tells nothing true.
func applyPreset(h http.Header, tls bool) {
	if tls {
		setIfAbsent(h, "Strict-Transport-Security", hsts)
	}
	setIfAbsent(h, "X-Content-Type-Options", noSniff)
	setIfAbsent(h, "Referrer-Policy", referrerPolicy)
	setIfAbsent(h, "X-Frame-Options", frameOptions)
}

func setIfAbsent(h http.Header, k string, v []string) {
	if _, ok := h[k]; !ok {
		h[k] = v
	}
}

// ServiceRules are the response header rules one client service
// announces, checked: CheckService drops the bad ones.
type ServiceRules struct{ ops *headerOps }

// CheckService compiles a client service's announced response header
// operations, dropping every entry that CheckField refuses and every
// entry past MaxServiceHeaders, and returns the rules and one notice per
// dropped entry. A nil ops is no rules.
func CheckService(o *HeaderOps) (ServiceRules, []string) {
	if o.entries() == 0 {
		return ServiceRules{}, nil
	}
	var notices []string
	kept := HeaderOps{Set: map[string]string{}, Add: map[string]string{}}
	n := 0
	take := func(kind, k, v string) bool {
		if err := CheckField(k, v); err != nil {
			notices = append(notices, fmt.Sprintf("headers.%s: %v; dropped", kind, err))
			return false
		}
		if n++; n > MaxServiceHeaders {
			notices = append(notices, fmt.Sprintf("headers.%s %s: more than %d entries; dropped", kind, k, MaxServiceHeaders))
			return false
		}
		return true
	}
	for _, k := range slices.Sorted(mapKeys(o.Set)) {
		if take("set", k, o.Set[k]) {
			kept.Set[k] = o.Set[k]
		}
	}
	for _, k := range slices.Sorted(mapKeys(o.Add)) {
		if take("add", k, o.Add[k]) {
			kept.Add[k] = o.Add[k]
		}
	}
	for _, k := range o.Remove {
		if take("remove", k, "") {
			kept.Remove = append(kept.Remove, k)
		}
	}
	ops, err := compileOps(&kept)
	if err != nil {
		// Unreachable: every entry kept passed CheckField.
		return ServiceRules{}, append(notices, "headers: "+err.Error())
	}
	return ServiceRules{ops: ops}, notices
}

// Apply runs the service's rules on h, the header of its answer, before
// the server's own (Response), which therefore win.
func (s ServiceRules) Apply(h http.Header) { s.ops.apply(h) }

// Empty reports whether s has no rule.
func (s ServiceRules) Empty() bool { return s.ops == nil }
