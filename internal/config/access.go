package config

import (
	"encoding/hex"
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Auth is a service's auth: block, the methods of which any one admits a
// visitor. The server checks them; the client only announces them. Values
// are taken literally (no ${VAR} expansion): password hashes are full of
// "$".
type Auth struct {
	Basic   *BasicAuth   `yaml:"basic"`
	Bearer  *BearerAuth  `yaml:"bearer"`
	JWT     *JWTAuth     `yaml:"jwt"`
	Forward *ForwardAuth `yaml:"forward"`
	OIDC    *OIDCAuth    `yaml:"oidc"`
}

// BasicAuth is auth.basic: a realm and users with argon2id (PHC string)
// or bcrypt hashes, never plain passwords.
type BasicAuth struct {
	Realm string            `yaml:"realm"`
	Users map[string]string `yaml:"users"`
}

// BearerAuth is auth.bearer: each API key's name and the hex SHA-256
// digest of the key (printf %s "$KEY" | sha256sum).
type BearerAuth struct {
	Keys map[string]string `yaml:"keys"`
}

// JWTAuth is auth.jwt: tokens verified against a JWKS URL.
type JWTAuth struct {
	JWKSURL         string              `yaml:"jwks_url"`
	Issuer          string              `yaml:"issuer"`
	Audience        []string            `yaml:"audience"`
	Claims          map[string][]string `yaml:"claims"`
	Header          string              `yaml:"header"`
	Cookie          string              `yaml:"cookie"`
	UserClaim       string              `yaml:"user_claim"`
	Algorithms      []string            `yaml:"algorithms"`
	Leeway          time.Duration       `yaml:"leeway"`
	CacheTTL        time.Duration       `yaml:"cache_ttl"`
	RefreshInterval time.Duration       `yaml:"refresh_interval"`
	Timeout         time.Duration       `yaml:"timeout"`
}

// ForwardAuth is auth.forward: an external auth service asked for every
// request.
type ForwardAuth struct {
	URL         string        `yaml:"url"`
	CopyHeaders []string      `yaml:"copy_headers"`
	UserHeader  string        `yaml:"user_header"`
	Timeout     time.Duration `yaml:"timeout"`
	CacheTTL    time.Duration `yaml:"cache_ttl"`
}

// OIDCAuth is auth.oidc: a browser login against the server's OpenID
// Connect provider, admitting the listed emails, email domains or groups.
type OIDCAuth struct {
	AllowedEmails  []string `yaml:"allowed_emails"`
	AllowedDomains []string `yaml:"allowed_domains"`
	Groups         []string `yaml:"groups"`
}

// Methods returns the names of the methods a declares, in a fixed order.
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

// Bounds of the access settings, the server's own: a block beyond them
// would be refused when the client announces it, so it is refused here,
// at load, where the key can be named.
const (
	maxAccessEntries = 1000
	maxAccessList    = 32
	maxAccessString  = 1024
	maxAuthTimeout   = 30 * time.Second
)

// authSetting is the auth: block of a service, decoded whole: its keys
// are user names and claim names, not config keys. Unknown keys are
// errors, so a typo never leaves a method out.
func authSetting(name, usage string, field func(*Service) **Auth) setting[Service] {
	s := newSetting(name, usage, func(c *Service, v value) error {
		if v.node == nil {
			return errors.New("is a block, set it in the file")
		}
		n := deref(v.node)
		if n.Kind != yaml.MappingNode {
			return errors.New("expected a block of methods (basic, bearer, jwt, forward, oidc)")
		}
		// Decoded from the file's own node, so that every line is the
		// file's; unknown keys are then named with their line and the
		// keys that are allowed there, as for any structured setting.
		a := new(Auth)
		if err := n.Decode(a); err != nil {
			return plainDecodeError(err)
		}
		if err := walkStructured(n, reflect.ValueOf(a).Elem(), 0); err != nil {
			return err
		}
		*field(c) = a
		return nil
	}, func(c *Service) string { return strings.Join((*field(c)).Methods(), ",") })
	s.whole = true
	return s.kind(KindBlock)
}

// access checks the access settings of the service at prefix p.
func (v *checker) access(p string, s Service) {
	ips := func(key string, list []string) {
		if len(list) > maxAccessEntries {
			v.add(p+key, "%d entries, at most %d", len(list), maxAccessEntries)
			return
		}
		for _, e := range list {
			if _, err := netip.ParsePrefix(e); err == nil {
				continue
			}
			if _, err := netip.ParseAddr(e); err != nil {
				v.add(p+key, "%q is neither an address nor a CIDR prefix", e)
			}
		}
	}
	ips("allowed_ips", s.AllowedIPs)
	ips("denied_ips", s.DeniedIPs)
	a := s.Auth
	if a == nil {
		if s.IdentityJWT {
			v.add(p+"identity_jwt", "needs an auth: block: an identity is only sent for a visitor a method admitted")
		}
		return
	}
	if len(a.Methods()) == 0 {
		v.add(p+"auth", "declares no method: set one of basic, bearer, jwt, forward, oidc")
	}
	if s.Public {
		v.add(p+"public", "cannot be combined with auth: a public service admits everyone")
	}
	str := func(key, val string) {
		if len(val) > maxAccessString {
			v.add(p+key, "longer than %d bytes", maxAccessString)
		}
	}
	list := func(key string, l []string, max int) {
		if len(l) > max {
			v.add(p+key, "%d entries, at most %d", len(l), max)
		}
		for _, e := range l {
			str(key, e)
		}
	}
	dur := func(key string, d, max time.Duration) {
		if d < 0 || d > max {
			v.add(p+key, "%s is outside [0, %s]", formatDuration(d), formatDuration(max))
		}
	}
	if b := a.Basic; b != nil {
		str("auth.basic.realm", b.Realm)
		if len(b.Users) == 0 {
			v.add(p+"auth.basic.users", "required: at least one user and its hash (aperio-client hash-password)")
		}
		if len(b.Users) > maxAccessEntries {
			v.add(p+"auth.basic.users", "%d users, at most %d", len(b.Users), maxAccessEntries)
		}
		for _, u := range sortedKeys(b.Users) {
			h := b.Users[u]
			switch {
			case u == "" || len(u) > 256 || strings.ContainsAny(u, ":\r\n"):
				v.add(p+"auth.basic.users", "user %.64q: a name is 1 to 256 bytes without ':' or line breaks", u)
			case !passwordHash(h):
				v.add(p+"auth.basic.users."+u, "is not an argon2id or bcrypt hash: plain passwords are refused; make one with aperio-client hash-password")
			case len(h) > maxAccessString:
				v.add(p+"auth.basic.users."+u, "hash longer than %d bytes", maxAccessString)
			}
		}
	}
	if b := a.Bearer; b != nil {
		if len(b.Keys) == 0 {
			v.add(p+"auth.bearer.keys", "required: at least one key name and its SHA-256 digest")
		}
		if len(b.Keys) > maxAccessEntries {
			v.add(p+"auth.bearer.keys", "%d keys, at most %d", len(b.Keys), maxAccessEntries)
		}
		for _, n := range sortedKeys(b.Keys) {
			if d, err := hex.DecodeString(b.Keys[n]); err != nil || len(d) != 32 {
				v.add(p+"auth.bearer.keys."+n, "is not a hex SHA-256 digest (64 hex digits): store printf %%s \"$KEY\" | sha256sum, never the key")
			}
		}
	}
	if j := a.JWT; j != nil {
		if msg := checkURL(j.JWKSURL, "https", "http"); msg != "" {
			v.add(p+"auth.jwt.jwks_url", "%s", msg)
		}
		if j.Issuer == "" {
			v.add(p+"auth.jwt.issuer", "required: the iss every token must carry")
		}
		if len(j.Audience) == 0 {
			v.add(p+"auth.jwt.audience", "required: the aud values accepted")
		}
		str("auth.jwt.issuer", j.Issuer)
		str("auth.jwt.header", j.Header)
		str("auth.jwt.cookie", j.Cookie)
		str("auth.jwt.user_claim", j.UserClaim)
		list("auth.jwt.audience", j.Audience, maxAccessList)
		list("auth.jwt.algorithms", j.Algorithms, maxAccessList)
		for _, alg := range j.Algorithms {
			if !slices.Contains([]string{"RS256", "ES256", "EdDSA"}, alg) {
				v.add(p+"auth.jwt.algorithms", "%q is not one of RS256, ES256, EdDSA", alg)
			}
		}
		if len(j.Claims) > maxAccessList {
			v.add(p+"auth.jwt.claims", "%d claims, at most %d", len(j.Claims), maxAccessList)
		}
		for k, vs := range j.Claims {
			list("auth.jwt.claims."+k, vs, maxAccessList)
		}
		dur("auth.jwt.leeway", j.Leeway, 5*time.Minute)
		dur("auth.jwt.timeout", j.Timeout, maxAuthTimeout)
		dur("auth.jwt.cache_ttl", j.CacheTTL, time.Hour)
		dur("auth.jwt.refresh_interval", j.RefreshInterval, time.Hour)
	}
	if f := a.Forward; f != nil {
		if msg := checkURL(f.URL, "https", "http"); msg != "" {
			v.add(p+"auth.forward.url", "%s", msg)
		}
		list("auth.forward.copy_headers", f.CopyHeaders, maxAccessList)
		for _, h := range f.CopyHeaders {
			if strings.HasPrefix(strings.ToLower(h), "x-aperio-") {
				v.add(p+"auth.forward.copy_headers", "%q: X-Aperio-* headers are the server's own", h)
			}
		}
		str("auth.forward.user_header", f.UserHeader)
		dur("auth.forward.timeout", f.Timeout, maxAuthTimeout)
		dur("auth.forward.cache_ttl", f.CacheTTL, 5*time.Minute)
	}
	if o := a.OIDC; o != nil {
		list("auth.oidc.allowed_emails", o.AllowedEmails, maxAccessEntries)
		list("auth.oidc.allowed_domains", o.AllowedDomains, maxAccessEntries)
		list("auth.oidc.groups", o.Groups, maxAccessEntries)
		if len(o.AllowedEmails)+len(o.AllowedDomains)+len(o.Groups) == 0 {
			v.add(p+"auth.oidc", "names nobody: set allowed_emails, allowed_domains or groups")
		}
	}
}

// passwordHash reports whether h looks like a hash the server verifies:
// an argon2id PHC string or a bcrypt hash. The server parses it fully;
// this only keeps a plain password out of the announcement.
func passwordHash(h string) bool {
	if strings.HasPrefix(h, "$argon2id$") {
		return strings.Count(h, "$") == 5
	}
	for _, p := range []string{"$2a$", "$2b$", "$2y$"} {
		if strings.HasPrefix(h, p) {
			return len(h) == 60
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
