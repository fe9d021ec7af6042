package tunnel

import (
	"errors"
	"fmt"
	"time"
)

// Access is a service's visitor access control as its client announces
// it: the server builds the service's gate from it and checks every
// visitor before anything is sent down the tunnel. The client never sees
// a request the gate refused. Durations travel as milliseconds.
//
// The tunnel checks only its shape and bounds (Validate); whether a hash
// is one the server can verify, a URL one the fence lets through, is the
// server's decision when it builds the gate.
type Access struct {
	// Public opens the service even under the server's default_access
	// deny. It excludes every auth method.
	Public bool `json:"public,omitempty"`
	// AllowedIPs and DeniedIPs are addresses or CIDR prefixes, judged on
	// the visitor's real address.
	AllowedIPs []string `json:"allowed_ips,omitempty"`
	DeniedIPs  []string `json:"denied_ips,omitempty"`
	// IdentityJWT asks the server to send the backend a signed identity
	// token for every admitted visitor.
	IdentityJWT bool `json:"identity_jwt,omitempty"`

	Basic   *BasicAuth   `json:"basic,omitempty"`
	Bearer  *BearerAuth  `json:"bearer,omitempty"`
	JWT     *JWTAuth     `json:"jwt,omitempty"`
	Forward *ForwardAuth `json:"forward,omitempty"`
	OIDC    *OIDCAuth    `json:"oidc,omitempty"`
}

// BasicAuth is the basic method: users and their argon2id or bcrypt
// hashes, never passwords.
type BasicAuth struct {
	Realm string            `json:"realm,omitempty"`
	Users map[string]string `json:"users"`
}

// BearerAuth is the bearer method: each key's name and the lowercase hex
// SHA-256 digest of the key.
type BearerAuth struct {
	Keys map[string]string `json:"keys"`
}

// JWTAuth is the jwt method.
type JWTAuth struct {
	JWKSURL           string              `json:"jwks_url"`
	Issuer            string              `json:"issuer"`
	Audience          []string            `json:"audience"`
	Claims            map[string][]string `json:"claims,omitempty"`
	Header            string              `json:"header,omitempty"`
	Cookie            string              `json:"cookie,omitempty"`
	Algorithms        []string            `json:"algorithms,omitempty"`
	UserClaim         string              `json:"user_claim,omitempty"`
	LeewayMS          int64               `json:"leeway_ms,omitempty"`
	CacheTTLMS        int64               `json:"cache_ttl_ms,omitempty"`
	RefreshIntervalMS int64               `json:"refresh_interval_ms,omitempty"`
	TimeoutMS         int64               `json:"timeout_ms,omitempty"`
}

// ForwardAuth is the forward method: an external auth service asked for
// every request.
type ForwardAuth struct {
	URL         string   `json:"url"`
	CopyHeaders []string `json:"copy_headers,omitempty"`
	UserHeader  string   `json:"user_header,omitempty"`
	TimeoutMS   int64    `json:"timeout_ms,omitempty"`
	CacheTTLMS  int64    `json:"cache_ttl_ms,omitempty"`
}

// OIDCAuth is the oidc method: a browser login against the server's
// provider, admitting the listed emails, email domains or groups.
type OIDCAuth struct {
	AllowedEmails  []string `json:"allowed_emails,omitempty"`
	AllowedDomains []string `json:"allowed_domains,omitempty"`
	Groups         []string `json:"groups,omitempty"`
}

// HasAuth reports whether a names an auth method.
func (a *Access) HasAuth() bool {
	return a != nil && (a.Basic != nil || a.Bearer != nil || a.JWT != nil || a.Forward != nil || a.OIDC != nil)
}

// Bounds on one service's access block. They match the server's own
// limits (package access), so that a block the tunnel accepts is one the
// server can build; each string is bounded so that a hostile block costs
// little to hold and compare.
const (
	maxAccessEntries = 1000 // users, keys, IP rules, emails, domains, groups
	maxAccessList    = 32   // audience, claims, claim values, copy_headers, algorithms
	maxAccessString  = 1024 // a name, a hash, a URL, a prefix
	maxAccessMillis  = int64(time.Hour / time.Millisecond)
)

// validate checks the shape and bounds of a, for service id.
func (a *Access) validate(id string) error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("announcement: service %s: access: "+format, append([]any{id}, args...)...))
	}
	str := func(what, s string) {
		if len(s) > maxAccessString || !printable(s) {
			bad("%s is longer than %d bytes or not printable", what, maxAccessString)
		}
	}
	list := func(what string, l []string, max int) {
		if len(l) > max {
			bad("%s has %d entries, at most %d", what, len(l), max)
			return
		}
		for _, s := range l {
			str(what+" entry", s)
		}
	}
	pairs := func(what string, m map[string]string, required bool) {
		switch {
		case required && len(m) == 0:
			bad("%s is empty", what)
		case len(m) > maxAccessEntries:
			bad("%s has %d entries, at most %d", what, len(m), maxAccessEntries)
		default:
			for k, v := range m {
				str(what+" name", k)
				str(what+" value", v)
			}
		}
	}
	millis := func(what string, ms int64) {
		if ms < 0 || ms > maxAccessMillis {
			bad("%s %dms is outside [0, 1h]", what, ms)
		}
	}
	if a.Public && a.HasAuth() {
		bad("public and auth methods exclude each other")
	}
	list("allowed_ips", a.AllowedIPs, maxAccessEntries)
	list("denied_ips", a.DeniedIPs, maxAccessEntries)
	if b := a.Basic; b != nil {
		str("basic realm", b.Realm)
		pairs("basic users", b.Users, true)
	}
	if b := a.Bearer; b != nil {
		pairs("bearer keys", b.Keys, true)
	}
	if j := a.JWT; j != nil {
		if j.JWKSURL == "" || j.Issuer == "" || len(j.Audience) == 0 {
			bad("jwt needs jwks_url, issuer and audience")
		}
		for what, s := range map[string]string{"jwt jwks_url": j.JWKSURL, "jwt issuer": j.Issuer, "jwt header": j.Header, "jwt cookie": j.Cookie, "jwt user_claim": j.UserClaim} {
			str(what, s)
		}
		list("jwt audience", j.Audience, maxAccessList)
		list("jwt algorithms", j.Algorithms, maxAccessList)
		if len(j.Claims) > maxAccessList {
			bad("jwt claims has %d entries, at most %d", len(j.Claims), maxAccessList)
		} else {
			for k, vs := range j.Claims {
				str("jwt claim name", k)
				list("jwt claim "+fmt.Sprintf("%.64q", k), vs, maxAccessList)
			}
		}
		millis("jwt leeway", j.LeewayMS)
		millis("jwt cache_ttl", j.CacheTTLMS)
		millis("jwt refresh_interval", j.RefreshIntervalMS)
		millis("jwt timeout", j.TimeoutMS)
	}
	if f := a.Forward; f != nil {
		if f.URL == "" {
			bad("forward needs url")
		}
		str("forward url", f.URL)
		str("forward user_header", f.UserHeader)
		list("forward copy_headers", f.CopyHeaders, maxAccessList)
		millis("forward timeout", f.TimeoutMS)
		millis("forward cache_ttl", f.CacheTTLMS)
	}
	if o := a.OIDC; o != nil {
		list("oidc allowed_emails", o.AllowedEmails, maxAccessEntries)
		list("oidc allowed_domains", o.AllowedDomains, maxAccessEntries)
		list("oidc groups", o.Groups, maxAccessEntries)
	}
	if len(errs) > 8 {
		errs = append(errs[:8], errors.New("announcement: and more access problems"))
	}
	return errors.Join(errs...)
}
