package router

import (
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
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
// byte has gone to a client, the request cannot be sent to another.
type countingBody struct {
	io.ReadCloser
	read atomic.Bool
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.read.Store(true)
	}
	return n, err
}
