package config

import (
	"encoding/hex"
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"strings"

	"github.com/aperio-dev/aperio/tunnel"
	"go.yaml.in/yaml/v3"
)

// Auth is a service's auth: block, the methods of which any one admits a
// visitor: the tunnel's own type, so that the client announces what it
// loaded as it is. The server checks the methods; the client only
// announces them. Values are taken literally (no ${VAR} expansion):
// password hashes are full of "$".
type Auth = tunnel.Auth

// The methods of an auth: block (auth.basic, auth.bearer, auth.jwt,
// auth.forward, auth.oidc) are the tunnel's types.
type (
	BasicAuth   = tunnel.BasicAuth
	BearerAuth  = tunnel.BearerAuth
	JWTAuth     = tunnel.JWTAuth
	ForwardAuth = tunnel.ForwardAuth
	OIDCAuth    = tunnel.OIDCAuth
)

// Access returns the access block s announces, the one its settings make
// (public, auth, allowed_ips, denied_ips, identity_jwt); nil when s sets
// none, so that the server's default_access decides.
func (s Service) Access() *tunnel.Access {
	if !s.Public && s.Auth == nil && len(s.AllowedIPs) == 0 && len(s.DeniedIPs) == 0 && !s.IdentityJWT {
		return nil
	}
	a := &tunnel.Access{Public: s.Public, AllowedIPs: s.AllowedIPs, DeniedIPs: s.DeniedIPs, IdentityJWT: s.IdentityJWT}
	if s.Auth != nil {
		a.Auth = *s.Auth
	}
	return a
}

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

// access checks the access settings of the service at prefix p: what the
// server reads of them by the server's own rules
// (tunnel.Access.Problems), then what only the client checks (addresses
// that do not parse, hashes and digests that are not ones, URLs,
// algorithms, an auth: block that declares nothing or names nobody).
func (v *checker) access(p string, s Service) {
	for _, pr := range s.Access().Problems() {
		v.add(p+pr.Field, "%s", pr.Msg)
	}
	ips := func(key string, list []string) {
		if len(list) > tunnel.MaxAccessEntries {
			return
		}
		for _, e := range list {
			if _, err := netip.ParsePrefix(e); err == nil {
				continue
			}
			if _, err := netip.ParseAddr(e); err != nil {
				v.add(p+key, "%.64q is neither an address nor a CIDR prefix", e)
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
	// Users and keys whose names the shared rules refused are not named
	// again here.
	if b := a.Basic; b != nil && len(b.Users) <= tunnel.MaxAccessEntries {
		for _, u := range sortedKeys(b.Users) {
			if !passwordHash(b.Users[u]) && len(u) <= tunnel.MaxAccessName {
				v.add(p+"auth.basic.users."+u, "is not an argon2id or bcrypt hash: plain passwords are refused; make one with aperio-client hash-password")
			}
		}
	}
	if b := a.Bearer; b != nil && len(b.Keys) <= tunnel.MaxAccessEntries {
		for _, n := range sortedKeys(b.Keys) {
			if d, err := hex.DecodeString(b.Keys[n]); (err != nil || len(d) != 32) && len(n) <= tunnel.MaxAccessName {
				v.add(p+"auth.bearer.keys."+n, "is not a hex SHA-256 digest (64 hex digits): store printf %%s \"$KEY\" | sha256sum, never the key")
			}
		}
	}
	if j := a.JWT; j != nil {
		if j.JWKSURL != "" {
			if msg := checkURL(j.JWKSURL, "https", "http"); msg != "" {
				v.add(p+"auth.jwt.jwks_url", "%s", msg)
			}
		}
		for _, alg := range j.Algorithms {
			if !slices.Contains([]string{"RS256", "ES256", "EdDSA"}, alg) {
				v.add(p+"auth.jwt.algorithms", "%.64q is not one of RS256, ES256, EdDSA", alg)
			}
		}
	}
	if f := a.Forward; f != nil {
		if f.URL != "" {
			if msg := checkURL(f.URL, "https", "http"); msg != "" {
				v.add(p+"auth.forward.url", "%s", msg)
			}
		}
		for _, h := range f.CopyHeaders {
			if strings.HasPrefix(strings.ToLower(h), "x-aperio-") {
				v.add(p+"auth.forward.copy_headers", "%.64q: X-Aperio-* headers are the server's own", h)
			}
		}
	}
	if o := a.OIDC; o != nil && len(o.AllowedEmails)+len(o.AllowedDomains)+len(o.Groups) == 0 {
		v.add(p+"auth.oidc", "names nobody: set allowed_emails, allowed_domains or groups")
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
