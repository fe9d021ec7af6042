package store

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"time"
)

// AdminSession is an admin login session of a browser: the master token
// or an admin key exchanged for a random secret the browser keeps in a
// cookie. The secret itself is never stored.
type AdminSession struct {
	// Hash is the SHA-256 of the session's secret, computed by the
	// caller. Unique: the key the session is found by.
	Hash []byte
	// KeyID is the admin key the session acts as; "" for the master
	// token.
	KeyID string
	// Master is set for a session of the master token, which has no key.
	Master bool
	// OrgID is the organization of the key at login; "" for the master
	// token. The caller re-reads the key on use, so its current
	// organization and role apply.
	OrgID string
	// CSRF is the token every state-changing request of the session
	// carries. Required.
	CSRF string
	// CreatedAt is assigned by the store.
	CreatedAt time.Time
	// ExpiresAt is when the session ends, whatever the browser keeps; it
	// must be after CreatedAt. The store returns expired sessions until
	// they are purged: refusing them is the caller's job.
	ExpiresAt time.Time
	// RemoteAddr is where the login came from, for people; "" if unknown.
	// The caller bounds it.
	RemoteAddr string
}

// CreateAdminSession stores s with CreatedAt now and returns it as stored.
// In the same transaction it deletes the oldest sessions of the same key
// (or of the master token) beyond keep, s included in the count, so that
// a key never holds more than keep sessions. keep must be at least 1. The
// error wraps ErrConflict when the hash is taken.
func (db *DB) CreateAdminSession(ctx context.Context, s AdminSession, keep int) (AdminSession, error) {
	if db.closed.Load() {
		return AdminSession{}, errClosed
	}
	now := stamp(db.now())
	var errs []error
	if len(s.Hash) != sha256.Size {
		errs = append(errs, fmt.Errorf("store: create admin session: hash is %d bytes, want %d (SHA-256)", len(s.Hash), sha256.Size))
	}
	if s.Master == (s.KeyID != "") {
		errs = append(errs, errors.New("store: create admin session: want exactly one of a key ID and the master flag"))
	}
	if s.CSRF == "" {
		errs = append(errs, errors.New("store: create admin session: empty csrf token"))
	}
	if !stamp(s.ExpiresAt).After(now) {
		errs = append(errs, errors.New("store: create admin session: expires at or before now"))
	}
	if keep < 1 {
		errs = append(errs, fmt.Errorf("store: create admin session: keep %d, want at least 1", keep))
	}
	if err := errors.Join(errs...); err != nil {
		return AdminSession{}, err
	}
	if s.Master {
		s.OrgID = ""
	}
	s.Hash = slices.Clone(s.Hash)
	s.CreatedAt = now
	s.ExpiresAt = stamp(s.ExpiresAt)
	if err := db.b.insertAdminSession(ctx, s, keep); err != nil {
		return AdminSession{}, db.fail("create admin session", err)
	}
	return s, nil
}

// AdminSessionByHash returns the session whose secret hashes to hash,
// expired or not, or an error wrapping ErrNotFound.
func (db *DB) AdminSessionByHash(ctx context.Context, hash []byte) (AdminSession, error) {
	if db.closed.Load() {
		return AdminSession{}, errClosed
	}
	s, err := db.b.adminSessionByHash(ctx, hash)
	if err != nil {
		return AdminSession{}, db.fail("admin session by hash", err)
	}
	return s, nil
}

// DeleteAdminSession deletes the session whose secret hashes to hash. The
// error wraps ErrNotFound when there is none.
func (db *DB) DeleteAdminSession(ctx context.Context, hash []byte) error {
	if db.closed.Load() {
		return errClosed
	}
	if err := db.b.deleteAdminSession(ctx, hash); err != nil {
		return db.fail("delete admin session", err)
	}
	return nil
}

// DeleteExpiredAdminSessions deletes the sessions that expire at or
// before now and returns how many it deleted.
func (db *DB) DeleteExpiredAdminSessions(ctx context.Context, now time.Time) (int64, error) {
	if db.closed.Load() {
		return 0, errClosed
	}
	n, err := db.b.deleteExpiredAdminSessions(ctx, stamp(now))
	if err != nil {
		return 0, db.fail("delete expired admin sessions", err)
	}
	return n, nil
}

// AdminKey returns the admin key with the given ID in organization orgID
// ("" means any organization), or an error wrapping ErrNotFound.
func (db *DB) AdminKey(ctx context.Context, orgID, id string) (AdminKey, error) {
	if db.closed.Load() {
		return AdminKey{}, errClosed
	}
	k, err := db.b.adminKey(ctx, orgID, id)
	if err != nil {
		return AdminKey{}, db.fail("admin key "+id, err)
	}
	return k, nil
}
