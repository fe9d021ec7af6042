package admin

import (
	"time"

	"github.com/go-chi/chi/v5"
)

// RoutesForTest returns the router, for chi.Walk.
func (a *API) RoutesForTest() chi.Routes { return a.router }

// RolesForTest returns the minimum role of every route by "METHOD
// /pattern", the pattern relative to Prefix: "viewer", "operator", "admin",
// "master" or "none".
func (a *API) RolesForTest() map[string]string {
	out := make(map[string]string)
	for _, rt := range a.routeTable() {
		out[rt.method+" "+rt.pattern] = rt.min.String()
	}
	return out
}

// RedactForTest is redact: an explanation as a key of orgID sees it.
var RedactForTest = redact

// SetKeyLoginReadTimeoutForTest sets the time a login's body may take and
// returns a function that restores it. Tests that call it must not run in
// parallel.
func SetKeyLoginReadTimeoutForTest(d time.Duration) (restore func()) {
	old := keyLoginReadTimeout
	keyLoginReadTimeout = d
	return func() { keyLoginReadTimeout = old }
}

// MaxSessionCandidatesForTest is how many well-formed session cookies a
// request looks up at most.
const MaxSessionCandidatesForTest = maxSessionCandidates
