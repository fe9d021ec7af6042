package server

import (
	"context"
	"time"

	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/internal/visitor/access/oidc"
	"github.com/aperio-dev/aperio/store"
)

// revocationLoadTimeout bounds one read of the OIDC session revocations.
const revocationLoadTimeout = 10 * time.Second

// storeRevoker records the OIDC logouts in the store, where every server
// sharing it reads them (through the change feed, reloadRevocations).
type storeRevoker struct{ db *store.DB }

func (s storeRevoker) RevokeSession(ctx context.Context, r oidc.Revocation) error {
	_, err := s.db.RevokeOIDCSessions(ctx, store.OIDCRevocation{
		Hostname: r.Host, SessionID: r.SessionID, Subject: r.Subject, Email: r.Email, ExpiresAt: r.ExpiresAt,
	})
	return err
}

// revocationsOf converts the store's rows.
func revocationsOf(rs []store.OIDCRevocation) []oidc.Revocation {
	out := make([]oidc.Revocation, len(rs))
	for i, r := range rs {
		out[i] = oidc.Revocation{Host: r.Hostname, SessionID: r.SessionID, Subject: r.Subject, Email: r.Email, RevokedAt: r.RevokedAt, ExpiresAt: r.ExpiresAt}
	}
	return out
}

// ReloadRevocations implements admin.RevocationFollower: POST
// /oidc/sessions/revoke puts the revocation in force here before it
// answers.
func (va *visitorAccess) ReloadRevocations(ctx context.Context, host string) error {
	if va.denylist == nil {
		return nil
	}
	return va.reloadRevocations(ctx, host)
}

// reloadRevocations reads the revocations of host ("" for every
// hostname) into the denylist. A failure keeps what the denylist holds
// (a revocation is never dropped by an outage) and is logged.
func (va *visitorAccess) reloadRevocations(ctx context.Context, host string) error {
	ctx, cancel := context.WithTimeout(ctx, revocationLoadTimeout)
	defer cancel()
	rs, err := va.db.OIDCRevocations(ctx, host, time.Now())
	if err != nil {
		va.log.Error("oidc session revocations not loaded", logkey.Hostname, host, logkey.Err, err)
		return err
	}
	if host == "" {
		va.denylist.Replace(revocationsOf(rs))
	} else {
		va.denylist.ReplaceHost(host, revocationsOf(rs))
	}
	return nil
}
