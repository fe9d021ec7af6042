package inspect

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// Recording is one request on its way through a capture: its body is
// teed as it is read, its answer through the writer Begin returned. The
// router marks the dispatch (Dispatched) and a refusal (Fail), and ends
// it with Finish. Its methods are safe for concurrent use.
type Recording struct {
	c       *Capture
	e       *apitype.InspectEntry
	start   time.Time
	reqBody *bodyBuf
	resp    bodyBuf
	mark    *ReplayMark

	mu       sync.Mutex // guards the following fields
	status   int
	head     bool // the response head was recorded
	headAt   time.Duration
	dispatch time.Duration
	sent     bool // dispatch is set
	err      string
	done     bool
}

// Begin starts recording r, received at start (the zero time: now), and
// returns the writer the request must be answered through. It replaces
// r.Body by a tee that keeps the capture's share of it as the body is
// read, and changes nothing else of r. https says how the visitor came.
// It returns nil and w when the capture ended meanwhile.
func (c *Capture) Begin(w http.ResponseWriter, r *http.Request, start time.Time, https bool) (*Recording, http.ResponseWriter) {
	now := c.in.now()
	if !c.recording(now) {
		return nil, w
	}
	if start.IsZero() {
		start = now
	}
	scheme := "http"
	if https {
		scheme = "https"
	}
	e := &apitype.InspectEntry{
		ID: c.in.nextID(), At: start, Method: r.Method, URL: r.URL.RequestURI(), Scheme: scheme, Proto: r.Proto,
	}
	if id := r.Header["X-Request-Id"]; len(id) > 0 {
		e.RequestID = id[0]
	}
	e.Request.Header, e.Request.HeadersTruncated = c.copyHeader(r.Header)
	rc := &Recording{c: c, e: e, start: start, reqBody: &bodyBuf{limit: c.bodyBytes}}
	rc.resp.limit = c.bodyBytes
	if m, ok := r.Context().Value(replayKey{}).(*ReplayMark); ok {
		e.ReplayOf = m.of
		rc.mark = m
	}
	if r.Body == nil || r.Body == http.NoBody {
		rc.reqBody.complete = true
	} else {
		r.Body = &teeBody{ReadCloser: r.Body, buf: rc.reqBody}
	}
	return rc, &writer{ResponseWriter: w, rc: rc}
}

// RecordingOf returns the Recording w answers for, if w is a capture's
// writer; nil otherwise.
func RecordingOf(w http.ResponseWriter) *Recording {
	if cw, ok := w.(*writer); ok {
		return cw.rc
	}
	return nil
}

// Dispatched marks the moment the request is sent to a client.
func (rc *Recording) Dispatched() {
	if rc == nil {
		return
	}
	d := rc.c.in.now().Sub(rc.start)
	rc.mu.Lock()
	rc.dispatch, rc.sent = d, true
	rc.mu.Unlock()
}

// Fail records why the server answered itself (a refusal, a failed
// exchange); the first reason is kept.
func (rc *Recording) Fail(reason string) {
	if rc == nil {
		return
	}
	rc.mu.Lock()
	if rc.err == "" {
		rc.err = reason
	}
	rc.mu.Unlock()
}

// Finish ends the recording with what the router measured: the time the
// request waited in a queue and was held for a cold start, and the
// client that served it; and puts the entry in the capture's ring. Calls
// after the first do nothing.
func (rc *Recording) Finish(queueWait, hold time.Duration, clientID string) {
	if rc == nil {
		return
	}
	done := rc.c.in.now().Sub(rc.start)
	rc.mu.Lock()
	if rc.done {
		rc.mu.Unlock()
		return
	}
	rc.done = true
	e := rc.e
	e.ClientID, e.Error = clientID, rc.err
	e.Response.Status = rc.status
	e.Timeline = apitype.InspectTimeline{Received: rc.start, QueueWaitMS: millis(queueWait), HoldMS: millis(hold), DoneMS: millis(done)}
	if rc.sent {
		v := millis(rc.dispatch)
		e.Timeline.DispatchMS = &v
	}
	if rc.head {
		v := millis(rc.headAt)
		e.Timeline.ResponseHeadMS = &v
	}
	rc.mu.Unlock()
	rc.resp.end() // what reached the visitor is the response body
	e.Request.Body, e.Request.BodySize, e.Request.BodyTruncated = rc.reqBody.result()
	e.Response.Body, e.Response.BodySize, e.Response.BodyTruncated = rc.resp.result()
	if e.Response.Header == nil {
		e.Response.Header = map[string][]string{}
	}
	if rc.c.add(e) && rc.mark != nil {
		rc.mark.set(e.ID)
	}
}

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// head records the response's status and head, once.
func (rc *Recording) recordHead(status int, h http.Header) {
	d := rc.c.in.now().Sub(rc.start)
	hdr, trunc := rc.c.copyHeader(h)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.head || rc.done {
		return // the entry may be published already: it is not written again
	}
	rc.head, rc.status, rc.headAt = true, status, d
	rc.e.Response.Header, rc.e.Response.HeadersTruncated = hdr, trunc
}

// copyHeader copies h with the capture's redacted headers' values
// replaced by Redacted, keeping at most MaxHeadBytes of names and values;
// it reports whether some were left out.
func (c *Capture) copyHeader(h http.Header) (map[string][]string, bool) {
	out := make(map[string][]string, len(h))
	n, truncated := 0, false
	for k, vv := range h {
		for _, v := range vv {
			if c.redact[http.CanonicalHeaderKey(k)] {
				v = Redacted
			}
			if n+len(k)+len(v) > MaxHeadBytes {
				truncated = true
				continue
			}
			n += len(k) + len(v)
			out[k] = append(out[k], v)
		}
	}
	return out, truncated
}

// bodyBuf keeps the first limit bytes of a body and counts the rest.
type bodyBuf struct {
	limit int

	mu       sync.Mutex // guards the following fields
	data     []byte
	size     int64
	complete bool
	frozen   bool // result was taken: bytes read later (a body still copied after the answer) are not counted
}

func (b *bodyBuf) add(p []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.frozen {
		return
	}
	if room := b.limit - len(b.data); room > 0 {
		b.data = append(b.data, p[:min(room, len(p))]...)
	}
	b.size += int64(len(p))
}

func (b *bodyBuf) end() {
	b.mu.Lock()
	b.complete = true
	b.mu.Unlock()
}

func (b *bodyBuf) result() ([]byte, int64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.frozen = true
	data := b.data
	if data == nil {
		data = []byte{}
	}
	return data, b.size, !b.complete || b.size > int64(len(b.data))
}

// teeBody keeps the capture's share of a request body as it is read: the
// reader upstream sees the same bytes at the same pace.
type teeBody struct {
	io.ReadCloser
	buf *bodyBuf
}

func (t *teeBody) Read(p []byte) (int, error) {
	n, err := t.ReadCloser.Read(p)
	if n > 0 {
		t.buf.add(p[:n])
	}
	if err == io.EOF {
		t.buf.end()
	}
	return n, err
}

// writer records the answer's status, head and first body bytes on its
// way to the visitor. It keeps Flush, Hijack and every
// http.ResponseController method working (Unwrap).
type writer struct {
	http.ResponseWriter
	rc          *Recording
	wroteHeader bool
}

func (w *writer) WriteHeader(status int) {
	if !w.wroteHeader && (status >= 200 || status == http.StatusSwitchingProtocols) {
		w.wroteHeader = true
		w.rc.recordHead(status, w.ResponseWriter.Header())
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *writer) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	n, err := w.ResponseWriter.Write(p)
	if n > 0 {
		w.rc.resp.add(p[:n])
	}
	return n, err
}

// Flush implements http.Flusher.
func (w *writer) Flush() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack implements http.Hijacker: the connection now carries a switched
// protocol, recorded as 101 with the head the writer holds.
func (w *writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil && !w.wroteHeader {
		w.wroteHeader = true
		w.rc.recordHead(http.StatusSwitchingProtocols, w.ResponseWriter.Header())
		w.rc.resp.end()
	}
	return c, brw, err
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// EndResponse marks the response body as written whole.
func (rc *Recording) EndResponse() {
	if rc != nil {
		rc.resp.end()
	}
}

func textOf(b []byte) *string {
	if !utf8.Valid(b) {
		return nil
	}
	s := string(b)
	return &s
}

type replayKey struct{}

// ReplayMark ties a replayed request to the entry it replays and, once
// recorded, to the entry it made.
type ReplayMark struct {
	of string

	mu sync.Mutex // guards id
	id string
}

// WithReplay returns ctx marking its request as a replay of entry of: the
// capture records it with replay_of, and m.ID reports its entry's id.
// The mark is in the context, which visitors cannot set, rather than in
// a header.
func WithReplay(ctx context.Context, of string) (context.Context, *ReplayMark) {
	m := &ReplayMark{of: of}
	return context.WithValue(ctx, replayKey{}, m), m
}

func (m *ReplayMark) set(id string) {
	m.mu.Lock()
	m.id = id
	m.mu.Unlock()
}

// ID returns the id of the entry the replay made; "" when none was
// recorded (the capture ended).
func (m *ReplayMark) ID() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.id
}
