package router

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync/atomic"

	"github.com/aperio-dev/aperio/internal/visitor/usage"
)

// failoverPolicy is what happens when a client vanishes before answering.
type failoverPolicy int

const (
	failoverFail      failoverPolicy = iota // answer 502
	failoverRetry                           // re-dispatch to another client now
	failoverWait                            // wait for the same client to reconnect
	failoverRetryWait                       // another client now, else wait for any
)

func parseFailover(s string) (failoverPolicy, error) {
	switch s {
	case "", "fail":
		return failoverFail, nil
	case "retry":
		return failoverRetry, nil
	case "wait":
		return failoverWait, nil
	case "retry-wait":
		return failoverRetryWait, nil
	}
	return 0, fmt.Errorf("router: unknown failover %q", s)
}

// idempotent reports whether a request with this method may be sent twice
// (RFC 9110 §9.2.2).
func idempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// countingBody records whether any of the request body was read: once a
// byte has gone to a client, the request cannot be sent to another. It
// counts the bytes read for usage, and once dispatch starts charging
// (startCharging) charges them as they are read, failing the read with
// errQuotaCut once a quota is crossed (quota.go).
type countingBody struct {
	io.ReadCloser
	read    atomic.Bool
	n       atomic.Int64                  // bytes read, for usage
	meter   atomic.Pointer[usage.Counter] // charged as read; nil: counted when the request ends
	charged atomic.Int64                  // bytes of n charged already
	over    atomic.Uint32                 // the usage.Verdict the bytes so far reached; 0 while none
	cut     atomic.Uint32                 // the usage.Verdict that cut the body; 0 while none
}

func (b *countingBody) Read(p []byte) (int, error) {
	if b.cut.Load() != 0 {
		return 0, errQuotaCut
	}
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.read.Store(true)
		if !b.charge(n) {
			return 0, errQuotaCut
		}
		b.n.Add(int64(n))
	}
	return n, err
}

// keepBody reads the request's body in full before its first dispatch,
// so that failover and retry_on_5xx may send it again, and returns it;
// nil when the body streams instead. It keeps a body only when a re-send
// could happen (a failover policy, or retry_on_5xx for an idempotent
// method), its length is declared and at most failover_replay_max_body,
// and the bytes kept across all requests stay within that bound too: the
// bound caps the server's memory, not one request's. A body of unknown
// length (chunked) always streams. The read is paced like the body's own
// (visitor_idle_timeout); its error is the visitor's.
func (a *admission) keepBody() ([]byte, error) {
	max, r := a.rt.cfg.FailoverReplayMaxBody, a.r
	if a.body == nil || max <= 0 || r.ContentLength <= 0 || r.ContentLength > max {
		return nil, nil
	}
	resend := (a.rt.failover != failoverFail && (a.rt.cfg.FailoverAllMethods || idempotent(r.Method))) ||
		(len(a.rt.cfg.RetryOn5xx) > 0 && idempotent(r.Method))
	if !resend {
		return nil, nil
	}
	n := r.ContentLength
	if a.rt.replayKept.Add(n) > max {
		a.rt.replayKept.Add(-n)
		return nil, nil
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(a.body, buf); err != nil {
		a.rt.replayKept.Add(-n)
		if bf := bodyFailure(r); bf != nil {
			err = bf
		} else if errors.Is(err, io.ErrUnexpectedEOF) {
			err = &visitorBodyError{err} // shorter than it declared
		}
		return nil, fmt.Errorf("read request body: %w", err)
	}
	return buf, nil
}

// replayBody is one sending of a kept request body. Each attempt gets its
// own reader over the shared bytes, so a failed attempt still reading
// cannot disturb the next.
type replayBody struct{ *bytes.Reader }

// Close does nothing: the bytes stay for the next attempt.
func (replayBody) Close() error { return nil }

// retryOn reports whether status is one of retry_on_5xx.
func (rt *Router) retryOn(status int) bool {
	return status >= 500 && slices.Contains(rt.cfg.RetryOn5xx, status)
}
