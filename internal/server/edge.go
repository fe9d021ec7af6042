package server

import (
	"net/http"
	"net/netip"
	"strings"

	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/control/admin"
	"github.com/aperio-dev/aperio/internal/control/dashboard"
	"github.com/aperio-dev/aperio/router"
	"github.com/aperio-dev/aperio/tunnel"
)

// metricsPath is where metrics are served: on the public port unless
// metrics_listen names a listener of their own, and there as well as at
// /metrics.
const metricsPath = "/aperio/metrics"

// edge is what the gateway decides about a request before any handler:
// who the visitor is, whether it is refused, and what of /aperio/ it may
// reach. Immutable after newEdge.
type edge struct {
	resolve      *router.Edge
	trusted      []netip.Prefix
	denied       []netip.Prefix
	adminAllowed []netip.Prefix // empty: everyone
	adminHosts   adminHosts     // where the operators' pages answer
	// settings is the router's live settings published with this edge:
	// admit pins each request to them, so that a reload, which swaps
	// both, is seen whole or not at all by every request.
	settings router.Snapshot
}

func newEdge(cfg Config) (*edge, error) {
	e := &edge{}
	var err error
	if e.trusted, err = config.ParsePrefixes(cfg.TrustedProxies); err != nil {
		return nil, err
	}
	if e.denied, err = config.ParsePrefixes(cfg.DeniedIPs); err != nil {
		return nil, err
	}
	if e.adminAllowed, err = config.ParsePrefixes(cfg.AdminAllowedIPs); err != nil {
		return nil, err
	}
	if e.adminHosts, err = newAdminHosts(cfg.AdminHosts); err != nil {
		return nil, err
	}
	e.resolve = router.NewEdge(e.trusted, cfg.RealIPHeader)
	return e, nil
}

func inAny(prefixes []netip.Prefix, a netip.Addr) bool {
	for _, p := range prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// admit resolves r's visitor, pins it to the router settings of this
// edge, echoes the request id on the response and answers 403 to a
// visitor in denied_ips. It returns the request the
// handlers see, or false when it answered.
func (e *edge) admit(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	r = e.resolve.Resolve(r)
	router.Pin(r, e.settings)
	w.Header()[router.HeaderRequestID] = r.Header[router.HeaderRequestID]
	if len(e.denied) > 0 && inAny(e.denied, router.VisitorOf(r).Addr) {
		http.Error(w, "aperio: forbidden", http.StatusForbidden)
		return r, false
	}
	return r, true
}

// visitorPath reports whether p, a path under /aperio/, is one visitors
// and clients reach from anywhere: the tunnel and the health endpoints.
// Everything else under /aperio/ (the admin API, metrics, and whatever
// administrative page comes later) is the operators', behind
// admin_allowed_ips; a new endpoint for visitors must be listed here.
func visitorPath(p string) bool {
	switch p {
	case tunnel.Path, "/aperio/health", "/aperio/healthz", "/aperio/readyz":
		return true
	}
	return false
}

// adminAllowedFor reports whether a may reach the operators' endpoints.
func (e *edge) adminAllowedFor(a netip.Addr) bool {
	return len(e.adminAllowed) == 0 || inAny(e.adminAllowed, a)
}

// guardAdmin answers 403 to a request for an operators' endpoint from
// outside admin_allowed_ips, and reports whether it did.
func (e *edge) guardAdmin(w http.ResponseWriter, r *http.Request) bool {
	if visitorPath(r.URL.Path) || e.adminAllowedFor(router.VisitorOf(r).Addr) {
		return false
	}
	http.Error(w, "aperio: forbidden", http.StatusForbidden)
	return true
}

// charged reports whether a request under /aperio/ costs a token of the
// visitor's bucket: tunnel handshakes, admin API requests that present
// credentials (each a store lookup, or a guess at a secret) or an admin
// session cookie (a guess at a seal or a store lookup), and the admin
// login's paths (a login cookie sealed, a provider called, a key
// checked). Health endpoints, metrics
// scrapes (compared against one digest, no lookup) and anonymous requests
// stay free. The admin login's callback is charged where it is told
// apart from a service's.
func charged(r *http.Request) bool {
	p := r.URL.Path
	if p == tunnel.Path || strings.HasPrefix(p, adminLoginPrefix) {
		return true
	}
	if dashboard.Owns(p) && !strings.HasPrefix(p, dashboard.AssetPrefix) {
		// A page is one or more API calls made with the browser's cookie.
		return hasAdminSession(r)
	}
	if p != admin.Prefix && !strings.HasPrefix(p, admin.Prefix+"/") {
		return false
	}
	return r.Header.Get("Authorization") != "" || hasAdminSession(r)
}

// hasAdminSession reports whether r carries an admin session cookie, OIDC
// (admin.SessionCookie) or key (admin.KeySessionCookie), of either name.
func hasAdminSession(r *http.Request) bool {
	for _, c := range r.Cookies() {
		switch c.Name {
		case admin.SessionCookie, "__Host-" + admin.SessionCookie,
			admin.KeySessionCookie, "__Host-" + admin.KeySessionCookie:
			return true
		}
	}
	return false
}
