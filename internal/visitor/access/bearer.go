package access

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sort"
)

// Bounds of the bearer method.
const (
	// MaxBearerKeys bounds a bearer method's keys.
	MaxBearerKeys = 1000
	// MinBearerKeyLen is the shortest key a visitor may present.
	MinBearerKeyLen = 16
)

// BearerConfig configures the bearer method (auth: {bearer: ...}).
type BearerConfig struct {
	// Keys maps each key's name (the user HeaderUser names) to the
	// key's SHA-256 digest in hex (`printf %s "$KEY" | sha256sum`). The
	// keys themselves are never stored. At least one, at most
	// MaxBearerKeys.
	Keys map[string]string
}

// Bearer is the bearer method: a static API key in the Authorization
// header, for machine clients.
//
// Keys are stored as plain SHA-256 digests, not slow password hashes:
// a key is at least MinBearerKeyLen characters of high-entropy random
// (openssl rand -hex 32), so its digest cannot be reversed by guessing,
// and a fast digest keeps every request cheap. A password chosen by a
// person belongs in the basic method instead.
type Bearer struct {
	names   []string
	digests [][sha256.Size]byte
}

// NewBearer returns the bearer method for cfg, or every problem of cfg
// joined with errors.Join. Errors name keys, never quote digests.
func NewBearer(cfg BearerConfig) (*Bearer, error) {
	var errs []error
	switch {
	case len(cfg.Keys) == 0:
		errs = append(errs, errors.New("access: bearer needs at least one key"))
	case len(cfg.Keys) > MaxBearerKeys:
		errs = append(errs, fmt.Errorf("access: bearer has %d keys, at most %d", len(cfg.Keys), MaxBearerKeys))
	}
	b := &Bearer{}
	names := make([]string, 0, len(cfg.Keys))
	for n := range cfg.Keys {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if n == "" || !validUser(n) {
			errs = append(errs, fmt.Errorf("access: bearer key name %s: a name is 1 to %d printable bytes", quote(n), maxUserLen))
			continue
		}
		d, err := hex.DecodeString(cfg.Keys[n])
		if err != nil || len(d) != sha256.Size {
			errs = append(errs, fmt.Errorf("access: bearer key %s: want the key's SHA-256 digest as 64 hex digits, never the key itself", quote(n)))
			continue
		}
		b.names = append(b.names, n)
		b.digests = append(b.digests, [sha256.Size]byte(d))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return b, nil
}

// Name returns "bearer".
func (b *Bearer) Name() string { return MethodBearer }

// Credentials returns the Authorization header.
func (b *Bearer) Credentials() (headers, cookies []string) {
	return []string{"Authorization"}, nil
}

// Check compares r's bearer key with every stored digest in constant
// time, whichever matches: the time taken tells nothing of which key is
// close.
func (b *Bearer) Check(r *http.Request, _ Visitor) Result {
	key, ok := authorization(r.Header, "Bearer")
	if !ok {
		return Result{Outcome: Absent, Reason: "no bearer key", Challenge: "Bearer"}
	}
	const invalidChallenge = `Bearer error="invalid_token"`
	if len(key) < MinBearerKeyLen || len(key) > maxCredentialLen {
		return Result{Outcome: Invalid, Reason: fmt.Sprintf("bearer key is not %d to %d bytes", MinBearerKeyLen, maxCredentialLen), Challenge: invalidChallenge}
	}
	sum := sha256.Sum256([]byte(key))
	match := -1
	for i := range b.digests {
		if subtle.ConstantTimeCompare(sum[:], b.digests[i][:]) == 1 {
			match = i
		}
	}
	if match < 0 {
		return Result{Outcome: Invalid, Reason: "unknown bearer key", Challenge: invalidChallenge}
	}
	return Result{Outcome: Admit, User: b.names[match], Reason: "key " + quote(b.names[match])}
}
