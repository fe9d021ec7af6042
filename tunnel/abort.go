package tunnel

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"
)

// exchangeAbort ends one exchange early: on the visitor's cancellation, on
// the response-head deadline or on a failing request body. Whichever comes
// first is the cause every later reader sees. It is safe for concurrent
// use; the zero value is not usable, see newExchangeAbort.
type exchangeAbort struct {
	// cause holds the first cause. A pointer to an interface value keeps
	// the stored type fixed whatever the error's dynamic type is.
	cause atomic.Pointer[error]
	st    *yamux.Stream
	// body is the visitor's request body; closed on abort so that a copier
	// blocked reading it returns (net/http's HTTP/2 bodies return at once;
	// HTTP/1 bodies when the pending read ends).
	body      io.Closer
	closeBody sync.Once
}

func newExchangeAbort(st *yamux.Stream, body io.Closer) *exchangeAbort {
	return &exchangeAbort{st: st, body: body}
}

// abort records err unless a cause is already recorded and resets the
// stream. It does not close the request body: callers that are not the
// body's reader do that with abortAndCloseBody.
func (a *exchangeAbort) abort(err error) {
	a.cause.CompareAndSwap(nil, &err)
	resetStream(a.st)
}

// abortAndCloseBody aborts and closes the request body. Only goroutines
// other than the body copier call it: closing an HTTP/1 body waits for a
// read in progress.
func (a *exchangeAbort) abortAndCloseBody(err error) {
	a.abort(err)
	if a.body != nil {
		a.closeBody.Do(func() { a.body.Close() })
	}
}

// err returns the recorded cause, or nil while the exchange runs.
func (a *exchangeAbort) err() error {
	if p := a.cause.Load(); p != nil {
		return *p
	}
	return nil
}

// resetStream abandons a stream at once. yamux v0.1.2 cannot send a reset
// (RST) on request and its Close is a half-close: a read in progress would
// wait until the peer closes too or StreamCloseTimeout passes. An expired
// read deadline ends local reads now; the close tells the peer, whose
// pending read sees EOF. The stream stays in the session's table until the
// peer's close or StreamCloseTimeout, buffering at most its window.
func resetStream(st *yamux.Stream) {
	st.SetReadDeadline(time.Unix(1, 0))
	st.Close()
}

// abortableReader reads a request body until the exchange is aborted; from
// then on it returns the cause, so that a copier stops after the read in
// progress instead of copying a slow upload into a dead stream.
type abortableReader struct {
	r io.Reader
	a *exchangeAbort
}

func (r *abortableReader) Read(p []byte) (int, error) {
	if err := r.a.err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}

// DefaultMaxHeaderBytes is the default bound on one HTTP head read from a
// tunnel stream, request line or status line, headers and the line breaks
// included (ServerConfig.MaxHeaderBytes, ClientConfig.MaxHeaderBytes).
const DefaultMaxHeaderBytes = 1 << 20

// ErrHeadTooLarge means a head read from a data stream exceeded its bound.
// The server answers the visitor 502; the client closes the stream.
var ErrHeadTooLarge = errors.New("tunnel: http head exceeds tunnel_max_header_bytes")

// headLimiter sits between a stream and its bufio.Reader. While a head is
// being read it lets through at most the remaining budget, then fails with
// ErrHeadTooLarge; between heads (bodies, upgraded bytes) it is a plain
// pass-through. The bufio.Reader may read up to its size ahead, so a head
// can be that much larger than the bound before it fails. It is used by
// one goroutine at a time: the one reading the stream.
type headLimiter struct {
	r     io.Reader
	limit int64
	n     int64 // bytes left while reading a head; -1 between heads
}

func newHeadLimiter(r io.Reader, limit int64) *headLimiter {
	if limit <= 0 {
		limit = DefaultMaxHeaderBytes
	}
	return &headLimiter{r: r, limit: limit, n: -1}
}

// startHead arms the bound for the next head; endHead lifts it.
func (l *headLimiter) startHead() { l.n = l.limit }
func (l *headLimiter) endHead()   { l.n = -1 }

func (l *headLimiter) Read(p []byte) (int, error) {
	if l.n < 0 {
		return l.r.Read(p)
	}
	if l.n == 0 {
		return 0, fmt.Errorf("%w (%d bytes)", ErrHeadTooLarge, l.limit)
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}
