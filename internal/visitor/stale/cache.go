// Package cache owns the serve-stale store: the last good copy of GET
// responses from services that opt into resilience, kept in memory under a
// byte bound and answered, marked as stale, when no client can serve the
// request. It decides which responses may be kept (RFC 9111 rules for a
// shared cache), for how long they may be served, and which request each
// stored copy may answer.
package stale

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// StaleHeader is the response header that marks an answer served from the
// cache instead of a client. Its value is always "1".
const StaleHeader = "X-Aperio-Stale"

// maxVariants bounds how many variants (responses with a Vary header, one
// per distinct set of varied request values) one key keeps. Storing one
// more evicts the oldest variant of that key, so a header with many values
// (User-Agent) cannot crowd out the rest of the cache through one URL.
const maxVariants = 4

// Config configures a Cache. The zero value is a disabled cache.
type Config struct {
	// MaxBytes bounds the memory held by stored responses: bodies, an
	// estimate of headers and bookkeeping, and keys (cache_max_bytes). One
	// response may use at most MaxBytes/8; larger ones are not stored. Zero
	// disables the cache; negative is invalid. DefaultConfig: 64 MiB.
	MaxBytes int64
	// MaxStale is how long after it was stored a response may still be
	// served (cache_max_stale). A response's own stale-if-error can only
	// shorten it. Zero disables the cache, since nothing could be served;
	// negative is invalid. DefaultConfig: 1h.
	MaxStale time.Duration
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
}

// DefaultConfig returns aperio-server's default cache settings
// (cache_max_bytes 64 MiB, cache_max_stale 1h), the one place they are
// written. Now is nil.
func DefaultConfig() Config {
	return Config{MaxBytes: 64 << 20, MaxStale: time.Hour}
}

// Validate reports every problem with cfg.
func (cfg Config) Validate() error {
	var errs []error
	if cfg.MaxBytes < 0 {
		errs = append(errs, fmt.Errorf("cache: MaxBytes must not be negative, got %d", cfg.MaxBytes))
	}
	if cfg.MaxStale < 0 {
		errs = append(errs, fmt.Errorf("cache: MaxStale must not be negative, got %v", cfg.MaxStale))
	}
	return errors.Join(errs...)
}

// Cache is a bounded in-memory store of responses, evicted least recently
// used first. It is safe for concurrent use. A nil *Cache is a disabled
// cache: Record returns nil and Lookup misses.
type Cache struct {
	maxBytes      int64
	maxEntryBytes int64
	maxStale      time.Duration
	now           func() time.Time

	// Counters behind Stats; atomic so that paths that need no lock
	// (rejections, discards) take none.
	hits, misses, stores, rejected, discarded atomic.Int64
	evictions, expired, invalidated           atomic.Int64

	mu      sync.Mutex // guards the following fields
	index   map[Key]*entry
	lru     entry // sentinel: lru.lruNext is the most recently used entry
	byAge   entry // sentinel: byAge.ageNext is the entry stored first
	entries int64
	bytes   int64
}

// entry is one stored response. Everything but the links is immutable
// once the entry is inserted, so a Hit reads it without the lock even after
// it has been evicted.
type entry struct {
	key        Key
	vary       []variedField
	status     int
	header     http.Header // hop-by-hop fields removed, Content-Length exact
	body       []byte
	storedAt   time.Time
	initialAge time.Duration // the Age the response arrived with
	expires    time.Time     // last instant it may be served
	size       int64         // bytes charged against MaxBytes

	// Links, guarded by Cache.mu.
	lruPrev, lruNext *entry
	agePrev, ageNext *entry
	sibling          *entry // next (older) variant of the same key
}

// variedField is one request header named by a response's Vary, with the
// values the request that produced the response carried.
type variedField struct {
	name   string // canonical
	values []string
}

// matches reports whether a request with header h may be answered by e:
// every header e varies on must carry exactly the values the original
// request carried (both absent counts as equal). Comparing values without
// normalizing them can miss an equivalent request but never serves a wrong
// variant.
func (e *entry) matches(h http.Header) bool {
	for _, f := range e.vary {
		if !slices.Equal(h[f.name], f.values) {
			return false
		}
	}
	return true
}

// New returns a cache configured by cfg, or an error if cfg is invalid.
func New(cfg Config) (*Cache, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Cache{
		maxBytes:      cfg.MaxBytes,
		maxEntryBytes: cfg.MaxBytes / 8,
		maxStale:      cfg.MaxStale,
		now:           cfg.Now,
		index:         make(map[Key]*entry),
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.maxStale == 0 {
		c.maxBytes = 0
	}
	c.lru.lruPrev, c.lru.lruNext = &c.lru, &c.lru
	c.byAge.agePrev, c.byAge.ageNext = &c.byAge, &c.byAge
	return c, nil
}

// enabled reports whether c stores and serves anything.
func (c *Cache) enabled() bool { return c != nil && c.maxBytes > 0 }

// Hit is a stored response found by Lookup. It stays valid after the
// entry is evicted, and is safe to serve from any goroutine, any number of
// times. The zero Hit is not valid: only Lookup makes them.
type Hit struct {
	e   *entry
	age time.Duration
}

// Age is how old the response was at lookup: the Age it arrived with plus
// the time since it was stored.
func (h Hit) Age() time.Duration { return h.age }

// staleValue is StaleHeader's value, shared by every answer. Its capacity
// is its length, so a caller appending to it copies first.
var staleValue = []string{"1"}

// ServeHTTP answers r with the stored response: its status, its headers
// (hop-by-hop fields were removed when it was stored) with Age set to
// whole seconds and StaleHeader set, and its body unless r is a HEAD
// request. r must be the request given to Lookup. Write errors are
// ignored: they mean the visitor left.
//
// The header values are shared with the stored entry, not copied; the
// slices are full, so appending to them (Header.Add) copies, but they must
// not be modified in place.
func (h Hit) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	dst := w.Header()
	for k, vv := range h.e.header {
		dst[k] = vv
	}
	dst["Age"] = []string{strconv.FormatInt(int64(h.age/time.Second), 10)}
	dst[StaleHeader] = staleValue
	w.WriteHeader(h.e.status)
	if r.Method != http.MethodHead {
		w.Write(h.e.body)
	}
}

// Lookup returns the stored response that may answer r, if any: r must be
// a GET or HEAD request (HEAD is answered from the GET response), its key
// must match, it must carry the values of every header the response
// varies on, and the response must not be past its serving deadline.
// Request Cache-Control directives are not consulted: Lookup is meant for
// when the alternative is an error page. Lookup never blocks on I/O; it
// allocates nothing.
func (c *Cache) Lookup(r *http.Request) (Hit, bool) {
	if !c.enabled() {
		return Hit{}, false
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		c.misses.Add(1)
		return Hit{}, false
	}
	k := KeyOf(r)
	now := c.now()
	c.mu.Lock()
	c.expireLocked(now)
	var next *entry
	for e := c.index[k]; e != nil; e = next {
		next = e.sibling
		if !e.matches(r.Header) {
			continue
		}
		if now.After(e.expires) {
			c.removeLocked(e)
			c.expired.Add(1)
			continue
		}
		c.lruRemoveLocked(e)
		c.lruPushFrontLocked(e)
		c.mu.Unlock()
		c.hits.Add(1)
		return Hit{e: e, age: e.initialAge + max(now.Sub(e.storedAt), 0)}, true
	}
	c.mu.Unlock()
	c.misses.Add(1)
	return Hit{}, false
}

// Has reports whether Lookup(r) would find a copy to serve now, without
// serving it: no counter moves, no entry is touched, expired or removed.
// It is for explaining what a request would get (router.Explain).
func (c *Cache) Has(r *http.Request) bool {
	if !c.enabled() || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		return false
	}
	k := KeyOf(r)
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for e := c.index[k]; e != nil; e = e.sibling {
		if e.matches(r.Header) && !now.After(e.expires) {
			return true
		}
	}
	return false
}

// Stats is a snapshot of a cache's size and counters. Counters count from
// New and never decrease.
type Stats struct {
	// Entries is the number of stored responses.
	Entries int64
	// Bytes is the memory charged against Config.MaxBytes; never more
	// than MaxBytes.
	Bytes int64
	// Hits and Misses count Lookup results.
	Hits, Misses int64
	// Stores counts responses stored (including replacements).
	Stores int64
	// Rejected counts responses Record refused (method, status,
	// Cache-Control, credentials, Vary: *, Set-Cookie) or gave up on
	// because the body outgrew MaxBytes/8.
	Rejected int64
	// Discarded counts recordings finished incomplete (the visitor left,
	// the body failed or was shorter than its Content-Length).
	Discarded int64
	// Evictions counts entries removed to make room (the byte bound, or
	// too many variants of one key).
	Evictions int64
	// Expired counts entries removed because they were too old to serve.
	Expired int64
	// Invalidated counts entries removed because a newer response for the
	// same key forbade storing (no-store, private, must-revalidate,
	// proxy-revalidate, Vary: *).
	Invalidated int64
}

// Stats returns a snapshot of c's size and counters. It is safe to call
// concurrently with everything else; a nil or disabled cache reports
// zeros.
func (c *Cache) Stats() Stats {
	if c == nil {
		return Stats{}
	}
	c.mu.Lock()
	s := Stats{Entries: c.entries, Bytes: c.bytes}
	c.mu.Unlock()
	s.Hits = c.hits.Load()
	s.Misses = c.misses.Load()
	s.Stores = c.stores.Load()
	s.Rejected = c.rejected.Load()
	s.Discarded = c.discarded.Load()
	s.Evictions = c.evictions.Load()
	s.Expired = c.expired.Load()
	s.Invalidated = c.invalidated.Load()
	return s
}

// insert stores e as the newest response for its key: it replaces the
// variants e supersedes, caps the key's variants, and evicts least
// recently used entries until the byte bound holds. e.size must not exceed
// maxEntryBytes, so e itself always fits.
func (c *Cache) insert(e *entry) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expireLocked(now)
	var next *entry
	n := 0
	for old := c.index[e.key]; old != nil; old = next {
		next = old.sibling
		if e.supersedes(old) {
			c.removeLocked(old) // replaced, not counted: the key still answers
			continue
		}
		n++
		if n >= maxVariants {
			c.removeLocked(old)
			c.evictions.Add(1)
		}
	}
	e.sibling = c.index[e.key]
	c.index[e.key] = e
	c.lruPushFrontLocked(e)
	e.agePrev, e.ageNext = c.byAge.agePrev, &c.byAge
	c.byAge.agePrev.ageNext = e
	c.byAge.agePrev = e
	c.entries++
	c.bytes += e.size
	c.stores.Add(1)
	for c.bytes > c.maxBytes {
		c.removeLocked(c.lru.lruPrev)
		c.evictions.Add(1)
	}
}

// supersedes reports whether e, the newest response for its key, replaces
// old: either both vary on the same headers with the same values (the
// same variant), or the origin changed which headers it varies on, in
// which case the older variants were made under rules it no longer uses.
func (e *entry) supersedes(old *entry) bool {
	if len(e.vary) != len(old.vary) {
		return true
	}
	for i, f := range e.vary {
		if f.name != old.vary[i].name {
			return true
		}
	}
	for i, f := range e.vary {
		if !slices.Equal(f.values, old.vary[i].values) {
			return false
		}
	}
	return true
}

// invalidate removes every stored variant of k.
func (c *Cache) invalidate(k Key) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var next *entry
	for e := c.index[k]; e != nil; e = next {
		next = e.sibling
		c.removeLocked(e)
		c.invalidated.Add(1)
	}
}

// expireLocked removes entries past MaxStale, oldest first. It stops at
// the first entry still within MaxStale, so an entry with a shorter bound
// (stale-if-error) or one stored out of order may linger until a lookup
// finds it or the LRU pushes it out; it is never served either way.
// Amortized O(1): each entry is removed once.
func (c *Cache) expireLocked(now time.Time) {
	for e := c.byAge.ageNext; e != &c.byAge && now.Sub(e.storedAt) > c.maxStale; e = c.byAge.ageNext {
		c.removeLocked(e)
		c.expired.Add(1)
	}
}

// removeLocked unlinks e from the index and both lists and releases its
// bytes. O(maxVariants).
func (c *Cache) removeLocked(e *entry) {
	c.lruRemoveLocked(e)
	e.agePrev.ageNext = e.ageNext
	e.ageNext.agePrev = e.agePrev
	e.agePrev, e.ageNext = nil, nil
	if head := c.index[e.key]; head == e {
		if e.sibling == nil {
			delete(c.index, e.key)
		} else {
			c.index[e.key] = e.sibling
		}
	} else {
		for p := head; p != nil; p = p.sibling {
			if p.sibling == e {
				p.sibling = e.sibling
				break
			}
		}
	}
	e.sibling = nil
	c.entries--
	c.bytes -= e.size
}

func (c *Cache) lruRemoveLocked(e *entry) {
	e.lruPrev.lruNext = e.lruNext
	e.lruNext.lruPrev = e.lruPrev
	e.lruPrev, e.lruNext = nil, nil
}

func (c *Cache) lruPushFrontLocked(e *entry) {
	e.lruPrev, e.lruNext = &c.lru, c.lru.lruNext
	c.lru.lruNext.lruPrev = e
	c.lru.lruNext = e
}
