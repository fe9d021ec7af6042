package oidc

import (
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Bounds of the groups claim an App reads: a provider that claims more
// groups than MaxClaimedGroups refuses the login (403), and a group
// longer than MaxClaimedGroupBytes is ignored (no rule can name it).
const (
	MaxClaimedGroups     = 256
	MaxClaimedGroupBytes = 256
)

// ErrExpired is wrapped, with ErrSessionInvalid, by App.Session's error
// for a session past its sealed expiry.
var ErrExpired = errors.New("oidc: session expired")

// MaxKeptGroups is how many groups an App's session keeps.
const MaxKeptGroups = maxGroups

// Identity is who the provider logged in, from a verified ID token.
type Identity struct {
	// Subject is the provider's stable id of the user (sub).
	Subject string
	// Email is the email claim, lowercased; empty if none.
	Email string
	// EmailVerified is the email_verified claim.
	EmailVerified bool
	// Groups is the groups claim: for an App at most MaxClaimedGroups,
	// none longer than MaxClaimedGroupBytes.
	Groups []string
}

// AppConfig configures an App: a login of the server's own pages (the
// admin API), apart from the services' logins.
type AppConfig struct {
	// Name tells the App's cookies apart from the services' and any other
	// App's: it is the purpose their keys are derived for. Required.
	Name string
	// SessionCookie and LoginCookie are the cookies' names over plain
	// http; over https they get the __Host- prefix. Required, distinct,
	// and not the services' names.
	SessionCookie, LoginCookie string
	// Keys seal both cookies (see Sealer): the caller derives them for
	// this App only. Required.
	Keys []Key
	// SessionTTL is how long a session lasts after login, enforced by the
	// expiry sealed inside the cookie, not only by the cookie's Max-Age.
	// Required: 1 s to MaxSessionTTL.
	SessionTTL time.Duration
	// Now is the clock of the sessions' expiry; nil means the Provider's.
	Now func() time.Time
}

// App runs a login of an application of the server itself against the
// Provider, through the same callback path as the services' logins: it
// has its own login cookie, so the server tells its callbacks apart
// (Owns), and its own session cookie, which holds an Identity, a CSRF
// token and an expiry. Which groups a session keeps, and what the
// identity may do, is the caller's. It is immutable and safe for
// concurrent use.
type App struct {
	p        *Provider
	cfg      AppConfig
	login    loginFlow
	sessions *Sealer
}

// NewApp returns an App of p, or the problems of cfg.
func (p *Provider) NewApp(cfg AppConfig) (*App, error) {
	var errs []error
	if cfg.Name == "" {
		errs = append(errs, errors.New("oidc: app needs a name"))
	}
	if cfg.SessionCookie == "" || cfg.LoginCookie == "" || cfg.SessionCookie == cfg.LoginCookie {
		errs = append(errs, errors.New("oidc: app needs two distinct cookie names"))
	}
	for _, n := range []string{cfg.SessionCookie, cfg.LoginCookie} {
		if n == SessionCookie || n == LoginCookie {
			errs = append(errs, fmt.Errorf("oidc: app cookie %q is a service cookie", n))
		}
	}
	if cfg.SessionTTL < time.Second || cfg.SessionTTL > MaxSessionTTL {
		errs = append(errs, fmt.Errorf("oidc: app session ttl %v outside [1s, %v]", cfg.SessionTTL, MaxSessionTTL))
	}
	// Both sealers take the same keys: the second can only fail where
	// the first did.
	logins, err := NewSealer("app "+cfg.Name+" login", cfg.Keys...)
	var sessions *Sealer
	if err == nil {
		sessions, err = NewSealer("app "+cfg.Name+" session", cfg.Keys...)
	}
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if cfg.Now == nil {
		cfg.Now = p.cfg.Now
	}
	return &App{
		p:        p,
		cfg:      cfg,
		login:    loginFlow{sealer: logins, cookie: cfg.LoginCookie, secureCookie: "__Host-" + cfg.LoginCookie},
		sessions: sessions,
	}, nil
}

// SessionCookieName returns the name of the session cookie: with the
// __Host- prefix when secure.
func (a *App) SessionCookieName(secure bool) string {
	if secure {
		return "__Host-" + a.cfg.SessionCookie
	}
	return a.cfg.SessionCookie
}

// Start answers a 302 to the provider that returns, through the callback
// on host, to ret if it is a path on the same host (else to "/"). ret is
// checked here; the caller passes what the browser asked for.
func (a *App) Start(w http.ResponseWriter, r *http.Request, host string, secure bool, ret string) {
	a.p.begin(w, r, &a.login, host, secure, safeReturn(ret))
}

// SafeReturn returns target if it is a path on the same host, and "/"
// otherwise: the rule every login applies to where it returns.
func SafeReturn(target string) string { return safeReturn(target) }

// Owns reports whether r, a request for CallbackPath on host, is the
// callback of a login this App started: it carries the App's login
// cookie, sealed for host, whose state is r's. It makes no call.
func (a *App) Owns(r *http.Request, host string, secure bool) bool {
	cookies := r.CookiesNamed(a.login.name(secure))
	if len(cookies) == 0 {
		return false
	}
	l, err := a.p.openLogin(&a.login, cookies, host)
	if err != nil {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(r.URL.Query().Get("state")), []byte(l.State)) == 1
}

// Finish completes a login this App started: the checks of the services'
// callback (login cookie, state, code exchange with the PKCE verifier, ID
// token), then the bound of the groups claim. It returns the identity and
// the path to return to, and clears the login cookie whatever happens. It
// writes nothing else: the caller decides whether the identity may log
// in, and calls Issue. Its error is a *LoginError.
func (a *App) Finish(w http.ResponseWriter, r *http.Request, host string, secure bool) (Identity, string, error) {
	id, l, lerr := a.p.finish(w, r, &a.login, host, secure)
	if lerr != nil {
		return Identity{}, "", lerr
	}
	if len(id.Groups) > MaxClaimedGroups {
		return Identity{}, "", loginErr(http.StatusForbidden, "forbidden: your account claims too many groups", fmt.Errorf("oidc: %d groups claimed, limit %d", len(id.Groups), MaxClaimedGroups))
	}
	kept := id.Groups[:0:0]
	for _, g := range id.Groups {
		if g != "" && len(g) <= MaxClaimedGroupBytes {
			kept = append(kept, g)
		}
	}
	id.Groups = kept
	return id, safeReturn(l.Return), nil
}

// Issue sets the session cookie for id on host, keeping the groups keep
// (at most MaxKeptGroups, each at most 255 bytes: those the caller's
// rules name), and returns the session. It refuses an identity too large
// for a cookie.
func (a *App) Issue(w http.ResponseWriter, id Identity, keep []string, host string, secure bool) (Session, error) {
	s := Session{
		Host:          host,
		Subject:       id.Subject,
		Email:         id.Email,
		EmailVerified: id.EmailVerified,
		Groups:        keep,
		Expires:       a.cfg.Now().Add(a.cfg.SessionTTL).Truncate(time.Second),
	}
	rand.Read(s.csrf[:]) // never fails
	payload, err := s.encode()
	if err != nil {
		return Session{}, err
	}
	value := a.sessions.Seal(payload)
	if len(value) > MaxSealedBytes {
		return Session{}, fmt.Errorf("oidc: session of %d bytes sealed, limit %d", len(value), MaxSealedBytes)
	}
	http.SetCookie(w, &http.Cookie{
		Name:     a.SessionCookieName(secure),
		Value:    value,
		Path:     "/",
		MaxAge:   int(a.cfg.SessionTTL / time.Second),
		HttpOnly: true,
		Secure:   secure,
		SameSite: http.SameSiteLaxMode,
	})
	return s, nil
}

// HasSession reports whether r carries the App's session cookie at all,
// valid or not.
func (a *App) HasSession(r *http.Request, secure bool) bool {
	return len(r.CookiesNamed(a.SessionCookieName(secure))) > 0
}

// Session returns the session r carries for host: sealed by the App's
// keys, issued on host, not expired. Its errors wrap ErrNoSession or
// ErrSessionInvalid. Like Provider.Check, it tries the first few cookies
// of the name, so a cookie a sibling subdomain planted cannot shadow the
// real one. It makes no call and takes no lock.
func (a *App) Session(r *http.Request, host string, secure bool) (Session, error) {
	err := ErrNoSession
	for i, c := range r.CookiesNamed(a.SessionCookieName(secure)) {
		if i == maxCandidates {
			break
		}
		var s Session
		if s, err = a.openSession(c.Value, host); err == nil {
			return s, nil
		}
	}
	return Session{}, err
}

func (a *App) openSession(value, host string) (Session, error) {
	s, err := openSealedSession(a.sessions, value, host)
	if err != nil {
		return Session{}, err
	}
	if !a.cfg.Now().Before(s.Expires) {
		return Session{}, fmt.Errorf("%w: %w at %s", ErrSessionInvalid, ErrExpired, s.Expires.UTC().Format(time.RFC3339))
	}
	return s, nil
}

// CheckCSRF reports, in constant time, whether token is s's CSRF token.
func (s Session) CheckCSRF(token string) bool { return s.checkCSRF(token) }

// End clears the session cookie.
func (a *App) End(w http.ResponseWriter, secure bool) {
	clearCookie(w, a.SessionCookieName(secure), secure)
}
