package oidc

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/aperio-dev/aperio/internal/b64"
)

// MinSecretBytes is the shortest secret a Key may hold: 32 bytes, the
// AES-256 key size, so the derivation never stretches less entropy than
// the cipher uses.
const MinSecretBytes = 32

// MaxSealedBytes bounds a sealed value as text. Browsers keep cookies of
// about 4 KiB, so nothing longer was sealed here; Open refuses it before
// decoding anything.
const MaxSealedBytes = 4096

const (
	sealVersion   = 1
	sealHeader    = 2 // version, key id
	sealNonceSize = 12
	sealTagSize   = 16
	// sealMinRaw is the smallest decoded value: header, nonce and tag
	// around an empty plaintext.
	sealMinRaw = sealHeader + sealNonceSize + sealTagSize
)

// ErrSealed is wrapped by every error of Sealer.Open: the value was not
// sealed by a key of this keyring for this purpose, was altered, or is
// malformed. A caller treats every case alike (no session); the wrapping
// error says which, for the log.
var ErrSealed = errors.New("oidc: sealed value refused")

// Key is one secret of a keyring. ID names it inside every value it
// seals, so that a value names the key that opens it; IDs are unique in a
// keyring. Secret is at least MinSecretBytes of random bytes; it is never
// used directly, only through a key derived from it per purpose.
type Key struct {
	ID     byte
	Secret []byte
}

// Sealer seals values (AES-256-GCM) so that only a holder of the keyring
// can read or forge them. Its first key seals; every key opens, which is
// how a key is rotated: add the new key first, keep the old one until the
// values it sealed have expired, then drop it. Each key is derived with
// HKDF-SHA256 from the Key's secret and the Sealer's purpose, so values
// sealed for one purpose (a session) never open for another (a login in
// progress) even under the same secrets. A Sealer is immutable and safe
// for concurrent use.
type Sealer struct {
	current byte
	aeads   [256]cipher.AEAD // by key id; nil where the keyring has none
	header  [sealHeader]byte // version and current key id, the seal's AAD
	purpose string
}

// NewSealer returns a Sealer for purpose with keys, the first of which
// seals. It refuses an empty purpose, an empty keyring, a duplicate ID and
// a secret shorter than MinSecretBytes, naming each problem.
func NewSealer(purpose string, keys ...Key) (*Sealer, error) {
	var errs []error
	if purpose == "" {
		errs = append(errs, errors.New("oidc: sealer needs a purpose"))
	}
	if len(keys) == 0 {
		errs = append(errs, errors.New("oidc: sealer needs at least one key"))
	}
	s := &Sealer{purpose: purpose}
	for i, k := range keys {
		if len(k.Secret) < MinSecretBytes {
			errs = append(errs, fmt.Errorf("oidc: key %d (id %d): secret has %d bytes, want at least %d", i, k.ID, len(k.Secret), MinSecretBytes))
			continue
		}
		if s.aeads[k.ID] != nil {
			errs = append(errs, fmt.Errorf("oidc: key %d: id %d used twice", i, k.ID))
			continue
		}
		key, err := hkdf.Key(sha256.New, k.Secret, nil, "aperio access/oidc sealer v1 "+purpose, 32)
		if err != nil {
			errs = append(errs, fmt.Errorf("oidc: key %d: derive: %w", i, err))
			continue
		}
		block, err := aes.NewCipher(key)
		if err != nil {
			errs = append(errs, fmt.Errorf("oidc: key %d: %w", i, err))
			continue
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			errs = append(errs, fmt.Errorf("oidc: key %d: %w", i, err))
			continue
		}
		s.aeads[k.ID] = aead
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	s.current = keys[0].ID
	s.header = [sealHeader]byte{sealVersion, s.current}
	return s, nil
}

// Seal returns plaintext sealed with the current key, as unpadded
// base64url text fit for a cookie value. The nonce is random per call, so
// sealing the same plaintext twice gives different values.
func (s *Sealer) Seal(plaintext []byte) string {
	aead := s.aeads[s.current]
	raw := make([]byte, sealHeader+sealNonceSize, sealMinRaw+len(plaintext))
	copy(raw, s.header[:])
	rand.Read(raw[sealHeader:]) // never fails (crypto/rand since Go 1.24)
	raw = aead.Seal(raw, raw[sealHeader:sealHeader+sealNonceSize], plaintext, s.header[:])
	return base64.RawURLEncoding.EncodeToString(raw)
}

// Open returns the plaintext of a value Seal made with any key of the
// keyring for the same purpose. Every refusal wraps ErrSealed: too long,
// not base64url, too short, an unknown version or key id, or a value
// that fails authentication (altered, or sealed for another purpose or
// keyring).
func (s *Sealer) Open(sealed string) ([]byte, error) {
	if len(sealed) > MaxSealedBytes {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrSealed, len(sealed), MaxSealedBytes)
	}
	raw, err := b64.DecodeRawURL(sealed)
	if err != nil {
		return nil, fmt.Errorf("%w: not base64url", ErrSealed)
	}
	if len(raw) < sealMinRaw {
		return nil, fmt.Errorf("%w: %d bytes, too short", ErrSealed, len(raw))
	}
	if raw[0] != sealVersion {
		return nil, fmt.Errorf("%w: version %d", ErrSealed, raw[0])
	}
	aead := s.aeads[raw[1]]
	if aead == nil {
		return nil, fmt.Errorf("%w: unknown key id %d", ErrSealed, raw[1])
	}
	nonce := raw[sealHeader : sealHeader+sealNonceSize]
	// The plaintext reuses the decoded buffer: one allocation per Open.
	plain, err := aead.Open(raw[sealHeader+sealNonceSize:sealHeader+sealNonceSize], nonce, raw[sealHeader+sealNonceSize:], raw[:sealHeader])
	if err != nil {
		return nil, fmt.Errorf("%w: key id %d: not authentic", ErrSealed, raw[1])
	}
	return plain, nil
}
