package config

import (
	"time"

	"github.com/aperio-dev/aperio/tunnel"
)

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
	// Transport is how the tunnel's frames travel (server.transport):
	// "websocket", the default, in WebSocket messages that any proxy
	// passing WebSockets passes; "tcp", straight on the upgraded
	// connection, faster where nothing between client and server needs
	// WebSocket.
	Transport string

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
	// IdleAction is what the process does once idle_timeout retired it
	// (idle_action): IdleActionExit (the default) ends it with status 0;
	// IdleActionWait keeps it, drained and disconnected, until SIGTERM or
	// SIGINT, so that a supervisor that restarts exited processes (a
	// Kubernetes pod) does not bring it back: the provider removes it.
	IdleAction string
	// DrainTimeout bounds the graceful drain on SIGTERM or SIGINT
	// (drain_timeout). Default 30s; 0 stops at once.
	DrainTimeout time.Duration
	// ReloadDrain bounds how long a service that a live reload removed
	// keeps serving the requests it has in flight before it is withdrawn
	// (reload_drain). Default 30s, at most MaxReloadDrain; 0 withdraws it
	// as soon as the servers stopped routing to it.
	ReloadDrain time.Duration

	// Services lists what this client publishes (services). The loader
	// builds one from APERIO_TARGET or the TARGET argument in single-service
	// mode. Validate requires at least one.
	Services []Service
	// Expose lists the public TCP and UDP ports asked for (expose:).
	// A client may have expose entries and no service.
	Expose []Expose
	// Scaling is the scaling declaration (scaling.*). Nil when no surface sets
	// any scaling field; otherwise tunnel.DefaultScaling fills the fields left unset.
	Scaling *Scaling
	// Adaptive is the default adaptive concurrency block of every service
	// (adaptive_concurrency.*). Nil when no surface sets any of its fields;
	// otherwise DefaultAdaptive fills the fields left unset. Which limit a
	// service ends with is Service.Concurrency.
	Adaptive *Adaptive
	// RetryForever keeps the client retrying servers that refuse its
	// tunnel for good (retry_forever): a token refused, no hostname
	// allowed, another protocol version. False (the default) exits with
	// code 1 once every server has refused three times in a row, so that a
	// wrong setting is not retried in silence; supervisors that restart
	// the client anyway may prefer true. Network errors are retried in
	// either case.
	RetryForever bool
	// StatusSocket is the unix socket on which the running client answers
	// `aperio-client status` (status_socket). Empty means one socket per
	// process in StatusDir(); "off" opens none.
	StatusSocket string
	// DebugListen is the loopback host:port of the debug listener
	// (debug_listen): pprof, runtime/trace and runtime metrics, for
	// operators (internal/debughttp). Empty, the default, opens none; an
	// address that is not loopback does not validate.
	DebugListen string

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
	// Type is how the target is probed (health.type): http (default), a GET
	// of Endpoint, or grpc, the grpc.health.v1.Health/Check call of an
	// h2c:// target (Endpoint unused). Empty means http.
	Type string
	// Success is what an http probe's status must be to pass
	// (health.success): 2xx (default) or 2xx-3xx. Empty means 2xx.
	Success string
}

// Service is one local target published under one or more hostnames.
type Service struct {
	// Name is the service's optional handle (services[].name): 1 to 63 of
	// a-z, 0-9 and -, unique within the config. It is shown in the
	// client's logs, --print-config and status, and announced so the
	// server's client list and explain show it. Empty means none: the
	// service is known by its index.
	Name string
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
	// Weight is the service's share among the clients of its binds under
	// weighted round-robin (weight), 1..1000; 0 means the default, 1.
	Weight int
	// LBStrategy is the server's lb_strategy for this service's binds
	// (lb_strategy: round-robin, least-inflight, primary-standby, sticky);
	// empty means the server's own.
	LBStrategy string
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
	// Public opens the service even under the server's default_access
	// deny (public). It excludes Auth.
	Public bool
	// Auth is the service's auth: block; nil for none.
	Auth *Auth
	// AllowedIPs and DeniedIPs are the visitor addresses or CIDR prefixes
	// the server admits or refuses for this service (allowed_ips,
	// denied_ips), judged on the visitor's real address.
	AllowedIPs, DeniedIPs []string
	// IdentityJWT asks the server to send the backend a signed identity
	// token for every visitor Auth admitted (identity_jwt).
	IdentityJWT bool

	// The backend settings (internal/config/backend.go); DefaultService holds
	// their defaults.

	// TrimBind removes Path from the front of the request's path before
	// the target sees it, keeping the segment boundary, and sends the
	// prefix in X-Forwarded-Prefix (trim_bind). Default true; false (and a
	// Service built by hand) forwards the path whole.
	TrimBind bool
	// RewriteHost sends the target's own host (localhost for a unix
	// target) instead of the visitor's Host: the key pass_hostname,
	// inverted (pass_hostname: false). Default false, so that the zero
	// value passes the visitor's Host, as Aperio always has.
	RewriteHost bool
	// HostHeader is a fixed Host sent to the target whatever the visitor
	// asked for (host_header), for virtual-hosted backends; it wins over
	// RewriteHost. Empty: none.
	HostHeader string
	// TLSServerName is the name an https target's certificate is verified
	// against and sent in SNI (tls_server_name). Empty: the target's host.
	TLSServerName string
	// TLSCAFile is a PEM file of the CAs an https target's certificate must
	// chain to (tls_ca_file), at most 1 MiB. Empty: the system's roots.
	TLSCAFile string
	// TLSInsecureSkipVerify accepts any certificate from an https target
	// (tls_insecure_skip_verify); the client warns at start. Default false.
	TLSInsecureSkipVerify bool
	// TLSClientCert and TLSClientKey are PEM files of the certificate the
	// client presents to an https target that asks for one (mTLS)
	// (tls_client_cert, tls_client_key), both or neither, at most 1 MiB.
	TLSClientCert, TLSClientKey string
	// Timeout bounds the wait for the target's response head once the
	// request is sent (timeout); bodies and streams are not bounded by it.
	// 0, the default, leaves it to the server's gateway_response_timeout.
	// At most 1h.
	Timeout time.Duration
	// ConnectTimeout bounds dialing the target (connect_timeout). Default
	// 10s; 0 means the default. At most 5m.
	ConnectTimeout time.Duration
	// Retry is the retry: block; the zero value retries nothing.
	Retry Retry
	// CircuitBreaker is the circuit_breaker: block; Failures 0 is none.
	CircuitBreaker CircuitBreaker
	// WaitForBackend keeps the service out of the announcement until its
	// first probe passed (wait_for_backend), so the server does not know
	// the bind before the backend is up. It needs a probe. Default false.
	WaitForBackend bool

	// Headers are the service's response header rules (headers); nil for
	// none.
	Headers *HeaderRules

	// TLSPassthrough asks the server to hand this service's TLS
	// connections over unterminated, routed by SNI (tls_passthrough):
	// the client connects them to the target's host:port, where the
	// backend holds its own certificate. No path, auth or headers.
	TLSPassthrough bool

	// The static file settings (internal/config/static.go).

	// Serve is a directory the client serves itself instead of a target
	// (serve); relative to the directory of the file that sets it. It
	// excludes Target.
	Serve string
	// SPA answers a GET for a missing path that names no file (no
	// extension) with the index of the root (spa), for single-page apps.
	SPA bool
	// Index is the file served for a directory (index); default
	// index.html.
	Index string
	// DirectoryListing lists a directory that has no index
	// (directory_listing); default false: 404.
	DirectoryListing bool
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

// Scaling is a client's scaling declaration (autoscaling.md): the one
// type the announcement carries, so its fields, defaults
// (tunnel.DefaultScaling) and rules (tunnel.Scaling.Validate) are the
// server's. LoadClient starts from tunnel.DefaultScaling, applies the
// scaling.* keys (scaling.url, scaling.secret, scaling.min, scaling.max,
// scaling.cold_start, scaling.target_utilization, scaling.window,
// scaling.cooldown), and sets an unset scaling.max to
// tunnel.DefaultScalingMax(Min).
type Scaling = tunnel.Scaling
