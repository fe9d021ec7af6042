package tunnel

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aperio-dev/aperio/internal/bufpool"
	"github.com/aperio-dev/aperio/internal/recovery"
	"github.com/hashicorp/yamux"
)

// serveOne answers one request read from a data stream and reports whether
// the stream can carry the next one.
func (c *Client) serveOne(ctx context.Context, st *yamux.Stream, br *bufio.Reader, w *abandonWatch, req *http.Request) bool {
	// The request counts as in flight until its response is written, not
	// while the stream then waits for its next request: a pooled stream
	// can wait indefinitely, and counting it would hold every drain until
	// drain_timeout and keep idle_timeout from ever firing.
	c.active.Add(1)
	counted := true
	defer func() {
		if counted {
			c.active.Add(-1)
		}
	}()

	service := req.Header.Get(ServiceHeader)
	delete(req.Header, ServiceHeader)
	upgrade := IsUpgrade(req.Header)
	hasBody := req.Body != http.NoBody

	rctx, cancelCause := context.WithCancelCause(ctx)
	defer cancelCause(nil)
	started := time.Now()
	// An abandoned request ends here at once: its backend request is
	// cancelled, and a response write blocked on the stream's full window
	// fails now. The server's close is a half-close, so without the
	// deadline that write would wait out the stream's close timeout
	// (30 s), the request in flight and the backend's answer open.
	abandoned := func() {
		cancelCause(c.abandonCause(time.Since(started)))
		st.SetWriteDeadline(time.Now())
	}
	var body *requestBody
	if hasBody {
		body = &requestBody{r: req.Body, closed: make(chan struct{}), eof: make(chan struct{}), failed: abandoned}
		req.Body = body
	}
	// Once the request (and its body, if any) has been read, the server
	// sends nothing on the stream until the response is complete; reading
	// EOF (or anything) early means it abandoned the request. Before the
	// body's end, a failing body read tells the same; after it, only w's
	// watch does (a POST whose backend is slow to answer, a gRPC stream),
	// for a request still running after abandonWatchDelay.
	if !upgrade {
		w.arm(rctx, body, abandoned)
	}
	req = req.WithContext(rctx)
	resp, err := c.cfg.Forwarder.Forward(rctx, service, req)
	if err != nil {
		if rctx.Err() != nil {
			w.disarm()
			return false // the server abandoned it; nobody reads an answer
		}
		// Visitors see a generic text: the error names internal addresses.
		c.backendWarn.warn(service, err)
		resp = errorResponse(http.StatusBadGateway, "aperio-client: backend unreachable")
	}
	bw := getWriter(st)
	defer putWriter(bw)
	if resp.StatusCode == http.StatusSwitchingProtocols {
		w.disarm()
		return c.serveUpgrade(st, br, bw, resp)
	}
	if err := writeResponse(bw, req, resp); err != nil {
		w.disarm()
		resp.Body.Close()
		return false
	}
	resp.Body.Close()

	if hasBody {
		// Reuse needs the request body read to its end; the backend may
		// have answered without reading it. The server reuses the stream
		// only after it wrote the whole body, so what is left is bounded by
		// the stream window; if it gave up instead, the read ends in EOF.
		// The transport may still be writing the body after the response
		// arrived; it closes the body when done, and only then is it ours.
		t := time.NewTimer(time.Second)
		defer t.Stop()
		select {
		case <-body.closed:
		case <-t.C:
			w.disarm()
			return false
		}
		if _, err := bufpool.Copy(io.Discard, body); err != nil {
			w.disarm()
			return false
		}
	}
	c.active.Add(-1)
	counted = false
	if upgrade {
		// An upgrade request the backend refused: the server never reuses
		// such a stream, and nothing here watches it for the next request.
		return false
	}
	// A request answered before the watch started leaves the stream to
	// its reader, the next ReadRequest; one the watch saw through waits
	// for its verdict: the next request's first byte, or the stream's end.
	return w.disarm() || <-w.next == nil
}

// abandonWatchDelay is how long the client serves a request before it
// watches the stream for the server abandoning it. Most requests are
// answered sooner and pay no watcher: no goroutine, no hand-off to it when
// the next request arrives (#43). A request abandoned earlier has its
// backend request cancelled when the delay ends, so its cost is bounded by
// the delay; with a response timeout under about 22 ms (timeoutShare of
// it within the delay), a visitor who left early reads as a timeout
// (abandonCause).
const abandonWatchDelay = 20 * time.Millisecond

// abandonWatch notices, on one data stream, that the server abandoned the
// request in flight once its body (if any) was read: the server sends
// nothing more until the response is complete, so reading anything early
// (EOF, most often) means it gave up. serveOne arms it for each request;
// if the request is still running after abandonWatchDelay, a goroutine
// (the timer's) peeks at the stream and reports on next. Its fields are
// used by the stream's serving goroutine and, while it runs, the watch;
// the zero value is not usable, see newAbandonWatch.
type abandonWatch struct {
	c     *Client
	br    *bufio.Reader
	timer *time.Timer // runs watch; made by the first arm, reset by later ones
	// next receives the watch's verdict: nil once the next request's first
	// byte is in, or why the request or the stream ended. It has room for
	// one, and the serving goroutine takes it before it arms again.
	next chan error

	mu sync.Mutex // guards the following fields: the request armed for
	// ctx is the request's context; body its body (nil for none) and
	// abandoned what ends it when the server abandoned it.
	ctx       context.Context
	body      *requestBody
	abandoned func()
}

func newAbandonWatch(c *Client, br *bufio.Reader) *abandonWatch {
	return &abandonWatch{c: c, br: br, next: make(chan error, 1)}
}

// arm starts the delay after which the request is watched: ctx is its
// context, body its body (nil for none) and abandoned what is called if
// the server abandons it. Only the stream's serving goroutine calls it,
// after the previous request's disarm.
func (w *abandonWatch) arm(ctx context.Context, body *requestBody, abandoned func()) {
	w.mu.Lock()
	w.ctx, w.body, w.abandoned = ctx, body, abandoned
	w.mu.Unlock()
	if w.timer == nil {
		w.timer = time.AfterFunc(abandonWatchDelay, w.watch)
		return
	}
	w.timer.Reset(abandonWatchDelay)
}

// disarm stops the delay and reports whether it stopped it before the
// watch started: if it did not, the watch runs (or ran) and reports on
// next. It reports false if nothing was ever armed. A stream whose
// request ends without reuse may leave a watch running; it ends when the
// stream does.
func (w *abandonWatch) disarm() bool { return w.timer != nil && w.timer.Stop() }

// watch waits for the request body's end, then peeks at the stream: an
// error is the server abandoning the request (or the stream ending), a
// byte the next request.
func (w *abandonWatch) watch() {
	defer recovery.Recover(w.c.log, "tunnel stream peek")
	w.c.watched.Add(1)
	w.mu.Lock()
	ctx, body, abandoned := w.ctx, w.body, w.abandoned
	w.mu.Unlock()
	if body != nil {
		select {
		case <-body.eof: // the body's reader is done with br
		case <-ctx.Done():
			w.next <- ctx.Err()
			return
		}
	}
	_, err := w.br.Peek(1)
	if err != nil {
		abandoned()
	}
	w.next <- err
}

// abandonCause is why a request the server abandoned after elapsed ended:
// ErrAbandonedTimeout at timeoutShare of the server's response timeout or
// later, ErrAbandoned before it or when the server did not say.
func (c *Client) abandonCause(elapsed time.Duration) error {
	if t := time.Duration(c.responseTimeout.Load()); t > 0 && elapsed >= time.Duration(float64(t)*timeoutShare) {
		return ErrAbandonedTimeout
	}
	return ErrAbandoned
}

// writeResponse writes resp onto the stream: fixed-length bodies are
// buffered and flushed once, bodies of unknown length are chunked and
// flushed as they arrive (SSE, gRPC), with trailers after the last chunk.
func writeResponse(bw *bufio.Writer, req *http.Request, resp *http.Response) error {
	RemoveHopHeaders(resp.Header, false)
	delete(resp.Header, lengthHeader)
	hasBody := bodyAllowed(resp.StatusCode) && req.Method != http.MethodHead
	chunked := hasBody && (resp.ContentLength < 0 || sendsTrailers(resp))
	if chunked && resp.ContentLength >= 0 {
		resp.Header[lengthHeader] = []string{strconv.FormatInt(resp.ContentLength, 10)}
	}
	if err := writeResponseHead(bw, resp, chunked, bodyAllowed(resp.StatusCode)); err != nil {
		return err
	}
	if !hasBody {
		return bw.Flush()
	}
	bc := &bodyCopier{bw: bw, src: resp.Body, length: resp.ContentLength, flushEach: resp.ContentLength < 0}
	if chunked {
		bc.length = -1
		bc.trailer = func() http.Header { return resp.Trailer }
	}
	return bc.copy()
}

// serveUpgrade relays a switched protocol until either side closes. The
// stream is never reused afterwards.
func (c *Client) serveUpgrade(st *yamux.Stream, br *bufio.Reader, bw *bufio.Writer, resp *http.Response) bool {
	backend, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		resp.Body.Close()
		return false
	}
	defer backend.Close()
	if err := writeResponseHead(bw, resp, false, false); err != nil {
		return false
	}
	if err := bw.Flush(); err != nil {
		return false
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer recovery.Recover(c.log, "tunnel upgrade relay")
		bufpool.Copy(backend, br) // visitor → backend
		if cw, ok := backend.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
	}()
	bufpool.Copy(st, backend) // backend → visitor
	st.Close()
	<-done
	return false
}

// errorResponse is the answer when the backend cannot be reached. It
// carries a header so the server can tell it apart from the app's own 502.
func errorResponse(status int, msg string) *http.Response {
	body := msg + "\n"
	return &http.Response{
		StatusCode:    status,
		Header:        http.Header{"Content-Type": {"text/plain; charset=utf-8"}, ErrorHeader: {ErrorBackend}, "Content-Length": {strconv.Itoa(len(body))}},
		ContentLength: int64(len(body)),
		Body:          io.NopCloser(strings.NewReader(body)),
	}
}

// requestBody lets the backend transport close the request body without
// closing the stream's reader: the rest of the body must still be drained
// before the stream can carry the next request. It reports its end on eof.
type requestBody struct {
	r       io.Reader
	once    sync.Once
	closed  chan struct{}
	eofOnce sync.Once
	eof     chan struct{} // closed once a read returned io.EOF
	// failed is called when a read fails before the body's end: the
	// server stopped sending it, so it abandoned the request. It cancels
	// the request's context before the backend's transport sees the
	// error, so the outcome is read as abandoned, not as a backend
	// failure.
	failed func()
}

func (b *requestBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	switch {
	case err == io.EOF:
		b.eofOnce.Do(func() { close(b.eof) })
	case err != nil:
		b.failed()
	}
	return n, err
}

func (b *requestBody) Close() error {
	b.once.Do(func() { close(b.closed) })
	return nil
}
