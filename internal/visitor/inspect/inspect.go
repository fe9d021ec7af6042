package inspect

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// Bounds and defaults of a capture.
const (
	DefaultDuration    = 600 * time.Second
	MaxDuration        = 3600 * time.Second
	DefaultMaxRequests = 100
	MaxMaxRequests     = 1000
	DefaultBodyBytes   = 16 << 10
	MaxBodyBytes       = 64 << 10
	// MaxHeadBytes bounds the header bytes (names and values) kept of one
	// head; headers past it are left out and the head marked truncated.
	MaxHeadBytes = 16 << 10
	// MaxRedactHeaders bounds a capture's own redact_headers, and the
	// server's inspect_redact_headers.
	MaxRedactHeaders = 32
	// MaxCaptures is how many captures may exist at once.
	MaxCaptures = 32
	// DefaultMemoryBytes bounds the memory of all captures together.
	DefaultMemoryBytes = 64 << 20
	// EndedRetention is how long an ended capture's entries stay readable
	// before they are freed.
	EndedRetention = time.Hour
)

// Redacted replaces the value of a redacted header.
const Redacted = "[redacted]"

// alwaysRedacted are redacted in every capture: credentials and sessions.
var alwaysRedacted = []string{"Authorization", "Proxy-Authorization", "Cookie", "Set-Cookie"}

// Errors of Start; ErrTooMany and ErrNoMemory say which bound refused.
var (
	ErrTooMany  = errors.New("inspect: too many captures")
	ErrNoMemory = errors.New("inspect: not enough capture memory")
	ErrBadInput = errors.New("inspect: bad capture settings")
	ErrNoEntry  = errors.New("inspect: no such captured request")
	ErrNoReplay = errors.New("inspect: request cannot be replayed")
	ErrInactive = errors.New("inspect: no active capture")
)

// Config configures an Inspector. The zero Config is usable.
type Config struct {
	// RedactHeaders names headers redacted in every capture, beside
	// alwaysRedacted (inspect_redact_headers); at most MaxRedactHeaders.
	RedactHeaders []string
	// MemoryBytes bounds the bytes all captures may hold (bodies and
	// heads, reserved when a capture starts); 0 means DefaultMemoryBytes.
	MemoryBytes int64
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Validate reports every problem of c.
func (c Config) Validate() error {
	var errs []error
	if len(c.RedactHeaders) > MaxRedactHeaders {
		errs = append(errs, fmt.Errorf("%d headers, at most %d", len(c.RedactHeaders), MaxRedactHeaders))
	}
	for _, h := range c.RedactHeaders {
		if !validHeaderName(h) {
			errs = append(errs, fmt.Errorf("%q is not a header name", h))
		}
	}
	if c.MemoryBytes < 0 {
		errs = append(errs, fmt.Errorf("memory bound %d is negative", c.MemoryBytes))
	}
	return errors.Join(errs...)
}

// Inspector holds the captures of one server. It is safe for concurrent
// use; the zero Inspector is not: use New.
type Inspector struct {
	cfg    Config
	now    func() time.Time
	memory int64
	seq    atomic.Uint64 // entry ids

	// active is the hostnames recording now: nil when none, so that the
	// request path pays one atomic load. Swapped under mu.
	active atomic.Pointer[map[string]*Capture]

	mu       sync.Mutex // guards the following fields
	captures map[string]*Capture
	reserved int64
}

// New returns an Inspector with no capture.
func New(cfg Config) (*Inspector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	in := &Inspector{cfg: cfg, now: cfg.Now, memory: cfg.MemoryBytes, captures: map[string]*Capture{}}
	if in.now == nil {
		in.now = time.Now
	}
	if in.memory == 0 {
		in.memory = DefaultMemoryBytes
	}
	return in, nil
}

// Options are a capture's bounds, checked by Start.
type Options struct {
	apitype.InspectRequest
	// OrgID is the organization the capture belongs to; StartedBy the
	// actor that started it.
	OrgID, StartedBy string
}

// CheckRequest reports what is wrong with req, wrapping ErrBadInput.
func CheckRequest(req apitype.InspectRequest) error {
	var problems []string
	if max := int64(MaxDuration / time.Second); req.DurationSeconds < 0 || req.DurationSeconds > max {
		problems = append(problems, fmt.Sprintf("duration_seconds: %d is not from 1 to %d", req.DurationSeconds, max))
	}
	if req.MaxRequests < 0 || req.MaxRequests > MaxMaxRequests {
		problems = append(problems, fmt.Sprintf("max_requests: %d is not from 1 to %d", req.MaxRequests, MaxMaxRequests))
	}
	if req.BodyBytes < 0 || req.BodyBytes > MaxBodyBytes {
		problems = append(problems, fmt.Sprintf("body_bytes: %d is not from 1 to %d", req.BodyBytes, MaxBodyBytes))
	}
	if len(req.RedactHeaders) > MaxRedactHeaders {
		problems = append(problems, fmt.Sprintf("redact_headers: %d headers, at most %d", len(req.RedactHeaders), MaxRedactHeaders))
	} else {
		for _, h := range req.RedactHeaders {
			if !validHeaderName(h) {
				problems = append(problems, fmt.Sprintf("redact_headers: %q is not a header name", h))
				break
			}
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrBadInput, strings.Join(problems, "; "))
	}
	return nil
}

// validHeaderName reports whether s is an HTTP token of at most 128 bytes.
func validHeaderName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// reservation is the memory a capture of these bounds may hold at most:
// each entry's two bodies and two heads.
func reservation(maxRequests, bodyBytes int) int64 {
	return int64(maxRequests) * (2*int64(bodyBytes) + 2*MaxHeadBytes)
}

// Start starts capturing host's requests with o's bounds, replacing a
// capture host had (its entries are dropped). It refuses with ErrTooMany
// when MaxCaptures exist and with ErrNoMemory when the capture's
// reservation does not fit in what the others left.
func (in *Inspector) Start(host string, o Options) (apitype.InspectCapture, error) {
	if err := CheckRequest(o.InspectRequest); err != nil {
		return apitype.InspectCapture{}, err
	}
	now := in.now()
	c := &Capture{in: in, host: host, org: o.OrgID, by: o.StartedBy, started: now, stopWhenFull: o.StopWhenFull}
	d := time.Duration(o.DurationSeconds) * time.Second
	if d == 0 {
		d = DefaultDuration
	}
	c.ends = now.Add(d)
	c.max = o.MaxRequests
	if c.max == 0 {
		c.max = DefaultMaxRequests
	}
	c.bodyBytes = o.BodyBytes
	if c.bodyBytes == 0 {
		c.bodyBytes = DefaultBodyBytes
	}
	c.redactList = slices.Clone(o.RedactHeaders)
	c.redact = map[string]bool{}
	for _, h := range alwaysRedacted {
		c.redact[h] = true
	}
	for _, h := range append(slices.Clone(in.cfg.RedactHeaders), o.RedactHeaders...) {
		c.redact[http.CanonicalHeaderKey(h)] = true
	}
	c.reserved = reservation(c.max, c.bodyBytes)
	c.ring = make([]*apitype.InspectEntry, 0, min(c.max, 16))

	in.mu.Lock()
	defer in.mu.Unlock()
	in.sweepLocked(now)
	old := in.captures[host]
	held := in.reserved
	count := len(in.captures)
	if old != nil {
		held -= old.reserved
		count--
	}
	if count >= MaxCaptures {
		return apitype.InspectCapture{}, fmt.Errorf("%w: %d captures exist, at most %d: delete one first", ErrTooMany, count, MaxCaptures)
	}
	if held+c.reserved > in.memory {
		return apitype.InspectCapture{}, fmt.Errorf("%w: the capture needs %d bytes (max_requests × (2 × body_bytes + 2 × %d)), %d of %d are free: lower max_requests or body_bytes, or delete a capture",
			ErrNoMemory, c.reserved, MaxHeadBytes, in.memory-held, in.memory)
	}
	if old != nil {
		old.stop()
	}
	in.captures[host] = c
	in.reserved = held + c.reserved
	in.publishLocked()
	return c.state(now), nil
}

// Stop ends host's capture and frees its entries; it reports whether
// there was one.
func (in *Inspector) Stop(host string) (apitype.InspectCapture, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	c := in.captures[host]
	if c == nil {
		return apitype.InspectCapture{}, false
	}
	st := c.state(in.now())
	in.removeLocked(c)
	in.publishLocked()
	return st, true
}

// Captures returns every capture, ordered by hostname.
func (in *Inspector) Captures() []apitype.InspectCapture {
	in.mu.Lock()
	defer in.mu.Unlock()
	now := in.now()
	in.sweepLocked(now)
	out := make([]apitype.InspectCapture, 0, len(in.captures))
	for _, c := range in.captures {
		out = append(out, c.state(now))
	}
	slices.SortFunc(out, func(a, b apitype.InspectCapture) int { return strings.Compare(a.Hostname, b.Hostname) })
	return out
}

// Capture returns host's capture, recording or ended; nil when none.
func (in *Inspector) Capture(host string) *Capture {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.sweepLocked(in.now())
	return in.captures[host]
}

// Lookup returns host's capture while it records, else nil. It is the
// request path's check: one atomic load while nothing is captured, and a
// map read otherwise. A nil Inspector captures nothing.
func (in *Inspector) Lookup(host string) *Capture {
	if in == nil {
		return nil
	}
	m := in.active.Load()
	if m == nil {
		return nil
	}
	return (*m)[host]
}

// sweepLocked ends the captures past their end and frees those ended
// longer than EndedRetention.
func (in *Inspector) sweepLocked(now time.Time) {
	changed := false
	for _, c := range in.captures {
		c.mu.Lock()
		if !c.ended && !now.Before(c.ends) {
			c.ended, c.endedAt = true, c.ends
			changed = true
		}
		drop := c.ended && now.Sub(c.endedAt) >= EndedRetention
		c.mu.Unlock()
		if drop {
			in.removeLocked(c)
			changed = true
		}
	}
	if changed {
		in.publishLocked()
	}
}

func (in *Inspector) removeLocked(c *Capture) {
	c.stop()
	if in.captures[c.host] == c {
		delete(in.captures, c.host)
		in.reserved -= c.reserved
	}
}

// publishLocked swaps in the snapshot of the recording captures.
func (in *Inspector) publishLocked() {
	m := make(map[string]*Capture)
	for h, c := range in.captures {
		c.mu.Lock()
		if !c.ended {
			m[h] = c
		}
		c.mu.Unlock()
	}
	if len(m) == 0 {
		in.active.Store(nil)
		return
	}
	in.active.Store(&m)
}

// ended is called by a capture that ended on its own (full, or past its
// end on the request path): it leaves the request path's snapshot.
func (in *Inspector) ended() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.publishLocked()
}

func (in *Inspector) nextID() string {
	return "req_" + strconv.FormatUint(in.seq.Add(1), 10)
}

// Capture is the capture of one hostname's requests. Its methods are safe
// for concurrent use.
type Capture struct {
	in           *Inspector
	host, org    string
	by           string
	started      time.Time
	ends         time.Time
	max          int
	bodyBytes    int
	stopWhenFull bool
	redactList   []string
	redact       map[string]bool // canonical names; read-only
	reserved     int64

	mu       sync.Mutex // guards the following fields
	ring     []*apitype.InspectEntry
	next     int // ring index of the next write once the ring is full
	captured int64
	ended    bool
	endedAt  time.Time
}

// Hostname returns the hostname the capture records.
func (c *Capture) Hostname() string { return c.host }

// OrgID returns the organization the capture belongs to.
func (c *Capture) OrgID() string { return c.org }

func (c *Capture) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ended {
		c.ended, c.endedAt = true, c.in.now()
	}
	c.ring = nil
}

func (c *Capture) state(now time.Time) apitype.InspectCapture {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := apitype.InspectRecording
	if c.ended {
		st = apitype.InspectEnded
	}
	return apitype.InspectCapture{
		Hostname: c.host, OrgID: c.org, State: st, StartedAt: c.started, EndsAt: c.ends, StartedBy: c.by,
		MaxRequests: c.max, BodyBytes: c.bodyBytes, RedactHeaders: append([]string{}, c.redactList...),
		StopWhenFull: c.stopWhenFull, Captured: c.captured, Kept: len(c.ring), ReservedBytes: c.reserved,
	}
}

// add puts e in the ring, overwriting the oldest entry when full, or
// ending the capture once full with stopWhenFull. It reports false when
// the capture ended before.
func (c *Capture) add(e *apitype.InspectEntry) bool {
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return false
	}
	if len(c.ring) < c.max {
		c.ring = append(c.ring, e)
	} else {
		c.ring[c.next] = e
		c.next = (c.next + 1) % c.max
	}
	c.captured++
	full := c.stopWhenFull && c.captured >= int64(c.max)
	if full {
		c.ended, c.endedAt = true, c.in.now()
	}
	c.mu.Unlock()
	if full {
		c.in.ended()
	}
	return true
}

// recording reports whether the capture still records at now; past its
// end it ends and leaves the request path.
func (c *Capture) recording(now time.Time) bool {
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return false
	}
	if now.Before(c.ends) {
		c.mu.Unlock()
		return true
	}
	c.ended, c.endedAt = true, c.ends
	c.mu.Unlock()
	c.in.ended()
	return false
}

// entriesLocked returns the ring's entries, newest first.
func (c *Capture) entriesLocked() []*apitype.InspectEntry {
	n := len(c.ring)
	out := make([]*apitype.InspectEntry, 0, n)
	for i := 0; i < n; i++ {
		// The newest is just before next once the ring wrapped.
		j := (c.next - 1 - i + 2*n) % n
		if n < c.max {
			j = n - 1 - i
		}
		out = append(out, c.ring[j])
	}
	return out
}

// Requests returns the summaries of the captured requests, newest first.
func (c *Capture) Requests() []apitype.InspectSummary {
	c.mu.Lock()
	es := c.entriesLocked()
	c.mu.Unlock()
	out := make([]apitype.InspectSummary, len(es))
	for i, e := range es {
		out[i] = apitype.InspectSummary{
			ID: e.ID, At: e.At, Method: e.Method, URL: e.URL, Status: e.Response.Status,
			DurationMS: e.Timeline.DoneMS, ClientID: e.ClientID, Error: e.Error, ReplayOf: e.ReplayOf,
			RequestBodySize: e.Request.BodySize, ResponseBodySize: e.Response.BodySize,
		}
	}
	return out
}

// Entry returns the captured request id in full, with its text forms
// and its curl command line; ErrNoEntry when the ring has no such entry.
func (c *Capture) Entry(id string) (apitype.InspectEntry, error) {
	e, ok := c.find(id)
	if !ok {
		return apitype.InspectEntry{}, ErrNoEntry
	}
	out := *e
	out.Request.Text = textOf(out.Request.Body)
	out.Response.Text = textOf(out.Response.Body)
	out.Curl = c.curl(e)
	return out, nil
}

func (c *Capture) find(id string) (*apitype.InspectEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.ring {
		if e.ID == id {
			return e, true
		}
	}
	return nil, false
}
