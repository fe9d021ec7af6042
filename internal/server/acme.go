package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aperio-dev/aperio/internal/edge/acme"
	"github.com/aperio-dev/aperio/internal/hostname"
	"github.com/aperio-dev/aperio/internal/logkey"
)

// The ask check keeps the hostname patterns of live tokens in memory: it
// reads the store again after acmeTokenRefresh, or after acmeMissRefresh
// when a name matches none (a token minted a moment ago). A flood of
// unknown names thus reads the store at most once per acmeMissRefresh.
const (
	acmeTokenRefresh = 30 * time.Second
	acmeMissRefresh  = 2 * time.Second
)

// acmeAsk is the ask check of automatic TLS: a certificate may be
// obtained for a name that a live token's hostname pattern covers, or
// that a client connected with the master token announces. Nothing else:
// never for whatever SNI a visitor sends.
type acmeAsk struct {
	g *Gateway

	mu       sync.Mutex
	patterns []string
	exact    []string
	loaded   time.Time
	now      func() time.Time
}

// tokens returns the patterns (and the exact names among them) of live
// tokens, reading the store when the list is older than maxAge.
func (a *acmeAsk) tokens(ctx context.Context, maxAge time.Duration) ([]string, []string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	if !a.loaded.IsZero() && now.Sub(a.loaded) < maxAge {
		return a.patterns, a.exact, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	toks, err := a.g.db.ListTokens(ctx, "")
	if err != nil {
		return a.patterns, a.exact, err // the last list, if any, still answers
	}
	var patterns, exact []string
	for _, t := range toks {
		if t.RevokedAt != nil || (t.ExpiresAt != nil && !now.Before(*t.ExpiresAt)) {
			continue
		}
		for _, h := range t.Hostnames {
			patterns = append(patterns, h)
			if !strings.HasPrefix(h, "*.") {
				exact = append(exact, h)
			}
		}
	}
	a.patterns, a.exact, a.loaded = patterns, exact, now
	return patterns, exact, nil
}

// Allowed implements the ask check.
func (a *acmeAsk) Allowed(ctx context.Context, name string) error {
	name = strings.ToLower(name)
	covered := func(patterns []string) bool {
		for _, p := range patterns {
			if hostname.Match(p, name) {
				return true
			}
		}
		return false
	}
	patterns, _, err := a.tokens(ctx, acmeTokenRefresh)
	if covered(patterns) {
		return nil
	}
	if patterns, _, err = a.tokens(ctx, acmeMissRefresh); covered(patterns) {
		return nil
	}
	for _, s := range a.g.tunnels.Sessions() {
		if s.Identity().TokenID != "" {
			continue // a token's client binds only what its token allows: covered above
		}
		for _, svc := range s.Announcement().Services {
			for _, h := range svc.Hostnames {
				if hostname.Match(h, name) {
					return nil
				}
			}
		}
	}
	if err != nil {
		return fmt.Errorf("no live token covers %s (and the tokens could not be read: %w)", name, err)
	}
	return fmt.Errorf("no live token covers %s", name)
}

// Names lists the exact hostnames of live tokens (acme.on_demand off).
func (a *acmeAsk) Names(ctx context.Context) ([]string, error) {
	_, exact, err := a.tokens(ctx, acmeTokenRefresh)
	return exact, err
}

// newACME builds the manager when acme is enabled; nil otherwise.
func (g *Gateway) newACME() (*acme.Manager, error) {
	if !g.cfg.ACME.Enabled() {
		return nil, nil
	}
	ask := &acmeAsk{g: g, now: time.Now}
	m, err := acme.New(g.cfg.ACME, acme.Options{
		Storage:    acme.NewStorage(g.db),
		Allowed:    ask.Allowed,
		Names:      ask.Names,
		PublicPort: g.cfg.Port,
		Logger:     g.log,
	})
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	return m, nil
}

// serveACMEHTTP serves acme.http_port: HTTP-01 challenges and the
// redirect to HTTPS. It returns a function that stops it.
func (g *Gateway) serveACMEHTTP() (stop func(), err error) {
	if g.acme == nil || g.cfg.ACME.HTTPPort == 0 {
		return func() {}, nil
	}
	addr := net.JoinHostPort(g.cfg.Host, strconv.Itoa(g.cfg.ACME.HTTPPort))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("gateway: acme.http_port: listen %s: %w", addr, err)
	}
	ln = limitConns(ln, connLimitConfig{MaxPerIP: g.cfg.MaxConnectionsPerIP})
	srv := &http.Server{
		Handler:           g.acme.HTTPHandler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    16 << 10,
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			g.log.Error("acme http listener stopped", logkey.Err, err)
		}
	}()
	g.log.Info("acme http listening", logkey.Addr, ln.Addr().String())
	return func() {
		srv.Close()
		<-done
	}, nil
}
