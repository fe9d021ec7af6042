package router

import (
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// Pacing: a visitor may not hold a global slot, a client's permit and a
// tunnel stream while it neither reads its response nor sends its body.
// Each direction of an exchange has a visitorClock that runs only while
// the exchange is blocked on the visitor (inside a write to it or a read
// from its body), so a quiet backend (SSE, gRPC streams) never counts
// against the visitor. Two rules end the request:
//
//   - no progress: one write or read blocks for VisitorIdleTimeout;
//   - too slow: once the exchange has waited on the visitor for
//     VisitorIdleTimeout in total, the bytes moved divided by that waiting
//     time fall below VisitorMinRate.
//
// Ending means expiring the connection's (HTTP/2: the stream's) deadline
// in that direction, so the blocked call returns at once, the response is
// cut off rather than completed, and the connection is not reused.

// minRateGrace is the waiting time after which the rate is judged when
// VisitorIdleTimeout is zero (no idle rule) but a rate is set.
const minRateGrace = 30 * time.Second

var (
	// errVisitorIdle: a read from or write to the visitor made no progress
	// for VisitorIdleTimeout.
	errVisitorIdle = errors.New("router: visitor made no progress within visitor_idle_timeout")
	// errVisitorSlow: the visitor moved fewer than VisitorMinRate bytes per
	// second of waiting.
	errVisitorSlow = errors.New("router: visitor slower than visitor_min_bytes_per_second")
)

// longAgo is a deadline in the past: setting it fails the blocked call.
var longAgo = time.Unix(1, 0)

// An expirer ends one direction of an exchange by setting its deadline
// in the past. The paced writer and body are their own expirers, so that
// pacing a request allocates nothing beside them.
type expirer interface{ expire() }

// visitorClock judges one direction of one exchange. Its methods are
// called by the one goroutine doing that direction's I/O; only fire runs
// on a timer's goroutine. It lives inside what it paces and is set up in
// place by init.
type visitorClock struct {
	idle    time.Duration
	minRate float64 // bytes per second; 0 means no rate rule
	grace   time.Duration
	ends    expirer

	timer   *time.Timer // nil until the first call; nil forever without idle
	waited  time.Duration
	moved   int64
	tripped atomic.Bool
}

// init sets the clock up with its rules and what ends the direction, and
// reports whether pacing is on: false when neither rule is set, and then
// the clock must not be used.
func (c *visitorClock) init(idle time.Duration, minRate int64, ends expirer) bool {
	if idle <= 0 && minRate <= 0 {
		return false
	}
	grace := idle
	if grace <= 0 {
		grace = minRateGrace
	}
	c.idle, c.minRate, c.grace, c.ends = idle, float64(minRate), grace, ends
	return true
}

// begin starts the wait of one call and returns its start time.
func (c *visitorClock) begin() time.Time {
	if c.idle > 0 {
		if c.timer == nil {
			c.timer = time.AfterFunc(c.idle, c.fire)
		} else {
			c.timer.Reset(c.idle)
		}
	}
	return time.Now()
}

// end stops the wait of one call that moved n bytes, and returns the rule
// the visitor broke, if any.
func (c *visitorClock) end(start time.Time, n int) error {
	if c.timer != nil {
		c.timer.Stop()
	}
	c.waited += time.Since(start)
	c.moved += int64(n)
	if c.tripped.Load() {
		return errVisitorIdle
	}
	if c.minRate > 0 && c.waited > c.grace && float64(c.moved)/c.waited.Seconds() < c.minRate {
		c.fire()
		return errVisitorSlow
	}
	return nil
}

// fire ends the exchange in this direction.
func (c *visitorClock) fire() {
	c.tripped.Store(true)
	c.ends.expire()
}

// stop releases the timer; the clock is not used afterwards.
func (c *visitorClock) stop() {
	if c.timer != nil {
		c.timer.Stop()
	}
}

// visitorBodyError is the error of a read from a visitor's request body:
// malformed framing, a visitor that left mid-body, or one that broke a
// pacing rule. It is the visitor's fault: 400, or 408 when too slow.
type visitorBodyError struct{ err error }

func (e *visitorBodyError) Error() string { return "visitor request body: " + e.err.Error() }
func (e *visitorBodyError) Unwrap() error { return e.err }

// slow reports whether the visitor broke a pacing rule.
func (e *visitorBodyError) slow() bool {
	return errors.Is(e.err, errVisitorIdle) || errors.Is(e.err, errVisitorSlow)
}

// visitorBody paces reads of a visitor's request body and marks every
// read error as the visitor's. Once the response head has arrived, a body
// of unknown length is a stream (gRPC, long uploads the backend answers
// early) whose quiet spells are legitimate, and pacing stops.
type visitorBody struct {
	io.ReadCloser
	ctl     http.ResponseController
	clock   *visitorClock // nil: not paced; else &own
	own     visitorClock
	stream  bool        // length unknown
	relaxed atomic.Bool // set when the response head arrived
	eof     bool
	failed  atomic.Pointer[visitorBodyError] // the first read error, the visitor's
}

// paceBody wraps a visitor's request body rc of declared length (-1:
// unknown) with the read rules.
func (rt *Router) paceBody(set *settings, w http.ResponseWriter, rc io.ReadCloser, length int64) *visitorBody {
	b := &visitorBody{ReadCloser: rc, ctl: *http.NewResponseController(w), stream: length < 0}
	if b.own.init(set.cfg.VisitorIdleTimeout, set.cfg.VisitorMinRate, b) {
		b.clock = &b.own
	}
	return b
}

// expire fails the blocked read from the visitor.
func (b *visitorBody) expire() { b.ctl.SetReadDeadline(longAgo) }

func (b *visitorBody) Read(p []byte) (int, error) {
	if b.clock == nil || b.eof || (b.stream && b.relaxed.Load()) {
		n, err := b.ReadCloser.Read(p)
		return n, b.wrap(err)
	}
	start := b.clock.begin()
	n, err := b.ReadCloser.Read(p)
	if perr := b.clock.end(start, n); perr != nil {
		return n, b.fail(perr)
	}
	return n, b.wrap(err)
}

func (b *visitorBody) wrap(err error) error {
	if err == nil {
		return nil
	}
	if err == io.EOF {
		// net/http clears the connection's read deadline when the body ends;
		// nothing here may set it again.
		b.eof = true
		return err
	}
	return b.fail(err)
}

// fail records err as the body's first failure and returns it wrapped.
func (b *visitorBody) fail(err error) error {
	e := &visitorBodyError{err}
	b.failed.CompareAndSwap(nil, e)
	return e
}

// bodyFailure returns the first error reading r's visitor body, or nil. A
// failed read of the visitor's connection also cancels the request's
// context, and the exchange may report that cancellation first; the body's
// own error is the cause to answer (408 for a visitor too slow, not a
// silent end as if the visitor had left).
func bodyFailure(r *http.Request) error {
	cb, ok := r.Body.(*countingBody)
	if !ok {
		return nil
	}
	vb, ok := cb.ReadCloser.(*visitorBody)
	if !ok {
		return nil
	}
	if e := vb.failed.Load(); e != nil {
		return e
	}
	return nil
}

// Close stops the clock.
func (b *visitorBody) Close() error {
	if b.clock != nil {
		b.clock.stop()
	}
	return b.ReadCloser.Close()
}

// responseStarted tells body, if it is paced, that the response head
// arrived.
func responseStarted(body *countingBody) {
	if body == nil {
		return
	}
	if vb, ok := body.ReadCloser.(*visitorBody); ok {
		vb.relaxed.Store(true)
	}
}

// pacedWriter is the visitor's ResponseWriter with the write rules: each
// Write and Flush is judged by its clock.
type pacedWriter struct {
	http.ResponseWriter
	ctl   http.ResponseController
	clock *visitorClock // nil: not paced; else &own
	own   visitorClock
	err   error // the first rule broken; later calls fail with it
}

// paceResponse returns w with the write rules, or w itself when pacing is
// off. The caller calls finish on the result when the body is written.
func (rt *Router) paceResponse(set *settings, w http.ResponseWriter) *pacedWriter {
	pw := &pacedWriter{ResponseWriter: w, ctl: *http.NewResponseController(w)}
	if pw.own.init(set.cfg.VisitorIdleTimeout, set.cfg.VisitorMinRate, pw) {
		pw.clock = &pw.own
	}
	return pw
}

// expire fails the blocked write to the visitor.
func (w *pacedWriter) expire() { w.ctl.SetWriteDeadline(longAgo) }

func (w *pacedWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if w.clock == nil {
		return w.ResponseWriter.Write(p)
	}
	start := w.clock.begin()
	n, err := w.ResponseWriter.Write(p)
	if perr := w.clock.end(start, n); perr != nil {
		w.err = perr
		return n, perr
	}
	return n, err
}

func (w *pacedWriter) Flush() {
	if w.err != nil {
		return
	}
	if w.clock == nil {
		w.ctl.Flush()
		return
	}
	start := w.clock.begin()
	w.ctl.Flush()
	if perr := w.clock.end(start, 0); perr != nil {
		w.err = perr
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (w *pacedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// finish pushes what the server buffered to the visitor under the rules,
// so that a visitor that stopped reading cannot hold the connection's
// goroutine after the handler returns, and stops the clock.
func (w *pacedWriter) finish() {
	if w.clock == nil {
		return
	}
	w.Flush()
	w.clock.stop()
}
