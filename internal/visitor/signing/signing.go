// Package signing owns the server's signing keys: the share links' HMAC
// keys (one series per organization) and the identity JWT's Ed25519 key
// (one server-wide series), kept in the store sealed under a key derived
// from the master token, so that a restart and every server sharing the
// database sign and verify with the same keys. It creates each series'
// first key once across servers, rotates them (the identity key by age,
// share keys on request), and follows the rotations other servers make
// through the store's change feed, with a periodic reload as a bound.
package signing

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/internal/visitor/access"
	"github.com/aperio-dev/aperio/store"
)

// DefaultRefresh is how often Run reloads the keys even when the change
// feed said nothing: the bound on how long a server may miss another's
// rotation, and how often the identity key's age is checked.
const DefaultRefresh = time.Minute

// DefaultIdentityRotation is the identity key's default lifetime.
const DefaultIdentityRotation = 720 * time.Hour

// secretLen is the length of every secret: a share link's HMAC key, or
// the seed of an Ed25519 key.
const secretLen = 32

// sealInfo is the HKDF context of the sealing key: it keeps the key apart
// from anything else derived from the master token.
const sealInfo = "aperio signing keys v1"

// reloadTimeout bounds one reload or rotation's store calls in Run.
const reloadTimeout = 30 * time.Second

// ErrUnopenable means a stored key does not open with this server's
// master token: the row was sealed by a server with another token (every
// server sharing a database must share the master token), or changed.
var ErrUnopenable = errors.New("signing: stored key does not open with this master token")

// Config configures Keys.
type Config struct {
	// Store keeps the keys. Required.
	Store *store.DB
	// MasterToken derives the key that seals the secrets. Required; every
	// server sharing Store must have the same.
	MasterToken string
	// Issuer is the identity tokens' iss. Required.
	Issuer string
	// IdentityRotation is the identity key's lifetime: a key older than
	// this is replaced by a new one at the next refresh, the old one
	// still published. 0 means never rotate.
	IdentityRotation time.Duration
	// Refresh is how often Run reloads the keys without a change; zero
	// means DefaultRefresh.
	Refresh time.Duration
	// Logger receives the keys' lifecycle (created, rotated, a key that
	// does not open); nil discards it.
	Logger *slog.Logger
	// Now is the clock of key ages; nil means time.Now.
	Now func() time.Time
}

// Keys is the server's set of signing keys, loaded from the store. It is
// safe for concurrent use. Run keeps it current.
type Keys struct {
	db       *store.DB
	aead     cipher.AEAD
	rotation time.Duration
	refresh  time.Duration
	log      *slog.Logger
	now      func() time.Time
	shares   *access.Keyring
	signer   *access.Signer

	mu sync.Mutex // guards the following fields; serializes reloads
	// identity is the current identity key's row, for its age, and
	// identityPrev the ID of the previous key published ("" for none).
	identity     store.SigningKey
	identityPrev string
	// unopened holds the IDs of rows already reported as unopenable, so
	// each is logged once, not at every reload.
	unopened map[string]bool
}

// New loads the keys from cfg.Store, creating the identity key when the
// store has none (once across every server sharing the store: a loser of
// the race loads the winner's). It fails when the current identity key
// does not open with cfg.MasterToken. Share keys are created per
// organization by EnsureShareKey.
func New(ctx context.Context, cfg Config) (*Keys, error) {
	var errs []error
	if cfg.Store == nil {
		errs = append(errs, errors.New("signing: no store"))
	}
	if cfg.MasterToken == "" {
		errs = append(errs, errors.New("signing: no master token"))
	}
	if cfg.IdentityRotation < 0 {
		errs = append(errs, fmt.Errorf("signing: identity key rotation %s is negative", cfg.IdentityRotation))
	}
	if cfg.Refresh < 0 {
		errs = append(errs, fmt.Errorf("signing: refresh %s is negative", cfg.Refresh))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	aead, err := sealer(cfg.MasterToken)
	if err != nil {
		return nil, err
	}
	k := &Keys{db: cfg.Store, aead: aead, rotation: cfg.IdentityRotation, refresh: cfg.Refresh, log: cfg.Logger, now: cfg.Now, unopened: map[string]bool{}}
	if k.refresh == 0 {
		k.refresh = DefaultRefresh
	}
	if k.log == nil {
		k.log = slog.New(slog.DiscardHandler)
	}
	if k.now == nil {
		k.now = time.Now
	}
	if k.shares, err = access.NewKeyring(access.KeyringConfig{Now: k.now}); err != nil {
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	set, err := k.identityKeysLocked(ctx, true)
	if err != nil {
		return nil, err
	}
	if k.signer, err = access.NewSigner(access.SignerConfig{Issuer: cfg.Issuer, Key: set.cur, Previous: set.prev, Now: k.now}); err != nil {
		return nil, err
	}
	k.identity, k.identityPrev = set.row, set.prevID
	if err := k.reloadSharesLocked(ctx); err != nil {
		return nil, err
	}
	return k, nil
}

// sealer returns the AEAD sealing the secrets: AES-256-GCM under a key
// derived from the master token with HKDF-SHA256.
func sealer(master string) (cipher.AEAD, error) {
	key, err := hkdf.Key(sha256.New, []byte(master), nil, sealInfo, 32)
	if err != nil {
		return nil, fmt.Errorf("signing: sealing key: %w", err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("signing: sealing key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("signing: sealing key: %w", err)
	}
	return aead, nil
}

// additional is what a sealed row is bound to: its purpose, organization
// and ID, so that a row copied to another series does not open.
func additional(k store.SigningKey) []byte {
	return []byte(k.Purpose + "\x00" + k.OrgID + "\x00" + k.ID)
}

// seal returns a SealFunc sealing a new random secret, and the secret.
func (k *Keys) seal() (store.SealFunc, []byte) {
	secret := make([]byte, secretLen)
	rand.Read(secret)
	return func(row store.SigningKey) ([]byte, error) {
		nonce := make([]byte, k.aead.NonceSize())
		rand.Read(nonce)
		return k.aead.Seal(nonce, nonce, secret, additional(row)), nil
	}, secret
}

// open returns the secret of row, or an error wrapping ErrUnopenable.
func (k *Keys) open(row store.SigningKey) ([]byte, error) {
	n := k.aead.NonceSize()
	if len(row.Sealed) < n+k.aead.Overhead() {
		return nil, fmt.Errorf("%w: key %s is %d bytes", ErrUnopenable, row.ID, len(row.Sealed))
	}
	secret, err := k.aead.Open(nil, row.Sealed[:n], row.Sealed[n:], additional(row))
	if err != nil || len(secret) != secretLen {
		return nil, fmt.Errorf("%w: key %s (%s, org %q, generation %d)", ErrUnopenable, row.ID, row.Purpose, row.OrgID, row.Generation)
	}
	return secret, nil
}

// reportUnopenableLocked logs, once per row, that a row does not open.
func (k *Keys) reportUnopenableLocked(row store.SigningKey, err error) {
	if k.unopened[row.ID] {
		return
	}
	k.unopened[row.ID] = true
	k.log.Error("signing key does not open: every server sharing the database must have the same master token",
		logkey.KeyID, row.ID, logkey.Purpose, row.Purpose, logkey.OrgID, row.OrgID, logkey.Generation, row.Generation, logkey.Err, err)
}

// Shares returns the share-link keyring. Its keys change as the store's
// do; the pointer does not.
func (k *Keys) Shares() *access.Keyring { return k.shares }

// Signer returns the identity signer. Its keys change as the store's do;
// the pointer does not.
func (k *Keys) Signer() *access.Signer { return k.signer }

// identitySet is the identity series as loaded: the current key and its
// row, and the previous key (nil when there is none, it is revoked or it
// does not open).
type identitySet struct {
	cur, prev ed25519.PrivateKey
	row       store.SigningKey
	prevID    string
}

// identityKeysLocked reads the identity series, creating its first key
// when create is set and there is none.
func (k *Keys) identityKeysLocked(ctx context.Context, create bool) (identitySet, error) {
	for range 2 { // a lost race to create re-reads once
		rows, err := k.db.SigningKeys(ctx, store.KeyPurposeIdentity)
		if err != nil {
			return identitySet{}, fmt.Errorf("signing: identity keys: %w", err)
		}
		rows = series(rows, "")
		if len(rows) == 0 {
			if !create {
				return identitySet{}, errors.New("signing: no identity key in the store")
			}
			if _, err := k.add(ctx, store.KeyPurposeIdentity, "", 1, false); err != nil && !errors.Is(err, store.ErrConflict) {
				return identitySet{}, fmt.Errorf("signing: create the identity key: %w", err)
			}
			continue
		}
		secret, err := k.open(rows[0])
		if err != nil {
			k.reportUnopenableLocked(rows[0], err)
			return identitySet{}, err
		}
		set := identitySet{cur: ed25519.NewKeyFromSeed(secret), row: rows[0]}
		if len(rows) > 1 && rows[1].RevokedAt == nil {
			if s, err := k.open(rows[1]); err == nil {
				set.prev, set.prevID = ed25519.NewKeyFromSeed(s), rows[1].ID
			} else {
				k.reportUnopenableLocked(rows[1], err)
			}
		}
		return set, nil
	}
	return identitySet{}, errors.New("signing: the identity key was created and is gone")
}

// series returns the rows of org among rows (sorted by org, then
// generation descending, as the store returns them).
func series(rows []store.SigningKey, org string) []store.SigningKey {
	var out []store.SigningKey
	for _, r := range rows {
		if r.OrgID == org {
			out = append(out, r)
		}
	}
	return out
}

// add stores a new key of generation gen in the series (purpose, org).
func (k *Keys) add(ctx context.Context, purpose, org string, gen int64, revoke bool) (store.SigningKey, error) {
	seal, _ := k.seal()
	row, err := k.db.AddSigningKey(ctx, purpose, org, gen, revoke, seal)
	if err != nil {
		return store.SigningKey{}, err
	}
	k.log.Info("signing key created", logkey.KeyID, row.ID, logkey.Purpose, purpose, logkey.OrgID, org, logkey.Generation, gen)
	return row, nil
}

// reloadShares rebuilds the keyring from the store.
func (k *Keys) reloadShares(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.reloadSharesLocked(ctx)
}

// reloadSharesLocked rebuilds the keyring from the store: every
// organization's keys that are not revoked and open, each organization's
// current key signing its links. Reads and the update happen under mu, so
// an older read never replaces a newer one.
func (k *Keys) reloadSharesLocked(ctx context.Context) error {
	rows, err := k.db.SigningKeys(ctx, store.KeyPurposeShare)
	if err != nil {
		return fmt.Errorf("signing: share keys: %w", err)
	}
	cfg := access.KeyringConfig{Keys: map[string][]byte{}, Orgs: map[string]string{}}
	for i, r := range rows {
		if r.RevokedAt != nil {
			continue
		}
		secret, err := k.open(r)
		if err != nil {
			k.reportUnopenableLocked(r, err)
			continue
		}
		cfg.Keys[r.ID] = secret
		if i == 0 || rows[i-1].OrgID != r.OrgID { // the series' highest generation
			cfg.Orgs[r.OrgID] = r.ID
		}
	}
	if err := k.shares.Update(cfg); err != nil {
		return fmt.Errorf("signing: share keys: %w", err)
	}
	return nil
}

// Reload reads every key from the store again, so that rotations made
// elsewhere take effect. A current identity key that does not open keeps
// the one in use, and is logged.
func (k *Keys) Reload(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	set, err := k.identityKeysLocked(ctx, false)
	if err != nil {
		return err
	}
	if set.row.ID != k.identity.ID || set.prevID != k.identityPrev {
		if err := k.signer.SetKeys(set.cur, set.prev); err != nil {
			return fmt.Errorf("signing: identity keys: %w", err)
		}
		k.identity, k.identityPrev = set.row, set.prevID
		k.log.Info("identity signing key loaded", logkey.KeyID, set.row.ID, logkey.Generation, set.row.Generation)
	}
	return k.reloadSharesLocked(ctx)
}

// EnsureShareKey creates organization org's first share key if it has
// none (once across servers), so that links can be minted for it.
func (k *Keys) EnsureShareKey(ctx context.Context, org string) error {
	if _, ok := k.shares.KeyFor(org); ok {
		return nil
	}
	if _, err := k.add(ctx, store.KeyPurposeShare, org, 1, false); err != nil && !errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("signing: share key of org %s: %w", org, err)
	}
	if err := k.reloadShares(ctx); err != nil {
		return err
	}
	if _, ok := k.shares.KeyFor(org); !ok {
		return fmt.Errorf("signing: share key of org %s: %w", org, ErrUnopenable)
	}
	return nil
}

// RotateShareKey makes a new current share key for organization org: the
// previous one still verifies, unless revokePrevious, which refuses every
// link and cookie it signed from the next request on (on other servers,
// once the change reaches them). Losing a race to a concurrent rotation
// elsewhere, it rotates again over the winner's key (at most three
// tries). The keyring is current when it returns.
func (k *Keys) RotateShareKey(ctx context.Context, org string, revokePrevious bool) (store.SigningKey, error) {
	for range 3 {
		rows, err := k.db.SigningKeys(ctx, store.KeyPurposeShare)
		if err != nil {
			return store.SigningKey{}, fmt.Errorf("signing: rotate share key of org %s: %w", org, err)
		}
		var gen int64
		if s := series(rows, org); len(s) > 0 {
			gen = s[0].Generation
		}
		row, err := k.add(ctx, store.KeyPurposeShare, org, gen+1, revokePrevious)
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			return store.SigningKey{}, fmt.Errorf("signing: rotate share key of org %s: %w", org, err)
		}
		return row, k.reloadShares(ctx)
	}
	return store.SigningKey{}, fmt.Errorf("signing: rotate share key of org %s: %w: other servers keep rotating it", org, store.ErrConflict)
}

// rotateIdentityIfOld replaces the identity key when it is older than the
// rotation; another server doing so first is no error.
func (k *Keys) rotateIdentityIfOld(ctx context.Context) error {
	k.mu.Lock()
	cur := k.identity
	k.mu.Unlock()
	if k.rotation <= 0 || k.now().Sub(cur.CreatedAt) < k.rotation {
		return nil
	}
	if _, err := k.add(ctx, store.KeyPurposeIdentity, "", cur.Generation+1, false); err != nil && !errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("signing: rotate the identity key: %w", err)
	}
	return nil
}

// Refresh rotates the identity key if it is due, then reloads every key.
// Run calls it at each refresh; tests call it with an advanced clock.
func (k *Keys) Refresh(ctx context.Context) error {
	return errors.Join(k.rotateIdentityIfOld(ctx), k.Reload(ctx))
}

// Run keeps the keys current until ctx ends: it reloads them when the
// change feed announces a new key (or may have lost one), and at every
// refresh, when it also rotates the identity key by age. Errors are
// logged and retried at the next refresh. It returns when ctx ends.
func (k *Keys) Run(ctx context.Context) {
	changes := k.db.Subscribe(ctx)
	tick := time.NewTicker(k.refresh)
	defer tick.Stop()
	// A rotation committed between New and Subscribe reached no
	// subscriber: reload once now that the feed is followed.
	rctx, cancel := context.WithTimeout(ctx, reloadTimeout)
	err := k.Reload(rctx)
	cancel()
	for {
		if err != nil && ctx.Err() == nil {
			k.log.Error("signing keys not reloaded", logkey.Err, err)
		}
		err = nil
		select {
		case <-ctx.Done():
			return
		case c, ok := <-changes:
			if !ok {
				return
			}
			if c.Kind != store.ChangeSigningKeys && c.Kind != store.ChangeResync {
				continue
			}
			rctx, cancel := context.WithTimeout(ctx, reloadTimeout)
			err = k.Reload(rctx)
			cancel()
		case <-tick.C:
			rctx, cancel := context.WithTimeout(ctx, reloadTimeout)
			err = k.Refresh(rctx)
			cancel()
		}
	}
}
