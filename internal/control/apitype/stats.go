package apitype

import "time"

// Stats is GET /aperio/api/stats: the traffic of the hostnames the caller
// may see, over rolling windows, for the dashboard and `aperio-client api
// stats`.
type Stats struct {
	// At is when the figures were read.
	At time.Time `json:"at"`
	// Clients counts the connected client connections the caller sees.
	Clients int `json:"clients"`
	// Hostnames counts the distinct hostnames those clients serve.
	Hostnames int `json:"hostnames"`
	// Held counts the requests waiting now, held for a cold start or
	// queued for a client's permit, on the hostnames the caller sees.
	Held int `json:"held"`
	// ScalingEvents1h counts the scaling calls and disarms of the last
	// hour on those hostnames.
	ScalingEvents1h int `json:"scaling_events_1h"`
	// Hosts holds one entry per hostname with traffic in the last hour,
	// sorted by hostname.
	Hosts []HostStats `json:"hosts"`
}

// The windows of HostStats.Windows.
const (
	Window1m = "1m"
	Window5m = "5m"
	Window1h = "1h"
)

// The pseudo-hostnames of HostStats, as the API, the metrics and the JSON
// output name them, and the words every table for people shows instead
// (the CLI's and the dashboard's English catalog): one name per thing.
const (
	// StatsOther gathers the hostnames past the server's bound on named
	// ones.
	StatsOther = "__other"
	// StatsUnrouted counts the requests no bind matched.
	StatsUnrouted = "__unrouted"
	// StatsOtherLabel and StatsUnroutedLabel are their names in tables.
	StatsOtherLabel    = "(other hostnames)"
	StatsUnroutedLabel = "(no route)"
)

// StatsLabel is hostname as a table shows it: the pseudo-hostnames by
// their labels, any other name as it is.
func StatsLabel(hostname string) string {
	switch hostname {
	case StatsOther:
		return StatsOtherLabel
	case StatsUnrouted:
		return StatsUnroutedLabel
	}
	return hostname
}

// HostStats is one hostname's traffic. Hostname is StatsOther for the
// hostnames past the server's bound on named ones, StatsUnrouted for
// requests no bind matched (both seen by the master token only).
type HostStats struct {
	Hostname string `json:"hostname"`
	// Windows maps "1m", "5m" and "1h" to the window ending now.
	Windows map[string]StatsWindow `json:"windows"`
	// Series is the last 60 ten-second buckets, oldest first, for charts;
	// fewer in the server's first ten minutes: none before it started.
	Series []StatsBucket `json:"series"`
}

// StatsWindow is the requests of one hostname that ended within a window.
type StatsWindow struct {
	Requests int64 `json:"requests"`
	// RPS is Requests divided by the window's length in seconds.
	RPS float64 `json:"rps"`
	// Errors counts 5xx answers and aborted requests (the visitor left
	// before an answer); ErrorRate is Errors / Requests (0 without any).
	// Both are 0 for StatsUnrouted: a hostname no client binds is a
	// visitor's miss, not a service's error, though it is answered 502.
	Errors    int64   `json:"errors"`
	ErrorRate float64 `json:"error_rate"`
	Status2xx int64   `json:"2xx"`
	Status3xx int64   `json:"3xx"`
	Status4xx int64   `json:"4xx"`
	Status5xx int64   `json:"5xx"`
	Aborted   int64   `json:"aborted"`
	// P50MS, P90MS and P99MS are quantiles of the request duration, and
	// QueueWaitP99MS of the wait for a permit, in milliseconds, estimated
	// from log-spaced histogram buckets (within a bucket's width).
	P50MS          float64 `json:"p50_ms"`
	P90MS          float64 `json:"p90_ms"`
	P99MS          float64 `json:"p99_ms"`
	QueueWaitP99MS float64 `json:"queue_wait_p99_ms"`
	// Held counts the requests that waited: queued for a permit or held
	// for a cold start.
	Held int64 `json:"held"`
}

// StatsBucket is one ten-second bucket of HostStats.Series.
type StatsBucket struct {
	// At is the bucket's start, in Unix seconds.
	At        int64 `json:"at"`
	Requests  int64 `json:"requests"`
	Status2xx int64 `json:"2xx"`
	Status3xx int64 `json:"3xx"`
	Status4xx int64 `json:"4xx"`
	Status5xx int64 `json:"5xx"`
	Aborted   int64 `json:"aborted"`
}

// The event types of GET /aperio/api/stream, the SSE "event:" field.
const (
	StreamAccess  = "access"
	StreamScaling = "scaling"
	StreamClient  = "client"
	// StreamDropped tells a subscriber how many events it was not sent
	// since the last time it was told: lost to its full buffer, or left
	// out of a sample of the access events (see StreamDroppedEvent).
	StreamDropped = "dropped"
)

// StreamTypes returns the event types a subscriber may ask for with
// ?type=, in a fixed order; "dropped" is always sent.
func StreamTypes() []string { return []string{StreamAccess, StreamScaling, StreamClient} }

// The Event of a StreamClientEvent.
const (
	ClientConnected    = "connected"
	ClientDisconnected = "disconnected"
	// ClientRetired is a client that retired of its own accord
	// (idle_timeout), announced by its drain.
	ClientRetired = "retired"
)

// StreamAccessEvent is an "access" event: one proxied request, as the
// access log records it.
type StreamAccessEvent struct {
	At       time.Time `json:"at"`
	Hostname string    `json:"hostname"`
	Method   string    `json:"method"`
	// Path is the request's path without its query string.
	Path        string  `json:"path"`
	Status      int     `json:"status"`
	DurationMS  float64 `json:"duration_ms"`
	QueueWaitMS float64 `json:"queue_wait_ms"`
	HoldMS      float64 `json:"hold_ms"`
	// Limit is the x-aperio-limit kind of a refusal; "" when none.
	Limit string `json:"limit"`
	// Client is the ID of the client session that served it; "" when none
	// did.
	Client    string `json:"client"`
	RequestID string `json:"request_id"`
}

// StreamScalingEvent is a "scaling" event: a scaling call or disarm.
type StreamScalingEvent struct {
	Hostname string `json:"hostname"`
	Path     string `json:"path"`
	// Action is scaling_requested, scaling_failed or scaling_disarmed.
	Action string `json:"action"`
	// Reason is cold_start, scale_out or scale_in.
	Reason string `json:"reason"`
	// Instances is the instance count the call asked for (its desired).
	Instances int       `json:"instances"`
	At        time.Time `json:"at"`
}

// StreamClientEvent is a "client" event: a client session attached or
// detached.
type StreamClientEvent struct {
	ID        string   `json:"id"`
	Name      string   `json:"name"`
	Hostnames []string `json:"hostnames"`
	// Event is "connected", "disconnected" or "retired".
	Event string `json:"event"`
}

// StreamMaxAccessRate is the access events a second one subscriber of the
// stream is sent at most; the others are counted in a "dropped" event's
// Sampled.
const StreamMaxAccessRate = 1000

// StreamDroppedEvent is a "dropped" event. Count is every event not sent;
// Sampled is the part of it that was left out on purpose: a subscriber is
// sent at most StreamMaxAccessRate access events a second, the rest
// counted here.
type StreamDroppedEvent struct {
	Count   int64 `json:"count"`
	Sampled int64 `json:"sampled"`
}

// AuditVerify is GET /aperio/api/audit/verify: whether the audit log's
// hash chain holds. Entries counts the entries verified (up to the break);
// Error says where it breaks, "" when OK.
type AuditVerify struct {
	OK      bool   `json:"ok"`
	Entries int64  `json:"entries"`
	Error   string `json:"error"`
}
