package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/aperio-dev/aperio/internal/control/events"
	"github.com/aperio-dev/aperio/internal/edge/acme"
	"github.com/aperio-dev/aperio/internal/edge/listen"
	"github.com/aperio-dev/aperio/internal/hostname"
	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/router"
	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/tunnel"
)

// acmeTokenRefresh is how long the exact names of live tokens (the
// names obtained up front without acme.on_demand) are kept before the
// store is read again.
const acmeTokenRefresh = 30 * time.Second

// acmeGoneBound bounds the names remembered as recently bound (the grace
// of acme.on_demand_grace): beyond it, the oldest are forgotten first.
const acmeGoneBound = 100000

// acmeAsk is the ask check of automatic TLS: a certificate is obtained
// on demand only for a name a connected client binds now (by its exact
// name or a wildcard), or bound within acme.on_demand_grace, for that
// client's organization; never for whatever SNI a visitor sends, nor for
// a name a token could bind some day (security probe F4). Without
// on_demand, the exact names of live tokens are obtained up front.
type acmeAsk struct {
	db     *store.DB       // the live tokens' names (Names)
	events *events.Emitter // audits the orders
	binds  bindView        // the router
	grace  time.Duration
	now    func() time.Time
	gen    atomic.Uint64 // bumped whenever a session's bound names change

	mu sync.Mutex // guards the following fields
	// bound is each session's bound patterns, as last seen.
	bound map[router.Conn]boundNames
	// gone is when each pattern stopped being bound, and by which
	// organization: the grace runs from then.
	gone map[string]goneBind
	// tokens caches the exact names of live tokens (Names).
	tokens       []acme.Name
	tokensLoaded time.Time
}

// bindView is what the ask check reads of the router.
type bindView interface {
	BoundOrg(host string) (string, bool)
	BoundPatterns(conn router.Conn) (string, []string)
}

type boundNames struct {
	org      string
	patterns []string // sorted
}

type goneBind struct {
	org string
	at  time.Time
}

func newACMEAsk(db *store.DB, ev *events.Emitter, binds bindView, grace time.Duration) *acmeAsk {
	return &acmeAsk{db: db, events: ev, binds: binds, grace: grace, now: time.Now, bound: make(map[router.Conn]boundNames), gone: make(map[string]goneBind)}
}

// Generation is acme.Options.Generation.
func (a *acmeAsk) Generation() uint64 { return a.gen.Load() }

// seen records s's bound patterns after an announcement: the patterns it
// no longer binds start their grace, those it binds again end theirs.
func (a *acmeAsk) seen(s router.Conn) {
	org, patterns := a.binds.BoundPatterns(s)
	slices.Sort(patterns)
	a.mu.Lock()
	defer a.mu.Unlock()
	prev := a.bound[s]
	if slices.Equal(prev.patterns, patterns) && prev.org == org {
		return
	}
	now := a.now()
	for _, p := range prev.patterns {
		if !slices.Contains(patterns, p) {
			a.leftLocked(p, prev.org, now)
		}
	}
	for _, p := range patterns {
		delete(a.gone, p)
	}
	a.bound[s] = boundNames{org: org, patterns: patterns}
	a.gen.Add(1)
}

// left records that s is gone: its patterns start their grace.
func (a *acmeAsk) left(s router.Conn) {
	a.mu.Lock()
	defer a.mu.Unlock()
	prev, ok := a.bound[s]
	if !ok {
		return
	}
	delete(a.bound, s)
	now := a.now()
	for _, p := range prev.patterns {
		a.leftLocked(p, prev.org, now)
	}
	a.gen.Add(1)
}

func (a *acmeAsk) leftLocked(pattern, org string, now time.Time) {
	if a.grace <= 0 {
		return
	}
	if len(a.gone) >= acmeGoneBound {
		var oldest string
		var at time.Time
		for p, gb := range a.gone {
			if now.Sub(gb.at) >= a.grace {
				delete(a.gone, p)
			} else if oldest == "" || gb.at.Before(at) {
				oldest, at = p, gb.at
			}
		}
		if len(a.gone) >= acmeGoneBound {
			delete(a.gone, oldest)
		}
	}
	a.gone[pattern] = goneBind{org: org, at: now}
}

// Allowed implements the ask check: the organization of the client that
// binds name now, or bound it within the grace.
func (a *acmeAsk) Allowed(_ context.Context, name string) (string, error) {
	name = hostname.Normalize(name)
	if org, ok := a.binds.BoundOrg(name); ok {
		return org, nil
	}
	if a.grace > 0 {
		a.mu.Lock()
		defer a.mu.Unlock()
		now := a.now()
		candidates := []string{name}
		for i := 1; i < len(name); i++ {
			if name[i] == '.' {
				candidates = append(candidates, "*"+name[i:])
			}
		}
		for _, p := range candidates {
			if gb, ok := a.gone[p]; ok && now.Sub(gb.at) < a.grace {
				return gb.org, nil
			}
		}
	}
	return "", fmt.Errorf("no connected client binds %s (nor did within acme.on_demand_grace)", name)
}

// Names lists the exact hostnames of live tokens, with their
// organizations (acme.on_demand off).
func (a *acmeAsk) Names(ctx context.Context) ([]acme.Name, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	if !a.tokensLoaded.IsZero() && now.Sub(a.tokensLoaded) < acmeTokenRefresh {
		return a.tokens, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	toks, err := a.db.ListTokens(ctx, "")
	if err != nil {
		return a.tokens, err
	}
	var names []acme.Name
	for _, t := range toks {
		if t.RevokedAt != nil || (t.ExpiresAt != nil && !now.Before(*t.ExpiresAt)) {
			continue
		}
		for _, h := range t.Hostnames {
			if !strings.HasPrefix(h, "*.") {
				names = append(names, acme.Name{Host: h, Org: t.OrgID})
			}
		}
	}
	a.tokens, a.tokensLoaded = names, now
	return names, nil
}

// audit records an order in the audit log, off the handshake's path.
func (a *acmeAsk) audit(o acme.Order) {
	detail := "new certificate ordered"
	if o.Renewal {
		detail = "renewal ordered"
	}
	a.events.Offer(events.Event{Kind: EventCertificateOrdered, Actor: store.ServerActor, OrgID: o.Org, Hostname: o.Name, Detail: detail})
}

// EventCertificateOrdered is the audit event of each certificate order
// automatic TLS places (a new name or a renewal).
const EventCertificateOrdered = "certificate_ordered"

// acmeHook tells the ask check of every change of a session's binds: the
// "acme" session hook. A session's names leave the check before the
// router forgets its binds.
func acmeHook(ask *acmeAsk) sessionHook {
	return sessionHook{
		name: "acme",
		updated: func(_ context.Context, s *tunnel.Session) []string {
			ask.seen(s)
			return nil
		},
		leaving: func(_ context.Context, s *tunnel.Session) { ask.left(s) },
	}
}

// newACME builds the manager when acme is enabled; nil otherwise.
func newACME(cfg Config, db *store.DB, ask *acmeAsk, log *slog.Logger) (*acme.Manager, error) {
	if !cfg.ACME.Enabled() {
		return nil, nil
	}
	m, err := acme.New(cfg.ACME, acme.Options{
		Storage:    acme.NewStorage(db),
		Allowed:    ask.Allowed,
		Names:      ask.Names,
		Generation: ask.Generation,
		Audit:      ask.audit,
		PublicPort: cfg.Port,
		Logger:     log,
	})
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	return m, nil
}

// registerACMEMetrics exports the automatic TLS counters: orders by kind
// (new, renewal) and refusals by reason (acme.Refused*).
func registerACMEMetrics(m metric.Meter, mgr *acme.Manager) error {
	if mgr == nil {
		return nil
	}
	orders, err := m.Int64ObservableCounter(metricACMEOrders,
		metric.WithDescription("Certificate orders automatic TLS placed, by kind (new, renewal); each is audited as certificate_ordered."))
	if err != nil {
		return err
	}
	refusals, err := m.Int64ObservableCounter(metricACMERefusals,
		metric.WithDescription("Certificates automatic TLS refused to obtain, by reason: invalid, not_bound, cached (the ask check); server_rate, org_rate, domain_rate, org_certificates (the budgets)."))
	if err != nil {
		return err
	}
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st := mgr.Stats()
		o.ObserveInt64(orders, st.Orders, metric.WithAttributes(attribute.String("kind", "new")))
		o.ObserveInt64(orders, st.Renewals, metric.WithAttributes(attribute.String("kind", "renewal")))
		for reason, n := range st.Refused {
			o.ObserveInt64(refusals, n, metric.WithAttributes(attribute.String("reason", reason)))
		}
		return nil
	}, orders, refusals)
	return err
}

// Metric names of automatic TLS.
const (
	metricACMEOrders   = "aperio.acme_orders"
	metricACMERefusals = "aperio.acme_refusals"
)

// serveACMEHTTP serves acme.http_port: HTTP-01 challenges and the
// redirect to HTTPS. It returns a function that stops it.
func serveACMEHTTP(cfg Config, mgr *acme.Manager, log *slog.Logger) (stop func(), err error) {
	if mgr == nil || cfg.ACME.HTTPPort == 0 {
		return func() {}, nil
	}
	addr := net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.ACME.HTTPPort))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("gateway: acme.http_port: listen %s: %w", addr, err)
	}
	ln = listen.Chain(ln, listen.Config{MaxPerIP: cfg.MaxConnectionsPerIP})
	srv := &http.Server{
		Handler:           mgr.HTTPHandler(),
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
			log.Error("acme http listener stopped", logkey.Err, err)
		}
	}()
	log.Info("acme http listening", logkey.Addr, ln.Addr().String())
	return func() {
		srv.Close()
		<-done
	}, nil
}
