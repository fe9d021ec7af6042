package access

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aperio-dev/aperio/internal/b64"

	"github.com/aperio-dev/aperio/internal/hostname"
	"github.com/aperio-dev/aperio/internal/urlpath"
)

// Share links: a stateless token `v1.<kid>.<payload>.<mac>` naming a
// hostname, a path prefix, an expiry and a nonce, signed with
// HMAC-SHA256 under the keyring's key <kid>. The payload and the MAC are
// unpadded base64url; the MAC covers `v1.<kid>.<payload>`.
const (
	// ShareParam is the query parameter a share URL carries on its first
	// visit; the gate turns it into CookieShare.
	ShareParam = "aperio_share"
	// MaxShareTTL bounds a share link's lifetime.
	MaxShareTTL = 30 * 24 * time.Hour
	// MinShareKeyLen is the shortest signing key accepted.
	MinShareKeyLen = 32
	// MaxShareKeys bounds the keys of a keyring: every organization's
	// current and previous key.
	MaxShareKeys = 1 << 16

	shareVersion     = "v1"
	maxShareTokenLen = 2048
	maxSharePathLen  = 1024
	maxKeyIDLen      = 32
	shareCacheSize   = 4096
)

// KeyringConfig configures the share-link keyring.
type KeyringConfig struct {
	// Keys maps key ids (1 to 32 of [A-Za-z0-9_-]) to secrets of at least
	// MinShareKeyLen random bytes; at most MaxShareKeys. Every key
	// verifies; removing a key revokes every link it signed. Empty means
	// no link verifies.
	Keys map[string][]byte
	// Current is the id of the key that signs the links Mint makes; ""
	// means Mint refuses (the keys are per organization: see Orgs).
	Current string
	// Orgs maps organization IDs to the id of the key that signs the
	// links MintFor makes for them; each must be among Keys. Nil means
	// none.
	Orgs map[string]string
	// Now is the clock; nil means time.Now. Update keeps the first one.
	Now func() time.Time
}

// Keyring signs and verifies share links. It is safe for concurrent use;
// Update replaces its keys at once for every gate holding it.
type Keyring struct {
	now   func() time.Time
	state atomic.Pointer[keyringState]
}

// keyringState is one immutable set of keys.
type keyringState struct {
	current string
	keys    map[string][]byte
	orgs    map[string]string
	// verified remembers tokens that verified, until they expire: a
	// share cookie then costs a digest instead of an HMAC and a JSON
	// decode on every request. A new set of keys (Update) starts with
	// an empty cache, so a removed key's tokens stop at once.
	verified *ttlCache[ShareLink]
}

// ShareLink is what a share token grants.
type ShareLink struct {
	// Host is the one hostname the link opens, normalized.
	Host string
	// Path is the path prefix it opens ("/" for the whole host); it
	// matches whole segments, like a bind's prefix.
	Path string
	// Expires is when the link stops working.
	Expires time.Time
	// Nonce tells links apart in audit; it is not secret.
	Nonce string
}

// shareClaims is a token's payload.
type shareClaims struct {
	Host    string `json:"h"`
	Path    string `json:"p"`
	Expires int64  `json:"e"`
	Nonce   string `json:"n"`
}

// NewKeyring returns the keyring for cfg, or every problem of cfg joined
// with errors.Join. Errors name keys, never show secrets.
func NewKeyring(cfg KeyringConfig) (*Keyring, error) {
	k := &Keyring{now: clock(cfg.Now)}
	if err := k.Update(cfg); err != nil {
		return nil, err
	}
	return k, nil
}

// Update replaces the keyring's keys, Current and Orgs with cfg's (its Now
// is ignored), or changes nothing and returns every problem of cfg. Tokens
// signed by a key cfg lacks are refused from the next Verify on, cookies
// already set included.
func (k *Keyring) Update(cfg KeyringConfig) error {
	var errs []error
	if len(cfg.Keys) > MaxShareKeys {
		errs = append(errs, fmt.Errorf("access: share keys: want at most %d keys, have %d", MaxShareKeys, len(cfg.Keys)))
	}
	ids := make([]string, 0, len(cfg.Keys))
	for id := range cfg.Keys {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	keys := make(map[string][]byte, len(cfg.Keys))
	for _, id := range ids {
		if !validKeyID(id) {
			errs = append(errs, fmt.Errorf("access: share key id %s: want 1 to %d of A-Z a-z 0-9 _ -", quote(id), maxKeyIDLen))
			continue
		}
		if len(cfg.Keys[id]) < MinShareKeyLen {
			errs = append(errs, fmt.Errorf("access: share key %s: want at least %d bytes, have %d", id, MinShareKeyLen, len(cfg.Keys[id])))
			continue
		}
		keys[id] = append([]byte(nil), cfg.Keys[id]...)
	}
	if _, ok := cfg.Keys[cfg.Current]; cfg.Current != "" && !ok {
		errs = append(errs, fmt.Errorf("access: share current key %s is not among the keys", quote(cfg.Current)))
	}
	orgs := make(map[string]string, len(cfg.Orgs))
	for org, id := range cfg.Orgs {
		if _, ok := cfg.Keys[id]; !ok {
			errs = append(errs, fmt.Errorf("access: share key %s of organization %s is not among the keys", quote(id), quote(org)))
		}
		orgs[org] = id
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	k.state.Store(&keyringState{current: cfg.Current, keys: keys, orgs: orgs, verified: newTTLCache[ShareLink](shareCacheSize, k.now)})
	return nil
}

func validKeyID(id string) bool {
	if id == "" || len(id) > maxKeyIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// ErrShareNoKey is Mint's and MintFor's refusal when the keyring has no
// current key for the link.
var ErrShareNoKey = errors.New("access: no share key to sign with")

// Mint returns a token for host (an exact hostname) and the path prefix
// path ("" means "/"), valid for ttl (at most MaxShareTTL), signed with
// the Current key, and the link it grants.
func (k *Keyring) Mint(host, path string, ttl time.Duration) (string, ShareLink, error) {
	st := k.state.Load()
	return k.mint(st, st.current, host, path, ttl)
}

// MintFor is Mint with the current key of organization org (KeyringConfig.Orgs).
func (k *Keyring) MintFor(org, host, path string, ttl time.Duration) (string, ShareLink, error) {
	st := k.state.Load()
	return k.mint(st, st.orgs[org], host, path, ttl)
}

// KeyFor returns the id of org's current key, false when it has none.
func (k *Keyring) KeyFor(org string) (string, bool) {
	id, ok := k.state.Load().orgs[org]
	return id, ok
}

func (k *Keyring) mint(st *keyringState, kid, host, path string, ttl time.Duration) (string, ShareLink, error) {
	if kid == "" {
		return "", ShareLink{}, ErrShareNoKey
	}
	h := hostname.Normalize(host)
	if err := hostname.Validate(h); err != nil || strings.HasPrefix(h, "*") {
		return "", ShareLink{}, fmt.Errorf("access: share hostname %s is not an exact hostname", quote(host))
	}
	if path == "" {
		path = "/"
	}
	if err := checkSharePath(path); err != nil {
		return "", ShareLink{}, err
	}
	if ttl <= 0 || ttl > MaxShareTTL {
		return "", ShareLink{}, fmt.Errorf("access: share ttl %s is not above 0 and at most %s", ttl, MaxShareTTL)
	}
	c := shareClaims{Host: h, Path: path, Expires: k.now().Add(ttl).Unix(), Nonce: rand.Text()[:16]}
	payload, err := json.Marshal(c)
	if err != nil {
		return "", ShareLink{}, fmt.Errorf("access: share: %w", err)
	}
	signed := shareVersion + "." + kid + "." + base64.RawURLEncoding.EncodeToString(payload)
	tok := signed + "." + base64.RawURLEncoding.EncodeToString(k.mac(st.keys[kid], signed))
	return tok, c.link(), nil
}

func (c shareClaims) link() ShareLink {
	return ShareLink{Host: c.Host, Path: c.Path, Expires: time.Unix(c.Expires, 0), Nonce: c.Nonce}
}

// checkSharePath reports whether p is a path prefix a link may name: an
// absolute path in normal form (no "." or ".." segments, no empty
// segment, no ";" parameter), without query or fragment.
func checkSharePath(p string) error {
	if len(p) > maxSharePathLen || !strings.HasPrefix(p, "/") || strings.ContainsAny(p, "?#;\\") || !printableASCII(p) {
		return fmt.Errorf("access: share path %s is not an absolute path of at most %d printable bytes", quote(p), maxSharePathLen)
	}
	if p == "/" {
		return nil
	}
	for seg := range strings.SplitSeq(strings.TrimSuffix(p[1:], "/"), "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("access: share path %s is not in normal form", quote(p))
		}
	}
	return nil
}

func (k *Keyring) mac(key []byte, signed string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(signed))
	return m.Sum(nil)
}

// Errors Verify wraps; each says why a token is refused.
var (
	ErrShareMalformed = errors.New("malformed share token")
	ErrShareKey       = errors.New("share token signed by an unknown key")
	ErrShareSignature = errors.New("share token signature does not match")
	ErrShareExpired   = errors.New("share token expired")
)

// Verify returns the link tok grants, or why it is refused (an error
// wrapping one of the ErrShare errors). It does not check the host or
// path a request names: see ShareLink.Covers.
func (k *Keyring) Verify(tok string) (ShareLink, error) {
	if len(tok) > maxShareTokenLen {
		return ShareLink{}, fmt.Errorf("%w: longer than %d bytes", ErrShareMalformed, maxShareTokenLen)
	}
	st := k.state.Load()
	sum := fieldsDigest(nil, tok)
	if link, ok := st.verified.get(sum); ok {
		return link, nil
	}
	version, rest, _ := strings.Cut(tok, ".")
	kid, rest, _ := strings.Cut(rest, ".")
	payload, mac, ok := strings.Cut(rest, ".")
	if !ok || version != shareVersion || strings.Contains(mac, ".") {
		return ShareLink{}, fmt.Errorf("%w: not v1.<key>.<payload>.<mac>", ErrShareMalformed)
	}
	key, ok := st.keys[kid]
	if !ok {
		return ShareLink{}, ErrShareKey
	}
	got, err := b64.DecodeRawURL(mac)
	if err != nil {
		return ShareLink{}, fmt.Errorf("%w: mac is not base64url", ErrShareMalformed)
	}
	if !hmac.Equal(got, k.mac(key, tok[:len(tok)-len(mac)-1])) {
		return ShareLink{}, ErrShareSignature
	}
	raw, err := b64.DecodeRawURL(payload)
	if err != nil {
		return ShareLink{}, fmt.Errorf("%w: payload is not base64url", ErrShareMalformed)
	}
	var c shareClaims
	if err := json.Unmarshal(raw, &c); err != nil || c.Host == "" || c.Path == "" || c.Expires == 0 {
		return ShareLink{}, fmt.Errorf("%w: payload", ErrShareMalformed)
	}
	link := c.link()
	if !k.now().Before(link.Expires) {
		return ShareLink{}, ErrShareExpired
	}
	st.verified.add(sum, link, link.Expires)
	return link, nil
}

// Covers reports whether the link opens host (normalized) at path (the
// normal form): the same host, and path under the link's prefix by whole
// segments.
func (l ShareLink) Covers(host, path string) bool {
	if host != l.Host {
		return false
	}
	p := strings.TrimSuffix(l.Path, "/")
	if p == "" {
		return true
	}
	return path == p || strings.HasPrefix(path, p) && path[len(p)] == '/'
}

// check is the gate's share step: a valid ShareParam answers with a
// redirect that sets the cookie; a valid cookie admits.
func (k *Keyring) check(r *http.Request, v Visitor) Result {
	var reasons []string
	if tok, ok := queryValue(r.URL.RawQuery, ShareParam); ok {
		link, err := k.verifyFor(r, tok, v)
		if err == nil {
			return k.redirect(r, v, tok, link)
		}
		reasons = append(reasons, "share parameter: "+err.Error())
	}
	if tok, ok := cookieValue(r.Header, CookieShare); ok {
		link, err := k.verifyFor(r, tok, v)
		if err == nil {
			return Result{Outcome: Admit, Reason: "share link " + link.Nonce + " until " + link.Expires.UTC().Format(time.RFC3339)}
		}
		reasons = append(reasons, "share cookie: "+err.Error())
	}
	if len(reasons) == 0 {
		return Result{Outcome: Absent}
	}
	return Result{Outcome: Invalid, Reason: strings.Join(reasons, "; ")}
}

func (k *Keyring) verifyFor(r *http.Request, tok string, v Visitor) (ShareLink, error) {
	link, err := k.Verify(tok)
	if err != nil {
		return link, err
	}
	if !link.Covers(v.Host, v.Path) || !link.Covers(v.Host, literalPath(r, v)) {
		return link, fmt.Errorf("share link %s is for %s%s, not this host and path", link.Nonce, link.Host, link.Path)
	}
	return link, nil
}

// literalPath is r's path read with its ";" parameters kept as data, as
// nginx and most servers read it, when that differs from v.Path (the
// path's key, parameters dropped); v.Path otherwise. A link opens a path
// only when it covers both readings: "/docs;x/secret" is outside a link
// for "/docs" to a backend that keeps parameters, so it is outside it
// here too, while "/docs/page;jsessionid=1" is inside under both.
func literalPath(r *http.Request, v Visitor) string {
	if r == nil || r.URL == nil {
		return v.Path
	}
	esc := r.URL.EscapedPath()
	if strings.IndexByte(esc, ';') < 0 {
		return v.Path
	}
	lit, err := urlpath.Decode(esc, false)
	if err != nil {
		return "" // covered by no link
	}
	return lit
}

// redirect answers a first visit: set the cookie, then send the visitor
// to the same URL without the parameter, so the token leaves the address
// bar and the history. The Location is a path on the same host; a path
// starting with two slashes (or a slash and a backslash) would name
// another host, so leading slashes are collapsed.
func (k *Keyring) redirect(r *http.Request, v Visitor, tok string, link ShareLink) Result {
	maxAge := max(int(link.Expires.Sub(k.now())/time.Second), 1)
	c := &http.Cookie{
		Name:     CookieShare,
		Value:    tok,
		Path:     "/",
		MaxAge:   maxAge,
		HttpOnly: true,
		Secure:   v.HTTPS,
		SameSite: http.SameSiteLaxMode,
	}
	loc := "/" + strings.TrimLeft(r.URL.EscapedPath(), "/\\")
	if q := withoutParam(r.URL.RawQuery, ShareParam); q != "" {
		loc += "?" + q
	}
	return Result{
		Outcome: Answer,
		Status:  http.StatusFound,
		Header: http.Header{
			"Location":        {loc},
			"Set-Cookie":      {c.String()},
			"Cache-Control":   {"no-store"},
			"Referrer-Policy": {"no-referrer"},
		},
		Reason: "share link " + link.Nonce + " accepted: redirecting to set its cookie (max-age " + strconv.Itoa(maxAge) + "s)",
	}
}

// queryValue returns the first value of key in raw (a RawQuery),
// unescaped. A value that does not unescape counts as absent.
func queryValue(raw, key string) (string, bool) {
	for raw != "" {
		var part string
		part, raw, _ = strings.Cut(raw, "&")
		k, v, _ := strings.Cut(part, "=")
		if k != key {
			continue
		}
		v, err := url.QueryUnescape(v)
		if err != nil {
			return "", false
		}
		return v, true
	}
	return "", false
}

// withoutParam returns raw (a RawQuery) without every key=... pair,
// keeping the others as sent, in order.
func withoutParam(raw, key string) string {
	var kept []string
	for part := range strings.SplitSeq(raw, "&") {
		if k, _, _ := strings.Cut(part, "="); k == key || part == "" {
			continue
		}
		kept = append(kept, part)
	}
	return strings.Join(kept, "&")
}
