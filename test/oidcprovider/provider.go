package main

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/oauth2-proxy/mockoidc"

	"github.com/aperio-dev/aperio/internal/logkey"
)

// Bounds of the provider's inputs.
const (
	// maxBody bounds every request body (a token exchange's form).
	maxBody = 64 << 10
	// maxAdminBody bounds a POST /admin/users body.
	maxAdminBody = 4 << 10
	// maxQueued bounds the users queued for the next logins; one more
	// answers 429.
	maxQueued = 16
	// maxSessions bounds the logins mockoidc remembers (it keeps every
	// authorization's code in a map): reaching it starts a fresh store,
	// so an older code no longer exchanges.
	maxSessions = 1024
	// maxField bounds a queued user's subject, email and each group.
	maxField = 254
	// maxGroups bounds a queued user's groups.
	maxGroups = 16
	// minAdminSecret is the shortest admin secret accepted.
	minAdminSecret = 16
)

// config is the provider's environment.
type config struct {
	// Issuer is the URL the servers reach the provider at, exactly as its
	// ID tokens name it: http://HOST:PORT/oidc (mockoidc serves under
	// /oidc).
	Issuer string
	// ClientID and ClientSecret are the one client's credentials.
	ClientID, ClientSecret string
	// AdminSecret is the bearer token of /admin/users, at least 16 bytes.
	AdminSecret string
}

// validate reports every problem of c, joined.
func (c config) validate() error {
	var errs []error
	if _, err := issuerAddr(c.Issuer); err != nil {
		errs = append(errs, err)
	}
	if c.ClientID == "" {
		errs = append(errs, errors.New("OIDC_CLIENT_ID is not set"))
	}
	if c.ClientSecret == "" {
		errs = append(errs, errors.New("OIDC_CLIENT_SECRET is not set"))
	}
	if len(c.AdminSecret) < minAdminSecret {
		errs = append(errs, fmt.Errorf("OIDC_ADMIN_SECRET must be at least %d bytes", minAdminSecret))
	}
	return errors.Join(errs...)
}

// issuerAddr returns the HOST:PORT of an issuer http://HOST:PORT/oidc.
func issuerAddr(issuer string) (string, error) {
	u, err := url.Parse(issuer)
	if err != nil {
		return "", fmt.Errorf("OIDC_ISSUER: %w", err)
	}
	if u.Scheme != "http" || u.Port() == "" || u.Hostname() == "" || u.Path != mockoidc.IssuerBase || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("OIDC_ISSUER %q: want http://HOST:PORT%s", issuer, mockoidc.IssuerBase)
	}
	return u.Host, nil
}

// provider is mockoidc behind the provider's own mux and http.Server.
type provider struct {
	srv         *http.Server
	adminSecret string
	log         *slog.Logger

	// mu orders every handler: mockoidc keeps its logins in plain maps
	// and slices, as a real provider's storage would serialize them.
	mu sync.Mutex
	m  *mockoidc.MockOIDC
}

// newProvider builds the provider for cfg. Its server is not started:
// serve p.srv on a listener.
func newProvider(cfg config, logger *slog.Logger) (*provider, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	addr, err := issuerAddr(cfg.Issuer)
	if err != nil {
		return nil, err
	}
	m, err := mockoidc.NewServer(nil)
	if err != nil {
		return nil, fmt.Errorf("mockoidc: %w", err)
	}
	m.ClientID, m.ClientSecret = cfg.ClientID, cfg.ClientSecret
	p := &provider{adminSecret: cfg.AdminSecret, log: logger, m: m}
	mux := http.NewServeMux()
	mux.Handle(mockoidc.AuthorizationEndpoint, p.locked(p.authorize))
	mux.Handle(mockoidc.TokenEndpoint, p.locked(m.Token))
	mux.Handle(mockoidc.UserinfoEndpoint, p.locked(m.Userinfo))
	mux.Handle(mockoidc.JWKSEndpoint, p.locked(m.JWKS))
	mux.Handle(mockoidc.DiscoveryEndpoint, p.locked(m.Discovery))
	mux.Handle("POST /admin/users", p.locked(p.queueUser))
	// mockoidc names its endpoints after its server's Addr: the issuer's
	// authority, not the listener's, so that the servers' discovery finds
	// the issuer they were configured with.
	p.srv = &http.Server{
		Addr:              addr,
		Handler:           p.logged(mux),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	m.Server = p.srv
	if got := m.Issuer(); got != cfg.Issuer {
		return nil, fmt.Errorf("mockoidc issuer %q, want %q", got, cfg.Issuer)
	}
	return p, nil
}

// locked runs h under p.mu with its body bounded.
func (p *provider) locked(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		p.mu.Lock()
		defer p.mu.Unlock()
		h(w, r)
	})
}

// statusWriter records the status of a response, for the log.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// logged logs one line per request, without the query (it carries codes
// and states), so that the suite's log dump shows the logins. Requests
// from loopback, the health check's every second, are not logged.
func (p *provider) logged(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil && ap.Addr().IsLoopback() {
			return
		}
		p.log.Info("request", logkey.Method, r.Method, logkey.Path, r.URL.Path, logkey.Status, sw.status, logkey.RemoteAddr, r.RemoteAddr)
	})
}

// authorize is mockoidc's authorization endpoint, with its store of
// logins bounded by maxSessions. It runs under p.mu.
func (p *provider) authorize(w http.ResponseWriter, r *http.Request) {
	if len(p.m.SessionStore.Store) >= maxSessions {
		p.m.SessionStore = mockoidc.NewSessionStore()
	}
	p.m.Authorize(w, r)
}

// queuedUser is the body of POST /admin/users.
type queuedUser struct {
	Subject       string   `json:"subject"`
	Email         string   `json:"email"`
	EmailVerified bool     `json:"email_verified"`
	Groups        []string `json:"groups"`
}

// validate reports what is wrong with u, or nil.
func (u queuedUser) validate() error {
	var errs []error
	field := func(name, v string) {
		if v == "" || len(v) > maxField || !utf8.ValidString(v) || strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			errs = append(errs, fmt.Errorf("%s: want 1 to %d bytes of printable UTF-8", name, maxField))
		}
	}
	field("subject", u.Subject)
	field("email", u.Email)
	if len(u.Groups) > maxGroups {
		errs = append(errs, fmt.Errorf("groups: %d, at most %d", len(u.Groups), maxGroups))
	} else {
		for i, g := range u.Groups {
			field(fmt.Sprintf("groups[%d]", i), g)
		}
	}
	return errors.Join(errs...)
}

// queueUser answers POST /admin/users: the user in the body is the one
// the next authorization logs in. It runs under p.mu.
func (p *provider) queueUser(w http.ResponseWriter, r *http.Request) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(token), []byte(p.adminSecret)) != 1 {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxAdminBody)
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	var u queuedUser
	if err := dec.Decode(&u); err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			http.Error(w, fmt.Sprintf("body larger than %d bytes", maxAdminBody), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "bad body: "+err.Error(), http.StatusBadRequest)
		return
	}
	if dec.More() {
		http.Error(w, "bad body: one JSON object expected", http.StatusBadRequest)
		return
	}
	if err := u.validate(); err != nil {
		http.Error(w, "bad user: "+err.Error(), http.StatusBadRequest)
		return
	}
	q := p.m.UserQueue
	q.Lock()
	defer q.Unlock()
	if len(q.Queue) >= maxQueued {
		http.Error(w, fmt.Sprintf("%d users queued already", maxQueued), http.StatusTooManyRequests)
		return
	}
	q.Queue = append(q.Queue, &mockoidc.MockUser{
		Subject:           u.Subject,
		Email:             u.Email,
		EmailVerified:     u.EmailVerified,
		PreferredUsername: u.Subject,
		Groups:            u.Groups,
	})
	p.log.Info("user queued", logkey.User, u.Email, logkey.Queued, len(q.Queue))
	w.WriteHeader(http.StatusNoContent)
}
