package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/tunnel"
	"github.com/aperio-dev/aperio/wire"
)

// tokenAuth authenticates tunnels: the master token (server.token), or an
// apr_ client token looked up by its hash in the store.
type tokenAuth struct {
	master     []byte
	db         *store.DB
	defaultOrg string
	now        func() time.Time
	// limits, when set, learns the byte quota of every token that
	// authenticates, before its first request.
	limits *usageLimits
}

// errInvalidToken is the one answer for every unknown token, so a caller
// learns nothing about which tokens exist.
var errInvalidToken = errors.New("invalid token")

func (a *tokenAuth) Authenticate(ctx context.Context, token string) (tunnel.Identity, error) {
	// Digests of equal length: the comparison takes the same time whatever
	// the length of either token, so it tells a caller nothing about the
	// master token's.
	got, want := sha256.Sum256([]byte(token)), sha256.Sum256(a.master)
	if subtle.ConstantTimeCompare(got[:], want[:]) == 1 {
		return tunnel.Identity{Name: wire.Master, OrgID: a.defaultOrg}, nil
	}
	if !strings.HasPrefix(token, "apr_") {
		return tunnel.Identity{}, errInvalidToken
	}
	h := sha256.Sum256([]byte(token))
	t, err := a.db.TokenByHash(ctx, h[:])
	switch {
	case errors.Is(err, store.ErrNotFound):
		return tunnel.Identity{}, errInvalidToken
	case err != nil:
		return tunnel.Identity{}, fmt.Errorf("%w: %w", tunnel.ErrUnavailable, err)
	case t.RevokedAt != nil:
		return tunnel.Identity{}, errors.New("token revoked")
	case t.ExpiresAt != nil && !a.now().Before(*t.ExpiresAt):
		return tunnel.Identity{}, errors.New("token expired")
	}
	a.limits.setToken(t)
	previous := !bytes.Equal(t.Hash, h[:])
	if previous && (t.PrevExpiresAt == nil || !a.now().Before(*t.PrevExpiresAt)) {
		return tunnel.Identity{}, errors.New("token secret rotated: connect with the new secret")
	}
	return identityOf(t, previous)
}

// identityOf is what token t grants a session that authenticated with its
// current secret, or with its previous one (previous), whose sessions end
// with the rotation's grace and are told so with every heartbeat.
func identityOf(t store.Token, previous bool) (tunnel.Identity, error) {
	id := tunnel.Identity{TokenID: t.ID, OrgID: t.OrgID, Name: t.Name, Hostnames: t.Hostnames, AllowCatchAll: t.AllowCatchAll,
		Paths: t.Limits.Paths, MaxRPS: t.Limits.MaxRPS, MaxConnections: t.Limits.MaxConnections, Generation: t.Generation}
	if t.ExpiresAt != nil {
		id.ExpiresAt = *t.ExpiresAt
	}
	if previous {
		id.Generation = t.Generation - 1
		if t.PrevExpiresAt != nil && (id.ExpiresAt.IsZero() || t.PrevExpiresAt.Before(id.ExpiresAt)) {
			id.ExpiresAt = *t.PrevExpiresAt
			id.EndReason = "token secret rotated: the previous secret's grace ended; connect with the new secret"
		}
		if t.PrevExpiresAt != nil {
			id.Notice = fmt.Sprintf("token %s was rotated: this client's secret stops working at %s; switch to the new secret", t.ID, t.PrevExpiresAt.UTC().Format(time.RFC3339))
		}
	}
	var err error
	if id.AllowedIPs, err = parsePrefixes(t.ID, "allowed_ips", t.AllowedIPs); err != nil {
		return tunnel.Identity{}, err
	}
	if id.ClientAllowedIPs, err = parsePrefixes(t.ID, "client_allowed_ips", t.Limits.ClientAllowedIPs); err != nil {
		return tunnel.Identity{}, err
	}
	return id, nil
}

// parsePrefixes parses a token's stored CIDRs. The API validates them
// before storing them; a bad one here means the record was edited by
// hand, and refusing the token is the safe reading.
func parsePrefixes(tokenID, field string, cidrs []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range cidrs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("token %s has an invalid %s entry %q", tokenID, field, s)
		}
		out = append(out, p)
	}
	return out, nil
}

// auditingRegistry records refused clients in the audit log, within a
// per-token budget (see refusalBudget).
type auditingRegistry struct {
	tunnel.Registry
	db     *store.DB
	log    *slog.Logger
	budget *refusalBudget
	binds  *bindAudits // nil: refused binds are not audited
}

func (r auditingRegistry) Attach(ctx context.Context, s *tunnel.Session) error {
	err := r.Registry.Attach(ctx, s)
	if err != nil {
		r.refused(ctx, s.Identity(), s.Announcement().Name, s.RemoteAddr(), err)
	}
	return err
}

// auditTimeout bounds the audit write of a refusal. Only a session being
// refused at its handshake waits for it; heartbeats never do.
const auditTimeout = 5 * time.Second

// refused audits the refusal of a client called name, from remote, when
// the budget of its token admits it. It blocks for the write, at most
// auditTimeout.
func (r auditingRegistry) refused(ctx context.Context, id tunnel.Identity, name, remote string, why error) {
	actor := wire.Master
	if id.TokenID != "" {
		actor = "token:" + id.TokenID
	}
	ok, leftOut, first := r.budget.admit(actor)
	if first {
		r.log.Warn("refused clients over budget, not auditing the rest of this minute",
			logkey.Actor, actor, logkey.Limit, maxRefusalAudits, logkey.RemoteAddr, remote)
	}
	if !ok {
		return
	}
	detail := fmt.Sprintf("%s from %s: %v", name, remote, why)
	if leftOut > 0 {
		detail += fmt.Sprintf(" (%d earlier refusals of this token over budget, not audited)", leftOut)
	}
	ctx, cancel := context.WithTimeout(ctx, auditTimeout)
	defer cancel()
	_, aerr := r.db.AppendAudit(ctx, store.AuditEntry{OrgID: id.OrgID, Event: "client_refused", Actor: actor, Detail: detail})
	if aerr != nil {
		r.log.Error("audit write failed", logkey.Event, "client_refused", logkey.Err, aerr)
	}
}
