package policy_test

import (
	"testing"

	"github.com/aperio-dev/aperio/internal/visitor/policy"
	"github.com/aperio-dev/aperio/internal/visitor/policy/policytest"
)

// TestMatchAllocatesNothing pins the hot path: an index of exact,
// wildcard and host-less rules, and a miss and hits of each.
func TestMatchAllocatesNothing(t *testing.T) {
	p, err := policy.New(policytest.Config(50, 10))
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"app.example.com", "r9.example.com", "x.wild4.example.com", "nobody.test"} {
		for _, path := range []string{"/", "/static2/x.css"} {
			if p.Match(host, path, "GET") == nil && host != "app.example.com" && host != "nobody.test" {
				t.Errorf("Match(%s, %s) = nil, want a rule: the case measures a miss only", host, path)
			}
			allocs := testing.AllocsPerRun(1000, func() { p.Match(host, path, "GET") })
			if allocs != 0 {
				t.Errorf("Match(%s, %s) allocates %v times, want 0", host, path, allocs)
			}
		}
	}
}

func BenchmarkMatch(b *testing.B) {
	p, err := policy.New(policytest.Config(50, 10))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		p.Match("app.example.com", "/index.html", "GET")
	}
}
