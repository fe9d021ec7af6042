package admin

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
)

// secretBytes is the entropy of every minted secret.
const secretBytes = 32

// prefixLen is how much of a secret listings show, kind prefix included
// ("apr_k3jd"): enough to tell secrets apart, far too little to guess one.
const prefixLen = 8

// secretEncoding spells secrets in lowercase base32 without padding: 52
// characters that survive shells, URLs and yaml unquoted.
var secretEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// minted is a fresh secret and what the store keeps of it.
type minted struct {
	secret string // returned to the caller once, never stored or logged
	prefix string
	hash   []byte // SHA-256 of secret
}

// mint returns a new random secret starting with kind (keyPrefix or
// tokenPrefix).
func mint(kind string) minted {
	var b [secretBytes]byte
	rand.Read(b[:]) // never fails: crypto/rand crashes the program instead
	s := kind + secretEncoding.EncodeToString(b[:])
	sum := sha256.Sum256([]byte(s))
	return minted{secret: s, prefix: s[:prefixLen], hash: sum[:]}
}
