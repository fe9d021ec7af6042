package events

import (
	"sync"
	"time"
)

// Budget of refusal audit entries (client_refused, client_bind_refused,
// scaling_refused). A holder of a valid client token can have its hello
// refused as fast as it can reconnect, or announce refused binds on every
// heartbeat; each refusal would otherwise add a permanent entry to the
// append-only audit log.
const (
	// MaxRefusalAudits bounds the refusals a RefusalBudget admits per
	// actor (client token, or the master token) per minute. Refusals
	// over it are counted, logged once per window by the caller, and
	// reported in the actor's next audited refusal.
	MaxRefusalAudits = 60
	// maxRefusalActors bounds the windows tracked at once, the shared
	// overflow window included. Actors are
	// authenticated tokens, so the set is small; past the bound, stale
	// windows are dropped and, if none is stale, the newcomer shares one
	// overflow window with every other untracked actor.
	maxRefusalActors = 4096
	// refusalOverflow is the actor key of that shared window.
	refusalOverflow = "\x00overflow"
)

// RefusalBudget counts refusals per actor in fixed one-minute windows and
// admits MaxRefusalAudits of them per window to the audit log. It is safe
// for concurrent use; its memory is bounded whatever the actors (at most
// 4096 windows).
type RefusalBudget struct {
	now func() time.Time

	mu     sync.Mutex // guards actors
	actors map[string]*refusalWindow
}

// refusalWindow is one actor's current window.
type refusalWindow struct {
	start      time.Time // start of the window
	n          int       // refusals audited in the window
	suppressed int       // refusals not audited since the last one that was
	warned     bool      // the window's first suppression was logged
}

// NewRefusalBudget returns an empty budget whose windows are timed by now
// (time.Now outside tests).
func NewRefusalBudget(now func() time.Time) *RefusalBudget {
	return &RefusalBudget{now: now, actors: make(map[string]*refusalWindow)}
}

// Admit counts one refusal of actor. It reports whether to audit it, how
// many of actor's refusals were left out before it (reset once reported),
// and whether this is the first one left out in the window (to log once).
func (b *RefusalBudget) Admit(actor string) (ok bool, leftOut int, first bool) {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.actors[actor]
	if w == nil {
		if len(b.actors) >= maxRefusalActors-1 { // one slot stays for the overflow window
			b.pruneLocked(now)
		}
		if len(b.actors) >= maxRefusalActors-1 {
			actor = refusalOverflow
			w = b.actors[actor]
		}
		if w == nil {
			w = &refusalWindow{start: now}
			b.actors[actor] = w
		}
	}
	if now.Sub(w.start) >= time.Minute || now.Before(w.start) {
		w.start, w.n, w.warned = now, 0, false
	}
	if w.n >= MaxRefusalAudits {
		w.suppressed++
		first = !w.warned
		w.warned = true
		return false, 0, first
	}
	w.n++
	leftOut, w.suppressed = w.suppressed, 0
	return true, leftOut, false
}

// pruneLocked drops the windows that ended with nothing left to report.
func (b *RefusalBudget) pruneLocked(now time.Time) {
	for a, w := range b.actors {
		if now.Sub(w.start) >= time.Minute && w.suppressed == 0 {
			delete(b.actors, a)
		}
	}
}
