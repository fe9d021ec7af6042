package store

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/aperio-dev/aperio/internal/logkey"
)

// Change kinds, as Change.Kind carries them.
const (
	// ChangeTokenRevoked: ID and OrgID name the token.
	ChangeTokenRevoked = "token_revoked"
	// ChangeTokenUpdated: ID and OrgID name the token, whose editable
	// fields (UpdateToken) or secret (RotateToken) changed; read it with
	// Token.
	ChangeTokenUpdated = "token_updated"
	// ChangeOrgLimits: OrgID names the organization whose limits were
	// replaced (SetOrgLimits).
	ChangeOrgLimits = "org_limits"
	// ChangeAdminKeyDeleted: ID and OrgID name the key.
	ChangeAdminKeyDeleted = "admin_key_deleted"
	// ChangeMaintenanceSet: Hostname and OrgID name the record.
	ChangeMaintenanceSet = "maintenance_set"
	// ChangeMaintenanceCleared: Hostname and OrgID name the record.
	ChangeMaintenanceCleared = "maintenance_cleared"
	// ChangeScalingUpdated: ID, OrgID and Hostname name the scaling
	// record, which was declared or lost an armer.
	ChangeScalingUpdated = "scaling_updated"
	// ChangeScalingCalled: ID, OrgID and Hostname name the scaling
	// record, which had a call recorded that leaves it armed: its call
	// state (cooldown, backoff, penalty) changed, so that every server
	// can honour it at once.
	ChangeScalingCalled = "scaling_called"
	// ChangeScalingDisarmed: ID, OrgID and Hostname name the scaling
	// record, which had a call recorded that leaves it disarmed (the
	// breaker tripped). It is published instead of ChangeScalingCalled,
	// so that subscribers can act on a disarm at once while they leave the
	// updates every heartbeat makes to a periodic reload.
	ChangeScalingDisarmed = "scaling_disarmed"
	// ChangeScalingDeleted: ID, OrgID and Hostname name the scaling
	// record, which was deleted (disarmed through the API, its last armer
	// released, or unrefreshed past the TTL).
	ChangeScalingDeleted = "scaling_deleted"
	// ChangeOrgHostnames: OrgID names the organization whose hostname
	// patterns were replaced; read them with ListOrgHostnames.
	ChangeOrgHostnames = "org_hostnames"
	// ChangeOrgPorts: OrgID names the organization whose public port
	// ranges were replaced; read them with ListOrgPorts.
	ChangeOrgPorts = "org_ports"
	// ChangeSigningKeys: ID names a new signing key (a first key or a
	// rotation) and OrgID its series' organization, "" for a server-wide
	// one; read them with SigningKeys.
	ChangeSigningKeys = "signing_keys"
	// ChangeResync carries no record: changes may have been missed (this
	// subscriber fell behind, or the PostgreSQL listener lost its
	// connection and has just reconnected). A subscriber that caches
	// anything derived from the store reloads it from the store.
	ChangeResync = "resync"
)

// subscriberQueue bounds the changes waiting for one subscriber. Beyond it
// the queue is replaced by one ChangeResync: a revoke must never be lost
// silently, and a writer must never wait for a reader.
const subscriberQueue = 256

// Change says that a record changed, through any DB sharing the database
// (see Subscribe). It names the record; read the store for its state.
type Change struct {
	// Kind is one of the Change* constants.
	Kind string
	// ID is the token, admin key or scaling record ID; empty for other
	// kinds.
	ID string
	// OrgID is the record's organization; empty for ChangeResync.
	OrgID string
	// Hostname is the hostname of a maintenance or scaling change; empty
	// otherwise.
	Hostname string
}

// Subscribe returns a channel of the changes committed after it returns by
// any DB sharing this database: on PostgreSQL every server's (LISTEN/NOTIFY,
// sent in the transaction of the change), on SQLite this DB's (one server
// owns an SQLite file; a second DB on the same file does not see this one's
// changes). Delivery on PostgreSQL is asynchronous: a change made through
// db arrives shortly after the call that made it returns, and one committed
// just before Subscribe may still arrive.
//
// The channel is unbuffered; each subscription has its own queue of
// subscriberQueue changes. A subscriber that falls further behind loses the
// queued changes and gets one ChangeResync in their place (counted by
// DroppedChanges); a writer never waits for a subscriber. The channel is
// closed when ctx ends or db closes.
func (db *DB) Subscribe(ctx context.Context) <-chan Change {
	return db.hub.subscribe(ctx)
}

// hub fans changes out to subscribers. It owns one forwarding goroutine per
// subscription; close joins them.
type hub struct {
	log     *slog.Logger
	done    chan struct{} // closed by close
	wg      sync.WaitGroup
	dropped atomic.Uint64

	mu     sync.Mutex // guards the following fields
	subs   map[*subscriber]struct{}
	closed bool
}

func newHub(log *slog.Logger) *hub {
	return &hub{
		log:  log,
		done: make(chan struct{}),
		subs: make(map[*subscriber]struct{}),
	}
}

func (h *hub) subscribe(ctx context.Context) <-chan Change {
	s := &subscriber{
		h:    h,
		out:  make(chan Change),
		wake: make(chan struct{}, 1),
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		close(s.out)
		return s.out
	}
	h.subs[s] = struct{}{}
	h.wg.Add(1)
	go s.forwardLoop(ctx)
	return s.out
}

// publish queues c for every subscriber. It never blocks on one.
func (h *hub) publish(c Change) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		s.push(c)
	}
}

// close ends every subscription and waits for their goroutines. Later
// subscriptions get a closed channel.
func (h *hub) close() {
	h.mu.Lock()
	if !h.closed {
		h.closed = true
		close(h.done)
	}
	h.mu.Unlock()
	h.wg.Wait()
}

func (h *hub) remove(s *subscriber) {
	h.mu.Lock()
	delete(h.subs, s)
	h.mu.Unlock()
}

// subscriber is one Subscribe call: a bounded queue and the goroutine that
// hands it to the consumer.
type subscriber struct {
	h    *hub
	out  chan Change
	wake chan struct{} // capacity 1: "the queue is not empty"

	mu     sync.Mutex // guards the following fields
	queue  []Change
	resync bool // deliver ChangeResync before the queue
}

// push queues c, or on overflow replaces the queue with a pending resync.
func (s *subscriber) push(c Change) {
	s.mu.Lock()
	switch {
	case c.Kind == ChangeResync:
		// A resync supersedes everything queued before it.
		clear(s.queue)
		s.queue = s.queue[:0]
		s.resync = true
	case len(s.queue) >= subscriberQueue:
		n := uint64(len(s.queue)) + 1
		clear(s.queue)
		s.queue = s.queue[:0]
		s.resync = true
		s.h.dropped.Add(n)
		s.h.log.Warn("change subscriber overflowed", logkey.Dropped, n)
	default:
		s.queue = append(s.queue, c)
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// next takes the next change to deliver, if any.
func (s *subscriber) next() (Change, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.resync {
		s.resync = false
		return Change{Kind: ChangeResync}, true
	}
	if len(s.queue) == 0 {
		return Change{}, false
	}
	c := s.queue[0]
	s.queue[0] = Change{}
	s.queue = s.queue[1:]
	if len(s.queue) == 0 {
		s.queue = nil // let the backing array go
	}
	return c, true
}

// forwardLoop delivers queued changes until ctx ends or the hub closes,
// then closes out.
func (s *subscriber) forwardLoop(ctx context.Context) {
	defer s.h.wg.Done()
	defer close(s.out)
	defer s.h.remove(s)
	for {
		c, ok := s.next()
		if !ok {
			select {
			case <-s.wake:
				continue
			case <-ctx.Done():
				return
			case <-s.h.done:
				return
			}
		}
		select {
		case s.out <- c:
		case <-ctx.Done():
			return
		case <-s.h.done:
			return
		}
	}
}
