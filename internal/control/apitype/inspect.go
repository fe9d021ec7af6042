package apitype

import "time"

// InspectRequest is the optional body of PUT /inspect/{hostname}: how a
// capture of the hostname's requests is bounded. A zero field takes its
// default.
type InspectRequest struct {
	// DurationSeconds ends the capture after this many seconds: default
	// 600, at most 3600.
	DurationSeconds int64 `json:"duration_seconds,omitempty"`
	// MaxRequests is the size of the ring of captured requests: default
	// 100, at most 1000.
	MaxRequests int `json:"max_requests,omitempty"`
	// BodyBytes is how much of each request and response body is kept:
	// default 16384, at most 65536.
	BodyBytes int `json:"body_bytes,omitempty"`
	// RedactHeaders names headers whose values are never kept, beside
	// Authorization, Proxy-Authorization, Cookie, Set-Cookie and the
	// server's inspect_redact_headers; at most 32.
	RedactHeaders []string `json:"redact_headers,omitempty"`
	// StopWhenFull ends the capture once MaxRequests were captured;
	// otherwise the ring overwrites its oldest entry.
	StopWhenFull bool `json:"stop_when_full,omitempty"`
}

// The states of a capture.
const (
	// InspectRecording is a capture that records its hostname's requests.
	InspectRecording = "recording"
	// InspectEnded is a capture past its duration, or full with
	// stop_when_full: its entries stay readable until it is deleted (or
	// an hour after it ended).
	InspectEnded = "ended"
)

// InspectCapture is a capture as GET /inspect and PUT /inspect/{hostname}
// show it.
type InspectCapture struct {
	Hostname      string    `json:"hostname"`
	OrgID         string    `json:"org_id"`
	State         string    `json:"state"`
	StartedAt     time.Time `json:"started_at"`
	EndsAt        time.Time `json:"ends_at"`
	StartedBy     string    `json:"started_by"`
	MaxRequests   int       `json:"max_requests"`
	BodyBytes     int       `json:"body_bytes"`
	RedactHeaders []string  `json:"redact_headers"`
	StopWhenFull  bool      `json:"stop_when_full"`
	// Captured counts the requests recorded since the capture started;
	// Kept those still in its ring.
	Captured int64 `json:"captured"`
	Kept     int   `json:"kept"`
	// ReservedBytes is the memory the capture holds against the server's
	// bound on all captures.
	ReservedBytes int64 `json:"reserved_bytes"`
}

// InspectSummary is one captured request as GET
// /inspect/{hostname}/requests lists it, newest first.
type InspectSummary struct {
	ID               string    `json:"id"`
	At               time.Time `json:"at"`
	Method           string    `json:"method"`
	URL              string    `json:"url"`
	Status           int       `json:"status"`
	DurationMS       float64   `json:"duration_ms"`
	ClientID         string    `json:"client_id,omitempty"`
	Error            string    `json:"error,omitempty"`
	ReplayOf         string    `json:"replay_of,omitempty"`
	RequestBodySize  int64     `json:"request_body_size"`
	ResponseBodySize int64     `json:"response_body_size"`
}

// InspectMessage is the head and the first bytes of the body of a
// captured request or response. Redacted header values read "[redacted]".
type InspectMessage struct {
	// Status is the response's status; 0 for a request, or when nothing
	// was answered.
	Status int                 `json:"status,omitempty"`
	Header map[string][]string `json:"headers"`
	// HeadersTruncated is set when headers beyond the capture's bound on
	// a head were left out.
	HeadersTruncated bool `json:"headers_truncated,omitempty"`
	// Body is the first bytes of the body (base64 in JSON); Text the same
	// bytes when they are valid UTF-8.
	Body []byte  `json:"body"`
	Text *string `json:"text,omitempty"`
	// BodySize counts the body bytes that passed; BodyTruncated is set
	// when Body is not the whole body (more passed than was kept, or the
	// body was not read to its end).
	BodySize      int64 `json:"body_size"`
	BodyTruncated bool  `json:"body_truncated"`
}

// InspectTimeline is when a captured request met each stage, in
// milliseconds after Received. A stage it never reached is absent.
type InspectTimeline struct {
	Received time.Time `json:"received"`
	// QueueWaitMS and HoldMS are the time spent in a pool's queue and
	// held for a cold start.
	QueueWaitMS float64 `json:"queue_wait_ms"`
	HoldMS      float64 `json:"hold_ms"`
	// DispatchMS is when the request was sent to the client that served
	// it (the last attempt, after a failover).
	DispatchMS     *float64 `json:"dispatch_ms,omitempty"`
	ResponseHeadMS *float64 `json:"response_head_ms,omitempty"`
	DoneMS         float64  `json:"done_ms"`
}

// InspectEntry is one captured request in full, as GET
// /inspect/{hostname}/requests/{id} shows it.
type InspectEntry struct {
	ID     string    `json:"id"`
	At     time.Time `json:"at"`
	Method string    `json:"method"`
	// URL is the path and query the visitor sent.
	URL string `json:"url"`
	// Scheme is how the visitor reached the server: "http" or "https".
	Scheme string `json:"scheme"`
	Proto  string `json:"proto"`
	// RequestID is the request's X-Request-Id.
	RequestID string `json:"request_id,omitempty"`
	// ReplayOf is the id of the entry this request replayed.
	ReplayOf string `json:"replay_of,omitempty"`
	// ClientID is the tunnel session that served the request.
	ClientID string `json:"client_id,omitempty"`
	// Error is why the server answered itself, when it did.
	Error    string          `json:"error,omitempty"`
	Request  InspectMessage  `json:"request"`
	Response InspectMessage  `json:"response"`
	Timeline InspectTimeline `json:"timeline"`
	// Curl is the request as a curl command line, quoted for a POSIX
	// shell, without the redacted headers.
	Curl string `json:"curl"`
}

// InspectReplay is the answer to POST
// /inspect/{hostname}/requests/{id}/replay: the entry the replay made
// and the status it was answered.
type InspectReplay struct {
	ID     string `json:"id"`
	Status int    `json:"status"`
}
