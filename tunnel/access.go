package tunnel

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Access is a service's visitor access control: the block a client
// announces, the server builds the service's gate from, and the client's
// config loader builds from a service's public, allowed_ips, denied_ips,
// identity_jwt and auth: keys. The server checks every visitor against the
// gate before anything is sent down the tunnel; the client never sees a
// request the gate refused. The zero Access sets no rule: the server's
// default_access decides.
//
// Problems holds the rules of a block that both binaries apply: the
// client's loader to a file, the server to an announcement. Whether a
// hash is one the server can verify, a URL one its fence lets through, is
// the server's decision when it builds the gate.
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
	// Auth is the service's auth methods. On the wire its fields sit
	// beside the ones above, as they always have.
	Auth
}

// Auth is a service's auth methods, any one of which admits a visitor:
// the client's auth: block, whose keys are its yaml tags. A nil method is
// not offered. Values are taken literally: password hashes are full of
// "$".
type Auth struct {
	Basic   *BasicAuth   `json:"basic,omitempty" yaml:"basic"`
	Bearer  *BearerAuth  `json:"bearer,omitempty" yaml:"bearer"`
	JWT     *JWTAuth     `json:"jwt,omitempty" yaml:"jwt"`
	Forward *ForwardAuth `json:"forward,omitempty" yaml:"forward"`
	OIDC    *OIDCAuth    `json:"oidc,omitempty" yaml:"oidc"`
}

// BasicAuth is the basic method: a realm and users with argon2id (PHC
// string) or bcrypt hashes, never plain passwords.
type BasicAuth struct {
	Realm string            `json:"realm,omitempty" yaml:"realm"`
	Users map[string]string `json:"users" yaml:"users"`
}

// BearerAuth is the bearer method: each key's name and the lowercase hex
// SHA-256 digest of the key (printf %s "$KEY" | sha256sum).
type BearerAuth struct {
	Keys map[string]string `json:"keys" yaml:"keys"`
}

// JWTAuth is the jwt method: tokens verified against a JWKS URL. A zero
// duration means the server's default. On the wire the durations travel
// as whole milliseconds (leeway_ms, cache_ttl_ms, refresh_interval_ms,
// timeout_ms), as they always have.
type JWTAuth struct {
	JWKSURL         string              `yaml:"jwks_url"`
	Issuer          string              `yaml:"issuer"`
	Audience        []string            `yaml:"audience"`
	Claims          map[string][]string `yaml:"claims"`
	Header          string              `yaml:"header"`
	Cookie          string              `yaml:"cookie"`
	Algorithms      []string            `yaml:"algorithms"`
	UserClaim       string              `yaml:"user_claim"`
	Leeway          time.Duration       `yaml:"leeway"`
	CacheTTL        time.Duration       `yaml:"cache_ttl"`
	RefreshInterval time.Duration       `yaml:"refresh_interval"`
	Timeout         time.Duration       `yaml:"timeout"`
}

// ForwardAuth is the forward method: an external auth service asked for
// every request. A zero duration means the server's default. On the wire
// the durations travel as whole milliseconds (timeout_ms, cache_ttl_ms).
type ForwardAuth struct {
	URL         string        `yaml:"url"`
	CopyHeaders []string      `yaml:"copy_headers"`
	UserHeader  string        `yaml:"user_header"`
	Timeout     time.Duration `yaml:"timeout"`
	CacheTTL    time.Duration `yaml:"cache_ttl"`
}

// OIDCAuth is the oidc method: a browser login against the server's
// OpenID Connect provider, admitting the listed emails, email domains or
// groups.
type OIDCAuth struct {
	AllowedEmails  []string `json:"allowed_emails,omitempty" yaml:"allowed_emails"`
	AllowedDomains []string `json:"allowed_domains,omitempty" yaml:"allowed_domains"`
	Groups         []string `json:"groups,omitempty" yaml:"groups"`
}

// Methods returns the names of the methods a offers, in a fixed order;
// nil for a nil a.
func (a *Auth) Methods() []string {
	if a == nil {
		return nil
	}
	var out []string
	for _, m := range []struct {
		name string
		set  bool
	}{{"basic", a.Basic != nil}, {"bearer", a.Bearer != nil}, {"jwt", a.JWT != nil}, {"forward", a.Forward != nil}, {"oidc", a.OIDC != nil}} {
		if m.set {
			out = append(out, m.name)
		}
	}
	return out
}

// HasAuth reports whether a names an auth method.
func (a *Access) HasAuth() bool {
	return a != nil && (a.Basic != nil || a.Bearer != nil || a.JWT != nil || a.Forward != nil || a.OIDC != nil)
}

// Bounds on one service's access block: the server's own (the gate it
// builds refuses more), so that a block the client's loader and the
// announcement check accept is one the server can build; each string is
// bounded so that a hostile block costs little to hold and compare.
const (
	// MaxAccessEntries bounds users, keys and each of allowed_ips and
	// denied_ips.
	MaxAccessEntries = 1000
	// MaxOIDCEntries bounds each of allowed_emails, allowed_domains and
	// groups.
	MaxOIDCEntries = 256
	// MaxAccessList bounds audience, algorithms, claims, each claim's
	// values and copy_headers.
	MaxAccessList = 32
	// MaxAccessString bounds a URL, an issuer, a hash, an entry.
	MaxAccessString = 1024
	// MaxAccessName bounds a basic user's and a bearer key's name.
	MaxAccessName = 256
	// MaxRealm bounds the basic realm.
	MaxRealm = 128
	// MaxJWTLeeway bounds JWTAuth.Leeway.
	MaxJWTLeeway = 5 * time.Minute
	// MaxAuthTimeout bounds JWTAuth.Timeout and ForwardAuth.Timeout.
	MaxAuthTimeout = 30 * time.Second
	// MaxJWKSCacheTTL bounds JWTAuth.CacheTTL and RefreshInterval.
	MaxJWKSCacheTTL = time.Hour
	// MaxForwardCacheTTL bounds ForwardAuth.CacheTTL.
	MaxForwardCacheTTL = 5 * time.Minute
)

// AccessProblem is one rule an access block breaks. Field is the key of
// the client's config it concerns, relative to the service (public,
// allowed_ips, auth.basic.users, auth.jwt.timeout); Msg says what is
// wrong, quoting at most a bounded part of what it read.
type AccessProblem struct {
	Field string
	Msg   string
}

// Problems returns every rule a breaks, in key order, or nil when a is
// nil or a block the server can hold: the one set of rules the client's
// loader applies to a service's access keys and the server to an
// announced block. A list with bad entries yields one problem, naming
// the first, so that a hostile block yields a bounded list.
func (a *Access) Problems() []AccessProblem {
	if a == nil {
		return nil
	}
	var out []AccessProblem
	add := func(field, format string, args ...any) {
		out = append(out, AccessProblem{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	str := func(field, s string, limit int) {
		if len(s) > limit || !printable(s) {
			add(field, "longer than %d bytes or not printable", limit)
		}
	}
	list := func(field string, l []string, limit int) {
		if len(l) > limit {
			add(field, "%d entries, at most %d", len(l), limit)
			return
		}
		if i := badEntry(l); i >= 0 {
			add(field, "entry %d is longer than %d bytes or not printable", i, MaxAccessString)
		}
	}
	dur := func(field string, d, limit time.Duration) {
		if d < 0 || d > limit {
			add(field, "%s is outside [0, %s]", shortDuration(d), shortDuration(limit))
		}
	}
	// names checks the names and values of users or keys: one problem
	// for the first bad name, one for the first bad value.
	names := func(field, what string, m map[string]string, rule string, badName func(string) bool) {
		sorted := sortedNames(m)
		for _, n := range sorted {
			if badName(n) {
				add(field, "%s %.64q: a name is 1 to %d printable bytes%s", what, n, MaxAccessName, rule)
				break
			}
		}
		for _, n := range sorted {
			if v := m[n]; len(v) > MaxAccessString || !printable(v) {
				add(field, "%s %.64q: the value is longer than %d bytes or not printable", what, n, MaxAccessString)
				break
			}
		}
	}
	badName := func(n string) bool { return n == "" || len(n) > MaxAccessName || !printable(n) }

	if a.Public && a.HasAuth() {
		add("public", "cannot be combined with auth: a public service admits everyone")
	}
	list("allowed_ips", a.AllowedIPs, MaxAccessEntries)
	list("denied_ips", a.DeniedIPs, MaxAccessEntries)
	if b := a.Basic; b != nil {
		str("auth.basic.realm", b.Realm, MaxRealm)
		switch {
		case len(b.Users) == 0:
			add("auth.basic.users", "required: at least one user and its hash (aperio-client hash-password)")
		case len(b.Users) > MaxAccessEntries:
			add("auth.basic.users", "%d users, at most %d", len(b.Users), MaxAccessEntries)
		default:
			names("auth.basic.users", "user", b.Users, " without ':'", func(n string) bool { return badName(n) || strings.Contains(n, ":") })
		}
	}
	if b := a.Bearer; b != nil {
		switch {
		case len(b.Keys) == 0:
			add("auth.bearer.keys", "required: at least one key name and its SHA-256 digest")
		case len(b.Keys) > MaxAccessEntries:
			add("auth.bearer.keys", "%d keys, at most %d", len(b.Keys), MaxAccessEntries)
		default:
			names("auth.bearer.keys", "key", b.Keys, "", badName)
		}
	}
	if j := a.JWT; j != nil {
		if j.JWKSURL == "" {
			add("auth.jwt.jwks_url", "required: the URL of the issuer's key set")
		}
		str("auth.jwt.jwks_url", j.JWKSURL, MaxAccessString)
		if j.Issuer == "" {
			add("auth.jwt.issuer", "required: the iss every token must carry")
		}
		str("auth.jwt.issuer", j.Issuer, MaxAccessString)
		if len(j.Audience) == 0 {
			add("auth.jwt.audience", "required: the aud values accepted")
		}
		list("auth.jwt.audience", j.Audience, MaxAccessList)
		if len(j.Claims) > MaxAccessList {
			add("auth.jwt.claims", "%d claims, at most %d", len(j.Claims), MaxAccessList)
		} else {
			claims := sortedNames(j.Claims)
			for _, k := range claims {
				if len(k) > MaxAccessString || !printable(k) {
					add("auth.jwt.claims", "claim %.64q: a name is longer than %d bytes or not printable", k, MaxAccessString)
					break
				}
				if vs := j.Claims[k]; len(vs) > MaxAccessList {
					add("auth.jwt.claims", "claim %.64q: %d values, at most %d", k, len(vs), MaxAccessList)
					break
				}
			}
			for _, k := range claims {
				if i := badEntry(j.Claims[k]); i >= 0 {
					add("auth.jwt.claims", "claim %.64q: value %d is longer than %d bytes or not printable", k, i, MaxAccessString)
					break
				}
			}
		}
		str("auth.jwt.header", j.Header, MaxAccessString)
		str("auth.jwt.cookie", j.Cookie, MaxAccessString)
		list("auth.jwt.algorithms", j.Algorithms, MaxAccessList)
		str("auth.jwt.user_claim", j.UserClaim, MaxAccessString)
		dur("auth.jwt.leeway", j.Leeway, MaxJWTLeeway)
		dur("auth.jwt.cache_ttl", j.CacheTTL, MaxJWKSCacheTTL)
		dur("auth.jwt.refresh_interval", j.RefreshInterval, MaxJWKSCacheTTL)
		dur("auth.jwt.timeout", j.Timeout, MaxAuthTimeout)
	}
	if f := a.Forward; f != nil {
		if f.URL == "" {
			add("auth.forward.url", "required: the URL of the auth service")
		}
		str("auth.forward.url", f.URL, MaxAccessString)
		list("auth.forward.copy_headers", f.CopyHeaders, MaxAccessList)
		str("auth.forward.user_header", f.UserHeader, MaxAccessString)
		dur("auth.forward.timeout", f.Timeout, MaxAuthTimeout)
		dur("auth.forward.cache_ttl", f.CacheTTL, MaxForwardCacheTTL)
	}
	if o := a.OIDC; o != nil {
		list("auth.oidc.allowed_emails", o.AllowedEmails, MaxOIDCEntries)
		list("auth.oidc.allowed_domains", o.AllowedDomains, MaxOIDCEntries)
		list("auth.oidc.groups", o.Groups, MaxOIDCEntries)
	}
	return out
}

// maxAccessProblems bounds the problems of one block the server sends
// back: the refusal goes to the client and into the log.
const maxAccessProblems = 8

// validate is Problems as the announcement check reports them, for
// service id: at most maxAccessProblems, then a count of the rest.
func (a *Access) validate(id string) []error {
	ps := a.Problems()
	var errs []error
	for i, p := range ps {
		if i == maxAccessProblems {
			errs = append(errs, fmt.Errorf("announcement: service %s: access: and %d more problems", id, len(ps)-i))
			break
		}
		errs = append(errs, fmt.Errorf("announcement: service %s: access: %s: %s", id, p.Field, p.Msg))
	}
	return errs
}

// badEntry returns the index of the first entry of l that is longer than
// MaxAccessString or not printable, or -1.
func badEntry(l []string) int {
	for i, s := range l {
		if len(s) > MaxAccessString || !printable(s) {
			return i
		}
	}
	return -1
}

// sortedNames returns the keys of m in order, so that the problem
// reported is the same on every run.
func sortedNames[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// shortDuration spells d as the client's config writes whole units (2m,
// 1h, 45s) rather than as time.Duration does (2m0s, 1h0m0s).
func shortDuration(d time.Duration) string {
	s := d.String()
	if t, ok := strings.CutSuffix(s, "m0s"); ok {
		s = t + "m"
	}
	if t, ok := strings.CutSuffix(s, "h0m"); ok {
		s = t + "h"
	}
	return s
}

// jwtWire is JWTAuth as the control stream carries it. Its fields, their
// order and their tags are the wire format: servers and clients of every
// release read and write exactly these.
type jwtWire struct {
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

// MarshalJSON writes j in the wire format, durations as whole
// milliseconds.
func (j JWTAuth) MarshalJSON() ([]byte, error) {
	return json.Marshal(jwtWire{
		JWKSURL: j.JWKSURL, Issuer: j.Issuer, Audience: j.Audience, Claims: j.Claims,
		Header: j.Header, Cookie: j.Cookie, Algorithms: j.Algorithms, UserClaim: j.UserClaim,
		LeewayMS: j.Leeway.Milliseconds(), CacheTTLMS: j.CacheTTL.Milliseconds(),
		RefreshIntervalMS: j.RefreshInterval.Milliseconds(), TimeoutMS: j.Timeout.Milliseconds(),
	})
}

// UnmarshalJSON reads j from the wire format. A count of milliseconds
// that does not fit a time.Duration is an error, as for Scaling;
// negative ones decode as they are, for Problems to report.
func (j *JWTAuth) UnmarshalJSON(b []byte) error {
	var w jwtWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	var ds [4]time.Duration
	for i, f := range []struct {
		key string
		ms  int64
	}{{"leeway_ms", w.LeewayMS}, {"cache_ttl_ms", w.CacheTTLMS}, {"refresh_interval_ms", w.RefreshIntervalMS}, {"timeout_ms", w.TimeoutMS}} {
		d, err := millis("access: jwt", f.key, f.ms)
		if err != nil {
			return err
		}
		ds[i] = d
	}
	*j = JWTAuth{
		JWKSURL: w.JWKSURL, Issuer: w.Issuer, Audience: w.Audience, Claims: w.Claims,
		Header: w.Header, Cookie: w.Cookie, Algorithms: w.Algorithms, UserClaim: w.UserClaim,
		Leeway: ds[0], CacheTTL: ds[1], RefreshInterval: ds[2], Timeout: ds[3],
	}
	return nil
}

// forwardWire is ForwardAuth as the control stream carries it; like
// jwtWire, it is the wire format.
type forwardWire struct {
	URL         string   `json:"url"`
	CopyHeaders []string `json:"copy_headers,omitempty"`
	UserHeader  string   `json:"user_header,omitempty"`
	TimeoutMS   int64    `json:"timeout_ms,omitempty"`
	CacheTTLMS  int64    `json:"cache_ttl_ms,omitempty"`
}

// MarshalJSON writes f in the wire format, durations as whole
// milliseconds.
func (f ForwardAuth) MarshalJSON() ([]byte, error) {
	return json.Marshal(forwardWire{
		URL: f.URL, CopyHeaders: f.CopyHeaders, UserHeader: f.UserHeader,
		TimeoutMS: f.Timeout.Milliseconds(), CacheTTLMS: f.CacheTTL.Milliseconds(),
	})
}

// UnmarshalJSON reads f from the wire format, as JWTAuth's does.
func (f *ForwardAuth) UnmarshalJSON(b []byte) error {
	var w forwardWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	timeout, err := millis("access: forward", "timeout_ms", w.TimeoutMS)
	if err != nil {
		return err
	}
	ttl, err := millis("access: forward", "cache_ttl_ms", w.CacheTTLMS)
	if err != nil {
		return err
	}
	*f = ForwardAuth{URL: w.URL, CopyHeaders: w.CopyHeaders, UserHeader: w.UserHeader, Timeout: timeout, CacheTTL: ttl}
	return nil
}
