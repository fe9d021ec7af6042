package access

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/aperio-dev/aperio/internal/b64"

	"github.com/aperio-dev/aperio/internal/passhash"
)

// Method names, as HeaderAuth, audit and metrics spell them.
const (
	MethodBasic   = "basic"
	MethodBearer  = "bearer"
	MethodJWT     = "jwt"
	MethodForward = "forward"
	MethodShare   = "share"
)

// Bounds of the basic method.
const (
	// MaxBasicUsers bounds a basic method's users.
	MaxBasicUsers = 1000
	// maxCredentialLen bounds an Authorization header's credentials (basic
	// and bearer): longer ones are refused unread.
	maxCredentialLen = 4096
	maxRealmLen      = 128
	// maxVerifyWait bounds the wait for a verification slot: beyond it a
	// flood of wrong passwords is refused with 503 rather than queued.
	maxVerifyWait = 5 * time.Second
)

// Defaults of BasicConfig.
const (
	DefaultBasicRealm     = "aperio"
	DefaultBasicCacheSize = 1024
	DefaultBasicCacheTTL  = 5 * time.Minute
)

// BasicConfig configures the basic method (auth: {basic: ...}).
type BasicConfig struct {
	// Realm is sent in the challenge (realm). "" means DefaultBasicRealm.
	// Printable ASCII without quotes or backslashes, at most 128 bytes.
	Realm string
	// Users maps each user name to its password's hash: argon2id in the
	// PHC form (aperio-client hash-password prints one) or bcrypt. A
	// plain-text password is an error naming the user. At least one, at
	// most MaxBasicUsers; names are printable, without ':'.
	Users map[string]string
	// CacheSize bounds the successful verifications remembered (0 means
	// DefaultBasicCacheSize). Failures are never remembered.
	CacheSize int
	// CacheTTL is how long a successful verification is remembered (0
	// means DefaultBasicCacheTTL). Changing a user's hash takes effect at
	// once: the hash is part of the cache key.
	CacheTTL time.Duration
	// MaxVerifying bounds hash verifications running at once across the
	// method (0 means GOMAXPROCS). Each costs tens of milliseconds and,
	// for argon2id, its memory parameter; a request beyond the bound
	// waits for a slot up to 5 s, or until its context ends, and is then
	// refused with 503. Cached successes take no slot.
	MaxVerifying int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Basic is the basic method: a user name and password in the
// Authorization header, checked against a hash. A successful
// verification is remembered (CacheTTL) under a keyed SHA-256 digest of
// the user, the password and the hash, so the hot path costs a digest and
// a map lookup instead of a hash verification.
type Basic struct {
	challenge string
	users     map[string]string
	dummy     string // a hash verified for unknown users, so timing does not tell them apart
	ttl       time.Duration
	cache     *ttlCache[struct{}]
	slots     chan struct{}
	cacheKey  [32]byte // per process: a dumped cache reveals no password digest
	now       func() time.Time
	verify    func(hash, password string) error // passhash.Verify; tests count calls
}

// NewBasic returns the basic method for cfg, or every problem of cfg
// joined with errors.Join.
func NewBasic(cfg BasicConfig) (*Basic, error) {
	var errs []error
	if cfg.Realm == "" {
		cfg.Realm = DefaultBasicRealm
	}
	if len(cfg.Realm) > maxRealmLen || strings.ContainsAny(cfg.Realm, `"\`) || !printableASCII(cfg.Realm) {
		errs = append(errs, fmt.Errorf("access: basic realm must be printable ASCII without quotes or backslashes, at most %d bytes", maxRealmLen))
	}
	switch {
	case len(cfg.Users) == 0:
		errs = append(errs, errors.New("access: basic needs at least one user"))
	case len(cfg.Users) > MaxBasicUsers:
		errs = append(errs, fmt.Errorf("access: basic has %d users, at most %d", len(cfg.Users), MaxBasicUsers))
	}
	names := make([]string, 0, len(cfg.Users))
	for u := range cfg.Users {
		names = append(names, u)
	}
	sort.Strings(names) // errors in a stable order
	for _, u := range names {
		if u == "" || len(u) > maxUserLen || strings.ContainsRune(u, ':') || !validUser(u) {
			errs = append(errs, fmt.Errorf("access: basic user %s: a name is 1 to %d printable bytes without ':'", quote(u), maxUserLen))
			continue
		}
		if err := passhash.Check(cfg.Users[u]); err != nil {
			errs = append(errs, fmt.Errorf("access: basic user %s: the password must be an argon2id or bcrypt hash, never plain text (aperio-client hash-password prints one): %w", quote(u), err))
		}
	}
	if cfg.CacheSize < 0 || cfg.CacheTTL < 0 || cfg.MaxVerifying < 0 {
		errs = append(errs, errors.New("access: basic cache_size, cache_ttl and max_verifying must not be negative"))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if cfg.CacheSize == 0 {
		cfg.CacheSize = DefaultBasicCacheSize
	}
	if cfg.CacheTTL == 0 {
		cfg.CacheTTL = DefaultBasicCacheTTL
	}
	if cfg.MaxVerifying == 0 {
		cfg.MaxVerifying = runtime.GOMAXPROCS(0)
	}
	dummy, err := passhash.Hash(rand.Text())
	if err != nil {
		return nil, fmt.Errorf("access: basic: %w", err)
	}
	b := &Basic{
		challenge: `Basic realm="` + cfg.Realm + `", charset="UTF-8"`,
		users:     cfg.Users,
		dummy:     dummy,
		ttl:       cfg.CacheTTL,
		now:       clock(cfg.Now),
		slots:     make(chan struct{}, cfg.MaxVerifying),
		verify:    passhash.Verify,
	}
	b.cache = newTTLCache[struct{}](cfg.CacheSize, b.now)
	rand.Read(b.cacheKey[:])
	return b, nil
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// Name returns "basic".
func (b *Basic) Name() string { return MethodBasic }

// Credentials returns the Authorization header.
func (b *Basic) Credentials() (headers, cookies []string) {
	return []string{"Authorization"}, nil
}

// Check verifies r's basic credentials.
func (b *Basic) Check(r *http.Request, _ Visitor) Result {
	cred, ok := authorization(r.Header, "Basic")
	if !ok {
		return Result{Outcome: Absent, Reason: "no basic credentials", Challenge: b.challenge}
	}
	invalid := func(reason string) Result {
		return Result{Outcome: Invalid, Reason: reason, Challenge: b.challenge}
	}
	if len(cred) > maxCredentialLen {
		return invalid(fmt.Sprintf("basic credentials longer than %d bytes", maxCredentialLen))
	}
	raw, err := b64.DecodeStd(cred)
	if err != nil {
		return invalid("basic credentials are not base64")
	}
	user, password, ok := strings.Cut(string(raw), ":")
	if !ok {
		return invalid("basic credentials without ':'")
	}
	hash, known := b.users[user]
	if !known {
		hash = b.dummy
	}
	key := b.key(user, password, hash)
	if known {
		if _, ok := b.cache.get(key); ok {
			return Result{Outcome: Admit, User: user, Reason: "user " + quote(user) + " (cached)"}
		}
	}
	if !b.acquire(r.Context()) {
		return Result{Outcome: Unavailable, Reason: "gave up waiting for a password verification slot"}
	}
	err = b.verify(hash, password)
	<-b.slots
	switch {
	case !known:
		return invalid("unknown user " + quote(user))
	case err != nil:
		return invalid("wrong password for user " + quote(user))
	}
	b.cache.add(key, struct{}{}, b.now().Add(b.ttl))
	return Result{Outcome: Admit, User: user, Reason: "user " + quote(user)}
}

// acquire takes a verification slot, waiting at most maxVerifyWait and
// until ctx ends; it reports whether it got one.
func (b *Basic) acquire(ctx context.Context) bool {
	select {
	case b.slots <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(maxVerifyWait)
	defer t.Stop()
	select {
	case b.slots <- struct{}{}:
		return true
	case <-ctx.Done():
	case <-t.C:
	}
	return false
}

// key is the cache key of one verification: the digest of the user, the
// password and the hash under the process's cache key.
func (b *Basic) key(user, password, hash string) [32]byte {
	return fieldsDigest(b.cacheKey[:], user, password, hash)
}
