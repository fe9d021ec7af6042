package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Signing key purposes, as SigningKey.Purpose carries them.
const (
	// KeyPurposeShare: the HMAC keys of share links, one series per
	// organization.
	KeyPurposeShare = "share"
	// KeyPurposeIdentity: the Ed25519 key of the identity JWT, one
	// server-wide series (OrgID "").
	KeyPurposeIdentity = "identity"
)

// MaxSealedKeyBytes bounds a sealed secret: a 32-byte secret sealed with
// AES-GCM is 60 bytes, so anything near this is not a key.
const MaxSealedKeyBytes = 1024

// maxSigningOrgLen bounds a signing key's OrgID, an organization ID.
const maxSigningOrgLen = 64

// SigningKey is one generation of a series of signing keys: the keys of
// one purpose for one organization (or the server). The store keeps the
// secret sealed and never opens it.
type SigningKey struct {
	// ID is assigned by the store ("sk_…"); share tokens carry it.
	ID string
	// Purpose is KeyPurposeShare or KeyPurposeIdentity.
	Purpose string
	// OrgID is the organization of the series; "" for a server-wide one.
	OrgID string
	// Generation numbers the keys of a series from 1, one more per
	// rotation; the highest is the current key.
	Generation int64
	// Sealed is the secret as the caller sealed it, at most
	// MaxSealedKeyBytes.
	Sealed []byte
	// CreatedAt is assigned by the store.
	CreatedAt time.Time
	// RevokedAt is when a rotation revoked the key; nil means it still
	// verifies.
	RevokedAt *time.Time
}

// SealFunc seals the secret of a new key. The store calls it once, with
// the key's ID, Purpose, OrgID, Generation and CreatedAt set, so that the
// seal can bind them; its error is returned as is.
type SealFunc func(k SigningKey) ([]byte, error)

// AddSigningKey stores generation gen of the series (purpose, orgID),
// its secret sealed by seal, and publishes ChangeSigningKeys. gen must be
// one more than the series' highest generation (1 for a new series), or
// the error wraps ErrConflict: another caller, on any server, created or
// rotated the series first, and the caller re-reads it with SigningKeys.
// In the same transaction, generations below gen-1 are removed (a series
// keeps its current and previous key) and, with revokePrevious, gen-1 is
// marked revoked. Purpose must be KeyPurposeShare or KeyPurposeIdentity,
// and the sealed secret at most MaxSealedKeyBytes.
func (db *DB) AddSigningKey(ctx context.Context, purpose, orgID string, gen int64, revokePrevious bool, seal SealFunc) (SigningKey, error) {
	if db.closed.Load() {
		return SigningKey{}, errClosed
	}
	if err := checkKeyPurpose(purpose); err != nil {
		return SigningKey{}, fmt.Errorf("store: add signing key: %w", err)
	}
	if len(orgID) > maxSigningOrgLen {
		return SigningKey{}, fmt.Errorf("store: add signing key: org id of %d bytes, at most %d", len(orgID), maxSigningOrgLen)
	}
	if gen < 1 {
		return SigningKey{}, fmt.Errorf("store: add signing key: generation %d, want at least 1", gen)
	}
	k := SigningKey{ID: newID("sk"), Purpose: purpose, OrgID: orgID, Generation: gen, CreatedAt: stamp(db.now())}
	sealed, err := seal(k)
	if err != nil {
		return SigningKey{}, err
	}
	if len(sealed) == 0 || len(sealed) > MaxSealedKeyBytes {
		return SigningKey{}, fmt.Errorf("store: add signing key: sealed secret of %d bytes, want 1 to %d", len(sealed), MaxSealedKeyBytes)
	}
	k.Sealed = slices.Clone(sealed)
	var at *time.Time
	if revokePrevious {
		at = &k.CreatedAt
	}
	if err := db.b.addSigningKey(ctx, k, at); err != nil {
		return SigningKey{}, db.fail(fmt.Sprintf("add %s key generation %d of org %q", purpose, gen, orgID), err)
	}
	return k, nil
}

// SigningKeys returns the keys of purpose of every series, by OrgID, the
// highest generation first, revoked ones included.
func (db *DB) SigningKeys(ctx context.Context, purpose string) ([]SigningKey, error) {
	if db.closed.Load() {
		return nil, errClosed
	}
	if err := checkKeyPurpose(purpose); err != nil {
		return nil, fmt.Errorf("store: signing keys: %w", err)
	}
	ks, err := db.b.signingKeys(ctx, purpose)
	if err != nil {
		return nil, db.fail("list "+purpose+" keys", err)
	}
	return ks, nil
}

func checkKeyPurpose(p string) error {
	if p != KeyPurposeShare && p != KeyPurposeIdentity {
		return errors.New("unknown key purpose " + quoteShort(p))
	}
	return nil
}

// quoteShort quotes s for an error, cut at 64 bytes: it may be anything a
// caller passed.
func quoteShort(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return fmt.Sprintf("%q", s)
}
