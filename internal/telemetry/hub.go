package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// The hub's defaults.
const (
	// DefaultMaxStreamSubscribers bounds the subscribers of a Hub
	// (max_stream_subscribers).
	DefaultMaxStreamSubscribers = 128
	// DefaultStreamBuffer is the events a subscriber's buffer holds before
	// it drops.
	DefaultStreamBuffer = 256
	// DefaultMaxStreamsPerCredential bounds the subscriptions of one
	// credential (an admin key and its key sessions, or one login) other
	// than the master token: a few dashboard tabs and a CLI tail.
	DefaultMaxStreamsPerCredential = 8
	// masterReserve is the subscriptions only the master token may take,
	// out of MaxSubscribers (when it is at least 2): the operator can
	// always follow the stream, whoever holds the rest.
	masterReserve = 1
)

const metricStreamDropped = "aperio.stream.dropped"

// Hub errors.
var (
	// ErrTooManySubscribers is Subscribe's answer past MaxSubscribers.
	ErrTooManySubscribers = errors.New("telemetry: too many stream subscribers")
	// ErrHubClosed is Subscribe's answer once the hub is closed.
	ErrHubClosed = errors.New("telemetry: stream hub closed")
	// ErrCredentialSubscribers is Subscribe's answer when the holder's
	// credential already has MaxPerCredential subscriptions.
	ErrCredentialSubscribers = errors.New("telemetry: too many stream subscribers of one credential")
	// ErrOrgSubscribers is Subscribe's answer when the holder's
	// organization already has MaxPerOrg subscriptions.
	ErrOrgSubscribers = errors.New("telemetry: too many stream subscribers of one organization")
)

// HubConfig configures a Hub. The zero value takes the defaults.
type HubConfig struct {
	// MaxSubscribers bounds the subscribers at once; 0 means
	// DefaultMaxStreamSubscribers. From 2 on, one of them is kept for the
	// master token.
	MaxSubscribers int
	// MaxPerCredential bounds the subscribers of one credential (a
	// StreamHolder's Credential) other than the master token; 0 means
	// DefaultMaxStreamsPerCredential.
	MaxPerCredential int
	// MaxPerOrg bounds the subscribers of one organization (a
	// StreamHolder's OrgID) other than the master token's; 0 means a
	// quarter of MaxSubscribers, at least 1.
	MaxPerOrg int
	// Buffer is each subscriber's buffer, in events; 0 means
	// DefaultStreamBuffer.
	Buffer int
	// Meter receives aperio_stream_dropped_total; nil records none.
	Meter metric.Meter
}

// StreamEvent is one event of the live stream: its type (apitype.StreamAccess,
// StreamScaling, StreamClient), what filters read, and its JSON, encoded
// once for every subscriber. Subscribers must not modify it.
type StreamEvent struct {
	Type string
	// Hostname is the event's hostname: the access's or the scaling
	// record's; "" for a client event, whose Hostnames list its binds.
	Hostname  string
	Hostnames []string
	// OrgID is the organization of a client event's token; "" otherwise.
	OrgID string
	// Data is the event's JSON.
	Data []byte
}

// StreamFilter is what a subscriber asks for.
type StreamFilter struct {
	// Types are the event types wanted; empty means all.
	Types []string
	// Hostname keeps only events on that hostname (a client event when it
	// is among its hostnames); "" keeps all.
	Hostname string
	// Allow, when set, is asked last for each event: the caller's
	// organization scope. It runs on the publisher's goroutine (the
	// request path), so it must be quick and must not block.
	Allow func(*StreamEvent) bool
	// Holder is who subscribes, for the per-credential and
	// per-organization bounds.
	Holder StreamHolder
}

// StreamHolder is who holds a subscription. The zero value is an
// in-process subscriber: it counts only against MaxSubscribers, and not
// into the master token's reserve.
type StreamHolder struct {
	// Master is the master token: bound only by MaxSubscribers, with a
	// slot kept for it.
	Master bool
	// Credential names the credential ("key:apk_…", "oidc:user"); OrgID
	// its organization.
	Credential string
	OrgID      string
}

// Hub fans the live stream's events out to subscribers: each has a bounded
// buffer, and a publisher never waits for one. A full buffer drops the
// event and counts it, per subscriber (told to it as a "dropped" event)
// and in aperio_stream_dropped_total. With no subscriber, Active is one
// atomic load, and publishers build nothing. It is safe for concurrent use.
type Hub struct {
	max, buffer     int
	perCred, perOrg int
	n               atomic.Int32                    // subscribers
	subs            atomic.Pointer[[]*Subscription] // immutable, copied on change
	mu              sync.Mutex                      // serializes subs' changes and closing, guards the counts below
	closed          bool
	credSubs        map[string]int // subscriptions per StreamHolder.Credential
	orgSubs         map[string]int // subscriptions per StreamHolder.OrgID
	done            chan struct{}
	dropped         atomic.Int64
	access          *accessRing
	accessSubs      atomic.Int32 // subscribers that want access events
}

// NewHub returns a hub with no subscriber.
func NewHub(cfg HubConfig) (*Hub, error) {
	h := &Hub{max: cfg.MaxSubscribers, buffer: cfg.Buffer, perCred: cfg.MaxPerCredential, perOrg: cfg.MaxPerOrg,
		done: make(chan struct{}), access: newAccessRing(), credSubs: map[string]int{}, orgSubs: map[string]int{}}
	if h.max <= 0 {
		h.max = DefaultMaxStreamSubscribers
	}
	if h.perCred <= 0 {
		h.perCred = DefaultMaxStreamsPerCredential
	}
	if h.perOrg <= 0 {
		h.perOrg = max(1, h.max/4)
	}
	if h.buffer <= 0 {
		h.buffer = DefaultStreamBuffer
	}
	h.subs.Store(&[]*Subscription{})
	if cfg.Meter != nil {
		_, err := cfg.Meter.Int64ObservableCounter(metricStreamDropped,
			metric.WithDescription("Live stream events dropped because a subscriber's buffer was full."),
			metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
				o.Observe(h.dropped.Load())
				return nil
			}))
		if err != nil {
			return nil, err
		}
	}
	return h, nil
}

// Active reports whether anyone subscribes: publishers check it before
// building an event. A nil hub is never active.
func (h *Hub) Active() bool { return h != nil && h.n.Load() > 0 }

// Dropped returns the events dropped so far, over every subscriber.
func (h *Hub) Dropped() int64 { return h.dropped.Load() }

// Subscribers returns the subscribers now.
func (h *Hub) Subscribers() int { return int(h.n.Load()) }

// Done is closed when the hub is: subscribers' writers end then.
func (h *Hub) Done() <-chan struct{} { return h.done }

// Close ends the stream for every subscriber (Done closes) and refuses
// new ones. It is idempotent and does not block.
func (h *Hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.closed = true
		close(h.done)
	}
}

// Subscribe adds a subscriber with f; its Close removes it. It fails with
// ErrTooManySubscribers past MaxSubscribers (for a holder other than the
// master token, past MaxSubscribers less the master's reserve),
// ErrCredentialSubscribers and ErrOrgSubscribers past the holder's
// bounds, and ErrHubClosed after Close.
func (h *Hub) Subscribe(f StreamFilter) (*Subscription, error) {
	s := &Subscription{hub: h, ch: make(chan *StreamEvent, h.buffer), hostname: f.Hostname, allow: f.Allow, holder: f.Holder}
	for _, t := range f.Types {
		s.types |= typeBit(t)
	}
	if s.types == 0 {
		s.types = ^uint8(0)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrHubClosed
	}
	old := *h.subs.Load()
	if err := h.admitLocked(len(old), f.Holder); err != nil {
		return nil, err
	}
	next := make([]*Subscription, len(old), len(old)+1)
	copy(next, old)
	next = append(next, s)
	if s.wantsAccess() {
		s.cursor = accessCursor{next: h.access.next.Load(), tokens: accessBurst, last: time.Now()}
		h.accessSubs.Add(1)
	}
	h.subs.Store(&next)
	h.n.Store(int32(len(next)))
	h.countLocked(f.Holder, 1)
	return s, nil
}

// admitLocked reports whether holder may take one more subscription
// while n are held.
func (h *Hub) admitLocked(n int, holder StreamHolder) error {
	limit := h.max
	if !holder.Master && holder.Credential != "" && h.max >= 2 {
		limit -= masterReserve
	}
	switch {
	case n >= limit:
		return ErrTooManySubscribers
	case holder.Master:
		return nil
	case holder.Credential != "" && h.credSubs[holder.Credential] >= h.perCred:
		return fmt.Errorf("%w: %s holds %d", ErrCredentialSubscribers, holder.Credential, h.perCred)
	case holder.OrgID != "" && h.orgSubs[holder.OrgID] >= h.perOrg:
		return fmt.Errorf("%w: %s holds %d", ErrOrgSubscribers, holder.OrgID, h.perOrg)
	}
	return nil
}

// countLocked adds d to holder's counts.
func (h *Hub) countLocked(holder StreamHolder, d int) {
	if holder.Master {
		return
	}
	addCount(h.credSubs, holder.Credential, d)
	addCount(h.orgSubs, holder.OrgID, d)
}

// addCount adds d to m[k], keeping only positive counts; "" is not
// counted.
func addCount(m map[string]int, k string, d int) {
	if k == "" {
		return
	}
	if m[k] += d; m[k] <= 0 {
		delete(m, k)
	}
}

func (h *Hub) remove(s *Subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	old := *h.subs.Load()
	next := make([]*Subscription, 0, len(old))
	for _, x := range old {
		switch {
		case x != s:
			next = append(next, x)
		default:
			if s.wantsAccess() {
				h.accessSubs.Add(-1)
			}
			h.countLocked(s.holder, -1)
		}
	}
	h.subs.Store(&next)
	h.n.Store(int32(len(next)))
}

// typeBit is an event type's bit in a subscription's mask; 0 for a type
// nobody publishes.
func typeBit(t string) uint8 {
	switch t {
	case apitype.StreamAccess:
		return 1
	case apitype.StreamScaling:
		return 2
	case apitype.StreamClient:
		return 4
	}
	return 0
}

// Publish offers e to every subscriber whose filter keeps it, without
// waiting: a full buffer drops it.
func (h *Hub) Publish(e *StreamEvent) {
	if !h.Active() {
		return
	}
	bit := typeBit(e.Type)
	for _, s := range *h.subs.Load() {
		if s.types&bit == 0 || !s.keeps(e) || s.allow != nil && !s.allow(e) {
			continue
		}
		select {
		case s.ch <- e:
		default:
			s.dropped.Add(1)
			h.dropped.Add(1)
		}
	}
}

// Emit encodes v as the JSON of an event of type typ on host (and hosts,
// for a client event of organization org) and publishes it; it does
// nothing, not even the encoding, with no subscriber.
func (h *Hub) Emit(typ, host string, hosts []string, org string, v any) {
	if !h.Active() {
		return
	}
	data, err := json.Marshal(v)
	if err != nil {
		return // the wire types always encode
	}
	h.Publish(&StreamEvent{Type: typ, Hostname: host, Hostnames: hosts, OrgID: org, Data: data})
}

// Subscription is one subscriber of a Hub. C, Dropped and Close are safe
// for concurrent use.
type Subscription struct {
	hub      *Hub
	ch       chan *StreamEvent
	types    uint8
	hostname string
	allow    func(*StreamEvent) bool
	holder   StreamHolder
	dropped  atomic.Int64
	sampled  atomic.Int64
	once     sync.Once
	cursor   accessCursor // ReadAccess's, on the subscriber's goroutine
}

func (s *Subscription) wantsAccess() bool { return s.types&typeBit(apitype.StreamAccess) != 0 }

func (s *Subscription) keeps(e *StreamEvent) bool {
	if s.hostname == "" || e.Hostname == s.hostname {
		return true
	}
	for _, h := range e.Hostnames {
		if h == s.hostname {
			return true
		}
	}
	return false
}

// C delivers the subscriber's events. It is never closed: read it until
// Done closes or the subscriber leaves.
func (s *Subscription) C() <-chan *StreamEvent { return s.ch }

// Done is closed when the hub closes.
func (s *Subscription) Done() <-chan struct{} { return s.hub.done }

// TakeDropped returns the events dropped since its last call, and resets
// the count.
func (s *Subscription) TakeDropped() int64 { return s.dropped.Swap(0) }

// Close removes the subscriber; events already buffered are let go. It is
// idempotent.
func (s *Subscription) Close() { s.once.Do(func() { s.hub.remove(s) }) }

// StreamWriteTimeout is the default time a stream writer gives one write
// to a subscriber before it gives up on it.
const StreamWriteTimeout = 10 * time.Second
