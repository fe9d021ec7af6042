// Package policytest builds traffic policies for tests and benchmarks of
// the packages that use package policy.
package policytest

import (
	"fmt"
	"time"

	"github.com/aperio-dev/aperio/internal/visitor/policy"
)

// Config returns a policy of routes route rules (exact hostnames, "*."
// wildcards and host-less globs, in turn) none of which matches
// app.example.com, and headers header rules, the first of them setting a
// response header of app.example.com and the others of other hostnames:
// the cost of a policy a request must look through without matching.
func Config(routes, headers int) policy.Config {
	var pc policy.Config
	for i := range routes {
		r := policy.Route{Policy: &policy.RoutePolicy{Timeout: time.Second}}
		switch i % 3 {
		case 0:
			r.Host = fmt.Sprintf("r%d.example.com", i)
		case 1:
			r.Host = fmt.Sprintf("*.wild%d.example.com", i)
		default:
			r.Path = fmt.Sprintf("/static%d/*.css", i)
		}
		pc.Routes = append(pc.Routes, r)
	}
	for i := range headers {
		host := fmt.Sprintf("h%d.example.com", i)
		if i == 0 {
			host = "app.example.com"
		}
		pc.Headers = append(pc.Headers, policy.HeaderRule{Host: host, Response: policy.HeaderOps{Set: map[string]string{"X-Served-By": "aperio"}}})
	}
	return pc
}
