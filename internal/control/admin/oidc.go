package admin

import (
	"context"
	"crypto/hkdf"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/hostname"
	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/internal/visitor/access/oidc"
	"github.com/aperio-dev/aperio/router"
	"github.com/aperio-dev/aperio/store"
)

// The admin login's paths, outside Prefix: a browser reaches them before
// it holds a credential. The provider sends it back to the same callback
// as the services' logins (oidc.CallbackPath), which the server hands to
// ServeLoginCallback when LoginCallback claims it.
const (
	// LoginPath starts a login: GET ?redirect=<same-host path>.
	LoginPath = "/aperio/admin/login"
	// LogoutPath ends the session, an OIDC one or a key session
	// (KeySessionPath): POST with the CSRF header.
	LogoutPath = "/aperio/admin/logout"
)

// The admin login's cookies over plain http; over https (TLS at the
// server, or a trusted proxy's X-Forwarded-Proto) their names get the
// __Host- prefix.
const (
	// SessionCookie holds the sealed session: who logged in, a CSRF token
	// and the expiry.
	SessionCookie = "aperio_admin"
	// LoginCookie holds a login in progress (state, nonce, PKCE verifier).
	LoginCookie = "aperio_admin_login"
)

// CSRFHeader carries a session's CSRF token (GET /whoami returns it) on
// every request of a login session other than GET and HEAD.
const CSRFHeader = apitype.CSRFHeader

// SessionTTL is the lifetime of an admin session: an OIDC session's is
// sealed inside its cookie, a key session's kept in the store (unless
// Config.KeySessionTTL says otherwise). A session ends 8 hours after its
// login whatever the browser keeps.
const SessionTTL = 8 * time.Hour

// MaxOIDCRoles bounds admin_oidc_roles: every request of a session scans
// it.
const MaxOIDCRoles = 256

// sessionInfo is the HKDF context of the admin sessions' key: no other
// key derived from the master token is this one.
const sessionInfo = "aperio admin sessions v1"

// The audit events of the admin login.
const (
	// EventAdminLogin is a successful login: actor oidc:<email>, the
	// organization it was mapped to, the role in the detail.
	EventAdminLogin = "admin_login"
)

// The outcomes OIDCConfig.Count is called with.
const (
	LoginAdmitted    = "admitted"    // a session was issued
	LoginDenied      = "denied"      // the provider or the mapping refused
	LoginUnavailable = "unavailable" // the provider could not be reached
)

// OIDCRole is one entry of admin_oidc_roles: the users it matches (by
// exactly one of Email, Domain, Group) act in Org with Role.
type OIDCRole struct {
	// Email matches a verified email address, without regard to case.
	Email string
	// Domain matches the part of a verified email after its last '@',
	// exactly (no subdomains), without regard to case.
	Domain string
	// Group matches a name in the ID token's groups claim, exactly.
	Group string
	// Org is the name of the organization the user acts in. It must exist
	// when the user logs in; until then the entry matches nobody.
	Org string
	// Role is viewer, operator or admin. The master token's powers are
	// never granted through a login.
	Role string
}

// Check returns what is wrong with r, or nil.
func (r OIDCRole) Check() error {
	var errs []error
	n := 0
	for _, m := range []string{r.Email, r.Domain, r.Group} {
		if m != "" {
			n++
		}
	}
	switch n {
	case 0:
		errs = append(errs, errors.New("names no user: set one of email, domain, group"))
	case 1:
	default:
		errs = append(errs, errors.New("sets more than one of email, domain, group: write one entry each"))
	}
	if e := r.Email; e != "" {
		local, domain, ok := strings.Cut(e, "@")
		if !ok || local == "" || strings.Contains(domain, "@") || len(e) > 254 || hostname.Validate(domain) != nil || strings.HasPrefix(domain, "*.") {
			errs = append(errs, fmt.Errorf("email %q is not an email address", e))
		}
	}
	if d := r.Domain; d != "" && (hostname.Validate(d) != nil || strings.HasPrefix(d, "*.")) {
		errs = append(errs, fmt.Errorf("domain %q is not a domain name", d))
	}
	if len(r.Group) > 255 {
		errs = append(errs, fmt.Errorf("group of %d bytes, limit 255", len(r.Group)))
	}
	if r.Org == "" {
		errs = append(errs, errors.New("org is required: the name of the organization the users act in"))
	} else if len(r.Org) > 256 {
		errs = append(errs, fmt.Errorf("org of %d bytes, limit 256", len(r.Org)))
	}
	switch r.Role {
	case RoleViewer, RoleOperator, RoleAdmin:
	case apitype.Master:
		errs = append(errs, errors.New("role master is never granted through a login: only the master token is master; use admin"))
	case "":
		errs = append(errs, errors.New("role is required: viewer, operator or admin"))
	default:
		errs = append(errs, fmt.Errorf("role %q is not one of viewer, operator, admin", r.Role))
	}
	return errors.Join(errs...)
}

// matches reports whether s is a user r names.
func (r *OIDCRole) matches(s *oidc.Session) bool {
	switch {
	case r.Email != "":
		return s.EmailVerified && strings.EqualFold(r.Email, s.Email)
	case r.Domain != "":
		i := strings.LastIndexByte(s.Email, '@')
		return s.EmailVerified && i >= 0 && strings.EqualFold(r.Domain, s.Email[i+1:])
	case r.Group != "":
		for _, g := range s.Groups {
			if g == r.Group {
				return true
			}
		}
	}
	return false
}

// OIDCConfig is the admin login (admin_oidc).
type OIDCConfig struct {
	// Provider is the server's OpenID Connect provider (the oidc: block).
	// Required.
	Provider *oidc.Provider
	// Roles maps users to an organization and a role, first match wins;
	// at most MaxOIDCRoles, each valid (OIDCRole.Check). Read again on
	// every request: a user no entry matches any more is refused at once.
	// Empty maps nobody.
	Roles []OIDCRole
	// Count is called once per finished callback with its outcome
	// (LoginAdmitted, LoginDenied, LoginUnavailable), for metrics; nil
	// counts nothing. It must be safe for concurrent use.
	Count func(outcome string)
}

func (c *OIDCConfig) validate() error {
	var errs []error
	if c.Provider == nil {
		errs = append(errs, errors.New("admin: admin_oidc needs the server's oidc provider"))
	}
	if len(c.Roles) > MaxOIDCRoles {
		errs = append(errs, fmt.Errorf("admin: admin_oidc_roles has %d entries, limit %d", len(c.Roles), MaxOIDCRoles))
	}
	for i, r := range c.Roles {
		if err := r.Check(); err != nil {
			errs = append(errs, fmt.Errorf("admin: admin_oidc_roles[%d]: %w", i, err))
		}
	}
	return errors.Join(errs...)
}

// adminLogin is the API's side of the admin login: the App that runs it,
// the role mapping, and the organizations' IDs by name.
type adminLogin struct {
	app   *oidc.App
	roles []OIDCRole
	count func(string)
	// groups are the group names the roles name, in the order of their
	// first entry: a session keeps the first MaxKeptGroups of its user's.
	groups []string

	mu   sync.Mutex        // guards orgs
	orgs map[string]string // name → ID of organizations found; never deleted or renamed
}

func newAdminLogin(cfg *OIDCConfig, master string, now func() time.Time) (*adminLogin, error) {
	key, err := hkdf.Key(sha256.New, []byte(master), nil, sessionInfo, 32)
	if err != nil {
		return nil, fmt.Errorf("admin: session key: %w", err)
	}
	app, err := cfg.Provider.NewApp(oidc.AppConfig{
		Name: "admin", SessionCookie: SessionCookie, LoginCookie: LoginCookie,
		Keys: []oidc.Key{{ID: 1, Secret: key}}, SessionTTL: SessionTTL, Now: now,
	})
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	l := &adminLogin{app: app, roles: cfg.Roles, count: cfg.Count, orgs: map[string]string{}}
	if l.count == nil {
		l.count = func(string) {}
	}
	seen := map[string]bool{}
	for _, r := range cfg.Roles {
		if r.Group != "" && !seen[r.Group] {
			seen[r.Group] = true
			l.groups = append(l.groups, r.Group)
		}
	}
	return l, nil
}

// kept returns the groups of claimed that the roles name, in the roles'
// order, at most oidc.MaxKeptGroups: the first group entry a user matches
// at login is always kept.
func (l *adminLogin) kept(claimed []string) []string {
	if len(l.groups) == 0 || len(claimed) == 0 {
		return nil
	}
	has := make(map[string]bool, len(claimed))
	for _, g := range claimed {
		has[g] = true
	}
	var out []string
	for _, g := range l.groups {
		if has[g] {
			out = append(out, g)
			if len(out) == oidc.MaxKeptGroups {
				break
			}
		}
	}
	return out
}

// match returns the first entry that names s's user.
func (l *adminLogin) match(s *oidc.Session) (OIDCRole, bool) {
	for i := range l.roles {
		if l.roles[i].matches(s) {
			return l.roles[i], true
		}
	}
	return OIDCRole{}, false
}

// errNoOrg is the mapping naming an organization that does not exist.
var errNoOrg = errors.New("admin: admin_oidc_roles names an organization that does not exist")

// orgID returns the ID of the organization called name. Found IDs are
// kept (organizations are never deleted or renamed); a miss asks the
// store again next time.
func (a *API) orgID(ctx context.Context, name string) (string, error) {
	l := a.login
	l.mu.Lock()
	id, ok := l.orgs[name]
	l.mu.Unlock()
	if ok {
		return id, nil
	}
	orgs, err := a.store.ListOrgs(ctx)
	if err != nil {
		return "", err
	}
	for _, o := range orgs {
		if o.Name == name {
			l.mu.Lock()
			l.orgs[name] = o.ID
			l.mu.Unlock()
			return o.ID, nil
		}
	}
	return "", fmt.Errorf("%w: %q", errNoOrg, name)
}

// secure reports whether r reached the server over https.
func secure(r *http.Request) bool { return router.VisitorOf(r).Proto == "https" }

// host returns r's hostname, normalized: sessions are bound to it.
func host(r *http.Request) string { return hostname.Normalize(r.Host) }

// sessionCaller returns the caller of r's login session, mapped again now.
// Every refusal answers 401 and is audited as login_failed, sampled.
func (a *API) sessionCaller(r *http.Request) (caller, error) {
	s, err := a.login.app.Session(r, host(r), secure(r))
	if err != nil {
		a.loginFailed(r, "admin session refused: "+sessionReason(err))
		return caller{}, errUnauthorized
	}
	c, err := a.mapSession(r.Context(), &s)
	if errors.Is(err, errNoRole) || errors.Is(err, errNoOrg) {
		a.loginFailed(r, "admin session of "+s.User()+" maps to no role")
		return caller{}, errUnauthorized
	}
	return c, err
}

// errNoRole is a session whose user no entry of admin_oidc_roles names.
var errNoRole = errors.New("admin: no admin_oidc_roles entry names the user")

// mapSession returns the caller s acts as: the organization and role of
// the first entry naming its user.
func (a *API) mapSession(ctx context.Context, s *oidc.Session) (caller, error) {
	rule, ok := a.login.match(s)
	if !ok {
		return caller{}, errNoRole
	}
	org, err := a.orgID(ctx, rule.Org)
	if err != nil {
		return caller{}, err
	}
	return caller{key: store.AdminKey{OrgID: org, Role: rule.Role}, user: s.User(), session: s}, nil
}

// sessionReason names why a session was refused, for the audit detail:
// never the cookie itself.
func sessionReason(err error) string {
	if errors.Is(err, oidc.ErrNoSession) {
		return "none"
	}
	if errors.Is(err, oidc.ErrExpired) {
		return "expired"
	}
	return "invalid"
}

// hasSession reports whether r carries an admin session cookie and no
// Authorization header: a bearer credential always wins.
func (a *API) hasSession(r *http.Request) bool {
	return a.login != nil && r.Header.Get("Authorization") == "" && a.login.app.HasSession(r, secure(r))
}

// checkCSRF refuses a state-changing request of a login session (OIDC or
// key) without the session's token in CSRFHeader.
func checkCSRF(r *http.Request, c caller) error {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return nil
	}
	var ok bool
	switch {
	case c.session != nil:
		ok = c.session.CheckCSRF(r.Header.Get(CSRFHeader))
	case c.keySession != nil:
		ok = checkCSRFToken(r.Header.Get(CSRFHeader), c.keySession.CSRF)
	default:
		return nil // a bearer credential: no browser sends it by itself
	}
	if !ok {
		return errorf(http.StatusForbidden, "missing or wrong %s header: send the csrf token GET %s/whoami returns", CSRFHeader, Prefix)
	}
	return nil
}

// LoginHandler returns the handler of KeySessionPath, LogoutPath and,
// when admin_oidc is on, LoginPath (and 404 under /aperio/admin/
// otherwise). The server serves it behind admin_allowed_ips and charges
// each request to the visitor's bucket.
func (a *API) LoginHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case KeySessionPath:
			a.serveKeyLogin(w, r)
		case LoginPath:
			if a.login == nil {
				a.fail(w, r, errorf(http.StatusNotFound, "no such endpoint: %s (admin_oidc is off)", r.URL.Path))
				return
			}
			a.serveLogin(w, r)
		case LogoutPath:
			a.serveLogout(w, r)
		default:
			a.fail(w, r, errorf(http.StatusNotFound, "no such endpoint: %s", r.URL.Path))
		}
	})
}

// serveLogin starts a login, or with a session that still maps to a role
// goes straight to the redirect parameter (a same-host path, else "/").
func (a *API) serveLogin(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		a.fail(w, r, errorf(http.StatusMethodNotAllowed, "method %s is not allowed on %s", r.Method, r.URL.Path))
		return
	}
	ret := r.URL.Query().Get("redirect")
	if s, err := a.login.app.Session(r, host(r), secure(r)); err == nil {
		if _, err := a.mapSession(r.Context(), &s); err == nil {
			w.Header().Set("Location", oidc.SafeReturn(ret))
			w.Header().Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusFound)
			return
		}
	}
	a.login.app.Start(w, r, host(r), secure(r), ret)
}

// LoginCallback reports whether r, a request for the OIDC callback, ends
// an admin login (it carries the admin login cookie of its state) rather
// than a service's.
func (a *API) LoginCallback(r *http.Request) bool {
	return a.login != nil && a.login.app.Owns(r, host(r), secure(r))
}

// ServeLoginCallback finishes an admin login: the provider's answer is
// checked (oidc.App.Finish), the user mapped by admin_oidc_roles, the
// session cookie set and the browser sent to where the login started.
// A user no entry maps answers 403. Audited as admin_login, or
// login_failed (sampled).
func (a *API) ServeLoginCallback(w http.ResponseWriter, r *http.Request) {
	if a.login == nil || r.Method != http.MethodGet {
		a.fail(w, r, errorf(http.StatusNotFound, "no admin login in progress"))
		return
	}
	h, sec := host(r), secure(r)
	id, ret, err := a.login.app.Finish(w, r, h, sec)
	if err != nil {
		le, ok := errors.AsType[*oidc.LoginError](err)
		if !ok {
			le = &oidc.LoginError{Status: http.StatusInternalServerError, Reason: "internal error", Err: err}
		}
		outcome := LoginDenied
		if le.Status >= 500 {
			outcome = LoginUnavailable
			a.log.Warn("admin login failed", logkey.Hostname, h, logkey.Err, err)
		}
		a.login.count(outcome)
		a.loginFailed(r, "admin login refused: "+le.Reason)
		a.fail(w, r, errorf(le.Status, "%s", le.Reason))
		return
	}
	probe := oidc.Session{Subject: id.Subject, Email: id.Email, EmailVerified: id.EmailVerified, Groups: a.login.kept(id.Groups)}
	user := probe.User()
	c, err := a.mapSession(r.Context(), &probe)
	switch {
	case errors.Is(err, errNoRole), errors.Is(err, errNoOrg):
		a.login.count(LoginDenied)
		a.loginFailed(r, "admin login of "+user+": "+err.Error())
		a.fail(w, r, errorf(http.StatusForbidden, "your account is not mapped to any organization and role (admin_oidc_roles)"))
		return
	case err != nil:
		a.fail(w, r, err)
		return
	}
	if _, err := a.login.app.Issue(w, id, probe.Groups, h, sec); err != nil {
		a.login.count(LoginDenied)
		a.loginFailed(r, "admin login of "+user+": "+err.Error())
		a.fail(w, r, errorf(http.StatusForbidden, "your identity is too large to hold in a session"))
		return
	}
	a.login.count(LoginAdmitted)
	a.log.Info("admin login", logkey.User, user, logkey.OrgID, c.key.OrgID, logkey.Role, c.key.Role)
	a.audit(r, store.AuditEntry{OrgID: c.key.OrgID, Event: EventAdminLogin, Actor: c.actor(), Detail: "role " + c.key.Role + " from " + r.RemoteAddr})
	w.Header().Set("Location", ret)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusFound)
}

// serveLogout ends the session (a key session, else an OIDC one) of a
// POST carrying its CSRF token: 204, the cookie cleared. Without a
// session it answers 401, without the token 403.
func (a *API) serveLogout(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		a.fail(w, r, errorf(http.StatusMethodNotAllowed, "method %s is not allowed on %s: POST with the %s header", r.Method, r.URL.Path, CSRFHeader))
		return
	}
	if hasKeySession(r) {
		a.serveKeyLogout(w, r)
		return
	}
	if a.login == nil {
		a.fail(w, r, errUnauthorized)
		return
	}
	s, err := a.login.app.Session(r, host(r), secure(r))
	if err != nil {
		a.fail(w, r, errUnauthorized)
		return
	}
	if err := checkCSRF(r, caller{session: &s}); err != nil {
		a.fail(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	if err := a.login.app.End(r.Context(), w, s, secure(r)); err != nil {
		a.log.Warn("admin logout not recorded", logkey.Err, err)
		a.fail(w, r, errorf(http.StatusServiceUnavailable, "signed out in this browser, but the session could not be ended everywhere: try again"))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// whoami answers who the API takes the caller for.
func (a *API) whoami(w http.ResponseWriter, r *http.Request, c caller) error {
	out := WhoAmI{Actor: c.actor().String(), OrgID: c.key.OrgID, Role: c.key.Role}
	if c.master {
		def, err := a.defaultOrgID(r.Context())
		if err != nil {
			return err
		}
		out.OrgID, out.Role = def, apitype.Master
	}
	if c.session != nil {
		out.CSRF = c.session.CSRFToken()
	}
	if c.keySession != nil {
		out.CSRF = c.keySession.CSRF
	}
	a.writeJSON(w, r, http.StatusOK, out)
	return nil
}
