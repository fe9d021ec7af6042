package server

import (
	"maps"
	"slices"
	"sync"
	"time"
)

// armerExpiry knows when each token that arms a scaling record expires, as
// of the last load of the records, so that the change watcher can sleep
// until the nearest expiry and then release that token's records as a
// revocation would. A timer to the nearest expiry, re-armed whenever the
// records are reloaded (on every change to them, debounced), costs no
// database read while nothing expires, and releases a record within the
// timer's accuracy of its last armer's expiry rather than at the next
// sweep. It is safe for concurrent use: loadArmed runs on the change
// watcher, on session goroutines and in New.
type armerExpiry struct {
	// changed has room for one signal: "the expiries changed, re-arm
	// the timer". set never blocks on it.
	changed chan struct{}

	mu sync.Mutex // guards at
	at map[string]time.Time
}

func newArmerExpiry() *armerExpiry {
	return &armerExpiry{changed: make(chan struct{}, 1)}
}

// set replaces the expiries, token ID → expires_at, and signals changed.
func (e *armerExpiry) set(at map[string]time.Time) {
	e.mu.Lock()
	e.at = at
	e.mu.Unlock()
	select {
	case e.changed <- struct{}{}:
	default:
	}
}

// next returns the nearest expiry, and false when no armer expires.
func (e *armerExpiry) next() (time.Time, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var first time.Time
	for _, t := range e.at {
		if first.IsZero() || t.Before(first) {
			first = t
		}
	}
	return first, !first.IsZero()
}

// due returns the tokens expired at now, sorted, and forgets them: the
// release that follows reloads the records, and brings a token back only
// if it still arms one.
func (e *armerExpiry) due(now time.Time) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var ids []string
	for _, id := range slices.Sorted(maps.Keys(e.at)) {
		if !now.Before(e.at[id]) {
			ids = append(ids, id)
			delete(e.at, id)
		}
	}
	return ids
}

// resetTimer sets t to fire at the nearest expiry, or stops it when no
// armer expires.
func (e *armerExpiry) resetTimer(t *time.Timer) {
	t.Stop()
	if at, ok := e.next(); ok {
		t.Reset(max(time.Until(at), 0))
	}
}
