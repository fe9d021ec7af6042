// Package access owns visitor access control: whether one request may
// reach a service, decided on the server before anything is sent down a
// tunnel. A Gate, built from one service's settings (the server's
// default_access, the service's public flag, its auth methods, its
// allowed_ips and denied_ips, the server's share-link keyring), answers
// each request with a Decision: admitted, with the user and the method
// that admitted it, or refused, with the answer the visitor gets. It also
// prepares the request the backend receives: the credentials the gate
// consumed removed, the visitor's own X-Aperio-* identity headers dropped,
// the gate's identity set. It owns the methods basic, bearer, jwt and
// forward, share links, and the identity token signed for backends; a
// browser login (oidc) plugs in as another Method.
package access

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/aperio-dev/aperio/internal/headerrule"
)

// Headers the backend receives about the visitor. Inbound copies are
// never trusted: PrepareUpstream removes them before it sets its own.
const (
	// HeaderUser names the user the gate admitted (a basic user, a bearer
	// key's name, a JWT's subject or the claim configured instead, what a
	// forward-auth service said, an OIDC email). Absent when the method
	// names nobody, such as a share link.
	HeaderUser = "X-Aperio-User"
	// HeaderAuth names the method that admitted the request: "basic",
	// "bearer", "jwt", "forward", "share", "oidc".
	HeaderAuth = "X-Aperio-Auth"
	// HeaderIdentity carries the identity token (see Signer) when the
	// service asked for one (identity_jwt).
	HeaderIdentity = "X-Aperio-Identity"
)

// Cookies the gate reads. They are credentials for the gate, never for
// the backend: PrepareUpstream removes them.
const (
	// CookieShare carries a share link's token after its first visit.
	CookieShare = "aperio_share"
	// CookieSession carries a browser login's session (the oidc method).
	CookieSession = "aperio_session"
	// CookieAdmin and CookieAdminLogin are the admin API's login session
	// and login in progress (admin.SessionCookie, admin.LoginCookie):
	// sent to every path of the hostname the admin logged in on, so to
	// any backend on that hostname too, which must never see them.
	CookieAdmin      = "aperio_admin"
	CookieAdminLogin = "aperio_admin_login"
	// CookieAdminSession is the admin API's key session
	// (admin.KeySessionCookie), sent to every path of its hostname like
	// CookieAdmin.
	CookieAdminSession = "aperio_admin_session"
)

// serverCookies are the server's own cookies: never the backend's.
var serverCookies = []string{CookieShare, CookieSession, CookieAdmin, "__Host-" + CookieAdmin, CookieAdminLogin, "__Host-" + CookieAdminLogin,
	CookieAdminSession, "__Host-" + CookieAdminSession}

// maxUserLen bounds the user a method names; a longer one, or one with
// characters a header value cannot carry, is refused, never cut.
const maxUserLen = 256

// Visitor is what the router resolved about a request before the gate
// sees it. The gate reads these, never the request's own headers, for
// the address, the scheme, the host and the path.
type Visitor struct {
	// Addr is the visitor's real address (a trusted proxy's word, else
	// the peer's), unmapped. The zero Addr means unknown: it is in no
	// prefix, so an allowed_ips list refuses it.
	Addr netip.Addr
	// HTTPS reports whether the visitor reached the server over TLS,
	// directly or as a trusted proxy said; cookies the gate sets are then
	// Secure.
	HTTPS bool
	// Host is the routed hostname, normalized (lowercase, no port, no
	// trailing dot).
	Host string
	// Path is the path's normal form, as routing matched it. Share links
	// are confined to a path prefix of it, so it must be the normal form:
	// a raw path with "/../" could leave the prefix after the check.
	Path string
}

// Outcome is what one Method made of a request.
type Outcome uint8

const (
	// Absent: the request carries no credential for this method. The
	// method's Challenge goes into the 401.
	Absent Outcome = iota
	// Admit: the credential is good; User names whom it admits.
	Admit
	// Invalid: a credential is there and is refused (wrong, expired,
	// malformed). The method's Challenge goes into the 401.
	Invalid
	// Answer: the method answers the visitor itself (Status, Header,
	// Body): a login redirect, a forward-auth service's refusal.
	Answer
	// Unavailable: the method could not decide (its key server or auth
	// service is unreachable). The gate fails closed with 503.
	Unavailable
)

var outcomeNames = [...]string{Absent: "absent", Admit: "admit", Invalid: "invalid", Answer: "answer", Unavailable: "unavailable"}

// String returns the outcome's lowercase name, as metrics label it.
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("outcome(%d)", o)
}

// Result is one Method's verdict on one request.
type Result struct {
	Outcome Outcome
	// User is whom an Admit admits; "" when the method names nobody. It
	// must be printable UTF-8 of at most 256 bytes (the gate refuses it
	// otherwise), since it is sent to the backend as a header.
	User string
	// Reason says why, for audit and explain: a lowercase phrase that
	// never contains a credential.
	Reason string
	// Challenge is a WWW-Authenticate value for Absent and Invalid; ""
	// for none.
	Challenge string
	// Status, Header and Body are an Answer's response.
	Status int
	Header http.Header
	Body   []byte
	// Upstream holds headers an Admit adds to the backend request (the
	// ones a forward-auth service returned); nil for none.
	Upstream http.Header
}

// Method is one way through a gate: basic, bearer, jwt, forward, oidc.
// Implementations must be safe for concurrent use.
type Method interface {
	// Name is the method's name: what HeaderAuth says and audit, explain
	// and metrics label.
	Name() string
	// Check judges r. It may block on I/O (a key server, an auth
	// service), bounded by its own timeout and r's context.
	Check(r *http.Request, v Visitor) Result
	// Credentials lists the request headers and cookies the method reads
	// as credentials: PrepareUpstream removes them before the backend.
	Credentials() (headers, cookies []string)
}

// Decision is what a Gate says about one request.
type Decision struct {
	// Admitted reports whether the request may go on to the backend.
	Admitted bool
	// User and Method name who was admitted and how. Method is "" when
	// the service is open and no method was consulted; User is "" when
	// the method names nobody.
	User, Method string
	// Upstream holds headers the admitting method adds to the backend
	// request; nil for none. PrepareUpstream sets them.
	Upstream http.Header

	// Status, Header and Body are the refusal's response (Admitted is
	// false): 401 with WWW-Authenticate, a redirect with Location, 503,
	// or what a forward-auth service answered. Header may be nil.
	Status int
	Header http.Header
	Body   []byte
	// Hidden reports that the refusal must look like an unclaimed
	// hostname, so that a closed service cannot be discovered: the
	// router answers it as it answers no route, and ignores Status,
	// Header and Body.
	Hidden bool

	// Reason says why, for audit and explain. It never contains a
	// credential; what a visitor sent (a user name) is quoted and cut.
	Reason string
}

// Posture is the server's default_access: whether a service with no auth
// methods and no public flag is open.
type Posture uint8

const (
	// Allow opens services that have no auth methods (the default, so
	// that existing setups keep working).
	Allow Posture = iota
	// Deny closes them unless they say public: true. A closed service is
	// answered like an unclaimed hostname.
	Deny
)

// String returns "allow" or "deny", the config spelling.
func (p Posture) String() string {
	if p == Deny {
		return "deny"
	}
	return "allow"
}

// ParsePosture parses a default_access value: "allow" or "deny". Any
// other value is an error, so a typo cannot open a server meant closed.
func ParsePosture(s string) (Posture, error) {
	switch s {
	case "allow":
		return Allow, nil
	case "deny":
		return Deny, nil
	}
	return Allow, fmt.Errorf("access: default_access %q is neither allow nor deny", s)
}

// Open reports whether a service is open to every visitor its IP rules
// admit: it has no auth methods, and it is public or the server's
// default_access is allow. A service with auth methods is never open.
func Open(def Posture, public, hasAuth bool) bool {
	if hasAuth {
		return false
	}
	return public || def == Allow
}

// Config is one service's access settings. The zero Config is an open
// service under default_access allow.
type Config struct {
	// Default is the server's default_access.
	Default Posture
	// Public is the service's public flag: open even under Deny. It
	// cannot be combined with Methods.
	Public bool
	// Methods are the service's auth methods; any one admits. They are
	// tried in order and the first to admit wins, so cheap local ones
	// (bearer, basic, jwt) should come before forward, which calls out.
	Methods []Method
	// IPs are the service's allowed_ips and denied_ips, applied before
	// anything else, to open services too.
	IPs IPRules
	// Shares verifies share links; nil means share links are not
	// accepted. They open services that are closed or have Methods.
	Shares *Keyring
	// Identity signs the identity token the backend receives in
	// HeaderIdentity (identity_jwt); nil means none is sent.
	Identity *Signer
}

// Gate decides access to one service. It is immutable and safe for
// concurrent use; build a new one when the settings change.
type Gate struct {
	open     bool
	methods  []Method
	ips      IPRules
	shares   *Keyring
	identity *Signer
	headers  []string // credential headers, canonical, to remove upstream
	cookies  []string // credential cookies to remove upstream
	// owned are the headers a method sets on the backend request from
	// its own answer (upstreamSetter): the visitor's copies, in every
	// spelling, are removed from every request the gate admits.
	owned []string
}

// upstreamSetter is a Method that sets headers of its own on the backend
// request from what it learned (forward: its copy_headers and
// user_header, taken from the auth service's answer). The backend is
// told to trust those names, so a visitor's own copy must never reach
// it, whether or not the answer carries the header this time: the gate
// removes them in every spelling (headerrule.SameName) before applying
// the answer.
type upstreamSetter interface {
	UpstreamHeaders() []string
}

// New returns the Gate for cfg, or an error when Public is combined with
// Methods or a Method is nil.
func New(cfg Config) (*Gate, error) {
	var errs []error
	if cfg.Public && len(cfg.Methods) > 0 {
		errs = append(errs, errors.New("access: public: true and auth methods exclude each other"))
	}
	g := &Gate{
		open:     Open(cfg.Default, cfg.Public, len(cfg.Methods) > 0),
		ips:      cfg.IPs,
		shares:   cfg.Shares,
		identity: cfg.Identity,
		cookies:  slices.Clone(serverCookies),
	}
	for i, m := range cfg.Methods {
		if m == nil {
			errs = append(errs, fmt.Errorf("access: method %d is nil", i))
			continue
		}
		g.methods = append(g.methods, m)
		hs, cs := m.Credentials()
		for _, h := range hs {
			if h = http.CanonicalHeaderKey(h); !contains(g.headers, h) {
				g.headers = append(g.headers, h)
			}
		}
		for _, c := range cs {
			if !contains(g.cookies, c) {
				g.cookies = append(g.cookies, c)
			}
		}
		if us, ok := m.(upstreamSetter); ok {
			for _, h := range us.UpstreamHeaders() {
				if h = http.CanonicalHeaderKey(h); !contains(g.owned, h) {
					g.owned = append(g.owned, h)
				}
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return g, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Open reports whether the gate admits every visitor its IP rules admit,
// without consulting a method.
func (g *Gate) Open() bool { return g.open }

// Check decides r. In order: the IP rules (a refusal is Hidden); an open
// service admits; a share link admits (or, on its first visit, redirects
// to set its cookie); the methods, the first to admit winning. When none
// admits, the refusal is, by precedence: 503 if a method could not
// decide (fail closed: a visitor who might have been admitted is never
// told otherwise), else the first method's own answer, else 401 with
// every method's challenge. A service with no method (closed by
// default_access deny) is refused Hidden.
//
// Check may block while a method calls out (jwt's key server, forward's
// auth service), each bounded by its own timeout and r's context.
func (g *Gate) Check(r *http.Request, v Visitor) Decision {
	if ok, reason := g.ips.admits(v.Addr); !ok {
		return Decision{Hidden: true, Reason: reason}
	}
	if g.open {
		return Decision{Admitted: true, Reason: "open"}
	}
	var shareReason string
	if g.shares != nil {
		res := g.shares.check(r, v)
		switch res.Outcome {
		case Admit:
			return Decision{Admitted: true, Method: MethodShare, Reason: res.Reason}
		case Answer:
			return Decision{Status: res.Status, Header: res.Header, Reason: res.Reason}
		case Invalid:
			shareReason = res.Reason
		}
	}
	if len(g.methods) == 0 {
		reason := "closed: default_access deny, no auth methods, not public"
		if shareReason != "" {
			reason += "; " + shareReason
		}
		return Decision{Hidden: true, Reason: reason}
	}
	var (
		reasons     []string
		challenges  []string
		answer      *Result
		unavailable bool
	)
	if shareReason != "" {
		reasons = append(reasons, shareReason)
	}
	for _, m := range g.methods {
		res := m.Check(r, v)
		if res.Outcome == Admit {
			if !validUser(res.User) {
				reasons = append(reasons, m.Name()+": the user it names is not printable UTF-8 of at most 256 bytes")
				continue
			}
			return Decision{Admitted: true, User: res.User, Method: m.Name(), Upstream: res.Upstream, Reason: m.Name() + ": " + res.Reason}
		}
		reasons = append(reasons, m.Name()+": "+res.Reason)
		switch res.Outcome {
		case Unavailable:
			unavailable = true
		case Answer:
			if answer == nil {
				answer = &res
			}
		default:
			if res.Challenge != "" && !contains(challenges, res.Challenge) {
				challenges = append(challenges, res.Challenge)
			}
		}
	}
	reason := strings.Join(reasons, "; ")
	switch {
	case unavailable:
		return Decision{Status: http.StatusServiceUnavailable, Header: http.Header{"Retry-After": {"5"}}, Reason: reason}
	case answer != nil:
		return Decision{Status: answer.Status, Header: answer.Header, Body: answer.Body, Reason: reason}
	}
	d := Decision{Status: http.StatusUnauthorized, Reason: reason}
	if len(challenges) > 0 {
		d.Header = http.Header{"Www-Authenticate": challenges}
	}
	return d
}

// validUser reports whether a method's user can be sent as a header
// value: at most maxUserLen bytes of printable UTF-8 ("" is valid: no
// user).
func validUser(u string) bool {
	if len(u) > maxUserLen || !utf8.ValidString(u) {
		return false
	}
	for _, c := range u {
		if c < 0x20 || c == 0x7f || (c >= 0x80 && c < 0xa0) {
			return false
		}
	}
	return true
}

// PrepareUpstream readies h, the header of the request the backend will
// receive, after d admitted it: it removes the visitor's own HeaderUser,
// HeaderAuth and HeaderIdentity, the credential headers and cookies the
// gate's methods read, the share and session cookies, and every header a
// method sets from its own answer (forward's copy_headers and
// user_header) in any spelling, whichever method admitted; then it sets
// HeaderAuth and HeaderUser from d, d.Upstream, and, when the gate signs
// identities, HeaderIdentity for v.Host. It returns an error only when
// the identity token cannot be signed; h is then without identity and
// the request must not go on. It must not be called for a refused d.
func (g *Gate) PrepareUpstream(h http.Header, v Visitor, d Decision) error {
	delete(h, HeaderUser)
	delete(h, HeaderAuth)
	delete(h, HeaderIdentity)
	if g.open && d.Method == "" {
		// No method read a credential: the backend's own pass through.
		removeCookies(h, serverCookies)
		return nil
	}
	for _, k := range g.headers {
		delete(h, k)
	}
	removeOwned(h, g.owned)
	removeCookies(h, g.cookies)
	if !d.Admitted || d.Method == "" {
		return nil
	}
	h[HeaderAuth] = []string{d.Method}
	if d.User != "" {
		h[HeaderUser] = []string{d.User}
	}
	for k, vv := range d.Upstream {
		h[k] = vv
	}
	if g.identity != nil {
		tok, err := g.identity.Sign(v.Host, d.User, d.Method)
		if err != nil {
			return err
		}
		h[HeaderIdentity] = []string{tok}
	}
	return nil
}

// removeOwned deletes from h every header whose name is one of names
// under headerrule.SameName (X_Forwarded_User as X-Forwarded-User). It
// allocates nothing.
func removeOwned(h http.Header, names []string) {
	if len(names) == 0 {
		return
	}
	for k := range h {
		for _, n := range names {
			if headerrule.SameName(k, n) {
				delete(h, k)
				break
			}
		}
	}
}

// removeCookies drops the named cookies from h's Cookie lines, keeping
// the others as sent. It allocates only when a line holds one of them.
func removeCookies(h http.Header, names []string) {
	lines := h["Cookie"]
	if len(lines) == 0 {
		return
	}
	out := lines[:0:0]
	changed := false
	for _, line := range lines {
		if !lineHasCookie(line, names) {
			out = append(out, line)
			continue
		}
		changed = true
		var kept []string
		for part := range strings.SplitSeq(line, ";") {
			p := strings.TrimSpace(part)
			name, _, _ := strings.Cut(p, "=")
			if p == "" || contains(names, strings.TrimSpace(name)) {
				continue
			}
			kept = append(kept, p)
		}
		if len(kept) > 0 {
			out = append(out, strings.Join(kept, "; "))
		}
	}
	if !changed {
		return
	}
	if len(out) == 0 {
		delete(h, "Cookie")
		return
	}
	h["Cookie"] = out
}

// lineHasCookie reports whether a Cookie line may hold one of names.
func lineHasCookie(line string, names []string) bool {
	for _, n := range names {
		if strings.Contains(line, n) {
			return true
		}
	}
	return false
}

// cookieValue returns the value of the cookie name in r's Cookie lines
// without parsing the others (http.Request.Cookie allocates every
// cookie). The first occurrence wins. ok is false when there is none.
func cookieValue(h http.Header, name string) (value string, ok bool) {
	for _, line := range h["Cookie"] {
		for len(line) > 0 {
			var part string
			part, line, _ = strings.Cut(line, ";")
			part = strings.TrimSpace(part)
			k, val, found := strings.Cut(part, "=")
			if found && strings.TrimSpace(k) == name {
				val = strings.TrimSpace(val)
				if len(val) >= 2 && val[0] == '"' && val[len(val)-1] == '"' {
					val = val[1 : len(val)-1]
				}
				return val, true
			}
		}
	}
	return "", false
}

// authorization returns the credentials of r's Authorization header for
// scheme (compared case-insensitively), and whether the header uses that
// scheme. More than one Authorization line is ambiguous: it counts as
// none.
func authorization(h http.Header, scheme string) (string, bool) {
	vv := h["Authorization"]
	if len(vv) != 1 {
		return "", false
	}
	v := vv[0]
	if len(v) <= len(scheme) || v[len(scheme)] != ' ' || !strings.EqualFold(v[:len(scheme)], scheme) {
		return "", false
	}
	return strings.TrimLeft(v[len(scheme)+1:], " "), true
}

// quote returns s quoted for a Reason, cut to 64 bytes: visitors choose
// it, and the audit log should not carry their essays.
func quote(s string) string {
	const max = 64
	if len(s) > max {
		return fmt.Sprintf("%q…", s[:max])
	}
	return fmt.Sprintf("%q", s)
}

// Auth is a service's auth block: one optional configuration per method.
// The browser login (oidc) is built by its own package and appended to
// the methods Methods returns.
type Auth struct {
	Basic   *BasicConfig
	Bearer  *BearerConfig
	JWT     *JWTConfig
	Forward *ForwardConfig
}

// Methods builds a's methods in the order a gate should try them: the
// local ones by cost (bearer, basic, jwt), then forward, which calls out.
// It reports every method's problems joined with errors.Join.
func (a Auth) Methods() ([]Method, error) {
	var (
		out  []Method
		errs []error
	)
	add := func(m Method, err error) {
		if err != nil {
			errs = append(errs, err)
			return
		}
		out = append(out, m)
	}
	if a.Bearer != nil {
		add(NewBearer(*a.Bearer))
	}
	if a.Basic != nil {
		add(NewBasic(*a.Basic))
	}
	if a.JWT != nil {
		add(NewJWT(*a.JWT))
	}
	if a.Forward != nil {
		add(NewForward(*a.Forward))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}
