// Package serverconfig owns aperio-server's key table: every server key
// bound to its field of server.Config (or of the process settings beside
// it), the loader that layers the yaml file over the environment over
// server.DefaultConfig, validation key by key, and --print-config. The
// machinery (spellings, parsing, sources, errors) is package config's, shared
// with the client; this package exists because it imports the server's
// packages, which aperio-client must not link.
package serverconfig

import (
	"errors"
	"io"
	"time"

	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/edge/acme"
	"github.com/aperio-dev/aperio/internal/server"
	"github.com/aperio-dev/aperio/internal/visitor/policy"
	"github.com/aperio-dev/aperio/router"
)

// File is the file aperio-server reads from its working directory when
// no other is named.
const File = "aperio-server.yaml"

// FileEnv is the environment variable that names the server's config
// file, like --config.
const FileEnv = "APERIO_SERVER_CONFIG"

// defaultAccesses are the values of default_access.
var defaultAccesses = []string{"allow", "deny"}

// databaseSchemes are the schemes of database_url.
var databaseSchemes = []string{"postgres", "postgresql"}

// Config is the effective configuration of aperio-server: the gateway's,
// and the process settings main applies itself.
type Config struct {
	server.Config
	// OTelSampleRate is the fraction of traces started here that are
	// sampled when tracing is on (the OTEL_EXPORTER_OTLP_* environment
	// names an endpoint), in [0,1] (otel_sample_rate). Default 1.
	OTelSampleRate float64
	// LogLevel is debug, info, warn or error (log_level, also LOG_LEVEL).
	// Default info.
	LogLevel string
	// LogFormat is text or json (log_format). Default text.
	LogFormat string
	// ErrorPages, MaintenanceWindows and Fallbacks are error_pages,
	// maintenance_windows and fallbacks as written, with their lines;
	// Load sets the router's typed forms of them (Router.ErrorPages,
	// Router.MaintenanceWindows, Router.Fallbacks). Empty by default.
	ErrorPages         []ErrorPageEntry
	MaintenanceWindows []WindowEntry
	Fallbacks          FallbackEntries
}

// Default returns the server configuration with every default of the
// contract and nothing else: server.DefaultConfig and the process
// settings' defaults. Token is empty, so it does not validate.
func Default() Config {
	return Config{
		Config:         server.DefaultConfig(),
		OTelSampleRate: 1,
		LogLevel:       config.DefaultLogLevel,
		LogFormat:      config.DefaultLogFormat,
	}
}

// settings is the server's key table, in --print-config order.
func settings() []config.Setting[Config] {
	type S = Config
	tab := []config.Setting[S]{
		config.StringSetting("host", "listen address of the public port", func(c *S) *string { return &c.Host }).Alias("HOST"),
		config.IntSetting("port", "public port: visitors, tunnels, admin API", func(c *S) *int { return &c.Port }).Alias("PORT"),
		config.StringSetting("server.token", "master token; authorizes tunnels and the admin API", func(c *S) *string { return &c.Token }).Secret(),
		config.StringSetting("data_dir", "directory of the embedded store", func(c *S) *string { return &c.Store.DataDir }),
		config.StringSetting("database_url", "postgres:// URL; use PostgreSQL instead of the embedded store", func(c *S) *string { return &c.Store.DatabaseURL }).Secret(),
		config.StringSetting("tls_cert", "PEM certificate file; with tls_key serves HTTPS", func(c *S) *string { return &c.TLSCert }),
		config.StringSetting("tls_key", "PEM key file of tls_cert", func(c *S) *string { return &c.TLSKey }),
		config.StringSetting("acme.email", "ACME account email; with it (or acme.ca) certificates come from the CA automatically", func(c *S) *string { return &c.ACME.Email }),
		config.StringSetting("acme.ca", "ACME directory URL; empty: Let's Encrypt production", func(c *S) *string { return &c.ACME.CA }),
		config.StringSetting("acme.ca_root", "PEM file of roots trusted for the CA's own API (private CAs, tests)", func(c *S) *string { return &c.ACME.CARoot }),
		config.ListSetting("acme.challenges", "challenge types offered: tls-alpn-01, http-01", func(c *S) *[]string { return &c.ACME.Challenges }),
		config.BoolSetting("acme.on_demand", "obtain a certificate at the first handshake for a name a connected client binds", func(c *S) *bool { return &c.ACME.OnDemand }),
		config.DurationSetting("acme.on_demand_grace", "how long after its client left a name may still get its certificate on demand; 0 = bound now only", func(c *S) *time.Duration { return &c.ACME.OnDemandGrace }),
		config.IntSetting("acme.http_port", "port answering HTTP-01 and redirecting to HTTPS; 0 = off", func(c *S) *int { return &c.ACME.HTTPPort }),
		config.ListSetting("acme.hostnames", "the server's own names (its tunnel and dashboard URL), obtained at start", func(c *S) *[]string { return &c.ACME.Hostnames }),
		config.BoolSetting("acme.redirect", "redirect plain HTTP on acme.http_port to HTTPS", func(c *S) *bool { return &c.ACME.Redirect }),
		config.DurationSetting("gateway_timeout", "how long a request may wait for a client or a permit", func(c *S) *time.Duration { return &c.Router.GatewayTimeout }),
		config.DurationSetting("gateway_response_timeout", "how long a dispatched request may wait for its response head", func(c *S) *time.Duration { return &c.Tunnel.ResponseHeaderTimeout }),
		config.IntSetting("max_concurrent_requests", "proxied requests in flight on the whole server", func(c *S) *int { return &c.Router.MaxConcurrentRequests }),
		config.SizeSetting("max_body_size", "request body ceiling (10MiB, bytes)", func(c *S) *int64 { return &c.Router.MaxBodyBytes }),
		config.EnumSetting("default_access", "allow or deny: whether a service without auth is open", func(c *S) *string { return &c.DefaultAccess }).Values(defaultAccesses...),
		config.DurationSetting("identity_key_rotation", "age at which the identity JWT key is replaced; 0 = never", func(c *S) *time.Duration { return &c.IdentityKeyRotation }),
		config.StringSetting("oidc.issuer", "OpenID Connect provider for services with auth: oidc", func(c *S) *string { return &c.OIDC.Issuer }),
		config.StringSetting("oidc.client_id", "client id registered at the provider", func(c *S) *string { return &c.OIDC.ClientID }),
		config.StringSetting("oidc.client_secret", "client secret registered at the provider", func(c *S) *string { return &c.OIDC.ClientSecret }).Secret(),
		config.ListSetting("oidc.scopes", "scopes asked for; empty: openid,email,profile", func(c *S) *[]string { return &c.OIDC.Scopes }),
		config.StringSetting("oidc.redirect_url", "callback URL registered for the one hostname it names", func(c *S) *string { return &c.OIDC.RedirectURL }),
		config.BoolSetting("admin_oidc", "admin API login through the oidc: provider at /aperio/admin/login", func(c *S) *bool { return &c.AdminOIDC }),
		config.YAMLSetting(adminOIDCRolesKey, "who logs in as what: [{email|domain|group, org, role}], first match wins", func(c *S) *[]server.AdminOIDCRole { return &c.AdminOIDCRoles }, parseAdminOIDCRoles),
		config.IntSetting("ip_limit_max", "per-visitor token bucket size", func(c *S) *int { return &c.Router.IPLimitMax }),
		config.FloatSetting("ip_limit_refill", "per-visitor refill, tokens per second", func(c *S) *float64 { return &c.Router.IPLimitRefill }),
		config.DurationSetting("read_header_timeout", "time a visitor may take to send a request head", func(c *S) *time.Duration { return &c.ReadHeaderTimeout }),
		config.SizeSetting("max_header_bytes", "request head ceiling (1MiB, bytes); larger heads get 431", func(c *S) *int64 { return &c.MaxHeaderBytes }),
		config.DurationSetting("keepalive_timeout", "idle time of a keep-alive connection between requests", func(c *S) *time.Duration { return &c.KeepAliveTimeout }),
		config.DurationSetting("visitor_idle_timeout", "end a request whose visitor neither reads nor sends for this long", func(c *S) *time.Duration { return &c.Router.VisitorIdleTimeout }),
		config.Int64Setting("visitor_min_bytes_per_second", "slowest visitor read or upload rate, judged after visitor_idle_timeout of waiting", func(c *S) *int64 { return &c.Router.VisitorMinRate }),
		config.IntSetting("max_connections_per_ip", "concurrent connections of one visitor address; 0 = no cap", func(c *S) *int { return &c.MaxConnectionsPerIP }),
		config.IntSetting("max_streams_per_ip", "concurrent proxied requests of one visitor address (429 streams-per-ip); 0 = no cap", func(c *S) *int { return &c.Router.MaxStreamsPerIP }),
		config.IntSetting("max_ws_connections", "WebSocket relays open at once (503 beyond); 0 = no cap", func(c *S) *int { return &c.Router.MaxWSConnections }),
		config.IntSetting("max_tunnels", "client tunnel sessions at once; the next handshake is refused; 0 = no cap", func(c *S) *int { return &c.Tunnel.MaxSessions }),
		config.ListSetting("tcp_port_range", "public ports (N or N-M) clients may expose over TCP and UDP; empty = off", func(c *S) *[]string { return &c.TCPPortRange }),
		config.IntSetting("max_tcp_connections", "open visitor connections of one public TCP port; 0 = the default, 100", func(c *S) *int { return &c.MaxTCPConnections }),
		config.IntSetting("port_max_connections_per_ip", "open connections of one visitor address (IPv6: its /64) on one public TCP port; 0 = a quarter of max_tcp_connections", func(c *S) *int { return &c.PortMaxConnectionsPerIP }),
		config.DurationSetting("port_first_byte_timeout", "a public TCP port's visitor connection that has sent no byte for this long ends; 0 = the default, 30s", func(c *S) *time.Duration { return &c.PortFirstByteTimeout }),
		config.DurationSetting("udp_idle_timeout", "a UDP flow of a public port with no datagram either way for this long ends; 0 = the default, 60s", func(c *S) *time.Duration { return &c.UDPIdleTimeout }),
		config.DurationSetting("tunnel_handshake_timeout", "time from a tunnel upgrade to the client's hello", func(c *S) *time.Duration { return &c.Tunnel.HandshakeTimeout }),
		config.DurationSetting("client_down_threshold", "heartbeat age after which a client is dropped", func(c *S) *time.Duration { return &c.Tunnel.DownThreshold }),
		config.SizeSetting("tunnel_max_header_bytes", "largest response head a client may send (1MiB, bytes)", func(c *S) *int64 { return &c.Tunnel.MaxHeaderBytes }),
		config.IntSetting("tunnel_max_streams", "streams open per tunnel session", func(c *S) *int { return &c.Tunnel.MaxStreams }),
		config.DurationSetting("tunnel_announce_interval", "least time between announcements applied per session", func(c *S) *time.Duration { return &c.Tunnel.AnnounceInterval }),
		config.DurationSetting("shutdown_timeout", "how long SIGTERM waits for in-flight requests", func(c *S) *time.Duration { return &c.ShutdownTimeout }),
		config.EnumSetting("lb_strategy", "round-robin, least-inflight, primary-standby or sticky", func(c *S) *string { return &c.Router.Strategy }).Values(router.Strategies...),
		config.IntSetting("outlier_consecutive_5xx", "5xx answers in a row that eject a client from rotation; 0 = never", func(c *S) *int { return &c.Router.OutlierConsecutive5xx }),
		config.DurationSetting("outlier_ejection_time", "first ejection's length, doubling while it keeps failing (at most 10x)", func(c *S) *time.Duration { return &c.Router.OutlierEjectionTime }),
		config.IntSetting("outlier_max_ejected_percent", "most of a bind's clients ejected at once, percent", func(c *S) *int { return &c.Router.OutlierMaxEjectedPercent }),
		config.BoolSetting("require_hostname_bind", "refuse services that name no hostname (no catch-all)", func(c *S) *bool { return &c.RequireHostnameBind }),
		config.EnumSetting("failover", "fail, retry, wait or retry-wait", func(c *S) *string { return &c.Router.Failover }).Values(router.Failovers...),
		config.BoolSetting("failover_all_methods", "fail over non-idempotent methods too", func(c *S) *bool { return &c.Router.FailoverAllMethods }),
		config.IntSetting("failover_max_jumps", "re-dispatches of one request", func(c *S) *int { return &c.Router.FailoverMaxJumps }),
		config.DurationSetting("failover_window", "time one request may spend failing over", func(c *S) *time.Duration { return &c.Router.FailoverWindow }),
		config.SizeSetting("failover_replay_max_body", "request bodies kept for failover to re-send (256KiB, bytes; also the total kept)", func(c *S) *int64 { return &c.Router.FailoverReplayMaxBody }),
		config.IntListSetting("retry_on_5xx", "statuses on which an idempotent request is sent once more to another client", func(c *S) *[]int { return &c.Router.RetryOn5xx }),
		config.YAMLSetting("fallbacks", "redirects when no client can serve: [{hostname, url, preserve_path, permanent}] or hostname: URL", func(c *S) *FallbackEntries { return &c.Fallbacks }, fallbacksFromText),
		config.YAMLSetting("error_pages", "HTML pages by status and hostname: [{status, hostname, html}]", func(c *S) *[]ErrorPageEntry { return &c.ErrorPages }, nil),
		config.YAMLSetting("maintenance_windows", "recurring maintenance: [{hostname, weekdays, start, end, time_zone, reason}]", func(c *S) *[]WindowEntry { return &c.MaintenanceWindows }, nil),
		// The traffic policy (docs/traffic-policy.md): structured lists,
		// written in the file only.
		config.YAMLSetting("routes", "ordered route rules: redirect, respond or a per-route policy", func(c *S) *[]policy.Route { return &c.Router.Policy.Routes }, nil),
		config.YAMLSetting("rate_limits", "token buckets routes name, per route and key", func(c *S) *[]policy.RateLimit { return &c.Router.Policy.RateLimits }, nil),
		config.YAMLSetting("headers", "request and response header rules per hostname", func(c *S) *[]policy.HeaderRule { return &c.Router.Policy.Headers }, nil),
		config.BoolSetting("security_headers", "HSTS (over HTTPS), nosniff, Referrer-Policy, X-Frame-Options on every answer", func(c *S) *bool { return &c.Router.Policy.SecurityHeaders }),
		config.BoolSetting("cache", "serve-stale cache for services that opt into resilience", func(c *S) *bool { return &c.CacheEnabled }),
		config.SizeSetting("cache_max_bytes", "cache size (64MiB, bytes)", func(c *S) *int64 { return &c.Cache.MaxBytes }),
		config.DurationSetting("cache_max_stale", "oldest cached answer served", func(c *S) *time.Duration { return &c.Cache.MaxStale }),
		config.BoolSetting("scaling", "honor client scaling declarations", func(c *S) *bool { return &c.ScalingEnabled }),
		config.BoolSetting("scaling_allow_http", "permit plain-http scaling endpoints", func(c *S) *bool { return &c.Outbound.AllowHTTP }),
		config.BoolSetting("scaling_allow_private", "permit scaling endpoints on private addresses", func(c *S) *bool { return &c.Outbound.AllowPrivate }),
		config.DurationSetting("scaling_record_ttl", "drop scaling records not re-announced for this long", func(c *S) *time.Duration { return &c.ScalingRecordTTL }),
		config.IntSetting("scaling_max_held", "requests held per pool (one bind: hostname and path) for its cold start", func(c *S) *int { return &c.Router.MaxHeld }),
		config.IntSetting("scaling_max_calls_per_minute", "scaling hook calls per minute", func(c *S) *int { return &c.Scaling.MaxCallsPerMinute }),
		config.IntSetting("scaling_max_records_per_org", "scaling records one organization may hold", func(c *S) *int { return &c.Scaling.MaxRecordsPerOrg }),
		config.IntSetting("scaling_max_records_per_token", "scaling records one client token may arm", func(c *S) *int { return &c.Scaling.MaxRecordsPerToken }),
		config.ListSetting("outbound_allowlist", "host, *.domain and CIDR patterns outbound calls may reach", func(c *S) *[]string { return &c.Outbound.Allowlist }),
		config.BoolSetting("outbound_block_private", "refuse outbound calls to internal addresses", func(c *S) *bool { return &c.Outbound.BlockPrivate }),
		config.StringSetting("metrics_token", "bearer token of /aperio/metrics; unset answers 404", func(c *S) *string { return &c.MetricsToken }).Secret(),
		config.BoolSetting("access_log", "one log line per proxied request (logger=access)", func(c *S) *bool { return &c.AccessLog }),
		config.BoolSetting("access_log_ips", "visitor addresses in access log lines", func(c *S) *bool { return &c.AccessLogIPs }),
		config.BoolSetting("server_timing", "Server-Timing header on answers that waited", func(c *S) *bool { return &c.ServerTiming }),
		config.IntSetting("max_stream_subscribers", "followers of the admin API's live stream at once (8 per credential, a quarter per organization, one kept for the master token)", func(c *S) *int { return &c.MaxStreamSubscribers }),
		config.FloatSetting("otel_sample_rate", "fraction of traces sampled when OTEL_EXPORTER_OTLP_* turns tracing on", func(c *S) *float64 { return &c.OTelSampleRate }),
		config.EnumSetting("log_level", "debug, info, warn or error", func(c *S) *string { return &c.LogLevel }).Values(config.LogLevels...).Alias("LOG_LEVEL"),
		config.EnumSetting("log_format", "text or json", func(c *S) *string { return &c.LogFormat }).Values(config.LogFormats...),
		// The edge: who may speak for the visitor, who is refused.
		config.ListSetting("trusted_proxies", "CIDRs/IPs whose forwarding headers and PROXY headers are believed", func(c *S) *[]string { return &c.TrustedProxies }),
		config.StringSetting("real_ip_header", "header a trusted proxy names the visitor in (X-Forwarded-For)", func(c *S) *string { return &c.RealIPHeader }),
		config.EnumSetting("underscore_headers", "allow, drop or refuse (400) visitor header names with an underscore; spellings of aperio's own names always go", func(c *S) *string { return &c.Router.UnderscoreHeaders }).Values(router.UnderscoreHeaderActions...),
		config.BoolSetting("proxy_protocol", "PROXY protocol v1/v2 on the public port, from trusted_proxies only", func(c *S) *bool { return &c.ProxyProtocol }),
		config.ListSetting("denied_ips", "CIDRs/IPs answered 403 before any handler", func(c *S) *[]string { return &c.DeniedIPs }),
		config.ListSetting("admin_allowed_ips", "CIDRs/IPs that may reach the admin API and metrics; empty = all", func(c *S) *[]string { return &c.AdminAllowedIPs }),
		config.ListSetting("admin_hosts", "hostnames (or *.wildcards, IPs) the dashboard, admin API and admin login answer on; empty = IPs, localhost, *.localhost", func(c *S) *[]string { return &c.AdminHosts }),
		config.DurationSetting("usage_flush_interval", "time between writes of the usage counts to the store (quotas refresh with them)", func(c *S) *time.Duration { return &c.UsageFlushInterval }),
		config.ListSetting("inspect_redact_headers", "headers whose values the request inspector never keeps, beside Authorization and cookies", func(c *S) *[]string { return &c.Inspect.RedactHeaders }),
		config.StringSetting("metrics_listen", "host:port of a separate metrics listener; empty = /aperio/metrics on the public port", func(c *S) *string { return &c.MetricsListen }),
		config.StringSetting("debug_listen", "loopback host:port serving pprof and runtime metrics (127.0.0.1:6060); empty = none", func(c *S) *string { return &c.DebugListen }),
	}
	for i := range tab {
		tab[i] = tab[i].NoFlag()
	}
	return tab
}

// Keys returns every key of aperio-server, in --print-config order, each
// with its Default from Default. Flag is empty: the server takes no
// per-key flags.
func Keys() []config.Key {
	return config.KeysWithDefaults(settings(), Default())
}

// Options says where Load finds its surfaces.
type Options struct {
	// File is the yaml file to read. Empty means the file named by
	// APERIO_SERVER_CONFIG, which must then exist, or else File if it
	// exists.
	File string
	// FileMustExist makes a missing File an error (--config FILE).
	FileMustExist bool
	// Env is the environment; main passes os.LookupEnv. Nil is empty.
	Env config.Env
	// ReadFile reads a file; nil means os.ReadFile.
	ReadFile func(name string) ([]byte, error)
}

// Load builds the server configuration, field by field: the yaml file
// wins over the environment, which wins over Default. ${VAR} and
// ${VAR:-default} in the file's values expand from o.Env.
//
// The error joins every problem, loading and validation alike, each a
// *config.Error. The configuration and sources are returned even then, with
// the defaults in place of values that did not load.
func Load(o Options) (Config, *config.Sources, error) {
	file, mustExist := o.File, o.FileMustExist
	if file == "" {
		if v, ok := lookup(o.Env, FileEnv); ok && v != "" {
			file, mustExist = v, true
		} else {
			file = File
		}
	}
	c, src, err := config.LoadTable(settings(), config.TableOptions{File: file, FileMustExist: mustExist, Env: o.Env, ReadFile: o.ReadFile}, Default, check)
	resolveTraffic(&c)
	return c, src, err
}

// lookup reads name from env; a nil env is empty.
func lookup(env config.Env, name string) (string, bool) {
	if env == nil {
		return "", false
	}
	return env(name)
}

// Print writes the effective server configuration for --print-config:
// one key a line, "key = value  # source", in Keys order. Secrets print
// as <set> or <unset>, empty values as "". It returns the first write error.
func Print(w io.Writer, c Config, s *config.Sources) error {
	return config.PrintTable(w, &c, settings(), s)
}

// Validate reports every problem of c, each a *config.Error, joined with
// errors.Join; nil when there is none. Errors name no source: Load
// returns the same problems with their sources.
func (c Config) Validate() error {
	v := config.NewChecker(nil)
	check(c, v)
	return v.Err()
}

// check reports every problem of s on v, each naming its key.
func check(s Config, v *config.Checker) {
	if s.Port < 0 || s.Port > 65535 {
		v.Add("port", "%d is not a port (0 to 65535)", s.Port)
	}
	if s.Token == "" {
		v.Add("server.token", "required: set server.token in %s or APERIO_SERVER_TOKEN", File)
	} else if msg := shortMasterToken(s.Token, MinMasterTokenLen); msg != "" {
		v.Add("server.token", "%s required", msg)
	}
	if s.Store.DatabaseURL != "" && config.CheckURL(s.Store.DatabaseURL, databaseSchemes...) != "" {
		// The URL carries a password: never echo it.
		v.Add("database_url", "must be a postgres:// or postgresql:// URL")
	}
	if s.TLSCert != "" && s.TLSKey == "" {
		v.Add("tls_key", "required when tls_cert is set")
	}
	if s.TLSKey != "" && s.TLSCert == "" {
		v.Add("tls_cert", "required when tls_key is set")
	}
	if s.ACME.Enabled() {
		if s.TLSCert != "" {
			v.Add("acme.email", "automatic TLS and tls_cert exclude each other: remove one")
		}
		var bad *acme.ConfigError
		if err := s.ACME.Validate(); errors.As(err, &bad) {
			v.Add(bad.Key, "%s", bad.Msg)
		}
		if s.ACME.HTTPPort != 0 && s.ACME.HTTPPort == s.Port {
			v.Add("acme.http_port", "%d is the public port", s.Port)
		}
	}
	v.Positive("gateway_timeout", s.Router.GatewayTimeout)
	v.Positive("gateway_response_timeout", s.Tunnel.ResponseHeaderTimeout)
	if s.Router.MaxConcurrentRequests < 1 {
		v.Add("max_concurrent_requests", "must be at least 1, got %d", s.Router.MaxConcurrentRequests)
	}
	v.NonNegative("max_body_size", s.Router.MaxBodyBytes)
	if s.DefaultAccess != "" { // "" is a hand-built Config: allow
		v.OneOf("default_access", s.DefaultAccess, defaultAccesses)
	}
	if r := s.IdentityKeyRotation; r != 0 && (r < server.MinIdentityKeyRotation || r > server.MaxIdentityKeyRotation) {
		v.Add("identity_key_rotation", "must be 0 (never) or between %v and %v, got %v", server.MinIdentityKeyRotation, server.MaxIdentityKeyRotation, r)
	}
	v.NonNegative("ip_limit_max", int64(s.Router.IPLimitMax))
	if !(s.Router.IPLimitRefill >= 0) {
		v.Add("ip_limit_refill", "must not be negative, got %g", s.Router.IPLimitRefill)
	}
	v.NonNegativeDuration("read_header_timeout", s.ReadHeaderTimeout)
	v.NonNegative("max_header_bytes", s.MaxHeaderBytes)
	v.NonNegativeDuration("keepalive_timeout", s.KeepAliveTimeout)
	v.NonNegativeDuration("visitor_idle_timeout", s.Router.VisitorIdleTimeout)
	v.NonNegative("visitor_min_bytes_per_second", int64(s.Router.VisitorMinRate))
	v.NonNegative("max_connections_per_ip", int64(s.MaxConnectionsPerIP))
	v.NonNegative("max_streams_per_ip", int64(s.Router.MaxStreamsPerIP))
	v.NonNegative("max_ws_connections", int64(s.Router.MaxWSConnections))
	v.NonNegative("max_tunnels", int64(s.Tunnel.MaxSessions))
	v.NonNegative("max_tcp_connections", int64(s.MaxTCPConnections))
	v.NonNegative("port_max_connections_per_ip", int64(s.PortMaxConnectionsPerIP))
	v.NonNegativeDuration("port_first_byte_timeout", s.PortFirstByteTimeout)
	v.NonNegativeDuration("udp_idle_timeout", s.UDPIdleTimeout)
	v.NonNegative("max_stream_subscribers", int64(s.MaxStreamSubscribers))
	v.NonNegativeDuration("tunnel_handshake_timeout", s.Tunnel.HandshakeTimeout)
	v.Positive("client_down_threshold", s.Tunnel.DownThreshold)
	if s.Tunnel.MaxHeaderBytes < 1 {
		v.Add("tunnel_max_header_bytes", "must be positive, got %d", s.Tunnel.MaxHeaderBytes)
	}
	if s.Tunnel.MaxStreams < 2 {
		v.Add("tunnel_max_streams", "must be at least 2, got %d", s.Tunnel.MaxStreams)
	}
	v.Positive("tunnel_announce_interval", s.Tunnel.AnnounceInterval)
	v.NonNegativeDuration("shutdown_timeout", s.ShutdownTimeout)
	v.OneOf("lb_strategy", s.Router.Strategy, router.Strategies)
	v.OneOf("failover", s.Router.Failover, router.Failovers)
	v.OneOf("underscore_headers", s.Router.UnderscoreHeaders, router.UnderscoreHeaderActions)
	v.NonNegative("failover_max_jumps", int64(s.Router.FailoverMaxJumps))
	v.NonNegativeDuration("failover_window", s.Router.FailoverWindow)
	v.NonNegative("outlier_consecutive_5xx", int64(s.Router.OutlierConsecutive5xx))
	if s.Router.OutlierConsecutive5xx > 0 {
		v.Positive("outlier_ejection_time", s.Router.OutlierEjectionTime)
	}
	if p := s.Router.OutlierMaxEjectedPercent; p < 0 || p > 100 {
		v.Add("outlier_max_ejected_percent", "must be within 0..100, got %d", p)
	}
	v.NonNegative("failover_replay_max_body", s.Router.FailoverReplayMaxBody)
	if err := s.Inspect.Validate(); err != nil {
		v.Add("inspect_redact_headers", "%v", err)
	}
	if n := len(s.Router.RetryOn5xx); n > router.MaxRetryOn5xx {
		v.Add("retry_on_5xx", "lists %d statuses, at most %d", n, router.MaxRetryOn5xx)
	}
	for _, st := range s.Router.RetryOn5xx {
		if st < 500 || st > 599 {
			v.Add("retry_on_5xx", "%d is not a 5xx status", st)
		}
	}
	trafficProblems(s, v)
	policyProblems(s.Router.Policy, v)
	v.NonNegative("cache_max_bytes", s.Cache.MaxBytes)
	v.NonNegativeDuration("cache_max_stale", s.Cache.MaxStale)
	v.NonNegativeDuration("scaling_record_ttl", s.ScalingRecordTTL)
	if f := s.UsageFlushInterval; f < server.MinUsageFlushInterval || f > server.MaxUsageFlushInterval {
		v.Add("usage_flush_interval", "must be between %v and %v, got %v", server.MinUsageFlushInterval, server.MaxUsageFlushInterval, f)
	}
	v.NonNegative("scaling_max_held", int64(s.Router.MaxHeld))
	v.NonNegative("scaling_max_calls_per_minute", int64(s.Scaling.MaxCallsPerMinute))
	if s.Scaling.MaxRecordsPerOrg < 1 {
		v.Add("scaling_max_records_per_org", "must be at least 1, got %d", s.Scaling.MaxRecordsPerOrg)
	}
	if s.Scaling.MaxRecordsPerToken < 1 {
		v.Add("scaling_max_records_per_token", "must be at least 1, got %d", s.Scaling.MaxRecordsPerToken)
	}
	for _, p := range s.Outbound.Allowlist {
		if !config.ValidOutboundPattern(p) {
			v.Add("outbound_allowlist", "%q is not a hostname, *.domain, IP address or CIDR prefix", p)
		}
	}
	if s.OTelSampleRate < 0 || s.OTelSampleRate > 1 || s.OTelSampleRate != s.OTelSampleRate {
		v.Add("otel_sample_rate", "must be between 0 and 1, got %g", s.OTelSampleRate)
	}
	v.OneOf("log_level", s.LogLevel, config.LogLevels)
	v.OneOf("log_format", s.LogFormat, config.LogFormats)
	edgeProblems(s, v)
	adminOIDCProblems(s, v)
}

// policyProblems reports every problem of the traffic policy under the
// key of its list (routes, rate_limits, headers), naming the entry and its
// line, and every route rule an earlier one fully covers.
func policyProblems(pc policy.Config, v *config.Checker) {
	p, err := policy.New(pc)
	if err != nil {
		for _, e := range unjoin(err) {
			var re *policy.RuleError
			if errors.As(e, &re) {
				v.Add(re.Key, "%s", re.Error())
			} else {
				v.Add("routes", "%v", e)
			}
		}
		return
	}
	_, unreachable := p.Check()
	for _, msg := range unreachable {
		v.Add("routes", "%s", msg)
	}
}

// unjoin returns the errors err joins, or err alone.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
