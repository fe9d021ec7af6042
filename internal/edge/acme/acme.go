// Package acme owns automatic TLS: certificates obtained from an ACME CA
// (Let's Encrypt by default) with certmagic, kept in Aperio's store so
// that servers sharing a database share them, and issued only for names a
// connected client binds (or bound within acme.on_demand_grace), within
// budgets per organization, per registered domain and server-wide, and a
// cap of stored certificates per organization (budget.go).
//
// The public port answers TLS-ALPN-01 challenges in its handshakes; the
// HTTP port (80 by default) answers HTTP-01 challenges and redirects
// everything else to HTTPS. With on_demand (the default) a certificate is
// obtained at the first handshake for a name the ask check allows;
// without it, the exact hostnames of live tokens are obtained up front
// and rechecked every few minutes. Wildcard token hostnames get one
// certificate per name on demand: DNS-01, which a wildcard certificate
// needs, is out of scope.
package acme

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/big"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"github.com/aperio-dev/aperio/internal/hostname"
	"github.com/aperio-dev/aperio/internal/logkey"
)

// The challenge types, as acme.challenges names them.
const (
	ChallengeTLSALPN = "tls-alpn-01"
	ChallengeHTTP    = "http-01"
)

// LetsEncrypt and LetsEncryptStaging are the directory URLs of Let's
// Encrypt's production and staging CAs.
const (
	LetsEncrypt        = certmagic.LetsEncryptProductionCA
	LetsEncryptStaging = certmagic.LetsEncryptStagingCA
)

// The server-wide issuance bucket: at most IssueBurst new certificates
// (or renewals) at once, refilled at IssuePerMinute a minute. Let's
// Encrypt allows 300 new orders per account per 3 hours; the budgets of
// budget.go keep one organization or domain from spending it all.
const (
	IssuePerMinute = 10
	IssueBurst     = 20
)

// cacheCapacity bounds the certificates held in memory (each a few KB);
// beyond it certmagic evicts at random and reloads from the store.
const cacheCapacity = 10000

// manageInterval is how often, without on_demand, the names to manage
// are listed again.
const manageInterval = 5 * time.Minute

// Config is the acme: block.
type Config struct {
	// Email is the ACME account's contact (optional for Let's Encrypt).
	Email string
	// CA is the ACME directory URL; empty means LetsEncrypt.
	CA string
	// CARoot is a PEM file of roots trusted for the CA's own API (a
	// private CA, or Pebble in tests); empty means the system's roots.
	CARoot string
	// Challenges are the challenge types offered; default both.
	Challenges []string
	// OnDemand obtains a certificate at the first handshake for an
	// allowed name; without it the names of live tokens are obtained up
	// front. Default true.
	OnDemand bool
	// HTTPPort serves HTTP-01 and redirects to HTTPS; 0 turns it off
	// (and then http-01 cannot be solved). Default 80.
	HTTPPort int
	// Redirect makes the HTTP port redirect requests other than
	// challenges to HTTPS; off, it answers them 404. Default true.
	Redirect bool
	// Hostnames are the server's own names (the URL clients dial and
	// operators open the dashboard at): always allowed, and obtained at
	// start rather than at the first handshake. Exact names only.
	Hostnames []string
	// OnDemandGrace is how long after a client stopped binding a name a
	// handshake for it may still obtain (or load) its certificate on
	// demand: a client that reconnects after a deploy keeps its
	// certificate. Default DefaultOnDemandGrace (24 h); 0 means only
	// names bound now; at most MaxOnDemandGrace.
	OnDemandGrace time.Duration
}

// Bounds of OnDemandGrace.
const (
	DefaultOnDemandGrace = 24 * time.Hour
	MaxOnDemandGrace     = 30 * 24 * time.Hour
)

// DefaultConfig is the acme: block's defaults. Automatic TLS is off
// until acme.email or acme.ca is set (Enabled).
func DefaultConfig() Config {
	return Config{Challenges: []string{ChallengeTLSALPN, ChallengeHTTP}, OnDemand: true, HTTPPort: 80, Redirect: true, OnDemandGrace: DefaultOnDemandGrace}
}

// Enabled reports whether the block turns automatic TLS on: it names an
// account email or a CA.
func (c Config) Enabled() bool { return c.Email != "" || c.CA != "" }

// ConfigError is a problem of the acme: block: the key and what is
// wrong with its value.
type ConfigError struct{ Key, Msg string }

func (e *ConfigError) Error() string { return e.Key + ": " + e.Msg }

func bad(key, format string, args ...any) error {
	return &ConfigError{Key: key, Msg: fmt.Sprintf(format, args...)}
}

// Validate reports the first problem of c as a *ConfigError.
func (c Config) Validate() error {
	if c.CA != "" && !strings.HasPrefix(c.CA, "https://") {
		return bad("acme.ca", "%q: want an https:// ACME directory URL", c.CA)
	}
	if len(c.Email) > 254 || strings.ContainsAny(c.Email, " \t\r\n") || (c.Email != "" && !strings.Contains(c.Email, "@")) {
		return bad("acme.email", "%q: want an email address", c.Email)
	}
	if len(c.Challenges) == 0 {
		return bad("acme.challenges", "want at least one of tls-alpn-01, http-01")
	}
	for _, ch := range c.Challenges {
		if ch != ChallengeTLSALPN && ch != ChallengeHTTP {
			return bad("acme.challenges", "%q is not one of tls-alpn-01, http-01 (dns-01 is not supported)", ch)
		}
	}
	if c.HTTPPort < 0 || c.HTTPPort > 65535 {
		return bad("acme.http_port", "%d: want 0 (off) to 65535", c.HTTPPort)
	}
	if len(c.Hostnames) > 100 {
		return bad("acme.hostnames", "%d names: at most 100", len(c.Hostnames))
	}
	for _, h := range c.Hostnames {
		if err := hostname.Validate(h); err != nil || strings.HasPrefix(h, "*.") {
			return bad("acme.hostnames", "%q: want an exact hostname (wildcards need DNS-01, which is not supported)", h)
		}
	}
	if c.OnDemandGrace < 0 || c.OnDemandGrace > MaxOnDemandGrace {
		return bad("acme.on_demand_grace", "%v: want 0 (names bound now only) to %v", c.OnDemandGrace, MaxOnDemandGrace)
	}
	if c.HTTPPort == 0 && slices.Equal(c.Challenges, []string{ChallengeHTTP}) {
		return bad("acme.challenges", "http-01 alone needs acme.http_port")
	}
	return nil
}

// Name is a name to obtain a certificate for, and the organization it
// is obtained for ("" for the server's own).
type Name struct{ Host, Org string }

// Order is a certificate order the manager places: a new name, or a
// renewal.
type Order struct {
	Name    string
	Org     string // "" for the server's own names and for renewals
	Renewal bool
}

// Options are what the server gives the manager.
type Options struct {
	// Storage holds accounts, certificates and locks (NewStorage).
	Storage certmagic.Storage
	// Allowed is the ask check of on-demand issuance, called at a
	// handshake for a name without a certificate in memory (before one is
	// loaded from the store or ordered): the organization the
	// certificate is for when a connected client binds name now, or did
	// within acme.on_demand_grace; an error otherwise. It must be fast
	// and make no call: a visitor chooses the names it is asked for.
	Allowed func(ctx context.Context, name string) (org string, err error)
	// Names lists the exact names to obtain without on_demand, with their
	// organizations.
	Names func(ctx context.Context) ([]Name, error)
	// Generation changes whenever what Allowed allows may have changed (a
	// bind came or went): a name refused a moment ago is asked again
	// then, and otherwise only after a minute (the negative cache). Nil
	// means the cache holds its minute.
	Generation func() uint64
	// Audit is told of every order, new or renewal, before it is placed.
	// It must not block (queue, or drop). Nil means none.
	Audit func(o Order)
	// Now is the clock of the budgets and caches; nil means time.Now.
	Now func() time.Time
	// PublicPort is the HTTPS port the redirect points to.
	PublicPort int
	// Logger receives issuance events.
	Logger *slog.Logger
	// RenewCheckInterval overrides certmagic's (10 minutes), for tests.
	RenewCheckInterval time.Duration
}

// Manager obtains, renews and serves the certificates.
type Manager struct {
	c      Config
	o      Options
	cache  *certmagic.Cache
	magic  *certmagic.Config
	issuer *certmagic.ACMEIssuer
	limit  *rate.Limiter // the server-wide bucket
	// orgs and domains are the budgets of organizations and registered
	// domains (budget.go).
	orgs, domains *buckets
	// refused is the negative cache: names the ask check refused, with
	// the Generation of the refusal.
	refused *nameCache[uint64]
	// pending holds the organization of names the ask check allowed a
	// moment ago, for the order that may follow.
	pending *nameCache[string]
	// loadOnly holds names no client binds here whose certificate is in
	// the store (another server's client binds them), with the Generation
	// of that verdict: served from the store (storeCerts, fromstore.go),
	// never ordered or renewed by this server.
	loadOnly   *nameCache[uint64]
	storeCerts *nameCache[fromStore]
	// selfSigned answers loopback handshakes without a name (the
	// healthcheck); made at New, never trusted by anyone.
	selfSigned *tls.Certificate
	log        *slog.Logger
	issued     atomic.Int64
	orders     atomic.Int64 // new orders placed
	renewals   atomic.Int64 // renewals placed

	mu         sync.Mutex       // guards refusalsBy
	refusalsBy map[string]int64 // by reason (Refused*)
}

// New builds the manager; Run starts its background work.
func New(c Config, o Options) (*Manager, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if o.Storage == nil || o.Allowed == nil {
		return nil, errors.New("acme: storage and the ask check are required")
	}
	if c.CA == "" {
		c.CA = LetsEncrypt
	}
	m := &Manager{c: c, o: o, log: o.Logger, limit: rate.NewLimiter(rate.Limit(float64(IssuePerMinute)/60), IssueBurst),
		orgs:       newBuckets(rate.Limit(float64(OrgIssuePerHour)/3600), OrgIssueBurst),
		domains:    newBuckets(rate.Limit(float64(DomainIssuePerWeek)/(7*24*3600)), DomainIssueBurst),
		refused:    newNameCache[uint64](negativeTTL),
		pending:    newNameCache[string](pendingTTL),
		loadOnly:   newNameCache[uint64](loadOnlyTTL),
		storeCerts: newNameCache[fromStore](pendingTTL),
		refusalsBy: make(map[string]int64),
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	if m.o.Now == nil {
		m.o.Now = time.Now
	}
	var roots *x509.CertPool
	if c.CARoot != "" {
		pem, err := os.ReadFile(c.CARoot)
		if err != nil {
			return nil, bad("acme.ca_root", "%v", err)
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return nil, bad("acme.ca_root", "%s: no PEM certificate in it", c.CARoot)
		}
	}
	m.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert:   func(certmagic.Certificate) (*certmagic.Config, error) { return m.magic, nil },
		Capacity:           cacheCapacity,
		RenewCheckInterval: o.RenewCheckInterval,
		Logger:             zap.NewNop(),
	})
	m.magic = certmagic.New(m.cache, certmagic.Config{
		Storage:  o.Storage,
		OnDemand: &certmagic.OnDemandConfig{DecisionFunc: m.decide},
		OnEvent:  m.onEvent,
		Logger:   zap.NewNop(),
	})
	altHTTP := c.HTTPPort
	m.issuer = certmagic.NewACMEIssuer(m.magic, certmagic.ACMEIssuer{
		CA:                      c.CA,
		Email:                   c.Email,
		Agreed:                  true,
		DisableHTTPChallenge:    !slices.Contains(c.Challenges, ChallengeHTTP) || c.HTTPPort == 0,
		DisableTLSALPNChallenge: !slices.Contains(c.Challenges, ChallengeTLSALPN),
		// The ports are ours: certmagic finds them taken and leaves the
		// answer to our listeners, which read the challenge from the
		// store when another server started it.
		AltHTTPPort:    altHTTP,
		AltTLSALPNPort: o.PublicPort,
		TrustedRoots:   roots,
		Logger:         zap.NewNop(),
	})
	m.magic.Issuers = []certmagic.Issuer{m.issuer}
	var err error
	if m.selfSigned, err = selfSigned(); err != nil {
		return nil, err
	}
	return m, nil
}

// decide is certmagic's ask, at every handshake for a name without a
// certificate in memory (before loading one from the store, and before
// ordering one): the name must be valid, and one of acme.hostnames or
// allowed by the server (bound now or within the grace). A name bound on
// another server sharing the store never reaches it: GetCertificate
// serves its stored certificate first (fromstore.go). A refusal is
// cached for a minute, or until the binds change.
func (m *Manager) decide(ctx context.Context, name string) error {
	if err := hostname.Validate(name); err != nil || strings.HasPrefix(name, "*.") {
		m.refuse(RefusedInvalid)
		return fmt.Errorf("acme: %q is not a hostname", name)
	}
	name = strings.ToLower(name)
	if slices.Contains(m.c.Hostnames, name) {
		return nil
	}
	now := m.o.Now()
	var gen uint64
	if m.o.Generation != nil {
		gen = m.o.Generation()
	}
	if g, ok := m.refused.get(name, now); ok && g == gen {
		m.refuse(RefusedCached)
		return fmt.Errorf("acme: %s was refused a moment ago", name)
	}
	org, err := m.o.Allowed(ctx, name)
	if err != nil {
		m.refused.put(name, gen, now)
		m.refuse(RefusedNotBound)
		return err
	}
	m.pending.put(name, org, now)
	return nil
}

// stored reports whether the store holds a certificate for name from
// this manager's CA.
func (m *Manager) stored(ctx context.Context, name string) bool {
	return m.o.Storage.Exists(ctx, certmagic.StorageKeys.SiteCert(m.issuer.IssuerKey(), name))
}

// refuse counts a refusal of reason.
func (m *Manager) refuse(reason string) {
	m.mu.Lock()
	m.refusalsBy[reason]++
	m.mu.Unlock()
}

// errBudget is the error of an order refused by a budget.
func errBudget(reason, name string) error {
	return fmt.Errorf("acme: issuance refused for %s: %s", name, reason)
}

// admitOrder decides whether the order of a certificate for name may be
// placed now: the budgets of its organization and registered domain and
// the organization's stored certificates for a new name, then the
// server-wide bucket. It returns the reason of a refusal, "" to go on.
func (m *Manager) admitOrder(ctx context.Context, name, org string, renewal bool) string {
	now := m.o.Now()
	if !renewal && !slices.Contains(m.c.Hostnames, name) {
		n, err := m.storedFor(ctx, org)
		if err != nil {
			m.log.Warn("cannot count the certificates of an organization", logkey.OrgID, org, logkey.Err, err)
		} else if n >= MaxCertificatesPerOrg {
			return RefusedOrgStoreFull
		}
		if !m.orgs.allow(orgKey(org), now) {
			return RefusedOrgRate
		}
		if !m.domains.allow(RegisteredDomain(name), now) {
			return RefusedDomainRate
		}
	}
	if !m.limit.AllowN(now, 1) {
		return RefusedServerRate
	}
	return ""
}

// onEvent logs issuance and enforces the budgets: an obtain or a renewal
// beyond them is refused before any ACME order is placed; every order
// placed is audited.
//
// A refusal is certmagic.ErrNoRetry: certmagic holds the store's issuance
// lock of the name, shared by every server, while it retries a renewal
// (the first retry a minute later), so a refused attempt that were
// retried would keep the server whose client binds the name from renewing
// it. The next handshake or maintenance pass tries again.
func (m *Manager) onEvent(ctx context.Context, event string, data map[string]any) error {
	name, _ := data["identifier"].(string)
	renewal, _ := data["renewal"].(bool)
	switch event {
	case "cert_obtaining":
		if _, ok := m.loadOnly.get(name, m.o.Now()); ok {
			m.refuse(RefusedNotBound)
			return certmagic.ErrNoRetry{Err: fmt.Errorf("acme: no client binds %s here: its stored certificate is served, not renewed", name)}
		}
		org, _ := m.pending.get(name, m.o.Now())
		if renewal {
			org = ""
		}
		if reason := m.admitOrder(ctx, name, org, renewal); reason != "" {
			m.refuse(reason)
			m.log.Warn("certificate issuance refused", logkey.Hostname, name, logkey.OrgID, org, logkey.Reason, reason)
			return certmagic.ErrNoRetry{Err: errBudget(reason, name)}
		}
		if renewal {
			m.renewals.Add(1)
		} else {
			m.orders.Add(1)
		}
		if m.o.Audit != nil {
			m.o.Audit(Order{Name: name, Org: org, Renewal: renewal})
		}
	case "cert_obtained":
		m.issued.Add(1)
		m.log.Info("certificate obtained", logkey.Hostname, name, logkey.Renewal, renewal)
		if cert, _ := data["certificate_path"].(string); !renewal && cert != "" && !slices.Contains(m.c.Hostnames, name) {
			org, _ := m.pending.get(name, m.o.Now())
			if err := m.o.Storage.Store(ctx, ownerKey(org, name), []byte(cert)); err != nil {
				m.log.Warn("certificate's organization not noted", logkey.Hostname, name, logkey.Err, err)
			}
		}
	case "cert_failed":
		err, _ := data["error"].(error)
		m.log.Warn("certificate not obtained", logkey.Hostname, name, logkey.Err, err)
	}
	return nil
}

// Stats are the manager's counters.
type Stats struct {
	Issued      int64 // certificates obtained or renewed by this server
	Orders      int64 // new certificates ordered (each audited)
	Renewals    int64 // renewals ordered (each audited)
	Denied      int64 // handshakes for names the ask check refused (invalid, not bound, cached)
	RateLimited int64 // orders refused by a budget (server, organization, domain, stored certificates)
	// Refused counts every refusal by reason (the Refused* constants).
	Refused map[string]int64
}

// Stats returns the counters.
func (m *Manager) Stats() Stats {
	m.mu.Lock()
	by := maps.Clone(m.refusalsBy)
	m.mu.Unlock()
	return Stats{
		Issued: m.issued.Load(), Orders: m.orders.Load(), Renewals: m.renewals.Load(),
		Denied:      by[RefusedInvalid] + by[RefusedNotBound] + by[RefusedCached],
		RateLimited: by[RefusedServerRate] + by[RefusedOrgRate] + by[RefusedDomainRate] + by[RefusedOrgStoreFull],
		Refused:     by,
	}
}

// GetCertificate serves a handshake: a TLS-ALPN-01 challenge, a cached or
// stored certificate, or one obtained now for an allowed name.
func (m *Manager) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if name := hello.ServerName; name == "" || net.ParseIP(name) != nil {
		// No name to obtain a certificate for. The server's own
		// healthcheck (loopback, by address) gets a self-signed one;
		// anyone else a failed handshake, as for a name not allowed.
		if hello.Conn != nil && isLoopback(hello.Conn.RemoteAddr()) {
			return m.selfSigned, nil
		}
		return nil, errors.New("acme: a handshake without a server name gets no certificate")
	}
	if slices.Contains(hello.SupportedProtos, "acme-tls/1") {
		return m.magic.GetCertificate(hello) // a TLS-ALPN-01 challenge
	}
	name := strings.ToLower(strings.TrimSuffix(hello.ServerName, "."))
	if len(m.cache.AllMatchingCertificates(name)) > 0 {
		return m.magic.GetCertificate(hello) // managed here: served, renewed when due
	}
	if !m.c.OnDemand {
		// Without on_demand only names already managed are served: no
		// handshake starts an order.
		return nil, fmt.Errorf("acme: no certificate for %q", name)
	}
	if hostname.Validate(name) == nil {
		ctx := context.Background()
		if hello.Context() != nil {
			ctx = hello.Context()
		}
		if cert, ok, err := m.servedFromStore(ctx, name); ok {
			return cert, err
		}
	}
	return m.magic.GetCertificate(hello)
}

// TLSConfig returns base with the manager's certificates and the
// TLS-ALPN-01 protocol added.
func (m *Manager) TLSConfig(base *tls.Config) *tls.Config {
	c := base.Clone()
	c.GetCertificate = m.GetCertificate
	c.NextProtos = append(slices.Clone(c.NextProtos), "h2", "http/1.1", "acme-tls/1")
	return c
}

// HTTPHandler is the HTTP port's handler: HTTP-01 challenges, and a
// permanent redirect to HTTPS for everything else (or 404 without
// Redirect).
func (m *Manager) HTTPHandler() http.Handler {
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !m.c.Redirect {
			http.NotFound(w, r)
			return
		}
		host := hostname.Normalize(r.Host)
		if hostname.Validate(host) != nil {
			http.Error(w, "a hostname is needed for the redirect to HTTPS", http.StatusBadRequest)
			return
		}
		if m.o.PublicPort != 443 && m.o.PublicPort != 0 {
			host = net.JoinHostPort(host, strconv.Itoa(m.o.PublicPort))
		}
		target := "https://" + host + r.URL.RequestURI()
		w.Header().Set("Connection", "close")
		http.Redirect(w, r, target, http.StatusPermanentRedirect)
	})
	return m.issuer.HTTPChallengeHandler(next)
}

// Run obtains acme.hostnames, manages the tokens' names up front without
// on_demand (listing them again every manageInterval), and stops the
// cache's maintenance when ctx ends.
func (m *Manager) Run(ctx context.Context) {
	defer m.cache.Stop()
	if len(m.c.Hostnames) > 0 {
		if err := m.magic.ManageAsync(ctx, m.c.Hostnames); err != nil {
			m.log.Warn("certificates for acme.hostnames not managed", logkey.Err, err)
		}
	}
	if m.c.OnDemand || m.o.Names == nil {
		<-ctx.Done()
		return
	}
	t := time.NewTicker(manageInterval)
	defer t.Stop()
	for {
		names, err := m.o.Names(ctx)
		if err != nil {
			m.log.Warn("cannot list the names to obtain certificates for", logkey.Err, err)
		} else if len(names) > 0 {
			var allowed []string
			for _, n := range names {
				h := strings.ToLower(n.Host)
				if hostname.Validate(h) != nil || strings.HasPrefix(h, "*.") {
					continue
				}
				m.pending.put(h, n.Org, m.o.Now())
				allowed = append(allowed, h)
			}
			if err := m.magic.ManageAsync(ctx, allowed); err != nil {
				m.log.Warn("certificates not managed", logkey.Err, err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func isLoopback(a net.Addr) bool {
	tcp, ok := a.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// selfSigned makes the certificate loopback handshakes without a name
// get: ECDSA P-256, valid for a year, for no name anyone could resolve.
func selfSigned() (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "aperio-server self-check"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
