package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/internal/visitor/access/oidc"
	"github.com/aperio-dev/aperio/store"
)

// The roles of admin keys, as the API and the store spell them. Each role
// may do what the roles before it may.
// They are declared in wire, which the API's Go client shares.
const (
	// RoleViewer reads every listing of its organization.
	RoleViewer = apitype.RoleViewer
	// RoleOperator also turns maintenance on and off and disarms scaling
	// records.
	RoleOperator = apitype.RoleOperator
	// RoleAdmin also mints and revokes tokens and creates and deletes
	// admin keys.
	RoleAdmin = apitype.RoleAdmin
)

// Roles returns the roles of admin keys, least privileged first.
func Roles() []string { return apitype.Roles() }

// role ranks what a caller may do; a caller may call a route whose minimum
// role is at most its own.
type role int

const (
	roleNone     role = iota // no authentication at all
	roleViewer               // reads
	roleOperator             // maintenance, scaling disarm, client disable
	roleAdmin                // tokens and admin keys
	roleMaster               // organizations: the master token only
)

// parseRole returns the rank of a key role, or roleNone.
func parseRole(s string) role {
	switch s {
	case RoleViewer:
		return roleViewer
	case RoleOperator:
		return roleOperator
	case RoleAdmin:
		return roleAdmin
	}
	return roleNone
}

func (r role) String() string {
	switch r {
	case roleViewer:
		return RoleViewer
	case roleOperator:
		return RoleOperator
	case roleAdmin:
		return RoleAdmin
	case roleMaster:
		return apitype.Master
	}
	return "none"
}

// keyPrefix and tokenPrefix start every admin key and client token secret.
const (
	keyPrefix   = "apk_"
	tokenPrefix = "apr_"
)

// caller is who made a request: the master token, an admin key, or a
// login session (OIDC, or a key session standing for either).
type caller struct {
	master bool
	// key is the admin key; for a login session, only its organization
	// and role (those of its admin_oidc_roles entry); zero for the master
	// token.
	key store.AdminKey
	// user and session are a login session's user (its email, else its
	// subject) and session; "" and nil otherwise.
	user    string
	session *oidc.Session
	// keySession is the key session the request came with (of the master
	// token or of key); nil otherwise.
	keySession *store.AdminSession
}

// actor names the caller in audit entries and CreatedBy fields.
func (c caller) actor() store.Actor {
	switch {
	case c.master:
		return store.MasterActor
	case c.session != nil:
		return store.OIDCActor(c.user)
	}
	return store.AdminKeyActor(c.key.ID)
}

// scope is the organization the caller's lookups and listings are limited
// to; "" (every organization) for the master token.
func (c caller) scope() string {
	if c.master {
		return ""
	}
	return c.key.OrgID
}

// sees reports whether a record of organization orgID is visible to c.
func (c caller) sees(orgID string) bool {
	return c.master || orgID == c.key.OrgID
}

func (c caller) allow(min role) error {
	if c.master {
		return nil
	}
	if min == roleMaster {
		return errorf(http.StatusForbidden, "only the master token may do this")
	}
	if have := parseRole(c.key.Role); have < min {
		who := "an admin key"
		if c.session != nil {
			who = "a login"
		}
		return errorf(http.StatusForbidden, "%s with role %s may not do this: it needs role %s", who, c.key.Role, min)
	}
	return nil
}

// errUnauthorized is answered to a request without valid credentials.
var errUnauthorized = &httpError{
	status: http.StatusUnauthorized,
	msg:    "missing or invalid credentials: send Authorization: Bearer <master token or apk_ key>, or log in at " + LoginPath,
}

// authenticate returns the caller of r: its bearer credential, or without
// an Authorization header its key session, else its admin login session.
// A missing or wrong credential answers errUnauthorized and is audited as
// login_failed.
func (a *API) authenticate(r *http.Request) (caller, error) {
	if hasKeySession(r) {
		return a.keySessionCaller(r)
	}
	if a.hasSession(r) {
		return a.sessionCaller(r)
	}
	secret, ok := bearer(r.Header.Get("Authorization"))
	if !ok {
		a.loginFailed(r, "no bearer credential")
		return caller{}, errUnauthorized
	}
	return a.credential(r, secret)
}

// credential returns the caller secret stands for: the master token or an
// admin key, as a bearer credential or a key login presents it. A wrong
// secret answers errUnauthorized and is audited as login_failed.
func (a *API) credential(r *http.Request, secret string) (caller, error) {
	sum := sha256.Sum256([]byte(secret))
	if subtle.ConstantTimeCompare(sum[:], a.master[:]) == 1 {
		return caller{master: true}, nil
	}
	if !strings.HasPrefix(secret, keyPrefix) {
		a.loginFailed(r, "unknown credential")
		return caller{}, errUnauthorized
	}
	k, err := a.store.AdminKeyByHash(r.Context(), sum[:])
	switch {
	case errors.Is(err, store.ErrNotFound):
		a.loginFailed(r, "unknown admin key "+secretPrefix(secret))
		return caller{}, errUnauthorized
	case err != nil:
		return caller{}, fmt.Errorf("look up admin key: %w", err)
	}
	if k.ExpiresAt != nil && !a.now().Before(*k.ExpiresAt) {
		a.loginFailed(r, "expired admin key "+secretPrefix(secret))
		return caller{}, errUnauthorized
	}
	if parseRole(k.Role) == roleNone {
		// Written by something other than this API; refuse rather than
		// guess what it may do.
		a.log.Error("admin key with unknown role", logkey.KeyID, k.ID, logkey.Role, k.Role)
		return caller{}, errorf(http.StatusForbidden, "admin key has unknown role %q", k.Role)
	}
	return caller{key: k}, nil
}

// bearer returns the credential of an "Authorization: Bearer X" header.
func bearer(h string) (string, bool) {
	scheme, cred, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	cred = strings.TrimSpace(cred)
	return cred, cred != ""
}

// loginFailed audits a failed login, within the budget.
func (a *API) loginFailed(r *http.Request, why string) {
	ok, suppressed, first := a.logins.admit(a.now())
	if first {
		a.log.Warn("failed logins over budget, not auditing the rest of this minute",
			logkey.Limit, maxFailedLoginAudits, logkey.RemoteAddr, r.RemoteAddr)
	}
	if !ok {
		return
	}
	detail := fmt.Sprintf("%s from %s", why, r.RemoteAddr)
	if suppressed > 0 {
		detail += fmt.Sprintf(" (%d earlier failed logins over budget, not audited)", suppressed)
	}
	a.audit(r, store.AuditEntry{Event: EventLoginFailed, Actor: store.AnonymousActor, Detail: detail})
}

// maxFailedLoginAudits bounds the login_failed entries written per minute,
// so that a flood of bad requests cannot flood the store; a credential
// cannot be guessed anyway (the master token is compared as a hash, keys
// carry 256 random bits).
const maxFailedLoginAudits = 60

// loginBudget counts failed logins in fixed one-minute windows.
type loginBudget struct {
	mu         sync.Mutex // guards the following fields
	window     time.Time  // start of the current window
	n          int        // failed logins audited in the window
	suppressed int        // failed logins not audited since the last one that was
	warned     bool       // the window's first suppression was logged
}

// admit counts one failed login at now. It reports whether to audit it, how
// many were suppressed before it (reset once reported), and whether this is
// the first suppression of the window (to log once).
func (b *loginBudget) admit(now time.Time) (ok bool, suppressed int, first bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if now.Sub(b.window) >= time.Minute || now.Before(b.window) {
		b.window, b.n, b.warned = now, 0, false
	}
	if b.n >= maxFailedLoginAudits {
		b.suppressed++
		first := !b.warned
		b.warned = true
		return false, 0, first
	}
	b.n++
	suppressed, b.suppressed = b.suppressed, 0
	return true, suppressed, false
}

// secretPrefix returns the displayable start of a secret: what listings
// show as prefix. It is safe to log.
func secretPrefix(secret string) string {
	if len(secret) > prefixLen {
		return secret[:prefixLen]
	}
	return secret
}
