package telemetry

import (
	"context"
	"encoding/json"
	"errors"
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
)

const metricStreamDropped = "aperio.stream.dropped"

// Hub errors.
var (
	// ErrTooManySubscribers is Subscribe's answer past MaxSubscribers.
	ErrTooManySubscribers = errors.New("telemetry: too many stream subscribers")
	// ErrHubClosed is Subscribe's answer once the hub is closed.
	ErrHubClosed = errors.New("telemetry: stream hub closed")
)

// HubConfig configures a Hub. The zero value takes the defaults.
type HubConfig struct {
	// MaxSubscribers bounds the subscribers at once; 0 means
	// DefaultMaxStreamSubscribers.
	MaxSubscribers int
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
}

// Hub fans the live stream's events out to subscribers: each has a bounded
// buffer, and a publisher never waits for one. A full buffer drops the
// event and counts it, per subscriber (told to it as a "dropped" event)
// and in aperio_stream_dropped_total. With no subscriber, Active is one
// atomic load, and publishers build nothing. It is safe for concurrent use.
type Hub struct {
	max, buffer int
	n           atomic.Int32                    // subscribers
	subs        atomic.Pointer[[]*Subscription] // immutable, copied on change
	mu          sync.Mutex                      // serializes subs' changes and closing
	closed      bool
	done        chan struct{}
	dropped     atomic.Int64
	access      *accessRing
	accessSubs  atomic.Int32 // subscribers that want access events
}

// NewHub returns a hub with no subscriber.
func NewHub(cfg HubConfig) (*Hub, error) {
	h := &Hub{max: cfg.MaxSubscribers, buffer: cfg.Buffer, done: make(chan struct{}), access: newAccessRing()}
	if h.max <= 0 {
		h.max = DefaultMaxStreamSubscribers
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
// ErrTooManySubscribers past the bound and ErrHubClosed after Close.
func (h *Hub) Subscribe(f StreamFilter) (*Subscription, error) {
	s := &Subscription{hub: h, ch: make(chan *StreamEvent, h.buffer), hostname: f.Hostname, allow: f.Allow}
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
	if len(old) >= h.max {
		return nil, ErrTooManySubscribers
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
	return s, nil
}

func (h *Hub) remove(s *Subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	old := *h.subs.Load()
	next := make([]*Subscription, 0, len(old))
	for _, x := range old {
		if x != s {
			next = append(next, x)
		} else if s.wantsAccess() {
			h.accessSubs.Add(-1)
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
