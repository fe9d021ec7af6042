package router

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"reflect"
	"slices"
	"strings"

	"github.com/aperio-dev/aperio/internal/telemetry"
	"github.com/aperio-dev/aperio/internal/visitor/access"
	"github.com/aperio-dev/aperio/internal/visitor/access/oidc"
	"github.com/aperio-dev/aperio/tunnel"
)

// AccessConfig is the server's side of visitor access control: what every
// service's gate shares. The zero value is default_access allow, no
// identity signer, no share links and no outbound client (a service
// announcing jwt or forward is then refused, with a notice).
type AccessConfig struct {
	// Default is default_access: whether a service without auth methods
	// and without public: true is open.
	Default access.Posture
	// Identity signs the identity token of services with identity_jwt;
	// nil refuses such services, with a notice.
	Identity *access.Signer
	// Shares verifies share links; nil: share links are not accepted.
	Shares *access.Keyring
	// Client makes the jwt method's key-set fetches and the forward
	// method's calls. It must enforce the outbound fence (never
	// http.DefaultClient); nil refuses services using those methods.
	Client *http.Client
	// OIDC is the server's OpenID Connect provider (the oidc: block); nil
	// refuses services announcing the oidc method, with a notice.
	OIDC *oidc.Provider
	// Denied, when set, is told of every request a gate refused. It runs
	// on the request's path: it must not block (sample, then hand off).
	Denied func(AccessDenial)
}

// AccessDenial is one request a gate refused, for audit.
type AccessDenial struct {
	// Host is the routed hostname and Path the path's normal form.
	Host, Path string
	// OrgID is the organization of the bind's oldest client; "" for the
	// master token's.
	OrgID string
	// Visitor is the visitor's real address; the zero Addr when unknown.
	Visitor netip.Addr
	// Methods are the gate's methods joined with "+"; "none" for a gate
	// without any (closed by default_access, or IP rules).
	Methods string
	// Status is the answer's status; 0 for a hidden refusal, answered
	// like no route.
	Status int
	// Reason says why; it never holds a credential.
	Reason string
}

// gateEntry is one service's gate, built once per change of its announced
// access block, never per request. All members of a bind agree on it (see
// updateLocked), so a pool uses its first member's.
type gateEntry struct {
	gate *access.Gate
	// spec is the announced block it was built from (nil: none), to tell
	// a change from a repeat and to compare the members of a bind.
	spec *tunnel.Access
	// remote is set when a method calls out (jwt, forward): a dry run
	// does not call them.
	remote bool
	// simple is set when the gate is open with no IP rules: every visitor
	// passes, and the backend request keeps its credentials.
	simple bool
	// ips are the service's allowed_ips and denied_ips, for a dry run.
	ips access.IPRules
	// oidc is the service's allow rules when it requires the oidc method,
	// nil otherwise: the login routes of its hostname use them.
	oidc *oidc.Policy
	// methods names the gate's methods for metrics and audit: their names
	// joined with "+" in the order they are tried, "none" without any.
	methods string
	// posture is the default_access the gate was built under. other is
	// the same block's gate under the other posture, for a block whose
	// openness default_access decides (announced, no methods, not
	// public), nil for every other: a request takes the one its settings
	// snapshot's default_access names (gateFor), so that a reload of
	// default_access reaches announced blocks without rebuilding them.
	posture access.Posture
	other   *gateEntry
}

// gateFor returns the gate of ge to judge a request under default_access
// def: ge, or its twin built under def.
func (ge *gateEntry) gateFor(def access.Posture) *gateEntry {
	if ge.other != nil && ge.posture != def {
		return ge.other
	}
	return ge
}

// sameAccess reports whether two announced access blocks are the same
// settings.
func sameAccess(a, b *tunnel.Access) bool {
	if a == nil || b == nil {
		return a == b
	}
	return reflect.DeepEqual(a, b)
}

// buildGate builds the gate of an announced access block under the
// server's settings, and its twin under the other default_access when
// that decides whether the block is open (see gateEntry.other): a gate
// without methods is only its IP rules, cheap to build twice. The error
// names what the server refused; the service is then not routed.
func (ac *AccessConfig) buildGate(spec *tunnel.Access) (*gateEntry, error) {
	e, err := ac.buildGateUnder(spec, ac.Default)
	if err != nil || spec == nil || spec.Public || e.methods != "none" {
		return e, err
	}
	flip := access.Deny
	if ac.Default == access.Deny {
		flip = access.Allow
	}
	o, err := ac.buildGateUnder(spec, flip)
	if err != nil {
		return nil, err
	}
	e.other, o.other = o, e
	return e, nil
}

// buildGateUnder builds the gate of spec under default_access def.
func (ac *AccessConfig) buildGateUnder(spec *tunnel.Access, def access.Posture) (*gateEntry, error) {
	cfg := access.Config{Default: def, Shares: ac.Shares}
	e := &gateEntry{spec: spec, posture: def}
	if spec != nil {
		var errs []error
		ips, err := access.ParseIPRules(spec.AllowedIPs, spec.DeniedIPs)
		if err != nil {
			errs = append(errs, err)
		}
		cfg.IPs, cfg.Public = ips, spec.Public
		if spec.IdentityJWT {
			if ac.Identity == nil {
				errs = append(errs, errors.New("identity_jwt: this server signs no identity tokens"))
			}
			cfg.Identity = ac.Identity
		}
		var au access.Auth
		if b := spec.Basic; b != nil {
			au.Basic = &access.BasicConfig{Realm: b.Realm, Users: b.Users}
		}
		if b := spec.Bearer; b != nil {
			au.Bearer = &access.BearerConfig{Keys: b.Keys}
		}
		if (spec.JWT != nil || spec.Forward != nil) && ac.Client == nil {
			errs = append(errs, errors.New("jwt and forward need the server's outbound client, which is not configured"))
		}
		if j := spec.JWT; j != nil {
			e.remote = true
			au.JWT = &access.JWTConfig{
				JWKSURL: j.JWKSURL, Client: ac.Client, Issuer: j.Issuer, Audience: j.Audience, Claims: j.Claims,
				Header: j.Header, Cookie: j.Cookie, Algorithms: j.Algorithms, UserClaim: j.UserClaim,
				Leeway: j.Leeway, CacheTTL: j.CacheTTL, RefreshInterval: j.RefreshInterval, Timeout: j.Timeout,
			}
		}
		if f := spec.Forward; f != nil {
			e.remote = true
			au.Forward = &access.ForwardConfig{URL: f.URL, Client: ac.Client, CopyHeaders: f.CopyHeaders, UserHeader: f.UserHeader, Timeout: f.Timeout, CacheTTL: f.CacheTTL}
		}
		var om *oidcMethod
		if o := spec.OIDC; o != nil {
			pol := &oidc.Policy{AllowedEmails: o.AllowedEmails, AllowedDomains: o.AllowedDomains, Groups: o.Groups}
			switch err := pol.Validate(); {
			case ac.OIDC == nil:
				errs = append(errs, errors.New("oidc: this server has no oidc: provider"))
			case err != nil:
				errs = append(errs, err)
			default:
				om, e.oidc = &oidcMethod{p: ac.OIDC, policy: pol}, pol
			}
		}
		if len(errs) == 0 {
			cfg.Methods, err = au.Methods()
			if err != nil {
				errs = append(errs, err)
			}
			if om != nil {
				// Local like bearer and basic, but before forward, which
				// calls out.
				at := len(cfg.Methods)
				if spec.Forward != nil {
					at--
				}
				cfg.Methods = slices.Insert(cfg.Methods, at, access.Method(om))
			}
		}
		if len(errs) > 0 {
			return nil, errors.Join(errs...)
		}
	}
	g, err := access.New(cfg)
	if err != nil {
		return nil, err
	}
	e.gate, e.ips = g, cfg.IPs
	e.methods = "none"
	if n := methodNames(cfg.Methods); n != "" {
		e.methods = n
	}
	e.simple = g.Open() && (spec == nil || len(spec.AllowedIPs)+len(spec.DeniedIPs) == 0)
	return e, nil
}

// accessNotice is the notice for a service whose access block the server
// refused: one line, bounded, naming the service.
func accessNotice(id string, err error) string {
	msg := strings.ReplaceAll(err.Error(), "\n", "; ")
	if len(msg) > 512 {
		msg = msg[:512] + "…"
	}
	return fmt.Sprintf("service %s: access refused: %s", id, msg) + tunnel.NotRouted
}

func methodNames(ms []access.Method) string {
	names := make([]string, len(ms))
	for i, m := range ms {
		names[i] = m.Name()
	}
	return strings.Join(names, "+")
}

// authOutcome labels a refusal for metrics.
func authOutcome(d *access.Decision) string {
	switch {
	case d.Hidden:
		return "hidden"
	case d.Status == http.StatusServiceUnavailable:
		return "unavailable"
	case d.Status >= 300 && d.Status < 400:
		return "redirect"
	}
	return "denied"
}

// denied records a refusal of the gate ge in rec and tells the Denied
// hook, if any.
func (a *admission) denied(ge *gateEntry, d *access.Decision, rec *telemetry.Request) {
	rec.AuthMethod, rec.AuthOutcome = ge.methods, authOutcome(d)
	hook := a.rt.cfg.Access.Denied
	if hook == nil {
		return
	}
	den := AccessDenial{Host: a.host, Path: a.path, Visitor: a.ip, Methods: ge.methods, Reason: d.Reason}
	if !d.Hidden {
		den.Status = d.Status
	}
	if ms := *a.p.members.Load(); len(ms) > 0 {
		den.OrgID = connOrg(ms[0].conn)
	}
	hook(den)
}
