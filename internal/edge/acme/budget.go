package acme

import (
	"context"
	"errors"
	"io/fs"
	"path"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/publicsuffix"
	"golang.org/x/time/rate"
)

// Budgets of new certificates beside the server-wide bucket
// (IssuePerMinute, IssueBurst), so that one organization, or one
// registered domain (a wildcard bind's random names all share one), can
// spend neither every tenant's issuance nor the CA's quota:
//
//   - an organization orders at most OrgIssueBurst at once, refilled at
//     OrgIssuePerHour an hour;
//   - a registered domain (example.com for a.b.example.com, by the public
//     suffix list) at most DomainIssueBurst at once, refilled at
//     DomainIssuePerWeek a week, below Let's Encrypt's 50 certificates
//     per registered domain per week;
//   - an organization keeps at most MaxCertificatesPerOrg certificates in
//     the store: beyond it, no new name of it is ordered until one
//     expires.
//
// Renewals count against the server-wide bucket only: refusing them
// would let certificates in use expire. The names of acme.hostnames count
// against the server-wide bucket only.
const (
	OrgIssueBurst         = 20
	OrgIssuePerHour       = 20
	DomainIssueBurst      = 20
	DomainIssuePerWeek    = 40
	MaxCertificatesPerOrg = 500
)

// Refusal reasons, as Stats.Refused and the metrics name them.
const (
	RefusedInvalid      = "invalid"          // not a hostname
	RefusedNotBound     = "not_bound"        // no client binds it, nor did within the grace
	RefusedCached       = "cached"           // refused a moment ago (negative cache)
	RefusedServerRate   = "server_rate"      // the server-wide bucket is empty
	RefusedOrgRate      = "org_rate"         // the organization's bucket is empty
	RefusedDomainRate   = "domain_rate"      // the registered domain's bucket is empty
	RefusedOrgStoreFull = "org_certificates" // the organization holds MaxCertificatesPerOrg
)

// Bounds of the manager's memory of names: the negative cache and the
// organizations of names allowed a moment ago, each at most maxNames
// entries, and the buckets of registered domains and organizations.
const (
	maxNames      = 10000
	negativeTTL   = time.Minute
	pendingTTL    = 10 * time.Minute
	maxBuckets    = 10000
	ownersKeyRoot = "aperio/owners"
)

// nameCache maps names to a value until a deadline, holding at most
// maxNames: when full, the entry inserted first goes. It is safe for
// concurrent use.
type nameCache[V any] struct {
	ttl time.Duration

	mu    sync.Mutex // guards the following fields
	items map[string]cached[V]
	order []string // insertion order, for eviction; may hold stale keys
}

type cached[V any] struct {
	v     V
	until time.Time
}

func newNameCache[V any](ttl time.Duration) *nameCache[V] {
	return &nameCache[V]{ttl: ttl, items: make(map[string]cached[V])}
}

func (c *nameCache[V]) put(name string, v V, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.items[name]; !ok {
		for len(c.items) >= maxNames && len(c.order) > 0 {
			delete(c.items, c.order[0])
			c.order = c.order[1:]
		}
		c.order = append(c.order, name)
		if len(c.order) > 2*maxNames { // stale keys of deleted entries
			c.compactLocked()
		}
	}
	c.items[name] = cached[V]{v: v, until: now.Add(c.ttl)}
}

func (c *nameCache[V]) compactLocked() {
	kept := c.order[:0]
	seen := make(map[string]bool, len(c.items))
	for _, k := range c.order {
		if _, ok := c.items[k]; ok && !seen[k] {
			seen[k] = true
			kept = append(kept, k)
		}
	}
	c.order = kept
}

func (c *nameCache[V]) get(name string, now time.Time) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.items[name]
	if !ok || !now.Before(e.until) {
		var zero V
		return zero, false
	}
	return e.v, true
}

func (c *nameCache[V]) forget(name string) {
	c.mu.Lock()
	delete(c.items, name)
	c.mu.Unlock()
}

func (c *nameCache[V]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.items)
}

// buckets are token buckets by key (an organization, a registered
// domain), made on first use. At most maxBuckets are kept: beyond it the
// full ones, which hold no state, are dropped. It is safe for concurrent
// use.
type buckets struct {
	every rate.Limit
	burst int

	mu sync.Mutex // guards m
	m  map[string]*rate.Limiter
}

func newBuckets(every rate.Limit, burst int) *buckets {
	return &buckets{every: every, burst: burst, m: make(map[string]*rate.Limiter)}
}

// allow takes a token of key's bucket at now, reporting whether there was
// one.
func (b *buckets) allow(key string, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.m[key]
	if l == nil {
		if len(b.m) >= maxBuckets {
			for k, x := range b.m {
				if x.TokensAt(now) >= float64(b.burst) {
					delete(b.m, k)
				}
			}
		}
		l = rate.NewLimiter(b.every, b.burst)
		b.m[key] = l
	}
	return l.AllowN(now, 1)
}

// RegisteredDomain returns the domain under which name was registered:
// its public suffix and one label more (example.co.uk for
// a.b.example.co.uk), by the public suffix list that golang.org/x/net
// embeds; name itself when it has no label above a public suffix.
func RegisteredDomain(name string) string {
	d, err := publicsuffix.EffectiveTLDPlusOne(name)
	if err != nil {
		return name
	}
	return d
}

// ownerKey is where the store notes that a certificate was obtained for
// name on behalf of org: the count of MaxCertificatesPerOrg reads these.
// The value is the certificate's storage key, so that a note whose
// certificate is gone is not counted.
func ownerKey(org, name string) string {
	return path.Join(ownersKeyRoot, orgKey(org), name)
}

// orgKey is org as one storage key segment.
func orgKey(org string) string {
	if org == "" || strings.ContainsAny(org, "/\\") || org == "." || org == ".." {
		return "_"
	}
	return org
}

// storedFor counts the certificates the store holds for org's names,
// dropping the notes of certificates that are gone.
func (m *Manager) storedFor(ctx context.Context, org string) (int, error) {
	dir := path.Join(ownersKeyRoot, orgKey(org))
	keys, err := m.o.Storage.List(ctx, dir, false)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil // the organization's first certificate
	}
	if err != nil {
		return 0, err
	}
	n := 0
	for _, k := range keys {
		cert, err := m.o.Storage.Load(ctx, k)
		if err != nil {
			continue
		}
		if m.o.Storage.Exists(ctx, string(cert)) {
			n++
			continue
		}
		m.o.Storage.Delete(ctx, k) // the certificate expired and was cleaned
	}
	return n, nil
}
