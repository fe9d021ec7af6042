// Package policy owns the server's traffic policy: the route rules
// (`routes:`, matched on hostname, path and method, answered with a
// redirect or a fixed response without any client, or carrying a
// per-route policy), the rate limits they name (`rate_limits:`, token
// buckets per route and key in a bounded LRU), and the header rules
// (`headers:`, the `security_headers` preset, and the rules client
// services announce). A Policy is compiled once from its Config into an
// index; matching it on the request path allocates nothing.
package policy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/aperio-dev/aperio/internal/headerrule"
)

// Bounds of a policy: a config past them fails to load.
const (
	MaxRoutes      = 1000
	MaxRateLimits  = 100
	MaxHeaderRules = 1000     // header entries (add, set, remove) in headers: and every route's policy
	MaxBodyBytes   = 64 << 10 // body of one respond answer
	// MaxServiceHeaders bounds the header entries one client service may
	// announce.
	MaxServiceHeaders = headerrule.MaxService
	// MaxKeys is the default and the greatest max_keys of a rate limit:
	// the buckets one limit keeps, least recently used dropped first.
	MaxKeys = 100_000
)

// Config is the traffic policy as the server's config file writes it. The
// zero value is no policy.
type Config struct {
	// Routes are matched in order; the first that matches a request
	// decides (routes:).
	Routes []Route `yaml:"routes"`
	// RateLimits are the token buckets routes name (rate_limits:).
	RateLimits []RateLimit `yaml:"rate_limits"`
	// Headers are header rules per hostname (headers:).
	Headers []HeaderRule `yaml:"headers"`
	// SecurityHeaders adds the security preset to every answer
	// (security_headers): HSTS when served over HTTPS,
	// X-Content-Type-Options, Referrer-Policy and X-Frame-Options, each
	// unless the answer has it already.
	SecurityHeaders bool `yaml:"security_headers"`
}

// Route is one rule of routes:. A request matches when its hostname, path
// and method all match; a rule has at most one of Redirect and Respond,
// or else a Policy.
type Route struct {
	// Host is an exact hostname or a "*." wildcard; empty matches every
	// hostname.
	Host string `yaml:"host"`
	// Path is a path prefix ("/api" matches "/api" and "/api/x", not
	// "/apix") or, when it holds *, ? or [, a glob of path.Match matched
	// against the whole path (a * stays within one segment). Empty
	// matches every path.
	Path string `yaml:"path"`
	// Methods are the methods it matches, in any case; empty matches all.
	Methods []string `yaml:"methods"`
	// Redirect answers with a redirect, without any client.
	Redirect *Redirect `yaml:"redirect"`
	// Respond answers with a fixed response, without any client.
	Respond *Respond `yaml:"respond"`
	// Policy applies to requests the rule matches that are proxied.
	Policy *RoutePolicy `yaml:"policy"`
	// Line is where the rule starts in the config file; 0 when unknown.
	Line int `yaml:"-"`
}

// Redirect is a route's redirect answer.
type Redirect struct {
	// To is an http or https URL, or a path starting with "/".
	To string `yaml:"to"`
	// Status is 301, 302, 307 or 308; zero means 302.
	Status int `yaml:"status"`
	// PreservePath appends the request's path and query to To.
	PreservePath bool `yaml:"preserve_path"`
}

// Respond is a route's fixed answer.
type Respond struct {
	// Status is 200 to 599; zero means 200.
	Status int `yaml:"status"`
	// Body is sent as is; at most MaxBodyBytes.
	Body string `yaml:"body"`
	// ContentType defaults to text/plain; charset=utf-8.
	ContentType string `yaml:"content_type"`
	// Headers are set on the answer.
	Headers map[string]string `yaml:"headers"`
}

// RoutePolicy is what a route applies to the requests it lets through.
type RoutePolicy struct {
	// Timeout replaces gateway_response_timeout for them; zero keeps it.
	Timeout time.Duration `yaml:"timeout"`
	// RateLimit names an entry of rate_limits; empty means none.
	RateLimit string `yaml:"rate_limit"`
	// Headers are applied after every hostname rule (headers:).
	Headers *RouteHeaders `yaml:"headers"`
	// MaxBodySize replaces max_body_size for them; zero keeps it.
	MaxBodySize Size `yaml:"max_body_size"`
}

// RateLimit is one entry of rate_limits: a token bucket for each route
// that names it and each key value.
type RateLimit struct {
	// Name is what routes name it by.
	Name string `yaml:"name"`
	// Key is what a bucket belongs to: ip (the visitor), header:NAME (the
	// value of that request header), user (the user access control
	// admitted) or token (the visitor's bearer token). A request without
	// the key's value is keyed by its visitor address.
	Key string `yaml:"key"`
	// Rate is the refill in tokens per second; it must be positive.
	Rate float64 `yaml:"rate"`
	// Burst is the bucket's size; zero means max(1, Rate).
	Burst int `yaml:"burst"`
	// MaxKeys bounds the buckets kept (least recently used go first);
	// zero means MaxKeys, the ceiling too.
	MaxKeys int `yaml:"max_keys"`
}

// HeaderRule is one entry of headers:: header operations for the
// requests of one hostname pattern.
type HeaderRule struct {
	// Host is an exact hostname or a "*." wildcard; empty means every
	// hostname.
	Host string `yaml:"host"`
	// Request is applied to the request the backend gets.
	Request HeaderOps `yaml:"request"`
	// Response is applied to the answer the visitor gets.
	Response HeaderOps `yaml:"response"`
	// Line is where the rule starts in the config file; 0 when unknown.
	Line int `yaml:"-"`
}

// RouteHeaders are a route's header operations.
type RouteHeaders struct {
	// Request is applied to the request the backend gets.
	Request HeaderOps `yaml:"request"`
	// Response is applied to the answer the visitor gets.
	Response HeaderOps `yaml:"response"`
}

// UnmarshalYAML reads a route's header operations, refusing unknown keys.
func (h *RouteHeaders) UnmarshalYAML(n *yaml.Node) error {
	type plain RouteHeaders
	return strictDecode(n, (*plain)(h), "request", "response")
}

// entries counts the operations of h.
func (h *RouteHeaders) entries() int {
	if h == nil {
		return 0
	}
	return h.Request.entries() + h.Response.entries()
}

// HeaderOps are header operations, applied remove, then set, then add.
type HeaderOps struct {
	// Set replaces a header's values with the one given.
	Set map[string]string `yaml:"set"`
	// Add appends a value.
	Add map[string]string `yaml:"add"`
	// Remove deletes a header.
	Remove []string `yaml:"remove"`
}

// entries counts the operations of o.
func (o *HeaderOps) entries() int {
	if o == nil {
		return 0
	}
	return len(o.Set) + len(o.Add) + len(o.Remove)
}

// Size is a size in bytes; in yaml a plain integer or one with a unit
// (KiB, MiB, GiB, KB, MB, GB, B).
type Size int64

// UnmarshalYAML reads a size.
func (s *Size) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: expected a size", n.Line)
	}
	v, err := ParseSize(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*s = Size(v)
	return nil
}

// sizeUnits are the units ParseSize knows, longest first.
var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30},
	{"kb", 1000}, {"mb", 1000 * 1000}, {"gb", 1000 * 1000 * 1000}, {"b", 1},
}

// ParseSize parses a size: a non-negative integer, optionally with a unit.
func ParseSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := int64(1)
	for _, u := range sizeUnits {
		if rest, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a size (bytes, or a number with KiB, MiB, GiB)", s)
	}
	return n * mult, nil
}

// UnmarshalYAML reads a route, refusing unknown keys and noting its line.
func (r *Route) UnmarshalYAML(n *yaml.Node) error {
	type plain Route
	if err := strictDecode(n, (*plain)(r), "host", "path", "methods", "redirect", "respond", "policy"); err != nil {
		return err
	}
	r.Line = n.Line
	return nil
}

// UnmarshalYAML reads a header rule, refusing unknown keys and noting its
// line.
func (h *HeaderRule) UnmarshalYAML(n *yaml.Node) error {
	type plain HeaderRule
	if err := strictDecode(n, (*plain)(h), "host", "request", "response"); err != nil {
		return err
	}
	h.Line = n.Line
	return nil
}

// UnmarshalYAML reads header operations, refusing unknown keys.
func (o *HeaderOps) UnmarshalYAML(n *yaml.Node) error {
	type plain HeaderOps
	return strictDecode(n, (*plain)(o), "set", "add", "remove")
}

// UnmarshalYAML reads a redirect, refusing unknown keys.
func (r *Redirect) UnmarshalYAML(n *yaml.Node) error {
	type plain Redirect
	return strictDecode(n, (*plain)(r), "to", "status", "preserve_path")
}

// UnmarshalYAML reads a fixed answer, refusing unknown keys.
func (r *Respond) UnmarshalYAML(n *yaml.Node) error {
	type plain Respond
	return strictDecode(n, (*plain)(r), "status", "body", "content_type", "headers")
}

// UnmarshalYAML reads a route's policy, refusing unknown keys.
func (p *RoutePolicy) UnmarshalYAML(n *yaml.Node) error {
	type plain RoutePolicy
	return strictDecode(n, (*plain)(p), "timeout", "rate_limit", "headers", "max_body_size")
}

// UnmarshalYAML reads a rate limit, refusing unknown keys.
func (l *RateLimit) UnmarshalYAML(n *yaml.Node) error {
	type plain RateLimit
	return strictDecode(n, (*plain)(l), "name", "key", "rate", "burst", "max_keys")
}

// strictDecode decodes the mapping n into v after checking that its keys
// are among known: a misspelt key must fail the load, not be ignored.
func strictDecode(n *yaml.Node, v any, known ...string) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: expected a mapping", n.Line)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; !slices.Contains(known, k.Value) {
			return fmt.Errorf("line %d: unknown key %q (known: %s)", k.Line, k.Value, strings.Join(known, ", "))
		}
	}
	return n.Decode(v)
}
