package config

import "time"

// Server is the effective configuration of aperio-server. Each field names
// its canonical key; DefaultServer holds every default. A Server built by hand
// (tests) should start from DefaultServer(), since several zero values are
// rejected by Validate.
type Server struct {
	// Host is the listen address of the public port (host, also HOST).
	// Default 0.0.0.0; empty listens on every address.
	Host string
	// Port is the public port for visitors, tunnels and /aperio/
	// (port, also PORT). Default 8080; 0 lets the kernel pick one.
	Port int
	// Token is the master token (server.token). Required: it authorizes
	// tunnels and the admin API. Secret.
	Token string

	// DataDir is the directory of the embedded store and other state
	// (data_dir). Default ./data.
	DataDir string
	// DatabaseURL, when set, is a postgres:// URL that switches the store to
	// PostgreSQL (database_url). Empty uses the embedded store in DataDir.
	// Secret.
	DatabaseURL string

	// TLSCert is a PEM certificate file (tls_cert). With TLSKey the server
	// speaks HTTPS and HTTP/2; with both empty it speaks plain HTTP and h2c.
	TLSCert string
	// TLSKey is the PEM key file of TLSCert (tls_key).
	TLSKey string

	// GatewayTimeout is how long a request may wait for a client or for a
	// client's concurrency permit (gateway_timeout). Default 10s; must be
	// positive.
	GatewayTimeout time.Duration
	// GatewayResponseTimeout is how long a dispatched request may wait for its
	// response head (gateway_response_timeout). Default 30s; must be positive.
	GatewayResponseTimeout time.Duration
	// MaxConcurrentRequests bounds the proxied requests in flight on the whole
	// server (max_concurrent_requests). Default 100; must be positive.
	MaxConcurrentRequests int
	// MaxBodyBytes is the request body ceiling in bytes; larger bodies get
	// 413 (max_body_size, accepts sizes like 10MiB). Default 10 MiB; 0 refuses
	// every body.
	MaxBodyBytes int64
	// IPLimitMax is the size of each visitor's token bucket (ip_limit_max).
	// Default 100.
	IPLimitMax int
	// IPLimitRefill is the refill rate of each visitor's bucket in tokens per
	// second (ip_limit_refill). Default 5.
	IPLimitRefill float64
	// Visitor connections. Each bound ends what a visitor holds without
	// using it; 0 turns a bound off unless its field says otherwise.
	//
	// ReadHeaderTimeout bounds the time a visitor may take to send a request
	// head (read_header_timeout). Default 10s.
	ReadHeaderTimeout time.Duration
	// MaxHeaderBytes bounds a visitor's request head in bytes; larger heads
	// get 431 (max_header_bytes). Default 1 MiB; 0 means net/http's 1 MiB.
	MaxHeaderBytes int64
	// KeepAliveTimeout is how long an idle keep-alive connection stays open
	// between requests (keepalive_timeout). Default 2m.
	KeepAliveTimeout time.Duration
	// VisitorIdleTimeout ends a request whose visitor makes no progress for
	// this long: a response write it does not read, or a request body read
	// it does not send (visitor_idle_timeout). A quiet backend does not
	// count. Default 1m, like nginx's send_timeout: a media player that
	// pauses reading a long download is cut off after that and asks again
	// with a range.
	VisitorIdleTimeout time.Duration
	// VisitorMinBytesPerSecond ends a request whose visitor reads the
	// response or sends the body slower than this, averaged over the time
	// the exchange waited on the visitor, once that time exceeds
	// VisitorIdleTimeout (visitor_min_bytes_per_second). Default 512.
	VisitorMinBytesPerSecond int
	// MaxConnectionsPerIP bounds the concurrent connections of one visitor
	// address on the public port; more are closed at accept
	// (max_connections_per_ip). Default 256. Behind a proxy that is not
	// exempted (trusted proxies), every visitor shares its address: raise
	// it or set 0.
	MaxConnectionsPerIP int
	// TunnelHandshakeTimeout bounds the time from a tunnel upgrade to the
	// client's hello; a client silent for longer is dropped
	// (tunnel_handshake_timeout). Default 10s; 0 means the protocol's 10s.
	TunnelHandshakeTimeout time.Duration
	// ClientDownThreshold is the heartbeat age after which a client is dropped
	// (client_down_threshold). Default 15s; must be positive.
	ClientDownThreshold time.Duration
	// TunnelMaxHeaderBytes bounds each response head a client sends on a
	// data stream (tunnel_max_header_bytes); a larger one answers the
	// visitor 502. Default 1 MiB; must be positive.
	TunnelMaxHeaderBytes int64
	// TunnelMaxStreams bounds the streams open on one tunnel session
	// (tunnel_max_streams), so its unread data stays under TunnelMaxStreams
	// × 2 MiB. Default 256; at least 2 (control stream plus one).
	TunnelMaxStreams int
	// TunnelAnnounceInterval is the least time between two announcements
	// applied for one session (tunnel_announce_interval); sooner ones are
	// coalesced, the latest winning. Default 200ms; must be positive.
	TunnelAnnounceInterval time.Duration
	// ShutdownTimeout bounds how long SIGTERM waits for in-flight requests
	// (shutdown_timeout). Default 10s; 0 stops at once.
	ShutdownTimeout time.Duration

	// LBStrategy picks among a hostname's clients (lb_strategy): round-robin,
	// least-inflight or primary-standby. Default round-robin.
	LBStrategy string
	// Failover says what a failed dispatch does (failover): fail, retry, wait
	// or retry-wait. Default fail.
	Failover string
	// FailoverAllMethods lets failover re-dispatch non-idempotent methods too
	// (failover_all_methods). Default false: only idempotent methods.
	FailoverAllMethods bool
	// FailoverMaxJumps bounds re-dispatches of one request
	// (failover_max_jumps). Default 2; 0 never re-dispatches.
	FailoverMaxJumps int
	// FailoverWindow bounds the time one request may spend failing over
	// (failover_window). Default 15s.
	FailoverWindow time.Duration
	// Fallbacks maps a hostname to the URL visitors are redirected to (302)
	// when no client can serve it (fallbacks). Nil means no fallbacks. The
	// loader lowercases the hostnames.
	Fallbacks map[string]string

	// Cache is the switch of the serve-stale cache block (cache). Default off.
	Cache bool
	// CacheMaxBytes bounds the cache in bytes (cache_max_bytes). Default 64 MiB.
	CacheMaxBytes int64
	// CacheMaxStale is how old a cached answer may be and still be served
	// (cache_max_stale). Default 1h.
	CacheMaxStale time.Duration

	// Scaling is the switch that honors client scaling declarations
	// (scaling). Default off.
	Scaling bool
	// ScalingAllowHTTP permits plain-http scaling endpoints
	// (scaling_allow_http). Default off: https only.
	ScalingAllowHTTP bool
	// ScalingAllowPrivate permits scaling endpoints that resolve to private,
	// loopback or link-local addresses (scaling_allow_private). Default off.
	ScalingAllowPrivate bool
	// ScalingRecordTTL drops scaling records nothing has re-announced for this
	// long (scaling_record_ttl). Default 30d; 0 keeps them forever.
	ScalingRecordTTL time.Duration
	// ScalingMaxHeld bounds the requests held across all cold starts
	// (scaling_max_held). Default 1000.
	ScalingMaxHeld int
	// ScalingMaxCallsPerMinute bounds the scaling hook calls the server makes
	// per minute (scaling_max_calls_per_minute). Default 60.
	ScalingMaxCallsPerMinute int
	// ScalingMaxRecordsPerOrg bounds the scaling records one organization
	// may hold (scaling_max_records_per_org); a declaration that would
	// create one more is refused with a notice. Default 100; at least 1.
	ScalingMaxRecordsPerOrg int
	// ScalingMaxRecordsPerToken bounds the scaling records one client token
	// may arm (scaling_max_records_per_token); the master token is bounded
	// by ScalingMaxRecordsPerOrg only. Default 32; at least 1.
	ScalingMaxRecordsPerToken int

	// OutboundAllowlist holds the host, wildcard (*.example.com) and CIDR
	// patterns the server may call for scaling hooks and webhooks
	// (outbound_allowlist, also outbound.allowlist). Empty means no
	// restriction.
	OutboundAllowlist []string
	// OutboundBlockPrivate refuses outbound destinations that resolve to
	// internal addresses when OutboundAllowlist is empty
	// (outbound_block_private). Default off.
	OutboundBlockPrivate bool

	// MetricsToken is the bearer token of /aperio/metrics (metrics_token).
	// Empty means /aperio/metrics answers 404 (on metrics_listen: no token
	// is asked). Secret.
	MetricsToken string
	// AccessLog writes one line per proxied request, in log_format, with
	// logger=access (access_log). Default on.
	AccessLog bool
	// AccessLogIPs adds the visitor's address to access log lines
	// (access_log_ips). Default off.
	AccessLogIPs bool
	// ServerTiming adds Server-Timing (aperio-queue, aperio-hold) to
	// answers that waited for a permit or a cold start (server_timing).
	// Default on.
	ServerTiming bool
	// OTelSampleRate is the fraction of traces started here that are
	// sampled when tracing is on (the OTEL_EXPORTER_OTLP_* environment
	// names an endpoint), in [0,1] (otel_sample_rate). Default 1.
	OTelSampleRate float64

	// LogLevel is debug, info, warn or error (log_level, also LOG_LEVEL).
	// Default info.
	LogLevel string
	// LogFormat is text or json (log_format). Default text.
	LogFormat string

	// TrustedProxies lists the CIDR prefixes and addresses of the proxies
	// in front of the server (trusted_proxies). Only a peer inside them may
	// name the visitor (RealIPHeader), the scheme (X-Forwarded-Proto) and
	// the request id, or send a PROXY protocol header. Empty trusts nobody.
	TrustedProxies []string
	// RealIPHeader is the header a trusted proxy names the visitor in
	// (real_ip_header): X-Forwarded-For (default, read rightmost-untrusted
	// first), or a single-address header such as X-Real-IP,
	// CF-Connecting-IP or True-Client-IP.
	RealIPHeader string
	// ProxyProtocol accepts PROXY protocol v1 and v2 headers on the public
	// port from peers inside TrustedProxies (proxy_protocol). Default off.
	ProxyProtocol bool
	// DeniedIPs lists CIDR prefixes and addresses whose requests are
	// answered 403 before any handler (denied_ips). Empty denies nobody.
	DeniedIPs []string
	// AdminAllowedIPs lists the CIDR prefixes and addresses that may reach
	// the admin API, metrics and the rest of /aperio/ other than the
	// tunnel and health endpoints (admin_allowed_ips). Empty allows all.
	AdminAllowedIPs []string
	// MetricsListen is the host:port of a listener of its own for metrics
	// (metrics_listen); /aperio/metrics then answers 404 on the public
	// port. Empty serves metrics at /aperio/metrics on the public port.
	MetricsListen string
}

// Client is the effective configuration of aperio-client. Each field names
// its canonical key; DefaultClient holds every default.
type Client struct {
	// ServerURL is the http, https, ws or wss URL of the server to hold a
	// tunnel to (server.url). Required.
	ServerURL string
	// ServerURLs lists more servers to hold tunnels to, for HA (server.urls).
	// Nil means only ServerURL.
	ServerURLs []string
	// Token is the client token, apr_… or the master token (server.token).
	// Required. Secret.
	Token string
	// APIKey is the admin key used by `aperio-client api` (server.api_key,
	// also APERIO_API_KEY). Secret.
	APIKey string

	// Name is shown in the admin API (name). The loader defaults it to the
	// machine's hostname; empty when that is unknown.
	Name string
	// MaxConcurrent is the concurrency limit announced for every service that
	// sets none, per connection (max_concurrent). 0 announces no limit, which
	// also makes utilization unmeasurable for autoscaling.
	MaxConcurrent int
	// Priority is the default tier of every service (priority): 0 is primary,
	// greater than 0 is standby.
	Priority int
	// Health holds the probe defaults of every service (health.*); each
	// Service.Health starts from it.
	Health Health
	// IdleTimeout retires the client after this long without a request
	// (idle_timeout), counted before the first request from when the client
	// became routable (a tunnel up and a service healthy), so that an
	// instance nothing is sent to retires too. 0 never retires.
	IdleTimeout time.Duration
	// DrainTimeout bounds the graceful drain on SIGTERM or SIGINT
	// (drain_timeout). Default 30s; 0 stops at once.
	DrainTimeout time.Duration

	// Services lists what this client publishes (services). The loader
	// builds one from APERIO_TARGET or the TARGET argument in single-service
	// mode. Validate requires at least one.
	Services []Service
	// Scaling is the scaling declaration (scaling.*). Nil when no surface sets
	// any scaling field; otherwise DefaultScaling fills the fields left unset.
	Scaling *Scaling
	// Adaptive is the default adaptive concurrency block of every service
	// (adaptive_concurrency.*). Nil when no surface sets any of its fields;
	// otherwise DefaultAdaptive fills the fields left unset. Which limit a
	// service ends with is Service.Concurrency.
	Adaptive *Adaptive
	// StatusSocket is the unix socket on which the running client answers
	// `aperio-client status` (status_socket). Empty means one socket per
	// process in StatusDir(); "off" opens none.
	StatusSocket string

	// LogLevel is debug, info, warn or error (log_level, also LOG_LEVEL).
	// Default info.
	LogLevel string
	// LogFormat is text or json (log_format). Default text.
	LogFormat string
}

// Health configures a service's backend probe. DefaultClient().Health holds
// the defaults.
type Health struct {
	// Endpoint is the path probed on the target, starting with "/"
	// (health.endpoint; APERIO_TARGET_HEALTH in single-service mode). Empty
	// means no probe: the service is healthy once connected.
	Endpoint string
	// Interval is the time between probes (health.interval). Default 10s;
	// must be positive.
	Interval time.Duration
	// Timeout bounds one probe (health.timeout). Default 5s; must be positive.
	Timeout time.Duration
	// Threshold is the number of consecutive failures before the service is
	// unhealthy (health.threshold). Default 2; at least 1.
	Threshold int
}

// Service is one local target published under one or more hostnames.
type Service struct {
	// Target is the URL of the local app, with scheme http, https or h2c
	// (target). The loader turns a bare port (3000) into
	// http://localhost:3000 and host:port into http://host:port. Required.
	Target string
	// Hostnames are the public names served, DNS names or *. wildcards
	// (hostname: a string or a list). The loader lowercases them. At least one
	// is required.
	Hostnames []string
	// Path is an optional prefix bind starting with "/" (path). Empty binds
	// the whole hostname.
	Path string
	// MaxConcurrent overrides Client.MaxConcurrent when greater than 0
	// (max_concurrent).
	MaxConcurrent int
	// Priority overrides Client.Priority when greater than 0 (priority).
	Priority int
	// Health is the probe of this service (health.*): Client.Health with the
	// service's own fields laid over it by the loader.
	Health Health
	// Resilience lets the server serve stale cached answers for this service
	// (resilience). Default false.
	Resilience bool
	// AllowConnect lets visitors' CONNECT requests through to the target
	// (allow_connect). Default false: the server answers CONNECT with 405,
	// so a backend that is a forward proxy is not an open proxy.
	AllowConnect bool
	// Adaptive is the service's own adaptive_concurrency block: the
	// client's block (or DefaultAdaptive) with the fields the service sets
	// laid over it. Nil when the service sets none.
	Adaptive *Adaptive
	// Concurrency is the limit the service ends with and why, resolved by
	// LoadClient from max_concurrent and the adaptive blocks. A Service
	// built by hand has the zero value; Client.ResolveConcurrency fills it.
	Concurrency Concurrency
}

// Adaptive is an adaptive_concurrency block: a limit the client learns
// from the backend instead of a fixed max_concurrent. DefaultAdaptive holds
// the defaults of the fields a block leaves unset.
type Adaptive struct {
	// Enabled is the block's switch (adaptive_concurrency, or its enabled
	// child). Default true once any field is set; false in a service turns
	// the client's block off for that service.
	Enabled bool
	// Mode is aimd or load-signal (adaptive_concurrency.mode). Default aimd.
	Mode string
	// Min is the lowest limit (adaptive_concurrency.min). Default 1.
	Min int
	// Max is the ceiling (adaptive_concurrency.max) when no max_concurrent
	// applies to the service; max_concurrent, when set, is the ceiling.
	// 0 means 100.
	Max int
	// Initial is the first limit (adaptive_concurrency.initial). 0 means Min.
	Initial int
	// IncreaseAfterSuccesses is the AIMD success streak that raises the
	// limit by one (adaptive_concurrency.increase_after_successes). Default
	// 10; values below 1, 0 included, count as 1 with a warning
	// (ClientWarnings).
	IncreaseAfterSuccesses int
	// DecreaseFactor multiplies the limit on a failure
	// (adaptive_concurrency.decrease_factor). Default 0.5; a value outside
	// (0, 1], 0 included, falls back to 0.5 with a warning
	// (ClientWarnings).
	DecreaseFactor float64
	// Interval is how often load signals are evaluated
	// (adaptive_concurrency.interval). Default 1s.
	Interval time.Duration
	// Window is how far back signal snapshots count
	// (adaptive_concurrency.window). Default 10s.
	Window time.Duration
	// ScaleUpStepRatio sizes a load-signal rise as a share of the limit
	// (adaptive_concurrency.scale_up_step_ratio). Default 0.05, in (0, 1].
	ScaleUpStepRatio float64
	// ScaleDownStepRatio sizes a load-signal fall
	// (adaptive_concurrency.scale_down_step_ratio). Default 0.05, in (0, 1].
	ScaleDownStepRatio float64
	// DesiredUtilizationRatio is the mean healthy ratio of the signals at
	// which the limit rises (adaptive_concurrency.desired_utilization_ratio).
	// Default 0.9, in (0, 1].
	DesiredUtilizationRatio float64
	// MinSamples is the number of snapshots a signal needs in the window to
	// count (adaptive_concurrency.min_samples). Default 5, at least 1.
	MinSamples int
	// Signals are the load signals: cpu, memory, scheduler, backend
	// (adaptive_concurrency.signals). Default all four. Empty with
	// mode load-signal falls back to AIMD with a warning.
	Signals []string
}

// Concurrency is the limit a service ends with.
type Concurrency struct {
	// Mode is none (no limit announced), fixed, aimd or load-signal.
	Mode string
	// Limit is the fixed limit, or the ceiling of a dynamic mode (0: the
	// block's default of 100).
	Limit int
	// Adaptive is the block in force for a dynamic mode; zero otherwise.
	Adaptive Adaptive
	// Why names the settings that decided Mode, for --print-config.
	Why string
}

// Scaling is a client's scaling declaration (autoscaling.md). DefaultScaling
// holds the defaults of the fields a declaration leaves unset.
type Scaling struct {
	// URL is the http or https endpoint the server calls (scaling.url).
	// Required when the block is declared.
	URL string
	// Secret is sent as Authorization: Bearer when set (scaling.secret).
	// Secret.
	Secret string
	// Min is the lowest capacity asked for (scaling.min). Default 0: scale to
	// zero, so a request can cold start the service.
	Min int
	// Max is the ceiling the server never asks to exceed, cold starts
	// included (scaling.max). It is at least Min. Unset, LoadClient sets
	// DefaultScalingMax(Min); 0 in a block built otherwise gets the same
	// default from the server.
	Max int
	// ColdStart is how long a visitor may be held while the service starts
	// (scaling.cold_start). Default 45s, at most 5m.
	ColdStart time.Duration
	// TargetUtilization is the utilization above which the server scales out
	// (scaling.target_utilization). Default 0.8, in (0, 1].
	TargetUtilization float64
	// Window is how long utilization must stay above target before a scale
	// out (scaling.window). Default 15s, at least 1s.
	Window time.Duration
	// Cooldown is the minimum gap between two calls for one bind
	// (scaling.cooldown). Default 60s, at least 1s.
	Cooldown time.Duration
}
