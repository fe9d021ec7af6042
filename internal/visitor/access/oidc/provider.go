package oidc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"time"

	gooidc "github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
)

// Defaults and bounds of Config.
const (
	DefaultSessionTTL = 24 * time.Hour
	MaxSessionTTL     = 30 * 24 * time.Hour
	DefaultLoginTTL   = 10 * time.Minute
	MaxLoginTTL       = time.Hour
	DefaultTimeout    = 10 * time.Second
	MaxTimeout        = time.Minute
	// MaxResponseBytes bounds every body read from the provider
	// (discovery, keys, token): a provider that streams more is an error.
	MaxResponseBytes = 1 << 20
)

// defaultScopes are the scopes asked for when Config.Scopes is empty;
// withDefaults hands out copies.
var defaultScopes = []string{gooidc.ScopeOpenID, "email", "profile"}

// Errors of New, both fatal at start: the server cannot protect a
// service with a provider it cannot reach or does not understand.
var (
	// ErrConfig wraps every problem Config.Validate reports.
	ErrConfig = errors.New("oidc: invalid configuration")
	// ErrDiscovery wraps a failed discovery: the issuer is unreachable
	// through the given client, answered other than 200 with a discovery
	// document for the same issuer, or named endpoints that are not
	// absolute http(s) URLs.
	ErrDiscovery = errors.New("oidc: provider discovery failed")
)

// Config is the server's `oidc:` block plus what the server supplies.
type Config struct {
	// Issuer is the provider's issuer URL, exactly as its ID tokens name
	// it; its discovery document is at Issuer + "/.well-known/openid-configuration".
	// It must be https unless AllowHTTP is set. Required.
	Issuer string
	// ClientID and ClientSecret identify the server to the provider.
	// Both required.
	ClientID     string
	ClientSecret string
	// Scopes asked for; empty means "openid email profile". It must include
	// "openid"; add "groups" (or what the provider calls it) for a
	// Policy's Groups to see anything.
	Scopes []string
	// RedirectURL, if set, is the callback URL registered for the one
	// hostname it names (for example the server's own, for the admin
	// dashboard). It must be an absolute URL whose path is CallbackPath.
	// Every other hostname's callback is derived from the visited host:
	// https://<host>/aperio/auth/callback (http when the request was not
	// secure). Empty means every callback is derived.
	RedirectURL string
	// HTTPClient makes every call to the provider: discovery, keys,
	// token exchange. Required, with a non-nil Transport: the server
	// passes its outbound-fenced client, so ambient proxies and
	// http.DefaultTransport are never used by accident. The Provider uses
	// a copy that follows no redirect, reads at most MaxResponseBytes of
	// any body and, if the client has no Timeout, times out after Timeout.
	HTTPClient *http.Client
	// Keys seal the session and login cookies; the first seals, all open
	// (see Sealer). Required.
	Keys []Key
	// SessionTTL is how long a session lasts after login. Zero means
	// DefaultSessionTTL (24 h); at most MaxSessionTTL (30 days).
	SessionTTL time.Duration
	// LoginTTL is how long a login may take between the redirect to the
	// provider and the callback. Zero means DefaultLoginTTL (10 min); at
	// most MaxLoginTTL (1 h).
	LoginTTL time.Duration
	// Timeout bounds each call to the provider. Zero means DefaultTimeout
	// (10 s); at most MaxTimeout (1 min).
	Timeout time.Duration
	// AllowHTTP accepts an http issuer (a test, or a provider on a network
	// the operator trusts). Default false.
	AllowHTTP bool
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger receives login failures and refusals at Info or Debug; nil
	// discards.
	Logger *slog.Logger
}

// withDefaults returns c with every zero field that has a default set.
func (c Config) withDefaults() Config {
	if len(c.Scopes) == 0 {
		c.Scopes = slices.Clone(defaultScopes)
	}
	if c.SessionTTL == 0 {
		c.SessionTTL = DefaultSessionTTL
	}
	if c.LoginTTL == 0 {
		c.LoginTTL = DefaultLoginTTL
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports every problem of c (after defaults), each wrapping
// ErrConfig. It makes no call.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...))
	}
	if u, err := url.Parse(c.Issuer); c.Issuer == "" {
		bad("issuer is required")
	} else if err != nil || !u.IsAbs() || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		bad("issuer %q is not an absolute URL without query or credentials", c.Issuer)
	} else if u.Scheme != "https" && !(u.Scheme == "http" && c.AllowHTTP) {
		bad("issuer %q must be https (http only with allow_http)", c.Issuer)
	}
	if c.ClientID == "" {
		bad("client id is required")
	}
	if c.ClientSecret == "" {
		bad("client secret is required")
	}
	if !slices.Contains(c.Scopes, gooidc.ScopeOpenID) {
		bad("scopes %q lack %q", c.Scopes, gooidc.ScopeOpenID)
	}
	if c.RedirectURL != "" {
		if u, err := url.Parse(c.RedirectURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Path != CallbackPath || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			bad("redirect url %q must be http(s)://<host>%s", c.RedirectURL, CallbackPath)
		}
	}
	if c.HTTPClient == nil {
		bad("an http client is required (the server's outbound client)")
	} else if c.HTTPClient.Transport == nil {
		bad("the http client needs an explicit transport")
	}
	if len(c.Keys) == 0 {
		bad("at least one session key is required")
	}
	for _, b := range []struct {
		name     string
		v, limit time.Duration
	}{{"session ttl", c.SessionTTL, MaxSessionTTL}, {"login ttl", c.LoginTTL, MaxLoginTTL}, {"timeout", c.Timeout, MaxTimeout}} {
		if b.v < time.Second || b.v > b.limit {
			bad("%s %v outside [1s, %v]", b.name, b.v, b.limit)
		}
	}
	return errors.Join(errs...)
}

// Provider runs the login flow against one OpenID Connect provider. It is
// immutable after New and safe for concurrent use; it owns no goroutine
// and needs no closing.
type Provider struct {
	cfg      Config // with defaults
	client   *http.Client
	oauth    oauth2.Config // RedirectURL is set per login
	verifier *gooidc.IDTokenVerifier
	sessions *Sealer
	login    loginFlow // services' logins
	fixed    *url.URL  // Config.RedirectURL parsed, or nil
}

// New validates cfg and discovers the provider: one GET of the discovery
// document through cfg.HTTPClient, bounded by ctx and cfg.Timeout. Its
// errors wrap ErrConfig or ErrDiscovery; the server should refuse to
// start on either. Signing keys are fetched later, on the first login,
// and again when an ID token names an unknown key.
func New(ctx context.Context, cfg Config) (*Provider, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	sessions, err := NewSealer("session", cfg.Keys...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	logins, err := NewSealer("login", cfg.Keys...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	p := &Provider{cfg: cfg, sessions: sessions, login: loginFlow{sealer: logins, cookie: LoginCookie, secureCookie: SecureLoginCookie}}
	if cfg.RedirectURL != "" {
		p.fixed, _ = url.Parse(cfg.RedirectURL) // checked by Validate
	}
	c := *cfg.HTTPClient
	c.Transport = boundedTransport{base: c.Transport}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c.Jar = nil
	if c.Timeout == 0 {
		c.Timeout = cfg.Timeout
	}
	p.client = &c

	dctx, cancel := context.WithTimeout(p.clientContext(ctx), cfg.Timeout)
	defer cancel()
	op, err := gooidc.NewProvider(dctx, cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("%w: issuer %s: %w", ErrDiscovery, cfg.Issuer, err)
	}
	ep := op.Endpoint()
	for name, raw := range map[string]string{"authorization_endpoint": ep.AuthURL, "token_endpoint": ep.TokenURL} {
		if u, err := url.Parse(raw); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return nil, fmt.Errorf("%w: issuer %s: %s %q is not an absolute http(s) URL", ErrDiscovery, cfg.Issuer, name, raw)
		}
	}
	p.oauth = oauth2.Config{
		ClientID:     cfg.ClientID,
		ClientSecret: cfg.ClientSecret,
		Endpoint:     ep,
		Scopes:       cfg.Scopes,
	}
	p.verifier = op.Verifier(&gooidc.Config{ClientID: cfg.ClientID, Now: cfg.Now})
	return p, nil
}

// clientContext returns ctx carrying the Provider's client, which is how
// go-oidc and x/oauth2 are told which client to use; without it both fall
// back to http.DefaultClient.
func (p *Provider) clientContext(ctx context.Context) context.Context {
	return context.WithValue(ctx, oauth2.HTTPClient, p.client)
}

// errTooLarge is returned by a provider body read past MaxResponseBytes.
var errTooLarge = fmt.Errorf("oidc: provider response larger than %d bytes", MaxResponseBytes)

// boundedTransport caps every response body from the provider: go-oidc
// reads discovery and key documents whole.
type boundedTransport struct{ base http.RoundTripper }

func (t boundedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	resp.Body = &boundedBody{rc: resp.Body, left: MaxResponseBytes}
	return resp, nil
}

type boundedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more than allowed tells a body at the limit from one
		// beyond it.
		var one [1]byte
		n, err := b.rc.Read(one[:])
		if n > 0 {
			return 0, errTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *boundedBody) Close() error { return b.rc.Close() }
