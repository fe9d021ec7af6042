package main

import (
	"container/list"
	"context"
	"sync"
	"time"
)

// objectLocks serializes the provider's writes to one Deployment or
// StatefulSet: a scaling call (stamp, then replicas) and a retirement
// (read the stamp, then lower) of the same object never interleave in
// this process. Across processes the scale update's resourceVersion does
// that job (retire.go). An entry lives only while someone holds or waits
// for it, so the map is bounded by the calls in flight. It is safe for
// concurrent use.
type objectLocks struct {
	mu    sync.Mutex // guards locks
	locks map[string]*objectLock
}

// objectLock is one object's lock: a token in a one-slot channel, so a
// waiter can give up when its context ends.
type objectLock struct {
	token chan struct{}
	refs  int // holders and waiters; guarded by objectLocks.mu
}

func newObjectLocks() *objectLocks {
	return &objectLocks{locks: make(map[string]*objectLock)}
}

// lock takes key's lock, waiting at most until ctx is done, and returns
// the function that gives it back.
func (l *objectLocks) lock(ctx context.Context, key string) (unlock func(), err error) {
	l.mu.Lock()
	e := l.locks[key]
	if e == nil {
		e = &objectLock{token: make(chan struct{}, 1)}
		l.locks[key] = e
	}
	e.refs++
	l.mu.Unlock()
	release := func() {
		l.mu.Lock()
		e.refs--
		if e.refs == 0 {
			delete(l.locks, key)
		}
		l.mu.Unlock()
	}
	select {
	case e.token <- struct{}{}:
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
	return func() {
		<-e.token
		release()
	}, nil
}

// len is the number of objects locked or waited for.
func (l *objectLocks) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.locks)
}

// seenSet remembers strings (webhook ids, instance ids) for ttl, at most
// max of them, the oldest forgotten first, so a sender of endless fresh
// ids costs bounded memory. It is safe for concurrent use.
type seenSet struct {
	max int
	ttl time.Duration
	now func() time.Time

	mu    sync.Mutex // guards the following fields
	byID  map[string]*list.Element
	order *list.List // of seenEntry, oldest first
}

type seenEntry struct {
	id      string
	expires time.Time
}

func newSeenSet(max int, ttl time.Duration, now func() time.Time) *seenSet {
	return &seenSet{max: max, ttl: ttl, now: now, byID: make(map[string]*list.Element), order: list.New()}
}

// has reports whether id was added less than ttl ago.
func (s *seenSet) has(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked(s.now())
	_, ok := s.byID[id]
	return ok
}

// add remembers id from now for ttl; adding it again restarts its time.
func (s *seenSet) add(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.expireLocked(now)
	if e, ok := s.byID[id]; ok {
		s.order.Remove(e)
		delete(s.byID, id)
	}
	for len(s.byID) >= s.max {
		f := s.order.Front()
		delete(s.byID, f.Value.(seenEntry).id)
		s.order.Remove(f)
	}
	s.byID[id] = s.order.PushBack(seenEntry{id: id, expires: now.Add(s.ttl)})
}

// expireLocked drops the entries whose time is up, oldest first.
func (s *seenSet) expireLocked(now time.Time) {
	for f := s.order.Front(); f != nil; f = s.order.Front() {
		e := f.Value.(seenEntry)
		if now.Before(e.expires) {
			return
		}
		delete(s.byID, e.id)
		s.order.Remove(f)
	}
}

// len is the number of ids remembered.
func (s *seenSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byID)
}
