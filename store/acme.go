package store

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// The bounds of what automatic TLS keeps in the store (certmagic's
// storage): its keys are short slash-separated paths, its values PEM
// certificates, keys and small JSON documents.
const (
	MaxACMEKeyBytes   = 1024
	MaxACMEValueBytes = 1 << 20
	maxACMELockName   = 1024
	maxACMEOwner      = 128
)

// ACMEItem is one stored value's metadata.
type ACMEItem struct {
	Key      string
	Size     int64
	Modified time.Time
}

func checkACMEKey(key string) error {
	if key == "" || len(key) > MaxACMEKeyBytes {
		return fmt.Errorf("acme key of %d bytes: want 1 to %d", len(key), MaxACMEKeyBytes)
	}
	if strings.ContainsRune(key, 0) {
		return fmt.Errorf("acme key holds a NUL byte")
	}
	return nil
}

// ACMEPut stores value under key, replacing what was there.
func (db *DB) ACMEPut(ctx context.Context, key string, value []byte) error {
	if db.closed.Load() {
		return errClosed
	}
	if err := checkACMEKey(key); err != nil {
		return fmt.Errorf("store: acme put: %w", err)
	}
	if len(value) > MaxACMEValueBytes {
		return fmt.Errorf("store: acme put %s: value of %d bytes, at most %d", key, len(value), MaxACMEValueBytes)
	}
	return db.b.acmePut(ctx, key, value, stamp(db.now()))
}

// ACMEGet returns the value under key; the error wraps ErrNotFound when
// there is none.
func (db *DB) ACMEGet(ctx context.Context, key string) ([]byte, error) {
	if db.closed.Load() {
		return nil, errClosed
	}
	if err := checkACMEKey(key); err != nil {
		return nil, fmt.Errorf("store: acme get: %w", err)
	}
	return db.b.acmeGet(ctx, key)
}

// ACMEDelete deletes key and every key under key + "/", reporting how
// many it deleted.
func (db *DB) ACMEDelete(ctx context.Context, key string) (int64, error) {
	if db.closed.Load() {
		return 0, errClosed
	}
	if err := checkACMEKey(key); err != nil {
		return 0, fmt.Errorf("store: acme delete: %w", err)
	}
	return db.b.acmeDelete(ctx, key)
}

// ACMEList returns the metadata of every key that is prefix or lies under
// prefix + "/" (every key when prefix is ""), in key order.
func (db *DB) ACMEList(ctx context.Context, prefix string) ([]ACMEItem, error) {
	if db.closed.Load() {
		return nil, errClosed
	}
	if len(prefix) > MaxACMEKeyBytes {
		return nil, fmt.Errorf("store: acme list: prefix of %d bytes, at most %d", len(prefix), MaxACMEKeyBytes)
	}
	return db.b.acmeList(ctx, prefix)
}

// ACMELock takes the lock name for owner until ttl from now, when it is
// free, expired, or already owner's (which extends it). It reports
// whether owner holds the lock; it never waits.
func (db *DB) ACMELock(ctx context.Context, name, owner string, ttl time.Duration) (bool, error) {
	if db.closed.Load() {
		return false, errClosed
	}
	if name == "" || len(name) > maxACMELockName || owner == "" || len(owner) > maxACMEOwner {
		return false, fmt.Errorf("store: acme lock: name of %d bytes (1 to %d) or owner of %d (1 to %d)", len(name), maxACMELockName, len(owner), maxACMEOwner)
	}
	if ttl <= 0 {
		return false, fmt.Errorf("store: acme lock: ttl %v, want > 0", ttl)
	}
	now := stamp(db.now())
	return db.b.acmeLock(ctx, name, owner, now, now.Add(ttl))
}

// ACMEUnlock releases owner's lock name; a lock held by another owner (it
// expired and was taken over) is left alone.
func (db *DB) ACMEUnlock(ctx context.Context, name, owner string) error {
	if db.closed.Load() {
		return errClosed
	}
	if name == "" || len(name) > maxACMELockName {
		return fmt.Errorf("store: acme unlock: name of %d bytes, want 1 to %d", len(name), maxACMELockName)
	}
	return db.b.acmeUnlock(ctx, name, owner)
}

// acmeUnder is the LIKE pattern of the keys under prefix + "/", with the
// pattern's own wildcards escaped (ESCAPE '\').
func acmeUnder(prefix string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return r.Replace(prefix) + "/%"
}
