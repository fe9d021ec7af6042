package gateway

import (
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
	id := tunnel.Identity{TokenID: t.ID, OrgID: t.OrgID, Name: t.Name, Hostnames: t.Hostnames, AllowCatchAll: t.AllowCatchAll}
	if t.ExpiresAt != nil {
		id.ExpiresAt = *t.ExpiresAt
	}
	for _, s := range t.AllowedIPs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			// The API validates CIDRs before storing them; a bad one here
			// means the record was edited by hand. Admitting no visitor
			// is the safe reading.
			return tunnel.Identity{}, fmt.Errorf("token %s has an invalid allowed_ips entry %q", t.ID, s)
		}
		id.AllowedIPs = append(id.AllowedIPs, p)
	}
	return id, nil
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
