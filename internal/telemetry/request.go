package telemetry

import (
	"net/http"
	"time"
)

// Request holds what one proxied request went through, measured once and
// read by everything that reports on it: the request metrics, the access
// log line, the Server-Timing header and the request's span. The proxy
// fills Hostname, Routed, ClientID, Limit, QueueWait and Hold; the
// Observer fills the rest. It belongs to one request and is not safe for
// concurrent use.
type Request struct {
	// Start is when the request reached the server.
	Start time.Time
	// Hostname is the request's hostname, normalized (lowercase, no port).
	Hostname string
	// Routed is set when a bind matched the hostname and path; metrics
	// label only routed hostnames by name (see HostLabelLimit).
	Routed bool
	// ClientID is the tunnel session that served the request; empty when
	// none did.
	ClientID string
	// Limit is the x-aperio-limit kind that refused the request with 429
	// ("ip", "server-concurrency", "client-concurrency", "token-rate"),
	// or that cut its response short ("token-quota", "org-quota", with
	// Aborted); empty when no limit refused it.
	Limit string
	// Aborted is set when the response was cut short after its head went
	// out (a byte quota crossed while it streamed): the handler's root
	// then aborts it (http.ErrAbortHandler), so that the visitor sees a
	// truncated response, the connection closed (HTTP/1) or the stream
	// reset (HTTP/2), never one that looks complete.
	Aborted bool
	// QueueWait is the time spent waiting in a pool's queue for a
	// client's permit; zero when a permit was free at once.
	QueueWait time.Duration
	// Hold is the time spent held for a cold start; zero when none.
	Hold time.Duration
	// Status is the status answered; 101 for a switched protocol, 0 when
	// nothing was answered (the visitor left first).
	Status int
	// Bytes counts the response body bytes written to the visitor.
	Bytes int64
	// Duration is the time from Start to the end of the response.
	Duration time.Duration
	// AuthMethod and AuthOutcome are what the service's access gate made
	// of the request, when it has one that is not simply open: the method
	// that admitted it, else the gate's methods joined with "+" ("none"
	// without any); and "admitted", "denied", "redirect", "unavailable" or
	// "hidden". Empty when no gate judged the request.
	AuthMethod, AuthOutcome string
}

// Proxy is what an Observer wraps: a handler that records its part of a
// request's facts in rec as it serves it. rec is never nil.
type Proxy interface {
	Proxy(w http.ResponseWriter, r *http.Request, rec *Request)
}
