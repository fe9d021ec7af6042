package router

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/aperio-dev/aperio/internal/headerrule"
)

// The header rule: a visitor's header name is compared with the names the
// server owns after folding case and reading "_" as "-", because that is
// how CGI-derived environments (PHP's $_SERVER, WSGI, Rack) read it: both
// X-Aperio-User and X_Aperio_User become HTTP_X_APERIO_USER there, the
// later one winning or the two joined. So every spelling of a server-owned
// name is removed before the backend sees the request (setForwarded), and
// underscore_headers says what becomes of the other names with an
// underscore: allow (Envoy's default), drop (nginx's default,
// underscores_in_headers off) or refuse with 400 (checkHeaderNames).

// underscoreAction is underscore_headers, parsed.
type underscoreAction uint8

const (
	underscoreAllow  underscoreAction = iota // pass the name on
	underscoreDrop                           // remove it from the backend request
	underscoreRefuse                         // answer the request 400
)

// parseUnderscoreAction parses a UnderscoreHeaders value; "" is allow.
func parseUnderscoreAction(s string) (underscoreAction, error) {
	switch s {
	case "", "allow":
		return underscoreAllow, nil
	case "drop":
		return underscoreDrop, nil
	case "refuse":
		return underscoreRefuse, nil
	}
	return underscoreAllow, fmt.Errorf("router: underscore_headers %q is not allow, drop or refuse", s)
}

// serverOwnedPrefixes and serverOwnedNames are the request headers the
// server owns, in their canonical spelling: its own X-Aperio-* (the
// identity, the identity token, the method), the forwarding headers it
// sets or vouches for, the request id, and the names backends take for
// the visitor's address.
var (
	serverOwnedPrefixes = [...]string{"X-Aperio-", "X-Forwarded-"}
	serverOwnedNames    = [...]string{headerForwarded, HeaderRequestID, "X-Real-Ip", "Cf-Connecting-Ip", "True-Client-Ip"}
)

// serverOwnedHeader reports whether header name k is one of the server's
// own under headerrule.SameName: any case, "_" for "-". It allocates
// nothing.
func serverOwnedHeader(k string) bool {
	for _, p := range serverOwnedPrefixes {
		if len(k) > len(p) && headerrule.HasPrefixName(k, p) {
			return true
		}
	}
	for _, n := range serverOwnedNames {
		if headerrule.SameName(k, n) {
			return true
		}
	}
	return false
}

// hasUnderscore reports whether header name k holds an underscore.
func hasUnderscore(k string) bool { return strings.IndexByte(k, '_') >= 0 }

// dropVisitorHeaders removes from h, the visitor's request header on its
// way to the backend, what the visitor may not say: every X-Aperio-*
// header and every underscore spelling of a server-owned name, whoever
// sent it; from a peer outside trusted_proxies, every server-owned name
// in any spelling but X-Request-Id (the edge's own by now); and, under
// underscore_headers drop, every other name with an underscore. The
// forwarding headers are set again after it (setForwarded).
func dropVisitorHeaders(h http.Header, trusted bool, act underscoreAction) {
	for k := range h {
		under := hasUnderscore(k)
		switch {
		case serverOwnedHeader(k):
			if under || !trusted && k != HeaderRequestID || hasAperioPrefix(k) {
				delete(h, k)
			}
		case under && act == underscoreDrop:
			delete(h, k)
		}
	}
}

// checkHeaderNames refuses, under underscore_headers refuse, a request
// with a header name holding an underscore (its step names it). Otherwise
// it passes, and a dry run notes the names the backend will not get
// (dropVisitorHeaders), a step for each. A dry run given no headers
// passes without a step.
func (a *admission) checkHeaderNames() verdict {
	if a.header == nil {
		return verdict{}
	}
	if a.set.underscore == underscoreRefuse {
		if k, ok := firstUnderscore(a.header); ok {
			v := stop(refusedUnderscoreHeader, whyUnderscoreRefused)
			v.name = k
			return v
		}
	}
	return pass(OutcomeInfo, whyHeadersDropped)
}

// firstUnderscore returns a name of h that holds an underscore, if any.
func firstUnderscore(h http.Header) (string, bool) {
	for k := range h {
		if hasUnderscore(k) {
			return k, true
		}
	}
	return "", false
}
