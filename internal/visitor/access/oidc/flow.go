package oidc

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"html"
	"log/slog"
	"net/http"
	"strings"
	"time"

	gooidc "github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/aperio-dev/aperio/internal/hostname"
	"github.com/aperio-dev/aperio/internal/logkey"
)

// The server's paths for the login flow, on every protected hostname.
const (
	// AuthPrefix is the prefix of every path ServeAuth answers.
	AuthPrefix = "/aperio/auth/"
	// LoginPath starts a login: GET ?redirect=<same-host path>.
	LoginPath = "/aperio/auth/login"
	// CallbackPath is where the provider sends the visitor back.
	CallbackPath = "/aperio/auth/callback"
	// LogoutPath shows a sign-out form (GET) and signs out (POST with
	// the session's CSRF token).
	LogoutPath = "/aperio/auth/logout"
)

// CSRFHeader and CSRFField carry the session's CSRF token on a logout
// POST; the header wins when both are present. The header is not an
// X-Aperio- name: the server removes those from visitors' requests.
const (
	CSRFHeader = "X-CSRF-Token"
	CSRFField  = "csrf"
)

// maxLogoutBody bounds a logout POST's form.
const maxLogoutBody = 4 << 10

// maxCodeBytes bounds the authorization code a callback accepts.
const maxCodeBytes = 4 << 10

// Errors of Check, for the caller's metrics and explain; Gate already
// answers each.
var (
	// ErrNoSession: the request carries no session cookie.
	ErrNoSession = errors.New("oidc: no session")
	// ErrSessionInvalid: the cookie does not open with the keyring, is
	// malformed, has expired, or was issued on another hostname.
	ErrSessionInvalid = errors.New("oidc: session refused")
	// ErrForbidden: the session is valid but the service's policy does not
	// admit its user.
	ErrForbidden = errors.New("oidc: user not allowed")
)

// Visit is what the caller knows of a request that the Provider does
// not decide itself.
type Visit struct {
	// Host is the hostname the request was routed by, normalized (lower
	// case, no port, see hostname.Normalize). Sessions are bound to it.
	Host string
	// Secure is true when the visitor's connection is https: TLS at the
	// server, or a trusted proxy said so. It selects the __Host- cookie
	// names, the Secure attribute and the scheme of the derived callback.
	Secure bool
	// Policy is the service's allow rules; nil admits every user the
	// provider logs in, like the zero Policy.
	Policy *Policy
}

func (v *Visit) policy() *Policy {
	if v.Policy == nil {
		return &Policy{}
	}
	return v.Policy
}

func sessionCookieName(secure bool) string {
	if secure {
		return SecureSessionCookie
	}
	return SessionCookie
}

// Check returns the session r carries for v: sealed by the keyring, not
// expired, issued on v.Host, and admitted by v.Policy. Its errors wrap
// ErrNoSession, ErrSessionInvalid or ErrForbidden; the latter comes with
// the session. It is the per-request hot path: it makes no call and
// takes no lock.
func (p *Provider) Check(r *http.Request, v Visit) (Session, error) {
	s, err := p.session(r, v)
	if err != nil {
		return Session{}, err
	}
	if !p.cfg.Now().Before(s.Expires) {
		return Session{}, fmt.Errorf("%w: expired at %s", ErrSessionInvalid, s.Expires.UTC().Format(time.RFC3339))
	}
	if !v.policy().Allows(&s) {
		return s, fmt.Errorf("%w: %s on %s", ErrForbidden, s.User(), v.Host)
	}
	return s, nil
}

// maxCandidates bounds how many cookies of one name are tried.
const maxCandidates = 4

// session opens r's session cookie for v.Host, whatever its expiry. A
// request may carry several cookies of the name: a sibling subdomain can
// set one for the parent domain (only the __Host- name is safe from
// that), and the browser may send it first. The first that opens and
// names v.Host wins, so such a cookie cannot shadow the real one.
func (p *Provider) session(r *http.Request, v Visit) (Session, error) {
	err := ErrNoSession
	for i, c := range r.CookiesNamed(sessionCookieName(v.Secure)) {
		if i == maxCandidates {
			break
		}
		var s Session
		if s, err = p.openSession(c.Value, v.Host); err == nil {
			return s, nil
		}
	}
	return Session{}, err
}

func (p *Provider) openSession(value, host string) (Session, error) {
	return openSealedSession(p.sessions, value, host)
}

// openSealedSession opens a session cookie's value sealed by sessions and
// checks that it was issued on host; every failure wraps
// ErrSessionInvalid.
func openSealedSession(sessions *Sealer, value, host string) (Session, error) {
	plain, err := sessions.Open(value)
	if err != nil {
		return Session{}, fmt.Errorf("%w: %w", ErrSessionInvalid, err)
	}
	s, err := decodeSession(plain)
	if err != nil {
		return Session{}, fmt.Errorf("%w: %w", ErrSessionInvalid, err)
	}
	if s.Host != host {
		return Session{}, fmt.Errorf("%w: issued on another hostname", ErrSessionInvalid)
	}
	return s, nil
}

// Gate decides a request to a protected service. With a valid session
// that the policy admits it returns the session and true, having written
// nothing. Otherwise it answers and returns false: 403 when the policy
// refuses the session's user; else, for a browser (a GET or HEAD that
// accepts text/html) a 302 to the provider that returns to this URL after
// login, and 401 for anything else. A refused cookie is cleared.
func (p *Provider) Gate(w http.ResponseWriter, r *http.Request, v Visit) (Session, bool) {
	s, err := p.Check(r, v)
	switch {
	case err == nil:
		return s, true
	case errors.Is(err, ErrForbidden):
		p.cfg.Logger.Debug("oidc user refused", logkey.Hostname, v.Host, logkey.User, s.User())
		refuse(w, http.StatusForbidden, "forbidden: your account may not use this site")
		return Session{}, false
	case errors.Is(err, ErrSessionInvalid):
		p.cfg.Logger.Debug("oidc session refused", logkey.Hostname, v.Host, logkey.Err, err)
		clearCookie(w, sessionCookieName(v.Secure), v.Secure)
	}
	if !browser(r) {
		refuse(w, http.StatusUnauthorized, "unauthorized: log in with a browser first")
		return Session{}, false
	}
	p.startLogin(w, r, v, safeReturn(r.URL.RequestURI()))
	return Session{}, false
}

// browser reports whether r is a navigation a login redirect can serve.
func browser(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	for _, a := range r.Header.Values("Accept") {
		if strings.Contains(a, "text/html") {
			return true
		}
	}
	return false
}

// ServeAuth answers the paths under AuthPrefix for v: LoginPath,
// CallbackPath, LogoutPath, and 404 for any other.
func (p *Provider) ServeAuth(w http.ResponseWriter, r *http.Request, v Visit) {
	switch r.URL.Path {
	case LoginPath:
		p.ServeLogin(w, r, v)
	case CallbackPath:
		p.ServeCallback(w, r, v)
	case LogoutPath:
		p.ServeLogout(w, r, v)
	default:
		refuse(w, http.StatusNotFound, "not found")
	}
}

// ServeLogin starts a login on GET or HEAD and returns afterwards to the
// query's redirect parameter, if it is a path on this host (else to "/").
// A visitor with a valid session goes there at once.
func (p *Provider) ServeLogin(w http.ResponseWriter, r *http.Request, v Visit) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		refuse(w, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	ret := safeReturn(r.URL.Query().Get("redirect"))
	if _, err := p.Check(r, v); err == nil {
		redirect(w, ret)
		return
	}
	p.startLogin(w, r, v, ret)
}

// loginFlow is where one kind of login keeps its state between the
// redirect to the provider and the callback: the login cookie's names and
// its sealer. Services' logins and each App's have their own, so that a
// login started for one never finishes as the other.
type loginFlow struct {
	sealer               *Sealer
	cookie, secureCookie string
}

func (f *loginFlow) name(secure bool) string {
	if secure {
		return f.secureCookie
	}
	return f.cookie
}

// startLogin redirects to the provider's authorization endpoint, with the
// state, nonce and PKCE verifier sealed in the login cookie.
func (p *Provider) startLogin(w http.ResponseWriter, r *http.Request, v Visit, ret string) {
	p.begin(w, r, &p.login, v.Host, v.Secure, ret)
}

// begin starts a login of flow fl on host, returning to ret (a checked
// same-host path) afterwards.
func (p *Provider) begin(w http.ResponseWriter, r *http.Request, fl *loginFlow, host string, secure bool, ret string) {
	redirectURI, err := p.redirectURI(r, host, secure)
	if err != nil {
		p.cfg.Logger.Debug("oidc login refused", logkey.Hostname, host, logkey.Err, err)
		refuse(w, http.StatusBadRequest, "bad request: unusable host")
		return
	}
	l := loginState{
		Host:        host,
		State:       random(32),
		Nonce:       random(32),
		Verifier:    oauth2.GenerateVerifier(),
		RedirectURI: redirectURI,
		Return:      ret,
		Expires:     p.cfg.Now().Add(p.cfg.LoginTTL),
	}
	http.SetCookie(w, &http.Cookie{
		Name:     fl.name(secure),
		Value:    fl.sealer.Seal(l.encode()),
		Path:     "/",
		MaxAge:   int(p.cfg.LoginTTL / time.Second),
		HttpOnly: true,
		Secure:   secure,
		SameSite: http.SameSiteLaxMode,
	})
	oc := p.oauth
	oc.RedirectURL = redirectURI
	redirect(w, oc.AuthCodeURL(l.State, oauth2.S256ChallengeOption(l.Verifier), gooidc.Nonce(l.Nonce)))
}

// redirectURI returns the callback URL for host: Config.RedirectURL when
// it names host, else <scheme>://<host>[:port]/aperio/auth/callback,
// with the port of r's Host header if it names the same host.
func (p *Provider) redirectURI(r *http.Request, host string, secure bool) (string, error) {
	if p.fixed != nil && hostname.Normalize(p.fixed.Host) == host {
		return p.cfg.RedirectURL, nil
	}
	if !plainHost(host) {
		return "", fmt.Errorf("oidc: host %q is not a DNS name", host)
	}
	authority := host
	if hostname.Normalize(r.Host) == host {
		if i := strings.LastIndexByte(r.Host, ':'); i >= 0 && digits(r.Host[i+1:]) {
			authority += r.Host[i:]
		}
	}
	scheme := "http"
	if secure {
		scheme = "https"
	}
	return scheme + "://" + authority + CallbackPath, nil
}

// plainHost reports whether h is letters, digits, hyphens and dots only,
// so it cannot carry anything into the URL built around it.
func plainHost(h string) bool {
	if h == "" || len(h) > hostname.MaxLen {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

func digits(s string) bool {
	if s == "" || len(s) > 5 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// ServeCallback finishes a login: it checks the provider's answer against
// the login cookie (state, host, age), exchanges the code with the PKCE
// verifier, verifies the ID token (signature, issuer, audience, expiry,
// nonce), checks v.Policy, sets the session cookie and redirects to the
// path the login started from. The login cookie is cleared whatever
// happens, so a callback URL works once. Answers: 400 for a callback
// without a matching login in progress, 401 when the provider refused
// the login or its token does not verify, 403 when the policy refuses the
// user, 502 when the provider could not be reached.
func (p *Provider) ServeCallback(w http.ResponseWriter, r *http.Request, v Visit) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		refuse(w, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	status, reason, err := p.callback(w, r, v)
	if err == nil {
		return
	}
	// Visitors can cause any 4xx at will, so those log at Debug; a 5xx
	// is the provider failing, which the operator must see.
	level := slog.LevelDebug
	if status >= 500 {
		level = slog.LevelWarn
	}
	p.cfg.Logger.Log(r.Context(), level, "oidc login refused", logkey.Hostname, v.Host, logkey.Reason, reason, logkey.Err, err)
	refuse(w, status, reason)
}

// callback does ServeCallback's work; on failure it returns the status
// and the short text for the visitor, and the error for the log.
func (p *Provider) callback(w http.ResponseWriter, r *http.Request, v Visit) (int, string, error) {
	id, l, err := p.finish(w, r, &p.login, v.Host, v.Secure)
	if err != nil {
		return err.Status, err.Reason, err.Err
	}
	pol := v.policy()
	s := Session{
		Host:          v.Host,
		Subject:       id.Subject,
		Email:         id.Email,
		EmailVerified: id.EmailVerified,
		Groups:        pol.keptGroups(id.Groups),
		Expires:       p.cfg.Now().Add(p.cfg.SessionTTL).Truncate(time.Second),
	}
	rand.Read(s.csrf[:]) // never fails
	if !pol.Allows(&s) {
		return http.StatusForbidden, "forbidden: your account may not use this site", fmt.Errorf("%w: %s on %s", ErrForbidden, s.User(), v.Host)
	}
	payload, perr := s.encode()
	if perr != nil {
		return http.StatusForbidden, "forbidden: identity too large to hold", perr
	}
	http.SetCookie(w, &http.Cookie{
		Name:     sessionCookieName(v.Secure),
		Value:    p.sessions.Seal(payload),
		Path:     "/",
		MaxAge:   int(p.cfg.SessionTTL / time.Second),
		HttpOnly: true,
		Secure:   v.Secure,
		SameSite: http.SameSiteLaxMode,
	})
	p.cfg.Logger.Info("oidc login", logkey.Hostname, v.Host, logkey.User, s.User())
	redirect(w, safeReturn(l.Return))
	return 0, "", nil
}

// LoginError is a callback refused before any session was issued: the
// status and the short text the browser gets, and the cause for the log.
type LoginError struct {
	// Status is 400 (no matching login in progress), 401 (the provider
	// refused, or its ID token does not verify), 403 (the identity cannot
	// be held) or 502 (the provider could not be reached).
	Status int
	// Reason is a short text safe to show the visitor.
	Reason string
	// Err is the cause, for the log only.
	Err error
}

func (e *LoginError) Error() string { return e.Reason + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *LoginError) Unwrap() error { return e.Err }

func loginErr(status int, reason string, err error) *LoginError {
	return &LoginError{Status: status, Reason: reason, Err: err}
}

// finish checks a callback of flow fl on host against its login cookie
// (state, host, age), exchanges the code with the PKCE verifier and
// verifies the ID token (signature, issuer, audience, expiry, nonce). It
// clears the login cookie whatever happens, so a callback URL works once.
func (p *Provider) finish(w http.ResponseWriter, r *http.Request, fl *loginFlow, host string, secure bool) (Identity, loginState, *LoginError) {
	name := fl.name(secure)
	cookies := r.CookiesNamed(name)
	if len(cookies) == 0 {
		return Identity{}, loginState{}, loginErr(http.StatusBadRequest, "bad request: no login in progress", errors.New("oidc: callback without a login cookie"))
	}
	clearCookie(w, name, secure)
	l, err := p.openLogin(fl, cookies, host)
	if err != nil {
		return Identity{}, loginState{}, loginErr(http.StatusBadRequest, "bad request: no login in progress", err)
	}
	if !p.cfg.Now().Before(l.Expires) {
		return Identity{}, loginState{}, loginErr(http.StatusBadRequest, "bad request: login expired, try again", fmt.Errorf("oidc: login expired at %s", l.Expires.UTC().Format(time.RFC3339)))
	}
	// The state comes first: only the provider this login went to knows
	// it, so nobody else can end the login, even with an error.
	q := r.URL.Query()
	if st := q.Get("state"); subtle.ConstantTimeCompare([]byte(st), []byte(l.State)) != 1 {
		return Identity{}, loginState{}, loginErr(http.StatusBadRequest, "bad request: state mismatch", errors.New("oidc: state mismatch"))
	}
	if e := q.Get("error"); e != "" {
		return Identity{}, loginState{}, loginErr(http.StatusUnauthorized, "unauthorized: the identity provider refused the login", fmt.Errorf("oidc: provider error %.64q: %.256q", e, q.Get("error_description")))
	}
	code := q.Get("code")
	if code == "" || len(code) > maxCodeBytes {
		return Identity{}, loginState{}, loginErr(http.StatusBadRequest, "bad request: no authorization code", fmt.Errorf("oidc: code of %d bytes", len(code)))
	}

	ctx, cancel := context.WithTimeout(p.clientContext(r.Context()), p.cfg.Timeout)
	defer cancel()
	oc := p.oauth
	oc.RedirectURL = l.RedirectURI
	tok, err := oc.Exchange(ctx, code, oauth2.VerifierOption(l.Verifier))
	if err != nil {
		if _, ok := errors.AsType[*oauth2.RetrieveError](err); ok {
			return Identity{}, loginState{}, loginErr(http.StatusUnauthorized, "unauthorized: the identity provider refused the code", err)
		}
		return Identity{}, loginState{}, loginErr(http.StatusBadGateway, "bad gateway: identity provider unreachable", err)
	}
	raw, ok := tok.Extra("id_token").(string)
	if !ok || raw == "" {
		return Identity{}, loginState{}, loginErr(http.StatusBadGateway, "bad gateway: identity provider sent no ID token", errors.New("oidc: token response without id_token"))
	}
	idt, err := p.verifier.Verify(ctx, raw)
	if err != nil {
		return Identity{}, loginState{}, loginErr(http.StatusUnauthorized, "unauthorized: ID token refused", err)
	}
	if subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(l.Nonce)) != 1 {
		return Identity{}, loginState{}, loginErr(http.StatusUnauthorized, "unauthorized: ID token refused", errors.New("oidc: nonce mismatch"))
	}
	cl, err := readClaims(idt)
	if err != nil {
		return Identity{}, loginState{}, loginErr(http.StatusUnauthorized, "unauthorized: ID token refused", err)
	}
	return Identity{Subject: idt.Subject, Email: strings.ToLower(cl.email), EmailVerified: cl.emailVerified, Groups: cl.groups}, l, nil
}

// openLogin returns the first of cookies that opens as a login on host
// (see session for why there may be several).
func (p *Provider) openLogin(fl *loginFlow, cookies []*http.Cookie, host string) (loginState, error) {
	var err error
	for i, c := range cookies {
		if i == maxCandidates {
			break
		}
		var plain []byte
		if plain, err = fl.sealer.Open(c.Value); err != nil {
			continue
		}
		var l loginState
		if l, err = decodeLogin(plain); err != nil {
			continue
		}
		if l.Host != host {
			err = fmt.Errorf("oidc: login started on %s", l.Host)
			continue
		}
		return l, nil
	}
	return loginState{}, err
}

// claims are the ID token claims a Policy reads.
type claims struct {
	email         string
	emailVerified bool
	groups        []string
}

// readClaims reads email, email_verified and groups from idt, accepting
// the shapes providers use: email_verified as a boolean or the string
// "true", groups as a list of strings or one string. A claim of another
// shape is an error; an absent one is empty.
func readClaims(idt *gooidc.IDToken) (claims, error) {
	var raw struct {
		Email         *string `json:"email"`
		EmailVerified any     `json:"email_verified"`
		Groups        any     `json:"groups"`
	}
	if err := idt.Claims(&raw); err != nil {
		return claims{}, fmt.Errorf("oidc: id token claims: %w", err)
	}
	var c claims
	if raw.Email != nil {
		c.email = *raw.Email
	}
	switch ev := raw.EmailVerified.(type) {
	case nil:
	case bool:
		c.emailVerified = ev
	case string:
		c.emailVerified = ev == "true"
	default:
		return claims{}, fmt.Errorf("oidc: email_verified of type %T", ev)
	}
	switch g := raw.Groups.(type) {
	case nil:
	case string:
		c.groups = []string{g}
	case []any:
		c.groups = make([]string, 0, len(g))
		for _, e := range g {
			s, ok := e.(string)
			if !ok {
				return claims{}, fmt.Errorf("oidc: groups entry of type %T", e)
			}
			c.groups = append(c.groups, s)
		}
	default:
		return claims{}, fmt.Errorf("oidc: groups of type %T", g)
	}
	return c, nil
}

// ServeLogout signs out. GET or HEAD never does: it shows a form that
// POSTs the session's CSRF token, so a link or image elsewhere cannot sign
// anyone out. POST clears the session cookie when it carries the token
// (CSRFHeader or the form field CSRFField) of the session it clears, and
// answers 403 otherwise. Signing out of the provider itself is not done.
func (p *Provider) ServeLogout(w http.ResponseWriter, r *http.Request, v Visit) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", "default-src 'none'; form-action 'self'; frame-ancestors 'none'")
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		s, err := p.session(r, v)
		h.Set("Content-Type", "text/html; charset=utf-8")
		if err != nil {
			fmt.Fprint(w, page("Signed out", "<p>You are not signed in on this site.</p>"))
			return
		}
		form := `<form method="post" action="` + LogoutPath + `">` +
			`<input type="hidden" name="` + CSRFField + `" value="` + html.EscapeString(s.CSRFToken()) + `">` +
			`<p>Signed in as ` + html.EscapeString(s.User()) + `.</p><button type="submit">Sign out</button></form>`
		fmt.Fprint(w, page("Sign out", form))
	case http.MethodPost:
		r.Body = http.MaxBytesReader(w, r.Body, maxLogoutBody)
		token := r.Header.Get(CSRFHeader)
		if token == "" {
			if err := r.ParseForm(); err != nil {
				refuse(w, http.StatusBadRequest, "bad request: unreadable form")
				return
			}
			token = r.PostForm.Get(CSRFField)
		}
		s, err := p.session(r, v)
		if err != nil || !s.checkCSRF(token) {
			p.cfg.Logger.Debug("oidc logout refused", logkey.Hostname, v.Host, logkey.Err, err)
			refuse(w, http.StatusForbidden, "forbidden: sign out from the sign-out page")
			return
		}
		clearCookie(w, sessionCookieName(v.Secure), v.Secure)
		h.Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, page("Signed out", "<p>You are signed out.</p>"))
	default:
		h.Set("Allow", "GET, HEAD, POST")
		refuse(w, http.StatusMethodNotAllowed, "method not allowed")
	}
}

func page(title, body string) string {
	return "<!doctype html><html><head><meta charset=\"utf-8\"><title>" + title + "</title></head><body>" + body + "</body></html>\n"
}

// random returns n random bytes as unpadded base64url.
func random(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails
	return base64.RawURLEncoding.EncodeToString(b)
}

// redirect answers 302 to target, which is either a checked same-host
// path or the provider's URL; it is not cleaned or rewritten.
func redirect(w http.ResponseWriter, target string) {
	w.Header().Set("Location", target)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusFound)
}

// refuse answers status with a short plain-text reason.
func refuse(w http.ResponseWriter, status int, msg string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	fmt.Fprintln(w, msg)
}

func clearCookie(w http.ResponseWriter, name string, secure bool) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: secure, SameSite: http.SameSiteLaxMode})
}
