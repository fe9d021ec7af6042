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

	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/tunnel"
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
	if subtle.ConstantTimeCompare([]byte(token), a.master) == 1 {
		return tunnel.Identity{Name: "master", OrgID: a.defaultOrg}, nil
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
	id := tunnel.Identity{TokenID: t.ID, OrgID: t.OrgID, Name: t.Name, Hostnames: t.Hostnames}
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

// auditingRegistry records refused clients in the audit log.
type auditingRegistry struct {
	tunnel.Registry
	db  *store.DB
	log *slog.Logger
}

func (r auditingRegistry) Attach(s *tunnel.Session) error {
	err := r.Registry.Attach(s)
	if err != nil {
		id := s.Identity()
		actor := "master"
		if id.TokenID != "" {
			actor = "token:" + id.TokenID
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, aerr := r.db.AppendAudit(ctx, store.AuditEntry{OrgID: id.OrgID, Event: "client_refused", Actor: actor,
			Detail: fmt.Sprintf("%s from %s: %v", s.Announcement().Name, s.RemoteAddr(), err)})
		if aerr != nil {
			r.log.Error("audit write failed", "event", "client_refused", "err", aerr)
		}
	}
	return err
}
