package admin

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aperio-dev/aperio/internal/b64"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/internal/visitor/access/oidc"
	"github.com/aperio-dev/aperio/router"
	"github.com/aperio-dev/aperio/store"
)

// The key login: a browser exchanges an admin key or the master token for
// a session kept in the store, so that the dashboard holds no secret a
// script could read. It works whether admin_oidc is on or off.
const (
	// KeySessionPath logs in: POST a form (fields key and redirect) or
	// JSON {"key": "..."}. LogoutPath ends the session it starts.
	KeySessionPath = "/aperio/admin/session"
	// KeySessionCookie holds the session's secret over plain http; over
	// https its name gets the __Host- prefix. The store keeps only the
	// secret's SHA-256. It is not aperio_session, the cookie of the
	// services' OIDC logins (oidc.SessionCookie), which /aperio/ on a
	// protected hostname also receives: the two logins would overwrite
	// each other's cookie. The server never forwards it to a backend
	// (access.CookieAdminSession).
	KeySessionCookie = "aperio_admin_session"
	// KeyLoginPage is where a refused form login is sent back to, with
	// error=invalid: the dashboard's login page.
	KeyLoginPage = "/aperio/ui/login"
	// KeyLoginDefaultRedirect is where a form login goes without a
	// redirect field: the dashboard.
	KeyLoginDefaultRedirect = "/aperio/"
)

// MaxKeyLoginBytes bounds the body of a POST to KeySessionPath: a key, a
// redirect path and the form's punctuation fit many times over. A larger
// body is answered 413.
const MaxKeyLoginBytes = 4 << 10

// keyLoginReadTimeout bounds the time a client may take to send a
// login's body once its head is read, so that a slow sender cannot hold
// a request open (the server's listener bounds the head). A variable for
// the tests.
var keyLoginReadTimeout = 10 * time.Second

// MaxKeySessions bounds the live sessions of one admin key (and of the
// master token): a login beyond it ends the oldest, so that a script
// logging in in a loop cannot grow the table.
const MaxKeySessions = 32

// maxSessionCandidates bounds the well-formed cookies of the session's
// name looked up per request, and maxSessionCookies the cookies of that
// name read at all: values that cannot be a secret cost no lookup and do
// not count, so cookies a sibling subdomain planted over plain http (over
// https the name carries __Host-, which no sibling can set) shadow the
// real one only by spending a lookup each, and a request costs at most
// maxSessionCandidates lookups.
const (
	maxSessionCandidates = 16
	maxSessionCookies    = 1024
)

// keySecretBytes is the entropy of a session's secret and of its CSRF
// token.
const keySecretBytes = 32

// keySecretLen is the length of a secret as the cookie carries it
// (unpadded base64url).
var keySecretLen = base64.RawURLEncoding.EncodedLen(keySecretBytes)

// KeyLoginRequest is the JSON body of POST KeySessionPath.
type KeyLoginRequest struct {
	// Key is the master token or an apk_ admin key.
	Key string `json:"key"`
}

// KeyLogin is the answer to a JSON POST KeySessionPath: the session
// cookie is set beside it.
type KeyLogin struct {
	// CSRF is the token every state-changing request of the session sends
	// in CSRFHeader (GET /whoami returns it too).
	CSRF string `json:"csrf"`
	// ExpiresAt is when the session ends, whatever the browser keeps.
	ExpiresAt time.Time `json:"expires_at"`
}

// keySessionCookieName is the session cookie's name for a request over
// https (secure) or plain http.
func keySessionCookieName(secure bool) string {
	if secure {
		return "__Host-" + KeySessionCookie
	}
	return KeySessionCookie
}

// hasKeySession reports whether r carries a key session cookie and no
// Authorization header: a bearer credential always wins.
func hasKeySession(r *http.Request) bool {
	return r.Header.Get("Authorization") == "" && len(r.CookiesNamed(keySessionCookieName(secure(r)))) > 0
}

// keySessionHashes returns the hashes of the well-formed secrets among the
// cookies of the session's name (see maxSessionCandidates). A value that
// is not a secret costs no lookup.
func keySessionHashes(r *http.Request) [][]byte {
	var out [][]byte
	for i, c := range r.CookiesNamed(keySessionCookieName(secure(r))) {
		if i == maxSessionCookies || len(out) == maxSessionCandidates {
			break
		}
		if len(c.Value) != keySecretLen {
			continue
		}
		raw, err := b64.DecodeRawURL(c.Value)
		if err != nil || len(raw) != keySecretBytes {
			continue
		}
		sum := sha256.Sum256(raw)
		out = append(out, sum[:])
	}
	return out
}

// keySessionCaller returns the caller of r's key session: the master
// token, or its admin key as stored now (its current organization and
// role). A session that is unknown, expired (its row deleted then) or of
// a key that no longer exists answers 401, audited as login_failed.
func (a *API) keySessionCaller(r *http.Request) (caller, error) {
	ctx := r.Context()
	var (
		s     store.AdminSession
		found bool
	)
	for _, h := range keySessionHashes(r) {
		var err error
		s, err = a.store.AdminSessionByHash(ctx, h)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return caller{}, err
		}
		found = true
		break
	}
	if !found {
		a.loginFailed(r, "admin key session refused: invalid")
		return caller{}, errUnauthorized
	}
	if !a.now().Before(s.ExpiresAt) {
		a.endKeySession(r, s.Hash)
		a.loginFailed(r, "admin key session refused: expired")
		return caller{}, errUnauthorized
	}
	if s.Master {
		return caller{master: true, keySession: &s}, nil
	}
	k, err := a.store.AdminKey(ctx, "", s.KeyID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		// Deleting a key deletes its sessions; this one raced it.
		a.endKeySession(r, s.Hash)
		a.loginFailed(r, "admin key session refused: key "+s.KeyID+" deleted")
		return caller{}, errUnauthorized
	case err != nil:
		return caller{}, err
	}
	if k.ExpiresAt != nil && !a.now().Before(*k.ExpiresAt) {
		a.endKeySession(r, s.Hash)
		a.loginFailed(r, "admin key session refused: key "+s.KeyID+" expired")
		return caller{}, errUnauthorized
	}
	if parseRole(k.Role) == roleNone {
		a.log.Error("admin key with unknown role", logkey.KeyID, k.ID, logkey.Role, k.Role)
		return caller{}, errorf(http.StatusForbidden, "admin key has unknown role %q", k.Role)
	}
	return caller{key: k, keySession: &s}, nil
}

// endKeySession deletes the session of hash; one already gone is no
// error. A failure is logged: the session expires anyway.
func (a *API) endKeySession(r *http.Request, hash []byte) {
	if err := a.store.DeleteAdminSession(r.Context(), hash); err != nil && !errors.Is(err, store.ErrNotFound) {
		a.log.Warn("delete admin key session", logkey.Err, err)
	}
}

// checkCSRFToken reports, in constant time, whether got is want.
func checkCSRFToken(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// sameOrigin reports whether r carries no Origin header, or exactly one
// naming r's own scheme and host: a page of another site cannot log a
// browser in to a session of the attacker's choosing.
func sameOrigin(r *http.Request) bool {
	origins := r.Header.Values("Origin")
	switch len(origins) {
	case 0:
		return true
	case 1:
	default:
		return false
	}
	scheme := "http"
	if secure(r) {
		scheme = "https"
	}
	return strings.EqualFold(origins[0], scheme+"://"+r.Host)
}

// keyLoginInput is what a login request carries.
type keyLoginInput struct {
	form     bool // a form post: answers are redirects
	key      string
	redirect string
}

// readKeyLogin reads r's body, at most MaxKeyLoginBytes, as a form or as
// JSON by its Content-Type.
func readKeyLogin(w http.ResponseWriter, r *http.Request) (keyLoginInput, error) {
	var in keyLoginInput
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch {
	case err != nil:
		return in, errorf(http.StatusUnsupportedMediaType, "send the key as application/x-www-form-urlencoded or application/json")
	case mt == "application/x-www-form-urlencoded":
		in.form = true
	case mt == "application/json":
	default:
		return in, errorf(http.StatusUnsupportedMediaType, "content type %s: send the key as application/x-www-form-urlencoded or application/json", mt)
	}
	// A connection that cannot take a deadline (none in the server's
	// own listeners) is read without one: the size bound still holds.
	rc := http.NewResponseController(w)
	deadline := rc.SetReadDeadline(time.Now().Add(keyLoginReadTimeout)) == nil
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxKeyLoginBytes))
	if deadline && err == nil {
		// The next request on the connection gets the server's own. After
		// an error the connection is not reused, and lifting the deadline
		// would let the server wait for the rest of the body.
		rc.SetReadDeadline(time.Time{})
	}
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			return in, errorf(http.StatusRequestEntityTooLarge, "request body is larger than %d bytes", mbe.Limit)
		}
		return in, errorf(http.StatusBadRequest, "cannot read the request body: %v", err)
	}
	if !in.form {
		var req KeyLoginRequest
		if err := decodeBody(body, &req, false); err != nil {
			return in, err
		}
		in.key = req.Key
		return in, nil
	}
	vals, err := url.ParseQuery(string(body))
	if err != nil {
		return in, errorf(http.StatusBadRequest, "malformed form body")
	}
	for name, vs := range vals {
		if len(vs) != 1 {
			return in, errorf(http.StatusBadRequest, "form field %q appears %d times, want once", name, len(vs))
		}
	}
	in.key, in.redirect = vals.Get("key"), vals.Get("redirect")
	return in, nil
}

// serveKeyLogin exchanges the key of a POST for a session: the cookie, and
// a 303 to the redirect field (a same-host path, else
// KeyLoginDefaultRedirect) for a form, KeyLogin for JSON. A wrong key
// sends a form back to KeyLoginPage?error=invalid and answers JSON 401,
// audited as login_failed (sampled). A POST from another origin is 403.
// Each login first purges the expired sessions.
func (a *API) serveKeyLogin(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		a.fail(w, r, errorf(http.StatusMethodNotAllowed, "method %s is not allowed on %s: POST the key", r.Method, r.URL.Path))
		return
	}
	if !sameOrigin(r) {
		a.loginFailed(r, "admin key login from another origin")
		a.fail(w, r, errorf(http.StatusForbidden, "login from another origin refused"))
		return
	}
	in, err := readKeyLogin(w, r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	c, err := a.credential(r, in.key)
	if err != nil {
		var he *httpError
		if in.form && errors.As(err, &he) && (he.status == http.StatusUnauthorized || he.status == http.StatusForbidden) {
			w.Header().Set("Location", KeyLoginPage+"?error=invalid")
			w.Header().Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusSeeOther)
			return
		}
		a.fail(w, r, err)
		return
	}
	ctx := r.Context()
	now := a.now()
	if _, err := a.store.DeleteExpiredAdminSessions(ctx, now); err != nil {
		a.fail(w, r, err)
		return
	}
	var secret, csrf [keySecretBytes]byte
	rand.Read(secret[:]) // never fails
	rand.Read(csrf[:])
	sum := sha256.Sum256(secret[:])
	s := store.AdminSession{
		Hash:      sum[:],
		KeyID:     c.key.ID,
		Master:    c.master,
		OrgID:     c.key.OrgID,
		CSRF:      base64.RawURLEncoding.EncodeToString(csrf[:]),
		ExpiresAt: now.Add(a.keyTTL),
	}
	if v := router.VisitorOf(r).Addr; v.IsValid() {
		s.RemoteAddr = v.String()
	}
	s, err = a.store.CreateAdminSession(ctx, s, MaxKeySessions)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	sec := secure(r)
	http.SetCookie(w, &http.Cookie{
		Name:     keySessionCookieName(sec),
		Value:    base64.RawURLEncoding.EncodeToString(secret[:]),
		Path:     "/",
		MaxAge:   int(a.keyTTL / time.Second),
		HttpOnly: true,
		Secure:   sec,
		SameSite: http.SameSiteStrictMode,
	})
	role := c.key.Role
	if c.master {
		role = apitype.Master
	}
	a.log.Info("admin key login", logkey.KeyID, c.key.ID, logkey.OrgID, c.key.OrgID, logkey.Role, role)
	a.audit(r, store.AuditEntry{OrgID: c.key.OrgID, Event: EventAdminLogin, Actor: c.actor(),
		Detail: "key session, role " + role + " from " + r.RemoteAddr})
	if in.form {
		ret := KeyLoginDefaultRedirect
		if in.redirect != "" {
			ret = oidc.SafeReturn(in.redirect)
		}
		w.Header().Set("Location", ret)
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusSeeOther)
		return
	}
	a.writeJSON(w, r, http.StatusOK, KeyLogin{CSRF: s.CSRF, ExpiresAt: s.ExpiresAt})
}

// serveKeyLogout ends r's key session: deleted in the store, the cookie
// cleared, 204. Without a valid session 401, without its CSRF token 403.
func (a *API) serveKeyLogout(w http.ResponseWriter, r *http.Request) {
	c, err := a.keySessionCaller(r)
	if err == nil {
		err = checkCSRF(r, c)
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if err := a.store.DeleteAdminSession(r.Context(), c.keySession.Hash); err != nil && !errors.Is(err, store.ErrNotFound) {
		a.fail(w, r, err)
		return
	}
	sec := secure(r)
	http.SetCookie(w, &http.Cookie{Name: keySessionCookieName(sec), Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: sec, SameSite: http.SameSiteStrictMode})
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}
