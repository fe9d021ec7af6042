package access

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// IdentityTTL is the lifetime of an identity token: long enough for a
// backend to verify it on arrival, short enough that a leaked one is
// soon useless.
const IdentityTTL = 60 * time.Second

// identityReuse is how long a signed token is handed out again for the
// same hostname, user and method: signing costs tens of microseconds, a
// cache hit one. A backend therefore always receives a token with at
// least IdentityTTL - identityReuse of life left.
const identityReuse = 30 * time.Second

// identityCacheSize bounds the tokens kept for reuse.
const identityCacheSize = 4096

// JWKSPath is where the server publishes Signer.JWKS.
const JWKSPath = "/aperio/.well-known/jwks.json"

// SignerConfig configures the identity signer.
type SignerConfig struct {
	// Issuer is the token's iss: the server's public URL or name. Required.
	Issuer string
	// Key is the Ed25519 signing key; nil means a key generated now, so
	// tokens signed before a restart stop verifying (they live a minute).
	// LoadSignerKey reads one from PEM; the server keeps its key in the
	// store and sets it with SetKeys.
	Key ed25519.PrivateKey
	// Previous, when set, is the key Key replaced: JWKS publishes it
	// too, so tokens it signed keep verifying. It never signs.
	Previous ed25519.PrivateKey
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Signer signs the identity tokens backends receive in HeaderIdentity:
// JWTs signed with Ed25519 (alg EdDSA), with iss the server, aud the
// hostname, sub the user, aperio_auth the method, and a lifetime of
// IdentityTTL. Backends verify them with the key set JWKS returns. It is
// safe for concurrent use; SetKeys replaces its keys at once.
type Signer struct {
	issuer string
	now    func() time.Time
	state  atomic.Pointer[signerState]
}

// signerState is one immutable pair of keys.
type signerState struct {
	signer jose.Signer
	kid    string
	jwks   []byte
	tokens *ttlCache[string] // recent tokens by hostname, user and method
}

// NewSigner returns the signer for cfg.
func NewSigner(cfg SignerConfig) (*Signer, error) {
	if cfg.Issuer == "" {
		return nil, errors.New("access: identity signer needs an issuer")
	}
	key := cfg.Key
	if key == nil {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("access: identity key: %w", err)
		}
		key = priv
	}
	s := &Signer{issuer: cfg.Issuer, now: clock(cfg.Now)}
	if err := s.SetKeys(key, cfg.Previous); err != nil {
		return nil, err
	}
	return s, nil
}

// publicJWK returns key's public half with its kid: the first 16
// characters of its RFC 7638 thumbprint, so the same key has the same kid
// on every server and after every restart.
func publicJWK(key ed25519.PrivateKey) (jose.JSONWebKey, error) {
	if len(key) != ed25519.PrivateKeySize {
		return jose.JSONWebKey{}, fmt.Errorf("access: identity key is %d bytes, want an Ed25519 private key", len(key))
	}
	pub := jose.JSONWebKey{Key: key.Public(), Algorithm: string(jose.EdDSA), Use: "sig"}
	thumb, err := pub.Thumbprint(crypto.SHA256)
	if err != nil {
		return jose.JSONWebKey{}, fmt.Errorf("access: identity key thumbprint: %w", err)
	}
	pub.KeyID = base64.RawURLEncoding.EncodeToString(thumb)[:16]
	return pub, nil
}

// SetKeys makes key the signing key and publishes previous (nil: none)
// beside it in JWKS, or changes nothing and returns why a key is not an
// Ed25519 private key. Tokens kept for reuse are dropped, so every token
// signed from now on is signed by key.
func (s *Signer) SetKeys(key, previous ed25519.PrivateKey) error {
	cur, err := publicJWK(key)
	if err != nil {
		return err
	}
	set := []jose.JSONWebKey{cur}
	if previous != nil {
		prev, err := publicJWK(previous)
		if err != nil {
			return fmt.Errorf("previous: %w", err)
		}
		if prev.KeyID != cur.KeyID {
			set = append(set, prev)
		}
	}
	jwks, err := json.Marshal(jose.JSONWebKeySet{Keys: set})
	if err != nil {
		return fmt.Errorf("access: identity key set: %w", err)
	}
	signer, err := jose.NewSigner(
		jose.SigningKey{Algorithm: jose.EdDSA, Key: jose.JSONWebKey{Key: key, KeyID: cur.KeyID}},
		(&jose.SignerOptions{}).WithType("JWT"),
	)
	if err != nil {
		return fmt.Errorf("access: identity signer: %w", err)
	}
	s.state.Store(&signerState{signer: signer, kid: cur.KeyID, jwks: jwks, tokens: newTTLCache[string](identityCacheSize, s.now)})
	return nil
}

// LoadSignerKey parses an Ed25519 private key from PEM (a PKCS #8
// "PRIVATE KEY" block, as `openssl genpkey -algorithm ed25519` writes).
func LoadSignerKey(pemBytes []byte) (ed25519.PrivateKey, error) {
	b, _ := pem.Decode(pemBytes)
	if b == nil || b.Type != "PRIVATE KEY" {
		return nil, errors.New("access: identity key: no PEM PRIVATE KEY block")
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("access: identity key: %w", err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("access: identity key is a %T, want Ed25519", k)
	}
	return priv, nil
}

// KeyID returns the kid of the signing key: the first 16 characters of
// its RFC 7638 thumbprint.
func (s *Signer) KeyID() string { return s.state.Load().kid }

// JWKS returns the JSON key set to serve at JWKSPath: the signing key's
// public half, then the previous key's when there is one, each with its
// kid, alg EdDSA and use sig. The caller must not modify it.
func (s *Signer) JWKS() []byte { return s.state.Load().jwks }

// identityClaims are the claims beyond the registered ones.
type identityClaims struct {
	Auth string `json:"aperio_auth"`
}

// Sign returns an identity token for user admitted by method on host. A
// token signed in the last 30 seconds for the same three is returned
// again.
func (s *Signer) Sign(host, user, method string) (string, error) {
	st := s.state.Load()
	key := fieldsDigest(nil, host, user, method)
	if tok, ok := st.tokens.get(key); ok {
		return tok, nil
	}
	now := s.now()
	c := jwt.Claims{
		Issuer:    s.issuer,
		Audience:  jwt.Audience{host},
		Subject:   user,
		IssuedAt:  jwt.NewNumericDate(now),
		NotBefore: jwt.NewNumericDate(now),
		Expiry:    jwt.NewNumericDate(now.Add(IdentityTTL)),
	}
	tok, err := jwt.Signed(st.signer).Claims(c).Claims(identityClaims{Auth: method}).Serialize()
	if err != nil {
		return "", fmt.Errorf("access: sign identity: %w", err)
	}
	st.tokens.add(key, tok, now.Add(identityReuse))
	return tok, nil
}
