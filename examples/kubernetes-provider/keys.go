package main

import (
	"container/list"
	"errors"
	"sync"
	"time"
)

// errKeyReused is a key seen before with another call.
var errKeyReused = errors.New("idempotency key reused with another call")

// keyCache remembers the answer to each accepted call by its
// Idempotency-Key, for ttl, and at most max keys (the oldest is forgotten
// first), so a caller sending endless fresh keys costs bounded memory.
// While the first call with a key runs, later ones wait for its answer
// instead of scaling a second time. It is safe for concurrent use.
type keyCache struct {
	max int
	ttl time.Duration
	now func() time.Time

	mu    sync.Mutex // guards the following fields
	byKey map[string]*keyEntry
	order *list.List // of *keyEntry, oldest first; creation order is expiry order
}

// keyEntry is one key: pending until done is closed, then holding the
// answer when ok.
type keyEntry struct {
	key         string
	fingerprint string
	expires     time.Time
	elem        *list.Element
	done        chan struct{} // closed by finish

	// Written once before done is closed, read only after.
	ans answer
	ok  bool
}

func newKeyCache(max int, ttl time.Duration, now func() time.Time) *keyCache {
	if now == nil {
		now = time.Now
	}
	return &keyCache{max: max, ttl: ttl, now: now, byKey: make(map[string]*keyEntry), order: list.New()}
}

// begin returns the live entry for key and whether the caller leads it:
// a leader serves the call and must call finish; a follower waits for
// e.done. It fails with errKeyReused when the key's entry was made for a
// call with another fingerprint.
func (c *keyCache) begin(key, fingerprint string) (e *keyEntry, leader bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	c.expireLocked(now)
	if e := c.byKey[key]; e != nil {
		if e.fingerprint != fingerprint {
			return nil, false, errKeyReused
		}
		return e, false, nil
	}
	for len(c.byKey) >= c.max {
		c.removeLocked(c.order.Front().Value.(*keyEntry))
	}
	e = &keyEntry{key: key, fingerprint: fingerprint, expires: now.Add(c.ttl), done: make(chan struct{})}
	e.elem = c.order.PushBack(e)
	c.byKey[key] = e
	return e, true, nil
}

// finish records the leader's answer. With keep, later calls with the key
// get ans until the entry expires; without, the key is forgotten and the
// next call with it is served afresh.
func (c *keyCache) finish(key string, e *keyEntry, ans answer, keep bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.ans, e.ok = ans, keep
	if !keep && c.byKey[key] == e {
		c.removeLocked(e)
	}
	close(e.done)
}

// result is the answer to replay, once done is closed.
func (e *keyEntry) result() (answer, bool) {
	return e.ans, e.ok
}

// expireLocked drops the entries whose time is up, oldest first.
func (c *keyCache) expireLocked(now time.Time) {
	for f := c.order.Front(); f != nil; f = c.order.Front() {
		e := f.Value.(*keyEntry)
		if now.Before(e.expires) {
			return
		}
		c.removeLocked(e)
	}
}

func (c *keyCache) removeLocked(e *keyEntry) {
	c.order.Remove(e.elem)
	delete(c.byKey, e.key)
}

// len is the number of keys remembered.
func (c *keyCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byKey)
}
