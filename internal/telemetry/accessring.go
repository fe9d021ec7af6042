package telemetry

import (
	"encoding/json"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// Access events take another road than the stream's other events. They
// come once per request, at the request rate, so the request path only
// copies a record into a ring shared by every subscriber: no encoding,
// no allocation, no channel send and, while the subscribers' writers are
// between writes, no wake-up either. Each subscriber's writer reads the
// ring at its own pace, encodes what it sends (each record once, the
// encoding shared with the other subscribers) and sends at most
// MaxAccessRate events a second: above that, the newest records are sent
// and the others counted as sampled out. A person watching a live tail
// cannot read more, and the stream's cost stays flat however busy the
// server is.

// The access ring's bounds.
const (
	// accessRingSize is the records the ring holds (a power of two): a
	// subscriber that falls further behind loses the oldest ones, counted
	// as dropped.
	accessRingSize = 1024
	// MaxAccessRate is the access events a second one subscriber is sent
	// at most, in bursts of up to a quarter of it.
	MaxAccessRate = apitype.StreamMaxAccessRate
	accessBurst   = MaxAccessRate / 4
)

// accessRecord is one request, as an access event tells it.
type accessRecord struct {
	at                     time.Time
	hostname, method, path string
	requestID, limit       string
	client                 string
	status                 int
	duration, queue, hold  time.Duration
}

// accessSlot is one record of the ring. seq is the record's sequence
// number plus one (0: never written), stored after the record under mu, so
// that a reader may check it without the lock; data is the record's JSON,
// encoded by the first subscriber that sends it.
type accessSlot struct {
	mu   sync.Mutex
	seq  atomic.Uint64
	rec  accessRecord
	data []byte
}

// accessRing is the ring of the latest requests, written by the request
// path and read by every subscriber that wants access events.
type accessRing struct {
	next  atomic.Uint64 // the sequence number of the next record
	slots [accessRingSize]accessSlot

	// Subscribers waiting for a record register in waiters and wait for
	// wake to close; the writer that sees one closes it.
	waiters atomic.Int32
	wakeMu  sync.Mutex
	wake    chan struct{}
}

func newAccessRing() *accessRing { return &accessRing{wake: make(chan struct{})} }

// put adds a record and wakes the subscribers waiting for one.
func (a *accessRing) put(rec *accessRecord) {
	seq := a.next.Add(1) - 1
	s := &a.slots[seq%accessRingSize]
	s.mu.Lock()
	// A writer preempted for a whole lap of the ring finds its slot
	// taken by a newer record; its own is lost, and readers count it.
	if s.seq.Load() < seq+1 {
		s.rec, s.data = *rec, nil
		s.seq.Store(seq + 1)
	}
	s.mu.Unlock()
	if a.waiters.Load() > 0 {
		a.wakeMu.Lock()
		if a.waiters.Load() > 0 {
			close(a.wake)
			a.wake = make(chan struct{})
			a.waiters.Store(0)
		}
		a.wakeMu.Unlock()
	}
}

// ready reports whether the record numbered seq, or a newer one in its
// slot, has been written.
func (a *accessRing) ready(seq uint64) bool {
	return a.slots[seq%accessRingSize].seq.Load() >= seq+1
}

// waitChan returns a channel that is closed once the record numbered seq
// may be read: at once when it already may.
func (a *accessRing) waitChan(seq uint64) <-chan struct{} {
	a.wakeMu.Lock()
	ch := a.wake
	a.waiters.Add(1)
	a.wakeMu.Unlock()
	// Registered first, checked second: a writer that completes the
	// record after this check sees the registration and closes ch.
	if a.ready(seq) {
		return closedChan
	}
	return ch
}

var closedChan = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// read copies the record numbered seq; ok is false when the slot holds a
// newer record (seq was lapped) or none yet.
func (a *accessRing) read(seq uint64, rec *accessRecord) (ok bool) {
	s := &a.slots[seq%accessRingSize]
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seq.Load() != seq+1 {
		return false
	}
	*rec = s.rec
	return true
}

// encoded returns the JSON of the record numbered seq, encoding it when
// no subscriber has; ok is false once the record was overwritten.
func (a *accessRing) encoded(seq uint64) (data []byte, ok bool) {
	s := &a.slots[seq%accessRingSize]
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seq.Load() != seq+1 {
		return nil, false
	}
	if s.data == nil {
		s.data = s.rec.encode()
	}
	return s.data, true
}

func (r *accessRecord) encode() []byte {
	ev := apitype.StreamAccessEvent{
		At:          r.at,
		Hostname:    r.hostname,
		Method:      r.method,
		Path:        r.path,
		Status:      r.status,
		DurationMS:  millis(r.duration),
		QueueWaitMS: millis(r.queue),
		HoldMS:      millis(r.hold),
		Limit:       r.limit,
		Client:      r.client,
		RequestID:   r.requestID,
	}
	data, err := json.Marshal(ev)
	if err != nil {
		return []byte("{}") // the wire type always encodes
	}
	return data
}

// publishAccess puts rec, a request r that ended, in the access ring.
func (h *Hub) publishAccess(r *http.Request, rec *Request) {
	if h.accessSubs.Load() == 0 {
		return
	}
	ar := accessRecord{
		at:       rec.Start.Add(rec.Duration).UTC(),
		hostname: rec.Hostname,
		method:   r.Method,
		path:     r.URL.Path,
		status:   rec.Status,
		duration: rec.Duration,
		queue:    rec.QueueWait,
		hold:     rec.Hold,
		limit:    rec.Limit,
		client:   rec.ClientID,
	}
	if id := r.Header["X-Request-Id"]; len(id) == 1 {
		ar.requestID = id[0]
	}
	h.access.put(&ar)
}

// accessCursor is one subscriber's place in the ring and its send budget.
type accessCursor struct {
	next   uint64    // the next record to read
	tokens float64   // events it may send now
	last   time.Time // when tokens were last refilled
}

// AccessReady returns a channel that is closed once an access event may be
// read with ReadAccess; nil (never ready) when the subscriber did not ask
// for access events. Ask again after each read.
func (s *Subscription) AccessReady() <-chan struct{} {
	if !s.wantsAccess() {
		return nil
	}
	return s.hub.access.waitChan(s.cursor.next)
}

// ReadAccess calls send with each access event waiting for the subscriber,
// oldest first, up to limit of them, and returns how many it sent; it stops
// at send's first error and returns it. Records the subscriber's filter does not keep are skipped;
// those the ring lost before the subscriber read them are added to
// TakeDropped, and those past MaxAccessRate to TakeSampled. It must not be
// called concurrently for one subscription.
func (s *Subscription) ReadAccess(limit int, send func(data []byte) error) (sent int, err error) {
	a, c := s.hub.access, &s.cursor
	end := a.next.Load()
	if lost := int64(end - c.next - accessRingSize); end-c.next > accessRingSize {
		s.dropped.Add(lost)
		s.hub.dropped.Add(lost)
		c.next = end - accessRingSize
	}
	now := time.Now()
	c.tokens = min(c.tokens+now.Sub(c.last).Seconds()*MaxAccessRate, accessBurst)
	c.last = now
	var rec accessRecord
	for ; c.next < end && sent < limit; c.next++ {
		if !a.ready(c.next) {
			return sent, nil // its writer has not finished it: next time
		}
		if !a.read(c.next, &rec) {
			s.dropped.Add(1)
			s.hub.dropped.Add(1)
			continue
		}
		if !s.keepsAccess(&rec) {
			continue
		}
		if c.tokens < 1 {
			s.sampled.Add(1)
			continue
		}
		data, ok := a.encoded(c.next)
		if !ok {
			s.dropped.Add(1)
			s.hub.dropped.Add(1)
			continue
		}
		c.tokens--
		sent++
		if err := send(data); err != nil {
			c.next++
			return sent, err
		}
	}
	return sent, nil
}

// AccessPending reports whether records wait that ReadAccess has not read.
func (s *Subscription) AccessPending() bool {
	return s.wantsAccess() && s.hub.access.next.Load() > s.cursor.next
}

// keepsAccess applies the subscriber's hostname filter and scope to rec.
func (s *Subscription) keepsAccess(rec *accessRecord) bool {
	if s.hostname != "" && rec.hostname != s.hostname {
		return false
	}
	return s.allow == nil || s.allow(&StreamEvent{Type: apitype.StreamAccess, Hostname: rec.hostname})
}

// TakeSampled returns the access events left out by MaxAccessRate since the
// last call, and resets the count.
func (s *Subscription) TakeSampled() int64 { return s.sampled.Swap(0) }
