// Package logkey holds the attribute keys of every log line both binaries
// write, one constant per key, so that one thing has one name in every log:
// a hostname is always "hostname", an error always "err". Keys are
// snake_case. The access log's keys (Hostname through IP, see
// docs/observability.md) are a public format: renaming one breaks the
// queries built on it. A root test fails when a log call passes a key as
// a string literal instead of one of these constants.
package logkey

// Keys of the access log: one line per proxied request.
const (
	Logger      = "logger" // which log a line belongs to ("access"), or which component wrote it
	Hostname    = "hostname"
	Method      = "method"
	Path        = "path"
	Status      = "status"
	Bytes       = "bytes"
	DurationMS  = "duration_ms"
	QueueWaitMS = "queue_wait_ms"
	HoldMS      = "hold_ms"
	ClientID    = "client_id"
	Limit       = "limit"
	RequestID   = "request_id"
	IP          = "ip"
)

// Keys of diagnostic lines.
const (
	// PID is a process id (a demo instance the demo provider started).
	PID = "pid"
	// Limits is the startup line's visitor-facing limits in force.
	Limits                = "limits"
	Abandoned             = "abandoned"
	Actor                 = "actor"
	Addr                  = "addr"
	Applied               = "applied"
	Attempts              = "attempts"
	Backend               = "backend"
	Code                  = "code" // a machine-readable cause, such as a tunnel refusal's
	Chained               = "chained"
	ClientName            = "client_name"
	ConsecutiveFailures   = "consecutive_failures"
	Container             = "container"
	Count                 = "count"
	Current               = "current"
	DeliveryID            = "delivery_id"
	Desired               = "desired"
	DrainTimeout          = "drain_timeout"
	Dropped               = "dropped"
	Duplicate             = "duplicate"
	Err                   = "err"
	Event                 = "event"
	First                 = "first"
	From                  = "from"
	Generation            = "generation" // a signing key's place in its series
	Hint                  = "hint"       // what the operator can do about an error
	Heartbeat             = "heartbeat"
	IdempotencyKey        = "idempotency_key"
	Idle                  = "idle"
	InFlight              = "in_flight"
	Issuer                = "issuer" // an OpenID Connect issuer URL
	KeyID                 = "key_id"
	Max                   = "max"
	MaxConcurrentRequests = "max_concurrent_requests"
	Min                   = "min"
	Mode                  = "mode"
	Notice                = "notice"
	OrgID                 = "org_id"
	Port                  = "port"        // a public TCP or UDP port (ports)
	Protocol              = "protocol"    // tcp or udp, of a public port
	ExposeName            = "expose_name" // a client's expose entry
	Orgs                  = "orgs"
	Owner                 = "owner"
	Panic                 = "panic"
	Problem               = "problem"
	Purpose               = "purpose" // a signing key's: share or identity
	Queued                = "queued"
	Reason                = "reason"
	Renewal               = "renewal" // a certificate event: a renewal (true) or a first issuance
	User                  = "user"    // a visitor a gate admitted or refused
	RecordID              = "record_id"
	RemoteAddr            = "remote_addr"
	RestartNeeded         = "restart_needed"
	RetryIn               = "retry_in"
	Restart               = "restart" // config keys a reload could not change live
	Role                  = "role"
	Running               = "running"
	SampleRate            = "sample_rate"
	ServerURL             = "server_url"
	Service               = "service"
	ServiceName           = "service_name"
	Services              = "services"
	SessionID             = "session_id"
	Signal                = "signal"
	Stack                 = "stack"
	Store                 = "store"
	Suppressed            = "suppressed"
	Target                = "target"
	Timeout               = "timeout"
	TLS                   = "tls"
	TokenID               = "token_id"
	TunnelMaxStreams      = "tunnel_max_streams"
	Transport             = "transport"  // how tunnel frames travel: websocket or tcp
	Ejections             = "ejections"  // ejections of one client service in a row
	PublicURL             = "public_url" // a URL visitors reach a service at, and its target
	Until                 = "until"
	Value                 = "value"
	Version               = "version"
	WebhookID             = "webhook_id"
	Where                 = "where"
	Why                   = "why"
)
