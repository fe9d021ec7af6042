package policy

import (
	"net/http"
	"path"
	"strings"
	"time"
)

// Rule is one compiled route rule. Its exported fields are read-only.
type Rule struct {
	// Index is the rule's place in routes, from 0; Name is "routes[Index]",
	// how refusals and explain name it.
	Index int
	Name  string
	// Timeout replaces gateway_response_timeout for the requests it
	// proxies; zero keeps it.
	Timeout time.Duration
	// MaxBodyBytes replaces max_body_size for them; zero keeps it.
	MaxBodyBytes int64

	host     string // normalized; "" every hostname
	path     string // "" every path
	glob     bool   // path is a path.Match pattern, else a prefix
	lit      string // a glob's literal start, before its first meta character
	methods  []string
	redirect *redirect
	respond  *respond
	limit    *limiter
	// reqHeaders and respHeaders are the route's header operations; nil
	// when it has none.
	reqHeaders, respHeaders *headerOps
}

type redirect struct {
	to       string
	status   int
	preserve bool
	location []string // to, shared by every answer without preserve_path
}

type respond struct {
	status int
	body   []byte
	header http.Header // Content-Type and Content-Length included
}

// Answers reports whether the rule answers itself (redirect or respond),
// so that the request needs no client.
func (r *Rule) Answers() bool { return r.redirect != nil || r.respond != nil }

// Limited reports whether the rule names a rate limit.
func (r *Rule) Limited() bool { return r.limit != nil }

// Describe says what the rule does, for explain.
func (r *Rule) Describe() string {
	var b strings.Builder
	b.WriteString(r.Name + " (")
	if r.host == "" {
		b.WriteString("any host")
	} else {
		b.WriteString(r.host)
	}
	if r.path != "" {
		b.WriteString(" " + r.path)
	}
	if len(r.methods) > 0 {
		b.WriteString(" " + strings.Join(r.methods, ","))
	}
	b.WriteString(")")
	switch {
	case r.redirect != nil:
		b.WriteString(": redirect to " + r.redirect.to)
	case r.respond != nil:
		b.WriteString(": fixed answer")
	default:
		b.WriteString(": proxied with its policy")
	}
	return b.String()
}

// Status is the status the rule answers with itself: its redirect's or
// fixed answer's, 0 when it proxies.
func (r *Rule) Status() int {
	switch {
	case r.redirect != nil:
		return r.redirect.status
	case r.respond != nil:
		return r.respond.status
	}
	return 0
}

// matches reports whether the rule matches a request; host is normalized.
func (r *Rule) matches(host, p, method string) bool {
	if r.host != "" && r.host != host && !wildcardMatch(r.host, host) {
		return false
	}
	if !r.pathMatches(p) {
		return false
	}
	if len(r.methods) == 0 {
		return true
	}
	for _, m := range r.methods {
		if m == method {
			return true
		}
	}
	return false
}

func (r *Rule) pathMatches(p string) bool {
	switch {
	case r.path == "":
		return true
	case r.glob:
		// The literal start turns most misses away without path.Match,
		// which also scans the rest of its pattern for errors: about
		// 50 ns a glob saved on every request that does not match it.
		if !strings.HasPrefix(p, r.lit) {
			return false
		}
		ok, _ := path.Match(r.path, p) // the pattern was checked at compile
		return ok
	default:
		return prefixMatch(r.path, p)
	}
}

// prefixMatch matches at a segment boundary, as binds do: "/api" matches
// "/api" and "/api/x" but not "/apix".
func prefixMatch(prefix, p string) bool {
	return strings.HasPrefix(p, prefix) &&
		(len(p) == len(prefix) || p[len(prefix)] == '/' || prefix[len(prefix)-1] == '/')
}

// wildcardMatch reports whether the "*." pattern matches host, which
// needs a label in front of the suffix.
func wildcardMatch(pattern, host string) bool {
	suffix, ok := strings.CutPrefix(pattern, "*")
	return ok && len(host) > len(suffix) && strings.HasSuffix(host, suffix)
}

// index finds the first rule in config order that matches a request
// without trying them all: rules of the exact hostname, of each wildcard
// suffix of it, and of every hostname, each list in config order. Only
// the first match of each list matters, and a list stops as soon as its
// rules come after the best match found.
type index struct {
	exact    map[string][]*Rule
	wildcard map[string][]*Rule // by suffix: "*.example.com" is ".example.com"
	any      []*Rule
}

func (x *index) add(r *Rule) {
	switch {
	case r.host == "":
		x.any = append(x.any, r)
	case strings.HasPrefix(r.host, "*."):
		if x.wildcard == nil {
			x.wildcard = map[string][]*Rule{}
		}
		x.wildcard[r.host[1:]] = append(x.wildcard[r.host[1:]], r)
	default:
		if x.exact == nil {
			x.exact = map[string][]*Rule{}
		}
		x.exact[r.host] = append(x.exact[r.host], r)
	}
}

// first returns the first rule of rs that matches and comes before best,
// or best.
func first(rs []*Rule, best *Rule, host, p, method string) *Rule {
	for _, r := range rs {
		if best != nil && r.Index >= best.Index {
			break
		}
		if r.matches(host, p, method) {
			return r
		}
	}
	return best
}

// Match returns the first rule in config order that matches host
// (normalized), path (its normal form) and method, or nil. It allocates
// nothing.
func (p *Policy) Match(host, path, method string) *Rule {
	if p == nil || len(p.rules) == 0 {
		return nil
	}
	var best *Rule
	if rs, ok := p.index.exact[host]; ok {
		best = first(rs, best, host, path, method)
	}
	if len(p.index.wildcard) > 0 {
		for i := 1; i < len(host); i++ {
			if host[i] != '.' {
				continue
			}
			if rs, ok := p.index.wildcard[host[i:]]; ok {
				best = first(rs, best, host, path, method)
			}
		}
	}
	return first(p.index.any, best, host, path, method)
}

// matchLinear is Match by trying every rule in order: what the index must
// agree with.
func (p *Policy) matchLinear(host, path, method string) *Rule {
	for i := range p.rules {
		if p.rules[i].matches(host, path, method) {
			return &p.rules[i]
		}
	}
	return nil
}

// Answer writes the rule's own answer (redirect or fixed response) to w
// for r, with the policy's response headers for host (tls: served over
// HTTPS). It reports false, writing nothing, for a rule that proxies.
func (p *Policy) Answer(w http.ResponseWriter, r *http.Request, host string, rule *Rule, tls bool) bool {
	h := w.Header()
	switch {
	case rule.redirect != nil:
		rd := rule.redirect
		if rd.preserve {
			loc := rd.to + r.URL.RequestURI()
			if strings.HasPrefix(loc, "//") {
				// to is "/" and the path starts with "//": that would be a
				// redirect to another host (protocol-relative). One slash.
				loc = "/" + strings.TrimLeft(loc, "/")
			}
			h["Location"] = []string{loc}
		} else {
			h["Location"] = rd.location
		}
		p.Response(h, host, rule, tls)
		w.WriteHeader(rd.status)
	case rule.respond != nil:
		rs := rule.respond
		for k, vv := range rs.header {
			h[k] = vv
		}
		p.Response(h, host, rule, tls)
		w.WriteHeader(rs.status)
		if r.Method != http.MethodHead {
			w.Write(rs.body)
		}
	default:
		return false
	}
	return true
}
