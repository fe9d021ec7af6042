package server

import (
	"context"
	"crypto/hkdf"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/aperio-dev/aperio/internal/control/admin"
	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/control/events"
	"github.com/aperio-dev/aperio/internal/outbound"
	"github.com/aperio-dev/aperio/internal/telemetry"
	"github.com/aperio-dev/aperio/internal/visitor/access"
	"github.com/aperio-dev/aperio/internal/visitor/access/oidc"
	"github.com/aperio-dev/aperio/internal/visitor/signing"
	"github.com/aperio-dev/aperio/router"
	"github.com/aperio-dev/aperio/store"
)

// IdentityIssuer is the iss of the identity tokens the server signs for
// backends (identity_jwt).
const IdentityIssuer = "aperio"

// visitorAccess is the server's side of visitor access control: the
// signing keys kept in the store (shared by every server on the
// database) with the identity signer and share keyring they back, the
// oidc: block's provider and its session revocations, the login routes
// of hostnames that require oidc, the JWKS of identity tokens, and the
// audit of refusals.
type visitorAccess struct {
	db     *store.DB
	log    *slog.Logger
	events *events.Emitter
	keys   *signing.Keys   // the store's signing keys behind signer and shares
	signer *access.Signer  // signs the identity tokens backends receive
	shares *access.Keyring // share links, keys per organization
	oidc   *oidc.Provider  // the oidc: block's provider; nil without one
	// denylist holds the OIDC session revocations in force (logouts, and
	// sessions an admin ended), loaded from the store at start and
	// followed through its change feed; nil without an oidc: block.
	denylist *oidc.Denylist
	// registry answers which service of a hostname requires a login; set
	// once the router exists.
	registry *router.Registry
}

// newVisitorAccess loads the signing keys and, with an oidc: block, the
// provider's discovery (through fence, so an unreachable provider fails
// the start) and the revocations in force.
func newVisitorAccess(ctx context.Context, cfg Config, db *store.DB, fence *outbound.Client, ev *events.Emitter, log *slog.Logger) (*visitorAccess, error) {
	va := &visitorAccess{db: db, log: log, events: ev}
	var err error
	va.keys, err = signing.New(ctx, signing.Config{
		Store: db, MasterToken: cfg.Token, Issuer: IdentityIssuer,
		IdentityRotation: cfg.IdentityKeyRotation, Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("gateway: signing keys (servers sharing a database must share server.token): %w", err)
	}
	va.signer = va.keys.Signer()
	va.shares = va.keys.Shares()
	if va.oidc, err = va.oidcProvider(ctx, cfg, fence); err != nil {
		return nil, err
	}
	return va, nil
}

// routerConfig returns the router's side of visitor access control:
// default_access, the identity signer, the share keyring, the provider,
// and the outbound client of the jwt and forward methods, under the same
// fence as scaling hooks and webhooks (never http.DefaultClient).
func (va *visitorAccess) routerConfig(cfg Config, fence *outbound.Client) (router.AccessConfig, error) {
	posture, err := cfg.posture()
	if err != nil {
		return router.AccessConfig{}, err
	}
	return router.AccessConfig{Default: posture, Identity: va.signer, Shares: va.shares, OIDC: va.oidc, Client: fence.HTTPClient(), Denied: va.authDenied}, nil
}

// oidcInfo is the HKDF context of the OIDC cookies' key.
const oidcInfo = "aperio oidc cookies v1"

// oidcStartTimeout bounds the provider's discovery at start.
const oidcStartTimeout = 30 * time.Second

// oidcProvider returns the server's OpenID Connect provider, nil without
// an oidc: block. It fetches the provider's discovery document through
// the outbound fence, so an unreachable provider fails the start.
func (va *visitorAccess) oidcProvider(ctx context.Context, cfg Config, fence *outbound.Client) (*oidc.Provider, error) {
	o := cfg.OIDC
	if o.Issuer == "" {
		return nil, nil
	}
	key, err := hkdf.Key(sha256.New, []byte(cfg.Token), nil, oidcInfo, 32)
	if err != nil {
		return nil, fmt.Errorf("gateway: oidc key: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, oidcStartTimeout)
	defer cancel()
	va.denylist = new(oidc.Denylist)
	if err := va.reloadRevocations(ctx, ""); err != nil {
		return nil, fmt.Errorf("gateway: oidc session revocations: %w", err)
	}
	p, err := oidc.New(ctx, oidc.Config{
		Issuer: o.Issuer, ClientID: o.ClientID, ClientSecret: o.ClientSecret, Scopes: o.Scopes, RedirectURL: o.RedirectURL,
		HTTPClient: fence.HTTPClient(), Keys: []oidc.Key{{ID: 1, Secret: key}},
		AllowHTTP: cfg.Outbound.AllowHTTP, Logger: va.log,
		Denylist: va.denylist, Revoker: storeRevoker{va.db},
	})
	if err != nil {
		return nil, fmt.Errorf("gateway: oidc: %w", err)
	}
	return p, nil
}

// adminLogin returns the admin API's login (admin_oidc) on the server's
// provider, nil when it is off, with its logins counted in
// aperio_auth_total{method="admin_oidc"}.
func (va *visitorAccess) adminLogin(cfg Config, meter metric.Meter) (*admin.OIDCConfig, error) {
	if !cfg.AdminOIDC {
		return nil, nil
	}
	if va.oidc == nil {
		return nil, errors.New("gateway: admin_oidc needs the oidc: block")
	}
	counter, err := telemetry.AuthCounter(meter)
	if err != nil {
		return nil, err
	}
	roles := make([]admin.OIDCRole, len(cfg.AdminOIDCRoles))
	for i, r := range cfg.AdminOIDCRoles {
		roles[i] = r.Entry()
	}
	method := attribute.String("method", "admin_oidc")
	return &admin.OIDCConfig{Provider: va.oidc, Roles: roles, Count: func(outcome string) {
		// The outcome is one of admin's three constants, never the
		// visitor's.
		counter.Add(context.Background(), 1, metric.WithAttributes(method, attribute.String("outcome", outcome)))
	}}, nil
}

// adminLoginPrefix is the prefix of the admin login's paths
// (admin.LoginPath, admin.KeySessionPath, admin.LogoutPath).
const adminLoginPrefix = "/aperio/admin/"

// serveAuth answers the login routes under /aperio/auth/ of a hostname
// whose service requires oidc; 404 elsewhere.
func (va *visitorAccess) serveAuth(w http.ResponseWriter, r *http.Request) {
	if va.oidc == nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such endpoint: " + r.URL.Path})
		return
	}
	visit, ok := va.registry.OIDCVisit(r.Host, router.VisitorOf(r).Proto == "https")
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no service of this hostname requires a login"})
		return
	}
	va.oidc.ServeAuth(w, r, visit)
}

// shareMinter is the admin API's side of the share keyring: it mints
// with the organization's key (created at its first link) and builds the
// URL for the scheme visitors of this server use.
type shareMinter struct{ k *signing.Keys }

func (m shareMinter) Mint(r *http.Request, orgID, host, path string, ttl time.Duration) (admin.ShareLink, string, error) {
	if err := m.k.EnsureShareKey(r.Context(), orgID); err != nil {
		return admin.ShareLink{}, "", err
	}
	tok, link, err := m.k.Shares().MintFor(orgID, host, path, ttl)
	if errors.Is(err, access.ErrShareNoKey) {
		return admin.ShareLink{}, "", err
	}
	if err != nil {
		return admin.ShareLink{}, "", fmt.Errorf("%w: %w", admin.ErrBadShare, err)
	}
	scheme := "http"
	if router.VisitorOf(r).Proto == "https" {
		scheme = "https"
	}
	u := url.URL{Scheme: scheme, Host: link.Host, Path: link.Path, RawQuery: url.Values{access.ShareParam: {tok}}.Encode()}
	return admin.ShareLink{URL: u.String(), Hostname: link.Host, Path: link.Path, ExpiresAt: link.Expires}, link.Nonce, nil
}

func (m shareMinter) RotateKey(ctx context.Context, orgID string, revokePrevious bool) (admin.ShareKey, error) {
	row, err := m.k.RotateShareKey(ctx, orgID, revokePrevious)
	if err != nil {
		return admin.ShareKey{}, err
	}
	return admin.ShareKey{ID: row.ID, OrgID: row.OrgID, Generation: row.Generation, RevokedPrevious: revokePrevious, CreatedAt: row.CreatedAt}, nil
}

// serveJWKS answers GET and HEAD of access.JWKSPath with the identity
// signer's public key set, on every hostname and without auth.
func (va *visitorAccess) serveJWKS(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	body := va.signer.JWKS()
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "public, max-age=300")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if r.Method == http.MethodHead {
		return
	}
	w.Write(body)
}

// authDenied is router.AccessConfig.Denied: it offers an auth_denied
// event, which the emitter samples (at most one per organization and
// hostname each events.DefaultSampleInterval, the rest counted in the
// next) and queues without waiting: a visitor can be refused as fast as
// it can send requests, and each audit entry is permanent.
func (va *visitorAccess) authDenied(d router.AccessDenial) {
	answer := "answered as no route"
	if d.Status != 0 {
		answer = "answered " + strconv.Itoa(d.Status)
	}
	visitor := "an unknown address"
	if d.Visitor.IsValid() {
		visitor = d.Visitor.String()
	}
	path := d.Path
	if len(path) > maxAuditDetail {
		path = path[:maxAuditDetail] + "…"
	}
	detail := fmt.Sprintf("%s%s from %s, auth %s, %s: %s", d.Host, path, visitor, d.Methods, answer, d.Reason)
	if len(detail) > maxAuditDetail {
		detail = detail[:maxAuditDetail] + "…"
	}
	va.events.Offer(events.Event{Kind: apitype.EventAuthDenied, OrgID: d.OrgID, Actor: store.VisitorActor, Hostname: d.Host, Detail: detail,
		Fields: map[string]any{"path": path, "visitor": visitor, "methods": d.Methods, "status": d.Status, "reason": d.Reason}})
}

// maxAuditDetail bounds an auth_denied entry's detail: the path is the
// visitor's.
const maxAuditDetail = 1024
