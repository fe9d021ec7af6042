package policy

import (
	"fmt"
	"hash/maphash"
	"math"
	"net/http"
	"net/netip"
	"strings"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/time/rate"

	"github.com/aperio-dev/aperio/internal/headerrule"
)

// keyKind is what a rate limit keys its buckets by.
type keyKind uint8

const (
	keyIP keyKind = iota
	keyHeader
	keyUser
	keyToken
)

// limiter is one compiled entry of rate_limits: token buckets
// (golang.org/x/time/rate, judged at the request's time) by route and
// key, at most maxKeys of them. Past that the least recently used
// bucket is dropped, which at worst gives its key a fresh burst: memory
// stays bounded whatever the key space (a flood of addresses or header
// values), at a few hundred bytes a bucket.
type limiter struct {
	index   int
	name    string // rate_limits[i]
	kind    keyKind
	header  string // canonical, for header:NAME
	rate    float64
	burst   float64
	maxKeys int
	seed    maphash.Seed
	buckets *lru.Cache[bucketKey, *rate.Limiter] // safe for concurrent use
}

// bucketKey names one bucket: the route, and the visitor's address or a
// hash of the key's value (a header, the user, the token), so that a
// key's value, a credential perhaps, is not kept and the key is of fixed
// size.
type bucketKey struct {
	route int32
	addr  netip.Addr
	sum   uint64
}

func newLimiter(i int, rl RateLimit) (*limiter, string) {
	l := &limiter{index: i, name: fmt.Sprintf("rate_limits[%d]", i), rate: rl.Rate, burst: float64(rl.Burst), maxKeys: rl.MaxKeys, seed: maphash.MakeSeed()}
	name := strings.TrimSpace(rl.Name)
	switch key := strings.TrimSpace(rl.Key); {
	case name == "":
		return nil, "name is required"
	case key == "ip" || key == "":
		l.kind = keyIP
	case key == "user":
		l.kind = keyUser
	case key == "token":
		l.kind = keyToken
	case strings.HasPrefix(key, "header:"):
		h := strings.TrimSpace(strings.TrimPrefix(key, "header:"))
		if !headerrule.ValidName(h) {
			return nil, fmt.Sprintf("key %q: %q is not a header name", key, h)
		}
		l.kind, l.header = keyHeader, http.CanonicalHeaderKey(h)
	default:
		return nil, fmt.Sprintf("key %q is not ip, header:NAME, user or token", key)
	}
	switch {
	case !(rl.Rate > 0) || math.IsInf(rl.Rate, 0):
		return nil, fmt.Sprintf("rate must be a positive number of tokens per second, got %g", rl.Rate)
	case rl.Burst < 0:
		return nil, fmt.Sprintf("burst must not be negative, got %d", rl.Burst)
	case rl.MaxKeys < 0 || rl.MaxKeys > MaxKeys:
		return nil, fmt.Sprintf("max_keys must be between 0 and %d, got %d", MaxKeys, rl.MaxKeys)
	}
	if l.burst == 0 {
		l.burst = max(1, math.Floor(rl.Rate))
	}
	if l.maxKeys == 0 {
		l.maxKeys = MaxKeys
	}
	c, err := lru.New[bucketKey, *rate.Limiter](l.maxKeys)
	if err != nil {
		return nil, err.Error()
	}
	l.buckets = c
	return l, ""
}

// Visitor is what a rate limit may key a request by.
type Visitor struct {
	// Addr is the visitor's address; the zero Addr when unknown.
	Addr netip.Addr
	// Header is the request's header (header:NAME, token); nil is empty.
	Header http.Header
	// User is the user access control admitted; "" when none.
	User string
}

// key returns v's bucket key for route under l. A visitor without the
// key's value is keyed by its address.
func (l *limiter) key(route int, v Visitor) bucketKey {
	k := bucketKey{route: int32(route)}
	var s string
	switch l.kind {
	case keyHeader:
		if vv := v.Header[l.header]; len(vv) > 0 {
			s = vv[0]
		}
	case keyUser:
		s = v.User
	case keyToken:
		if a := v.Header["Authorization"]; len(a) > 0 && len(a[0]) > 7 && strings.EqualFold(a[0][:7], "bearer ") {
			s = a[0][7:]
		}
	}
	if s == "" {
		k.addr = v.Addr
		return k
	}
	k.sum = maphash.String(l.seed, s)
	return k
}

// Allow takes a token of v's bucket of the rule's rate limit. It reports
// whether there was one, and when not how long until there will be. A
// rule without a limit always allows.
func (r *Rule) Allow(now time.Time, v Visitor) (time.Duration, bool) {
	l := r.limit
	if l == nil {
		return 0, true
	}
	k := l.key(r.Index, v)
	b, ok := l.buckets.Get(k)
	if !ok {
		nb := rate.NewLimiter(rate.Limit(l.rate), int(l.burst))
		if prev, found, _ := l.buckets.PeekOrAdd(k, nb); found {
			b = prev
		} else {
			b = nb
		}
	}
	if b.AllowN(now, 1) {
		return 0, true
	}
	return time.Duration((1 - b.TokensAt(now)) / l.rate * float64(time.Second)), false
}

// Tokens returns the tokens left in v's bucket now, without taking one or
// making the bucket recently used, and the limit's burst and rate. A key
// with no bucket yet has a full one.
func (r *Rule) Tokens(now time.Time, v Visitor) (tokens, burst, rate float64) {
	l := r.limit
	if l == nil {
		return 0, 0, 0
	}
	b, ok := l.buckets.Peek(l.key(r.Index, v))
	if !ok {
		return l.burst, l.burst, l.rate
	}
	return b.TokensAt(now), l.burst, l.rate
}

// LimitName returns the name of the rule's rate limit,
// "rate_limits[i]"; "" when it has none.
func (r *Rule) LimitName() string {
	if r.limit == nil {
		return ""
	}
	return r.limit.name
}

// KeyName returns what the rule's rate limit keys by: ip, header:NAME,
// user or token.
func (r *Rule) KeyName() string {
	if r.limit == nil {
		return ""
	}
	switch r.limit.kind {
	case keyHeader:
		return "header:" + r.limit.header
	case keyUser:
		return "user"
	case keyToken:
		return "token"
	}
	return "ip"
}

// len returns the buckets l keeps, for tests.
func (l *limiter) len() int { return l.buckets.Len() }
