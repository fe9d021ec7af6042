package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ChangeOIDCRevoked: Hostname names the hostname whose OIDC session
// revocations changed (a logout, or an admin ending sessions); read them
// with OIDCRevocations.
const ChangeOIDCRevoked = "oidc_revoked"

// Bounds of the OIDC session revocations. A user's logged-out sessions
// beyond MaxRevokedSessionsPerUser on one hostname become one revocation
// of every session of that user issued until then; a hostname's
// revocations beyond MaxRevocationsPerHost become one revocation of every
// session of the hostname issued until then. Either way nothing revoked
// becomes valid again, and the table holds at most MaxRevocationsPerHost
// rows per hostname, each kept only until the sessions it ends expire.
const (
	MaxRevokedSessionsPerUser = 32
	MaxRevocationsPerHost     = 10000
)

// revokedPerUser and revocationsPerHost are the bounds in force: the
// constants, lowered by tests (SetRevocationBoundsForTest).
var revokedPerUser, revocationsPerHost int64 = MaxRevokedSessionsPerUser, MaxRevocationsPerHost

// Bounds of the fields of an OIDCRevocation.
const (
	maxRevocationHost    = 253
	maxRevocationSession = 64
	maxRevocationUser    = 255
)

// OIDCRevocation ends sessions of the services' OpenID Connect login on
// one hostname before their sealed expiry: one session (SessionID set:
// a logout), every session of a user issued at or before RevokedAt
// (Subject or Email set), or every session of the hostname issued at or
// before RevokedAt (neither). Sessions live in sealed cookies; the
// revocations are what every server sharing the store checks them
// against.
type OIDCRevocation struct {
	// ID is assigned by the store ("orv_…").
	ID string
	// Hostname is the hostname the sessions were issued on. Required.
	Hostname string
	// SessionID is the revoked session's id; "" for a revocation by user
	// or of the whole hostname.
	SessionID string
	// Subject and Email name the user (the provider's sub, the lowercased
	// email); a logout sets both, a revocation by user one of them.
	Subject, Email string
	// RevokedAt is when the revocation was made, to the millisecond,
	// assigned by the store: a revocation by user or hostname ends the
	// sessions issued at or before it.
	RevokedAt time.Time
	// ExpiresAt is when every session the revocation ends has expired;
	// the store drops it then. Required, after now.
	ExpiresAt time.Time
}

// RevokeOIDCSessions stores r (ID and RevokedAt assigned), drops the
// revocations that have expired, applies the bounds (see
// MaxRevokedSessionsPerUser), and publishes ChangeOIDCRevoked for
// r.Hostname. It returns the revocation as stored, which the bounds may
// have widened to the user or the hostname.
func (db *DB) RevokeOIDCSessions(ctx context.Context, r OIDCRevocation) (OIDCRevocation, error) {
	if db.closed.Load() {
		return OIDCRevocation{}, errClosed
	}
	now := db.now()
	var errs []error
	if r.Hostname == "" || len(r.Hostname) > maxRevocationHost {
		errs = append(errs, fmt.Errorf("hostname of %d bytes, want 1 to %d", len(r.Hostname), maxRevocationHost))
	}
	if len(r.SessionID) > maxRevocationSession || len(r.Subject) > maxRevocationUser || len(r.Email) > maxRevocationUser {
		errs = append(errs, errors.New("session id, subject or email too long"))
	}
	if r.SessionID != "" && r.Subject == "" && r.Email == "" {
		errs = append(errs, errors.New("a revoked session needs its user"))
	}
	if !r.ExpiresAt.After(now) {
		errs = append(errs, errors.New("expires at or before now"))
	}
	if err := errors.Join(errs...); err != nil {
		return OIDCRevocation{}, fmt.Errorf("store: revoke oidc sessions: %w", err)
	}
	r.ID = newID("orv")
	r.RevokedAt = now.UTC().Truncate(time.Millisecond)
	r.ExpiresAt = r.ExpiresAt.UTC().Truncate(time.Millisecond)
	out, err := db.b.revokeOIDC(ctx, r)
	if err != nil {
		return OIDCRevocation{}, db.fail("revoke oidc sessions of "+quoteShort(r.Hostname), err)
	}
	return out, nil
}

// OIDCRevocations returns the revocations of hostname ("" for every
// hostname) that have not expired at now, oldest first.
func (db *DB) OIDCRevocations(ctx context.Context, hostname string, now time.Time) ([]OIDCRevocation, error) {
	if db.closed.Load() {
		return nil, errClosed
	}
	rs, err := db.b.oidcRevocations(ctx, hostname, now.UnixMilli())
	if err != nil {
		return nil, db.fail("list oidc revocations", err)
	}
	return rs, nil
}

// The revocations' SQL. Times are Unix milliseconds (an integer column
// in both engines): a revocation by user or hostname compares them with a
// session's issue time, which the session carries to the millisecond.
const (
	revSelect      = `SELECT id, hostname, session_id, subject, email, revoked_at, expires_at FROM oidc_revocations`
	revList        = revSelect + ` WHERE ($1 = '' OR hostname = $1) AND expires_at > $2 ORDER BY revoked_at, id`
	revPurge       = `DELETE FROM oidc_revocations WHERE expires_at <= $1`
	revInsert      = `INSERT INTO oidc_revocations (id, hostname, session_id, subject, email, revoked_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7)`
	revUserCount   = `SELECT count(*), coalesce(max(expires_at), 0) FROM oidc_revocations WHERE hostname = $1 AND subject = $2 AND session_id <> ''`
	revUserDelete  = `DELETE FROM oidc_revocations WHERE hostname = $1 AND ((subject = $2 AND $2 <> '') OR (email = $3 AND $3 <> ''))`
	revUserMax     = `SELECT coalesce(max(expires_at), 0) FROM oidc_revocations WHERE hostname = $1 AND ((subject = $2 AND $2 <> '') OR (email = $3 AND $3 <> ''))`
	revHostCount   = `SELECT count(*), coalesce(max(expires_at), 0) FROM oidc_revocations WHERE hostname = $1`
	revHostDelete  = `DELETE FROM oidc_revocations WHERE hostname = $1`
	revHostMaxOnly = `SELECT coalesce(max(expires_at), 0) FROM oidc_revocations WHERE hostname = $1`
)

// revokeOIDC stores r under the bounds, one writer per hostname at a
// time (so that two logouts never both find room under a bound), and
// announces ChangeOIDCRevoked.
func (b *backend) revokeOIDC(ctx context.Context, r OIDCRevocation) (OIDCRevocation, error) {
	var out OIDCRevocation
	err := b.write(ctx, func(tx *txn) error {
		if err := tx.lock(ctx, "oidc_revocations:"+r.Hostname); err != nil {
			return err
		}
		var err error
		if out, err = applyRevocation(ctx, tx, r); err != nil {
			return err
		}
		return tx.announce(ctx, Change{Kind: ChangeOIDCRevoked, ID: out.ID, Hostname: out.Hostname})
	})
	if err != nil {
		return OIDCRevocation{}, err
	}
	return out, nil
}

// oidcRevocations lists the rows of hostname ("" for all) that expire
// after now (Unix milliseconds).
func (b *backend) oidcRevocations(ctx context.Context, hostname string, now int64) ([]OIDCRevocation, error) {
	return queryRows(ctx, b, scanRevocation, revList, hostname, now)
}

// applyRevocation stores r in tx under the bounds and returns it as
// stored.
func applyRevocation(ctx context.Context, tx *txn, r OIDCRevocation) (OIDCRevocation, error) {
	exec := func(q string, args ...any) error {
		_, err := tx.ExecContext(ctx, q, args...)
		return err
	}
	ints := func(q string, args []any, dst ...any) error { return tx.QueryRowContext(ctx, q, args...).Scan(dst...) }
	at, until := r.RevokedAt.UnixMilli(), r.ExpiresAt.UnixMilli()
	if err := exec(revPurge, at); err != nil {
		return OIDCRevocation{}, err
	}
	if r.SessionID != "" {
		// A logout: one session, unless the user already has the most
		// sessions one user may have revoked one by one.
		var n, last int64
		if err := ints(revUserCount, []any{r.Hostname, r.Subject}, &n, &last); err != nil {
			return OIDCRevocation{}, err
		}
		if n >= revokedPerUser {
			r.SessionID, until = "", max(until, last)
		}
	}
	if r.SessionID == "" {
		// By user or hostname: it ends what the narrower ones of the same
		// user (or of the hostname) end, which go.
		del, mx, args := revUserDelete, revUserMax, []any{r.Hostname, r.Subject, r.Email}
		if r.Subject == "" && r.Email == "" {
			del, mx, args = revHostDelete, revHostMaxOnly, []any{r.Hostname}
		}
		var last int64
		if err := ints(mx, args, &last); err != nil {
			return OIDCRevocation{}, err
		}
		until = max(until, last)
		if err := exec(del, args...); err != nil {
			return OIDCRevocation{}, err
		}
	}
	var n, last int64
	if err := ints(revHostCount, []any{r.Hostname}, &n, &last); err != nil {
		return OIDCRevocation{}, err
	}
	if n >= revocationsPerHost {
		// The hostname holds the most revocations it may: every session
		// of it issued until now ends.
		r.SessionID, r.Subject, r.Email, until = "", "", "", max(until, last)
		if err := exec(revHostDelete, r.Hostname); err != nil {
			return OIDCRevocation{}, err
		}
	}
	r.ExpiresAt = time.UnixMilli(until).UTC()
	if err := exec(revInsert, r.ID, r.Hostname, r.SessionID, r.Subject, r.Email, at, until); err != nil {
		return OIDCRevocation{}, err
	}
	return r, nil
}

// scanRevocation reads a row of revSelect.
func scanRevocation(s scanner) (OIDCRevocation, error) {
	var r OIDCRevocation
	var at, until int64
	if err := s.Scan(&r.ID, &r.Hostname, &r.SessionID, &r.Subject, &r.Email, &at, &until); err != nil {
		return OIDCRevocation{}, err
	}
	r.RevokedAt, r.ExpiresAt = time.UnixMilli(at).UTC(), time.UnixMilli(until).UTC()
	return r, nil
}
