package access

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aperio-dev/aperio/internal/b64"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Defaults and bounds of the jwt method.
const (
	DefaultJWKSCacheTTL    = time.Hour
	DefaultJWKSRefresh     = 30 * time.Second
	DefaultJWKSTimeout     = 5 * time.Second
	MaxJWKSTimeout         = 30 * time.Second
	DefaultJWTLeeway       = 30 * time.Second
	MaxJWTLeeway           = 5 * time.Minute
	DefaultJWTCacheSize    = 4096
	MinJWKSRefresh         = time.Second
	MaxJWKSBytes           = 1 << 20
	maxJWKSKeys            = 100
	maxJWTLen              = 8192
	minRSABits             = 2048
	maxRequiredClaims      = 32
	maxRequiredClaimValues = 256
)

// jwtAlgorithms are the signature algorithms a jwt method may accept:
// asymmetric only, so a key set (public by nature) can never be used as
// an HMAC secret, and never "none".
var jwtAlgorithms = []jose.SignatureAlgorithm{jose.RS256, jose.ES256, jose.EdDSA}

// JWTConfig configures the jwt method (auth: {jwt: ...}).
type JWTConfig struct {
	// JWKSURL is where the issuer publishes its keys. Required.
	JWKSURL string
	// Client fetches JWKSURL. Required: it must be the caller's client
	// under the outbound policy (the fence), never http.DefaultClient.
	// Redirects are never followed whatever its CheckRedirect says.
	Client *http.Client
	// Issuer is the iss every token must carry. Required.
	Issuer string
	// Audience lists accepted aud values; a token must name one. Required.
	Audience []string
	// Claims lists further claims a token must carry: each claim's value
	// (a string, or an array of strings) must equal, or contain, one of
	// the listed values. At most 32 claims.
	Claims map[string][]string
	// Header is a header carrying the bare token; "" means the
	// Authorization header with the Bearer scheme.
	Header string
	// Cookie is a cookie carrying the token, read when the header has
	// none; "" means none.
	Cookie string
	// Algorithms restricts the accepted algorithms to a subset of RS256,
	// ES256 and EdDSA; empty means all three.
	Algorithms []string
	// UserClaim is the string claim naming the user (HeaderUser); ""
	// means "sub".
	UserClaim string
	// Leeway is the clock skew allowed on exp, nbf and iat; 0 means
	// DefaultJWTLeeway, at most MaxJWTLeeway.
	Leeway time.Duration
	// CacheTTL is how long a fetched key set is used before it is fetched
	// again; 0 means DefaultJWKSCacheTTL.
	CacheTTL time.Duration
	// RefreshInterval is the least time between two fetches: a token
	// naming an unknown kid triggers a fetch at most this often, and a
	// failed fetch is retried no sooner. 0 means DefaultJWKSRefresh; at
	// least MinJWKSRefresh.
	RefreshInterval time.Duration
	// Timeout bounds one fetch of JWKSURL; 0 means DefaultJWKSTimeout,
	// at most MaxJWKSTimeout. The body is read up to MaxJWKSBytes.
	Timeout time.Duration
	// CacheSize bounds the verified tokens remembered until their exp, so
	// a token's signature is checked once; 0 means DefaultJWTCacheSize.
	CacheSize int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// JWT is the jwt method: a JSON Web Token from a header or a cookie,
// verified against the issuer's key set. It fails closed: when the key
// set cannot be fetched, a token is never admitted (Unavailable, 503).
type JWT struct {
	url, origin string
	client      *http.Client
	expected    jwt.Expected
	claims      map[string][]string
	header      string // canonical; "" means Authorization Bearer
	cookie      string
	algs        []jose.SignatureAlgorithm
	userClaim   string
	leeway      time.Duration
	ttl         time.Duration
	refresh     time.Duration
	timeout     time.Duration
	now         func() time.Time

	keys   atomic.Pointer[keySet] // nil until the first fetch succeeds
	tokens *ttlCache[string]      // SHA-256 of a verified token → its user

	fetching chan struct{} // a slot: one fetch at a time
	mu       sync.Mutex    // guards the following fields
	lastTry  time.Time     // start of the last fetch, successful or not
	lastErr  error         // its error
}

// keySet is one fetched JWKS, immutable.
type keySet struct {
	byKID   map[string][]jose.JSONWebKey
	all     []jose.JSONWebKey
	fetched time.Time
	digest  [32]byte // of the body: a changed set purges verified tokens
}

// NewJWT returns the jwt method for cfg, or every problem of cfg joined
// with errors.Join. It fetches nothing: the first token does.
func NewJWT(cfg JWTConfig) (*JWT, error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("access: jwt "+format, args...)) }
	origin, ok := outboundOrigin(cfg.JWKSURL)
	if !ok {
		bad("jwks_url must be an absolute http(s) URL")
	}
	if cfg.Client == nil {
		bad("needs the outbound client to fetch its key set")
	}
	if cfg.Issuer == "" {
		bad("issuer is required")
	}
	if len(cfg.Audience) == 0 || slices.Contains(cfg.Audience, "") {
		bad("audience is required (one or more non-empty values)")
	}
	if len(cfg.Claims) > maxRequiredClaims {
		bad("claims: at most %d", maxRequiredClaims)
	}
	for name, vals := range cfg.Claims {
		if name == "" || len(vals) == 0 || len(vals) > maxRequiredClaimValues {
			bad("claim %s: want a name and 1 to %d values", quote(name), maxRequiredClaimValues)
		}
	}
	j := &JWT{
		url:       cfg.JWKSURL,
		origin:    origin,
		expected:  jwt.Expected{Issuer: cfg.Issuer, AnyAudience: jwt.Audience(cfg.Audience)},
		claims:    cfg.Claims,
		cookie:    cfg.Cookie,
		userClaim: cfg.UserClaim,
		leeway:    cfg.Leeway,
		ttl:       cfg.CacheTTL,
		refresh:   cfg.RefreshInterval,
		timeout:   cfg.Timeout,
		now:       clock(cfg.Now),
		fetching:  make(chan struct{}, 1),
	}
	if cfg.Header != "" {
		j.header = http.CanonicalHeaderKey(cfg.Header)
	}
	if cfg.Client != nil {
		j.client = noRedirects(cfg.Client)
	}
	for _, a := range cfg.Algorithms {
		alg := jose.SignatureAlgorithm(a)
		if !slices.Contains(jwtAlgorithms, alg) {
			bad("algorithm %s is not one of RS256, ES256, EdDSA", quote(a))
			continue
		}
		j.algs = append(j.algs, alg)
	}
	if len(cfg.Algorithms) == 0 {
		j.algs = jwtAlgorithms
	}
	if j.userClaim == "" {
		j.userClaim = "sub"
	}
	switch {
	case j.leeway < 0 || j.leeway > MaxJWTLeeway:
		bad("leeway must be 0 to %s", MaxJWTLeeway)
	case j.leeway == 0:
		j.leeway = DefaultJWTLeeway
	}
	if j.ttl == 0 {
		j.ttl = DefaultJWKSCacheTTL
	}
	if j.refresh == 0 {
		j.refresh = DefaultJWKSRefresh
	}
	if j.refresh < MinJWKSRefresh || j.ttl < j.refresh {
		bad("refresh interval must be at least %s and at most the cache TTL", MinJWKSRefresh)
	}
	switch {
	case j.timeout < 0 || j.timeout > MaxJWKSTimeout:
		bad("timeout must be 0 to %s", MaxJWKSTimeout)
	case j.timeout == 0:
		j.timeout = DefaultJWKSTimeout
	}
	size := cfg.CacheSize
	if size < 0 {
		bad("cache size must not be negative")
	}
	if size <= 0 {
		size = DefaultJWTCacheSize
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	j.tokens = newTTLCache[string](size, j.now)
	return j, nil
}

// Name returns "jwt".
func (j *JWT) Name() string { return MethodJWT }

// Credentials returns the header and the cookie the token comes in.
func (j *JWT) Credentials() (headers, cookies []string) {
	h := j.header
	if h == "" {
		h = "Authorization"
	}
	if j.cookie != "" {
		cookies = []string{j.cookie}
	}
	return []string{h}, cookies
}

// token returns r's token, from the header, else the cookie.
func (j *JWT) token(r *http.Request) (string, bool) {
	if j.header == "" {
		if t, ok := authorization(r.Header, "Bearer"); ok {
			return t, true
		}
	} else if vv := r.Header[j.header]; len(vv) == 1 {
		return strings.TrimSpace(vv[0]), true
	}
	if j.cookie != "" {
		return cookieValue(r.Header, j.cookie)
	}
	return "", false
}

// Check verifies r's token.
func (j *JWT) Check(r *http.Request, _ Visitor) Result {
	tok, ok := j.token(r)
	if !ok {
		return Result{Outcome: Absent, Reason: "no token", Challenge: "Bearer"}
	}
	invalid := func(reason string) Result {
		return Result{Outcome: Invalid, Reason: reason, Challenge: `Bearer error="invalid_token"`}
	}
	if len(tok) > maxJWTLen {
		return invalid(fmt.Sprintf("token longer than %d bytes", maxJWTLen))
	}
	sum := sha256.Sum256([]byte(tok))
	now := j.now()
	set := j.keys.Load()
	if set != nil && now.Sub(set.fetched) < j.ttl {
		if user, ok := j.tokens.get(sum); ok {
			return Result{Outcome: Admit, User: user, Reason: "subject " + quote(user) + " (cached)"}
		}
	}
	if !canonicalCompact(tok) {
		return invalid("token is not canonical compact JWS")
	}
	parsed, err := jwt.ParseSigned(tok, j.algs)
	if err != nil {
		return invalid("malformed token or algorithm not accepted")
	}
	if len(parsed.Headers) != 1 {
		return invalid("token must have exactly one signature")
	}
	hdr := parsed.Headers[0]
	keys, res := j.keysFor(r.Context(), hdr.KeyID, jose.SignatureAlgorithm(hdr.Algorithm))
	if res != nil {
		return *res
	}
	var (
		std   jwt.Claims
		extra map[string]any
	)
	verified := false
	for _, k := range keys {
		if parsed.Claims(k.Key, &std, &extra) == nil {
			verified = true
			break
		}
	}
	if !verified {
		return invalid("signature does not verify")
	}
	if std.Expiry == nil {
		return invalid("token has no exp")
	}
	e := j.expected
	e.Time = now
	if err := std.ValidateWithLeeway(e, j.leeway); err != nil {
		return invalid(claimsReason(err))
	}
	for name, allowed := range j.claims {
		if !claimMatches(extra[name], allowed) {
			return invalid("claim " + quote(name) + " missing or not an accepted value")
		}
	}
	user, _ := extra[j.userClaim].(string)
	if user == "" || !validUser(user) {
		return invalid("claim " + quote(j.userClaim) + " is not printable text of 1 to 256 bytes")
	}
	j.tokens.add(sum, user, std.Expiry.Time().Add(j.leeway))
	return Result{Outcome: Admit, User: user, Reason: "subject " + quote(user)}
}

func claimsReason(err error) string {
	switch {
	case errors.Is(err, jwt.ErrExpired):
		return "token expired"
	case errors.Is(err, jwt.ErrNotValidYet):
		return "token not valid yet (nbf)"
	case errors.Is(err, jwt.ErrIssuedInTheFuture):
		return "token issued in the future (iat)"
	case errors.Is(err, jwt.ErrInvalidIssuer):
		return "wrong issuer"
	case errors.Is(err, jwt.ErrInvalidAudience):
		return "wrong audience"
	}
	return "claims do not validate"
}

// claimMatches reports whether v (a decoded claim) is, or contains, one
// of allowed. Only strings count.
func claimMatches(v any, allowed []string) bool {
	switch v := v.(type) {
	case string:
		return slices.Contains(allowed, v)
	case []any:
		for _, e := range v {
			if s, ok := e.(string); ok && slices.Contains(allowed, s) {
				return true
			}
		}
	}
	return false
}

// keysFor returns the keys that may have signed a token with kid and alg,
// fetching the key set when it is missing or older than the TTL, or when
// kid is unknown and the last fetch is older than the refresh interval.
// A nil *Result means keys is usable; otherwise it is the refusal.
func (j *JWT) keysFor(ctx context.Context, kid string, alg jose.SignatureAlgorithm) ([]jose.JSONWebKey, *Result) {
	set := j.keys.Load()
	if set == nil || j.now().Sub(set.fetched) >= j.ttl {
		var err error
		if set, err = j.fetch(ctx, set, false); err != nil {
			return nil, &Result{Outcome: Unavailable, Reason: "key set unavailable: " + err.Error()}
		}
	}
	keys := set.candidates(kid, alg)
	if len(keys) == 0 && kid != "" {
		if fresh, err := j.fetch(ctx, set, true); err == nil {
			keys = fresh.candidates(kid, alg)
		}
	}
	if len(keys) == 0 {
		return nil, &Result{Outcome: Invalid, Reason: "no key for kid " + quote(kid) + " and alg " + string(alg), Challenge: `Bearer error="invalid_token"`}
	}
	return keys, nil
}

// candidates returns the keys of s a token with kid and alg may be
// checked against: the keys with that kid (every key when kid is ""),
// whose alg, if set, is alg and whose type fits alg.
func (s *keySet) candidates(kid string, alg jose.SignatureAlgorithm) []jose.JSONWebKey {
	pool := s.all
	if kid != "" {
		pool = s.byKID[kid]
	}
	var out []jose.JSONWebKey
	for _, k := range pool {
		if (k.Algorithm == "" || k.Algorithm == string(alg)) && keyFits(k.Key, alg) {
			out = append(out, k)
		}
	}
	return out
}

// keyFits reports whether key is of the type alg signs with.
func keyFits(key any, alg jose.SignatureAlgorithm) bool {
	switch k := key.(type) {
	case *rsa.PublicKey:
		return alg == jose.RS256
	case *ecdsa.PublicKey:
		return alg == jose.ES256 && k.Curve == elliptic.P256()
	case ed25519.PublicKey:
		return alg == jose.EdDSA
	}
	return false
}

// errThrottled is returned by fetch within the refresh interval of the
// last attempt.
var errThrottled = errors.New("fetched less than the refresh interval ago")

// fetch replaces seen, the key set the caller saw, with a fresh one and
// returns it. One fetch runs at a time; a caller that waited while
// another fetched takes that result. Within the refresh interval of the
// last attempt nothing is fetched, so neither a flood of tokens naming
// unknown kids nor an unreachable key server makes more than one fetch
// per interval: it returns that attempt's error, or, when the attempt
// succeeded and forUnknownKID says an unknown kid asked, errThrottled.
func (j *JWT) fetch(ctx context.Context, seen *keySet, forUnknownKID bool) (*keySet, error) {
	select {
	case j.fetching <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for a fetch: %w", ctx.Err())
	}
	defer func() { <-j.fetching }()
	if cur := j.keys.Load(); cur != seen && cur != nil {
		return cur, nil // fetched while this caller waited
	}
	now := j.now()
	j.mu.Lock()
	recent := !j.lastTry.IsZero() && now.Sub(j.lastTry) < j.refresh
	lastErr := j.lastErr
	j.mu.Unlock()
	if recent {
		if lastErr != nil {
			return nil, lastErr
		}
		if forUnknownKID {
			return nil, errThrottled
		}
	}
	set, err := j.get(ctx, now)
	j.mu.Lock()
	j.lastTry, j.lastErr = now, err
	j.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if seen == nil || seen.digest != set.digest {
		j.tokens.purge() // a removed key must not keep admitting its tokens
	}
	j.keys.Store(set)
	return set, nil
}

// get fetches and parses the key set. Errors name the URL's origin only:
// its path or query may hold a credential.
func (j *JWT) get(ctx context.Context, now time.Time) (*keySet, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), j.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.url, nil)
	if err != nil {
		return nil, fmt.Errorf("jwks %s: bad request", j.origin)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := j.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("jwks %s: %w", j.origin, outboundError(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("jwks %s: status %d", j.origin, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxJWKSBytes+1))
	if err != nil {
		return nil, fmt.Errorf("jwks %s: reading: %w", j.origin, err)
	}
	if len(body) > MaxJWKSBytes {
		return nil, fmt.Errorf("jwks %s: larger than %d bytes", j.origin, MaxJWKSBytes)
	}
	set, err := parseKeySet(body, j.algs)
	if err != nil {
		return nil, fmt.Errorf("jwks %s: %w", j.origin, err)
	}
	set.fetched = now
	return set, nil
}

// parseKeySet keeps the keys of a JWKS document a token may be verified
// against: public signing keys (use "sig" or unset) of the accepted
// algorithms, RSA of at least 2048 bits, EC on P-256, Ed25519. Keys
// go-jose cannot read, symmetric keys ("oct": a key set is public, so an
// HMAC key in it is no secret) and the private half of any key are
// dropped, not errors; a set left with no key is one.
func parseKeySet(body []byte, algs []jose.SignatureAlgorithm) (*keySet, error) {
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, errors.New("not a JSON key set")
	}
	if len(doc.Keys) > maxJWKSKeys {
		return nil, fmt.Errorf("%d keys, at most %d", len(doc.Keys), maxJWKSKeys)
	}
	set := &keySet{byKID: map[string][]jose.JSONWebKey{}, digest: sha256.Sum256(body)}
	for _, raw := range doc.Keys {
		var k jose.JSONWebKey
		if json.Unmarshal(raw, &k) != nil || !k.Valid() {
			continue
		}
		if !k.IsPublic() {
			k = k.Public()
		}
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		if k.Algorithm != "" && !slices.Contains(algs, jose.SignatureAlgorithm(k.Algorithm)) {
			continue
		}
		ok := false
		for _, a := range algs {
			ok = ok || keyFits(k.Key, a)
		}
		if rk, isRSA := k.Key.(*rsa.PublicKey); !ok || isRSA && rk.N.BitLen() < minRSABits {
			continue
		}
		set.all = append(set.all, k)
		set.byKID[k.KeyID] = append(set.byKID[k.KeyID], k)
	}
	if len(set.all) == 0 {
		return nil, errors.New("no usable signing key")
	}
	return set, nil
}

// canonicalCompact reports whether tok is three dot-separated segments of
// canonical unpadded base64url (an empty one included: alg "none" is
// refused by ParseSigned, with its own reason). go-jose's decoder accepts respellings
// (ignored trailing bits), so one token would have many texts and the
// verified-token cache, keyed by the text, many entries.
func canonicalCompact(tok string) bool {
	for range 3 {
		seg, rest, _ := strings.Cut(tok, ".")
		if _, err := b64.DecodeRawURL(seg); err != nil {
			return false
		}
		tok = rest
	}
	return tok == ""
}
