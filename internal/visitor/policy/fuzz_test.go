package policy

import (
	"strings"
	"testing"
)

// FuzzRoute checks that the index finds the rule a linear scan in config
// order finds, for rules and requests the fuzzer writes: rules is a list
// of "host|path|METHOD,METHOD" separated by ";" (entries that do not
// compile are left out).
func FuzzRoute(f *testing.F) {
	f.Add("a.test|/api|GET;*.test|/api/*|;|/static/*.css|;a.test||POST", "a.test", "/api/v1", "GET")
	f.Add("*.b.test||;*.test|/x|;|/|DELETE", "a.b.test", "/x", "DELETE")
	f.Add("|/a/[bc]|;x.test|/a|", "x.test", "/a/b", "PUT")
	f.Add("*.a.test||;*.test||", "x.y.a.test", "/", "GET")
	f.Fuzz(func(t *testing.T, rules, host, path, method string) {
		var cfg Config
		for spec := range strings.SplitSeq(rules, ";") {
			parts := strings.SplitN(spec, "|", 3)
			for len(parts) < 3 {
				parts = append(parts, "")
			}
			r := Route{Host: parts[0], Path: parts[1], Policy: &RoutePolicy{}}
			if parts[2] != "" {
				r.Methods = strings.Split(parts[2], ",")
			}
			if _, err := New(Config{Routes: []Route{r}}); err == nil && len(cfg.Routes) < 50 {
				cfg.Routes = append(cfg.Routes, r)
			}
		}
		p, err := New(cfg)
		if err != nil {
			t.Fatalf("rules that compile one by one do not compile together: %v", err)
		}
		p.Check() // must not panic
		host = strings.ToLower(host)
		if got, want := p.Match(host, path, method), p.matchLinear(host, path, method); got != want {
			t.Fatalf("Match(%q, %q, %q) = %v, linear scan %v", host, path, method, got, want)
		}
	})
}
