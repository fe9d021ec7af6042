package access

import (
	"crypto/sha256"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// ttlCache is a bounded LRU of values that expire. Keys are SHA-256
// digests of what the value vouches for, so the cache holds no
// credential. Expired entries are dropped when read; the LRU bound caps
// memory whatever the traffic. It is safe for concurrent use (the LRU
// holds one mutex per call).
//
// It is not golang-lru's expirable LRU: that one starts a goroutine per
// cache that never exits, and reads the wall clock, where tests inject
// one.
type ttlCache[V any] struct {
	c   *lru.Cache[[32]byte, ttlEntry[V]]
	now func() time.Time
}

type ttlEntry[V any] struct {
	v     V
	until time.Time
}

// newTTLCache returns a cache of at most size entries (size > 0).
func newTTLCache[V any](size int, now func() time.Time) *ttlCache[V] {
	c, err := lru.New[[32]byte, ttlEntry[V]](size)
	if err != nil {
		panic("access: cache size " + err.Error()) // sizes are validated before
	}
	return &ttlCache[V]{c: c, now: now}
}

// get returns the value under k if it has not expired.
func (t *ttlCache[V]) get(k [32]byte) (V, bool) {
	e, ok := t.c.Get(k)
	if !ok {
		var zero V
		return zero, false
	}
	if !t.now().Before(e.until) {
		t.c.Remove(k)
		var zero V
		return zero, false
	}
	return e.v, true
}

// add stores v under k until the given time.
func (t *ttlCache[V]) add(k [32]byte, v V, until time.Time) {
	t.c.Add(k, ttlEntry[V]{v: v, until: until})
}

// purge drops every entry.
func (t *ttlCache[V]) purge() { t.c.Purge() }

// clock returns now, or time.Now when now is nil.
func clock(now func() time.Time) func() time.Time {
	if now == nil {
		return time.Now
	}
	return now
}

// fieldsDigest returns the SHA-256 of key and then each field prefixed by
// its length, so that no two lists of fields share a digest ("ab", "c"
// and "a", "bc" differ). Cache keys are made with it.
func fieldsDigest(key []byte, fields ...string) [32]byte {
	h := sha256.New()
	h.Write(key)
	for _, s := range fields {
		n := len(s)
		h.Write([]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
		h.Write([]byte(s))
	}
	var k [32]byte
	h.Sum(k[:0])
	return k
}
