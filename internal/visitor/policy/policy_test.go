package policy

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// mustNew compiles cfg or fails the test.
func mustNew(t testing.TB, cfg Config) *Policy {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p
}

// proxied is a route policy that proxies with nothing changed.
func proxied() *RoutePolicy { return &RoutePolicy{Timeout: time.Second} }

func TestMatch(t *testing.T) {
	p := mustNew(t, Config{Routes: []Route{
		{Host: "old.example.com", Redirect: &Redirect{To: "https://new.example.com", PreservePath: true}}, // 0
		{Host: "app.example.com", Path: "/healthz", Respond: &Respond{Body: "ok"}},                        // 1
		{Host: "*.example.com", Path: "/api", Methods: []string{"post"}, Policy: proxied()},               // 2
		{Path: "/static/*.css", Policy: proxied()},                                                        // 3
		{Host: "App.Example.com", Path: "/api", Policy: proxied()},                                        // 4
		{Path: "/", Methods: []string{"DELETE"}, Respond: &Respond{Status: 405}},                          // 5
	}})
	tests := []struct {
		host, path, method string
		want               int // rule index; -1 none
	}{
		{"old.example.com", "/x", "GET", 0},
		{"app.example.com", "/healthz", "GET", 1},
		{"app.example.com", "/healthz/deep", "GET", 1},
		{"app.example.com", "/healthzz", "GET", -1},
		{"app.example.com", "/api/v1", "POST", 2},
		{"a.b.example.com", "/api", "POST", 2},
		{"example.com", "/api", "POST", -1},
		{"app.example.com", "/api/v1", "GET", 4},
		{"other.test", "/static/site.css", "GET", 3},
		{"other.test", "/static/a/site.css", "GET", -1},
		{"old.example.com", "/", "DELETE", 0},
		{"other.test", "/x", "DELETE", 5},
	}
	for _, tt := range tests {
		got := p.Match(tt.host, tt.path, tt.method)
		idx := -1
		if got != nil {
			idx = got.Index
		}
		if idx != tt.want {
			t.Errorf("Match(%s, %s, %s) = routes[%d], want routes[%d]", tt.host, tt.path, tt.method, idx, tt.want)
		}
		if lin := p.matchLinear(tt.host, tt.path, tt.method); lin != got {
			t.Errorf("Match(%s, %s, %s) = %v, linear scan %v", tt.host, tt.path, tt.method, got, lin)
		}
	}
	var nilPolicy *Policy
	if r := nilPolicy.Match("a.test", "/", "GET"); r != nil {
		t.Errorf("nil Policy Match = %v, want nil", r)
	}
}

func TestAnswer(t *testing.T) {
	p := mustNew(t, Config{
		Routes: []Route{
			{Host: "old.test", Path: "/keep", Redirect: &Redirect{To: "https://new.test/", Status: 308, PreservePath: true}},
			{Host: "old.test", Path: "/moved", Redirect: &Redirect{To: "/moved"}},
			{Host: "old.test", Redirect: &Redirect{To: "/", PreservePath: true}},
			{Host: "app.test", Respond: &Respond{Status: 503, Body: "down", ContentType: "text/html", Headers: map[string]string{"cache-control": "no-store"}}},
			{Host: "proxy.test", Policy: proxied()},
		},
		SecurityHeaders: true,
	})
	tests := []struct {
		name, method, target string
		tls                  bool
		status               int
		header               map[string]string
		body                 string
	}{
		{name: "redirect keeps path and query", target: "http://old.test/keep/a%20b?q=1", status: 308,
			header: map[string]string{"Location": "https://new.test/keep/a%20b?q=1", "X-Frame-Options": "SAMEORIGIN"}},
		{name: "redirect to a path, default 302", target: "http://old.test/moved/x", status: 302,
			header: map[string]string{"Location": "/moved", "Strict-Transport-Security": ""}},
		{name: "preserved path never leaves the host", target: "http://old.test//evil.test/x", status: 302,
			header: map[string]string{"Location": "/evil.test/x"}},
		{name: "respond over TLS: HSTS", target: "https://app.test/", tls: true, status: 503,
			header: map[string]string{"Content-Type": "text/html", "Cache-Control": "no-store", "Content-Length": "4", "Strict-Transport-Security": "max-age=31536000", "X-Content-Type-Options": "nosniff"},
			body:   "down"},
		{name: "HEAD gets no body", method: http.MethodHead, target: "http://app.test/", status: 503, header: map[string]string{"Content-Length": "4"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method := tt.method
			if method == "" {
				method = http.MethodGet
			}
			r := httptest.NewRequest(method, tt.target, nil)
			w := httptest.NewRecorder()
			rule := p.Match(strings.Split(r.Host, ":")[0], r.URL.Path, method)
			if rule == nil || !p.Answer(w, r, r.Host, rule, tt.tls) {
				t.Fatalf("no answering rule for %s", tt.target)
			}
			if w.Code != tt.status {
				t.Errorf("status = %d, want %d", w.Code, tt.status)
			}
			for k, v := range tt.header {
				if got := w.Header().Get(k); got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
			if got := w.Body.String(); got != tt.body {
				t.Errorf("body = %q, want %q", got, tt.body)
			}
		})
	}
	rule := p.Match("proxy.test", "/", "GET")
	if rule == nil || rule.Answers() || p.Answer(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil), "proxy.test", rule, false) {
		t.Errorf("a policy rule answers by itself")
	}
}

func TestHeaders(t *testing.T) {
	p := mustNew(t, Config{
		Headers: []HeaderRule{
			{Host: "app.test", Request: HeaderOps{Set: map[string]string{"X-Env": "exact"}}, Response: HeaderOps{Set: map[string]string{"X-Frame-Options": "DENY"}, Remove: []string{"server"}}},
			{Host: "*.test", Request: HeaderOps{Set: map[string]string{"X-Env": "wild"}, Add: map[string]string{"X-Tag": "w"}}},
			{Request: HeaderOps{Set: map[string]string{"X-Env": "any"}, Remove: []string{"Cookie"}}},
		},
		Routes: []Route{{Host: "app.test", Path: "/api", Policy: &RoutePolicy{Headers: &RouteHeaders{
			Request:  HeaderOps{Add: map[string]string{"X-Tag": "route"}},
			Response: HeaderOps{Set: map[string]string{"Cache-Control": "no-store"}},
		}}}},
		SecurityHeaders: true,
	})
	req := http.Header{"Cookie": {"a=b"}, "X-Tag": {"visitor"}}
	rule := p.Match("app.test", "/api/x", "GET")
	p.Request(req, "app.test", rule)
	if got := req.Get("X-Env"); got != "exact" {
		t.Errorf("X-Env = %q, want exact: the exact hostname's rule wins", got)
	}
	if got := req.Values("X-Tag"); strings.Join(got, ",") != "visitor,w,route" {
		t.Errorf("X-Tag = %q, want visitor,w,route", got)
	}
	if _, ok := req["Cookie"]; ok {
		t.Errorf("Cookie kept, want removed")
	}
	resp := http.Header{"Server": {"nginx"}, "X-Content-Type-Options": {"sniff-anyway"}}
	p.Response(resp, "app.test", rule, false)
	want := map[string]string{"Server": "", "X-Frame-Options": "DENY", "Cache-Control": "no-store",
		"X-Content-Type-Options": "sniff-anyway", "Referrer-Policy": "strict-origin-when-cross-origin", "Strict-Transport-Security": ""}
	for k, v := range want {
		if got := resp.Get(k); got != v {
			t.Errorf("response %s = %q, want %q", k, got, v)
		}
	}
	other := http.Header{}
	p.Request(other, "example.org", nil)
	if got := other.Get("X-Env"); got != "any" {
		t.Errorf("X-Env for another host = %q, want any", got)
	}
	// A value shared between requests is never appended to in place.
	a, b := http.Header{}, http.Header{}
	p.Request(a, "x.test", nil)
	p.Request(b, "x.test", nil)
	a["X-Env"] = append(a["X-Env"], "more")
	if got := b.Values("X-Env"); len(got) != 1 {
		t.Errorf("a second request's X-Env = %q after the first's grew", got)
	}
}

func TestCheckService(t *testing.T) {
	ops := &HeaderOps{Set: map[string]string{"X-App": "1", "Connection": "close", "X-Aperio-Auth": "none", "X-Bad": "a\r\nb"}, Remove: []string{"Server"}}
	ops.Add = map[string]string{}
	for i := range 70 {
		ops.Add[fmt.Sprintf("X-N%02d", i)] = "v"
	}
	rules, notices := CheckService(ops)
	h := http.Header{"Server": {"nginx"}}
	rules.Apply(h)
	if h.Get("X-App") != "1" || h.Get("Connection") != "" || h.Get("X-Aperio-Auth") != "" || h.Get("X-Bad") != "" {
		t.Errorf("after the service's rules: %v", h)
	}
	// X-App and the first 63 adds are kept; the rest (7 adds and the
	// remove of Server) are past the cap.
	if n := len(h) - 1; n != MaxServiceHeaders || h.Get("Server") != "nginx" {
		t.Errorf("%d headers set (Server %q), want %d and Server kept", n, h.Get("Server"), MaxServiceHeaders)
	}
	if want := 3 + 8; len(notices) != want {
		t.Errorf("notices = %d, want %d:\n%s", len(notices), want, strings.Join(notices, "\n"))
	}
	if r, n := CheckService(nil); !r.Empty() || n != nil {
		t.Errorf("CheckService(nil) = %v, %v; want no rules", r, n)
	}
}

func TestRateLimit(t *testing.T) {
	p := mustNew(t, Config{
		RateLimits: []RateLimit{
			{Name: "api", Key: "ip", Rate: 1, Burst: 2},
			{Name: "keys", Key: "header:X-Api-Key", Rate: 1, Burst: 1},
			{Name: "users", Key: "user", Rate: 1, Burst: 1},
			{Name: "tokens", Key: "token", Rate: 0.5, Burst: 1},
		},
		Routes: []Route{
			{Path: "/a", Policy: &RoutePolicy{RateLimit: "api"}},
			{Path: "/b", Policy: &RoutePolicy{RateLimit: "api"}},
			{Path: "/k", Policy: &RoutePolicy{RateLimit: "keys"}},
			{Path: "/u", Policy: &RoutePolicy{RateLimit: "users"}},
			{Path: "/t", Policy: &RoutePolicy{RateLimit: "tokens"}},
		},
	})
	now := time.Unix(1000, 0)
	ip1, ip2 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	allow := func(path string, v Visitor, at time.Time) bool {
		_, ok := p.Match("x.test", path, "GET").Allow(at, v)
		return ok
	}
	a := Visitor{Addr: ip1}
	if !allow("/a", a, now) || !allow("/a", a, now) || allow("/a", a, now) {
		t.Errorf("burst 2: want two allowed, then refused")
	}
	if !allow("/b", a, now) {
		t.Errorf("/b refused: buckets are per route, it has its own")
	}
	if !allow("/a", Visitor{Addr: ip2}, now) {
		t.Errorf("another visitor refused: buckets are per key")
	}
	retry, ok := p.Match("x.test", "/a", "GET").Allow(now, a)
	if ok || retry != time.Second {
		t.Errorf("Allow after the burst = %v, %v; want 1s, false", retry, ok)
	}
	if !allow("/a", a, now.Add(time.Second)) {
		t.Errorf("refused a second later: the bucket refills at 1/s")
	}
	k1 := Visitor{Addr: ip1, Header: http.Header{"X-Api-Key": {"k1"}}}
	k2 := Visitor{Addr: ip1, Header: http.Header{"X-Api-Key": {"k2"}}}
	if !allow("/k", k1, now) || allow("/k", k1, now) || !allow("/k", k2, now) {
		t.Errorf("header key: want one per key value")
	}
	if !allow("/k", Visitor{Addr: ip2}, now) || allow("/k", Visitor{Addr: ip2}, now) {
		t.Errorf("no header: want keyed by the address")
	}
	if !allow("/u", Visitor{Addr: ip1, User: "ann"}, now) || allow("/u", Visitor{Addr: ip2, User: "ann"}, now) || !allow("/u", Visitor{Addr: ip1, User: "bob"}, now) {
		t.Errorf("user key: want one bucket per user, whatever the address")
	}
	tok := func(s string) Visitor { return Visitor{Addr: ip1, Header: http.Header{"Authorization": {s}}} }
	if !allow("/t", tok("Bearer abc"), now) || allow("/t", tok("bearer abc"), now) || !allow("/t", tok("Bearer xyz"), now) {
		t.Errorf("token key: want one bucket per bearer token")
	}
	rule := p.Match("x.test", "/t", "GET")
	if tokens, burst, rate := rule.Tokens(now, tok("Bearer abc")); tokens != 0 || burst != 1 || rate != 0.5 {
		t.Errorf("Tokens = %v, %v, %v; want 0, 1, 0.5", tokens, burst, rate)
	}
	if rule.LimitName() != "rate_limits[3]" || rule.KeyName() != "token" {
		t.Errorf("LimitName, KeyName = %q, %q", rule.LimitName(), rule.KeyName())
	}
}

// TestRateLimitFlood sends a million distinct addresses at a limit: the
// buckets stay at max_keys and the heap does not grow with the flood.
func TestRateLimitFlood(t *testing.T) {
	const maxKeys = 10_000
	p := mustNew(t, Config{
		RateLimits: []RateLimit{{Name: "api", Rate: 1, MaxKeys: maxKeys}},
		Routes:     []Route{{Policy: &RoutePolicy{RateLimit: "api"}}},
	})
	rule := p.Match("x.test", "/", "GET")
	now := time.Unix(1000, 0)
	var before, after runtime.MemStats
	flood := func(from, n int) {
		for i := range n {
			ip := netip.AddrFrom4([4]byte{10, byte((from + i) >> 16), byte((from + i) >> 8), byte(from + i)})
			if _, ok := rule.Allow(now, Visitor{Addr: ip}); !ok {
				t.Fatalf("a first request of %s refused", ip)
			}
		}
	}
	flood(0, maxKeys)
	runtime.GC()
	runtime.ReadMemStats(&before)
	flood(maxKeys, 1_000_000)
	runtime.GC()
	runtime.ReadMemStats(&after)
	if n := rule.limit.len(); n != maxKeys {
		t.Errorf("%d buckets after the flood, want max_keys %d", n, maxKeys)
	}
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 4<<20 {
		t.Errorf("heap grew by %d bytes over a million new keys, want under 4 MiB (a bucket a key would be 200 MB): the LRU is not bounding it", grew)
	}
}

func TestNewRefuses(t *testing.T) {
	big := strings.Repeat("x", MaxBodyBytes+1)
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"bad glob", Config{Routes: []Route{{Path: "/a/[b", Policy: proxied(), Line: 7}}}, "routes[0] (line 7): path \"/a/[b\" is not a valid glob"},
		{"bad host", Config{Routes: []Route{{Host: "a b", Policy: proxied()}}}, "routes[0]: host: invalid hostname"},
		{"no action", Config{Routes: []Route{{Host: "a.test"}}}, "exactly one of redirect, respond and policy"},
		{"two actions", Config{Routes: []Route{{Respond: &Respond{}, Policy: proxied()}}}, "exactly one"},
		{"redirect status", Config{Routes: []Route{{Redirect: &Redirect{To: "/x", Status: 303}}}}, "status 303 is not 301, 302, 307 or 308"},
		{"redirect scheme", Config{Routes: []Route{{Redirect: &Redirect{To: "javascript:alert(1)"}}}}, "must be an http or https URL"},
		{"redirect protocol-relative", Config{Routes: []Route{{Redirect: &Redirect{To: "//evil.test"}}}}, "must be an http or https URL"},
		{"redirect CRLF", Config{Routes: []Route{{Redirect: &Redirect{To: "/x\r\nSet-Cookie: a=b"}}}}, "control character"},
		{"body too big", Config{Routes: []Route{{Respond: &Respond{Body: big}}}}, "at most 65536"},
		{"respond header CRLF", Config{Routes: []Route{{Respond: &Respond{Headers: map[string]string{"X-A": "a\nb"}}}}}, "control character"},
		{"respond status", Config{Routes: []Route{{Respond: &Respond{Status: 101}}}}, "not between 200 and 599"},
		{"unknown limit", Config{Routes: []Route{{Policy: &RoutePolicy{RateLimit: "nope"}}}}, "names no entry of rate_limits"},
		{"limit key", Config{RateLimits: []RateLimit{{Name: "a", Key: "cookie", Rate: 1}}}, "rate_limits[0]: key \"cookie\""},
		{"limit rate", Config{RateLimits: []RateLimit{{Name: "a", Rate: 0}}}, "rate must be a positive"},
		{"limit keys", Config{RateLimits: []RateLimit{{Name: "a", Rate: 1, MaxKeys: MaxKeys + 1}}}, "max_keys must be between"},
		{"limit name twice", Config{RateLimits: []RateLimit{{Name: "a", Rate: 1}, {Name: "a", Rate: 1}}}, "rate_limits[1]: name \"a\" is used by rate_limits[0] too"},
		{"hop-by-hop rule", Config{Headers: []HeaderRule{{Response: HeaderOps{Set: map[string]string{"Transfer-Encoding": "x"}}}}}, "headers[0]: response: set: Transfer-Encoding"},
		{"aperio rule", Config{Headers: []HeaderRule{{Request: HeaderOps{Set: map[string]string{"X-Aperio-User": "root"}}}}}, "X-Aperio-* headers are aperio's own"},
		{"too many routes", Config{Routes: make([]Route, MaxRoutes+1)}, "at most 1000"},
		{"too many limits", Config{RateLimits: make([]RateLimit, MaxRateLimits+1)}, "at most 100"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New = %v, want an error containing %q", err, tt.want)
			}
			var re *RuleError
			if !errors.As(err, &re) {
				t.Errorf("New's error %v is no *RuleError", err)
			}
		})
	}
	// One bad rate limit is one error: the route naming it is not blamed
	// as well (issue 39); a route naming a limit nobody declared still is.
	_, err := New(Config{
		RateLimits: []RateLimit{{Name: "slow", Rate: -1}},
		Routes:     []Route{{Host: "a.test", Policy: &RoutePolicy{RateLimit: "slow"}, Line: 4}, {Host: "b.test", Policy: &RoutePolicy{RateLimit: "nope"}, Line: 6}},
	})
	if err == nil || !strings.Contains(err.Error(), "rate_limits[0]: rate must be a positive") ||
		strings.Contains(err.Error(), `"slow" names no entry`) || !strings.Contains(err.Error(), `routes[1] (line 6): policy.rate_limit "nope" names no entry`) {
		t.Errorf("New(a bad limit named by a route) = %v, want the limit's error alone, and the unknown name's", err)
	}

	var many []HeaderRule
	for range MaxHeaderRules/2 + 1 {
		many = append(many, HeaderRule{Request: HeaderOps{Set: map[string]string{"X-A": "1", "X-B": "2"}}})
	}
	if _, err := New(Config{Headers: many}); err == nil || !strings.Contains(err.Error(), "more than 1000 header entries") {
		t.Errorf("New(%d header entries) = %v, want refused", 2*len(many), err)
	}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name     string
		routes   []Route
		warnings []string
		problems []string
	}{
		{"covered by a host-less prefix", []Route{{Path: "/api", Policy: proxied()}, {Host: "a.test", Path: "/api/v1", Policy: proxied()}},
			nil, []string{"routes[1] is unreachable: routes[0], earlier, matches every request it does"}},
		{"covered by a wildcard", []Route{{Host: "*.test", Policy: proxied()}, {Host: "a.b.test", Methods: []string{"GET"}, Policy: proxied()}},
			nil, []string{"routes[1] is unreachable"}},
		{"glob under a prefix", []Route{{Path: "/static", Policy: proxied()}, {Path: "/static/*.css", Policy: proxied()}},
			nil, []string{"routes[1] is unreachable"}},
		{"the same rule twice", []Route{{Path: "/x/*", Policy: proxied()}, {Path: "/x/*", Policy: proxied()}},
			nil, []string{"routes[1] is unreachable"}},
		{"partial: methods", []Route{{Path: "/api", Methods: []string{"GET"}, Policy: proxied()}, {Path: "/api", Methods: []string{"GET", "POST"}, Policy: proxied()}},
			[]string{"routes[0] and routes[1] may both match some requests: routes[0], earlier, wins those"}, nil},
		{"partial: specific first", []Route{{Host: "a.test", Path: "/api/v1", Policy: proxied()}, {Path: "/api", Policy: proxied()}},
			[]string{"routes[0] and routes[1] may both match"}, nil},
		{"partial: glob and prefix", []Route{{Path: "/*/admin", Policy: proxied()}, {Path: "/api", Policy: proxied()}},
			[]string{"routes[0] and routes[1] may both match"}, nil},
		{"apart: hosts", []Route{{Host: "a.test", Policy: proxied()}, {Host: "b.test", Policy: proxied()}}, nil, nil},
		{"apart: paths", []Route{{Path: "/api", Policy: proxied()}, {Path: "/apix", Policy: proxied()}}, nil, nil},
		{"apart: methods", []Route{{Methods: []string{"GET"}, Policy: proxied()}, {Methods: []string{"POST"}, Policy: proxied()}}, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, p := mustNew(t, Config{Routes: tt.routes}).Check()
			same := func(kind string, got, want []string) {
				if len(got) != len(want) {
					t.Errorf("%s = %q, want %q", kind, got, want)
					return
				}
				for i := range want {
					if !strings.HasPrefix(got[i], want[i]) {
						t.Errorf("%s[%d] = %q, want it to start %q", kind, i, got[i], want[i])
					}
				}
			}
			same("warnings", w, tt.warnings)
			same("problems", p, tt.problems)
		})
	}
}

func TestDecodeYAML(t *testing.T) {
	src := `
routes:
  - host: old.example.com
    redirect: {to: "https://new.example.com", status: 301, preserve_path: true}
  - host: app.example.com
    path: /api
    policy: {timeout: 5s, rate_limit: api, max_body_size: 1MiB,
             headers: {request: {set: {X-Env: prod}}, response: {remove: [Server]}}}
rate_limits:
  - {name: api, key: "header:X-Api-Key", rate: 10, burst: 20, max_keys: 5000}
headers:
  - host: "*.example.com"
    response: {set: {X-Frame-Options: DENY}}
security_headers: true
`
	var cfg Config
	if err := yaml.Unmarshal([]byte(src), &cfg); err != nil {
		t.Fatal(err)
	}
	p := mustNew(t, cfg)
	if cfg.Routes[1].Line != 5 || cfg.Headers[0].Line != 12 {
		t.Errorf("lines = %d, %d; want 5, 12", cfg.Routes[1].Line, cfg.Headers[0].Line)
	}
	r := p.Match("app.example.com", "/api/x", "GET")
	if r == nil || r.Timeout != 5*time.Second || r.MaxBodyBytes != 1<<20 || r.LimitName() != "rate_limits[0]" || r.KeyName() != "header:X-Api-Key" {
		t.Errorf("routes[1] compiled as %+v", r)
	}
	for _, bad := range []string{
		"routes:\n  - host: a.test\n    respnd: {body: x}\n",
		"routes:\n  - redirect: {to: /x, code: 301}\n",
		"routes:\n  - policy: {max_body_size: lots}\n",
		"headers:\n  - response: {sett: {a: b}}\n",
	} {
		var c Config
		if err := yaml.Unmarshal([]byte(bad), &c); err == nil || !strings.Contains(err.Error(), "line") {
			t.Errorf("yaml %q: %v, want an error naming the line", bad, err)
		}
	}
}
