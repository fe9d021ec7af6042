package config

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/aperio-dev/aperio/tunnel"
)

// ServerFile is the file aperio-server reads from its working directory when
// no other is named.
const ServerFile = "aperio-server.yaml"

// ServerConfigEnv is the environment variable that names the server's config
// file, like --config.
const ServerConfigEnv = "APERIO_SERVER_CONFIG"

// The value sets of the enumerated settings.
var (
	lbStrategies = []string{"round-robin", "least-inflight", "primary-standby"}
	failovers    = []string{"fail", "retry", "wait", "retry-wait"}
	logLevels    = []string{"debug", "info", "warn", "error"}
	logFormats   = []string{"text", "json"}
)

// DefaultServer returns the server configuration with every default of the
// contract and nothing else: Token is empty, so it does not validate.
func DefaultServer() Server {
	return Server{
		Host:                     "0.0.0.0",
		Port:                     8080,
		DataDir:                  "./data",
		GatewayTimeout:           10 * time.Second,
		GatewayResponseTimeout:   30 * time.Second,
		MaxConcurrentRequests:    100,
		MaxBodyBytes:             10 << 20,
		IPLimitMax:               100,
		IPLimitRefill:            5,
		ReadHeaderTimeout:        10 * time.Second,
		MaxHeaderBytes:           1 << 20,
		KeepAliveTimeout:         2 * time.Minute,
		VisitorIdleTimeout:       60 * time.Second,
		VisitorMinBytesPerSecond: 512,
		MaxConnectionsPerIP:      256,
		TunnelHandshakeTimeout:   10 * time.Second,
		ClientDownThreshold:      15 * time.Second,
		TunnelMaxHeaderBytes:     tunnel.DefaultMaxHeaderBytes,
		TunnelMaxStreams:         tunnel.DefaultMaxStreams,
		TunnelAnnounceInterval:   tunnel.DefaultAnnounceInterval,
		ShutdownTimeout:          10 * time.Second,
		LBStrategy:               "round-robin",
		Failover:                 "fail",
		FailoverMaxJumps:         2,
		FailoverWindow:           15 * time.Second,
		CacheMaxBytes:            64 << 20,
		CacheMaxStale:            time.Hour,
		ScalingRecordTTL:         30 * day,
		ScalingMaxHeld:           1000,
		ScalingMaxCallsPerMinute: 60,
		AccessLog:                true,
		ServerTiming:             true,
		OTelSampleRate:           1,
		LogLevel:                 "info",
		LogFormat:                "text",
		RealIPHeader:             "X-Forwarded-For",

		ScalingMaxRecordsPerOrg:   100,
		ScalingMaxRecordsPerToken: 32,
	}
}

// serverSettings is the server's key table, in --print-config order.
func serverSettings() []setting[Server] {
	type S = Server
	tab := []setting[S]{
		stringSetting("host", "listen address of the public port", func(c *S) *string { return &c.Host }).alias("HOST"),
		intSetting("port", "public port: visitors, tunnels, admin API", func(c *S) *int { return &c.Port }).alias("PORT"),
		stringSetting("server.token", "master token; authorizes tunnels and the admin API", func(c *S) *string { return &c.Token }).secret(),
		stringSetting("data_dir", "directory of the embedded store", func(c *S) *string { return &c.DataDir }),
		stringSetting("database_url", "postgres:// URL; use PostgreSQL instead of the embedded store", func(c *S) *string { return &c.DatabaseURL }).secret(),
		stringSetting("tls_cert", "PEM certificate file; with tls_key serves HTTPS", func(c *S) *string { return &c.TLSCert }),
		stringSetting("tls_key", "PEM key file of tls_cert", func(c *S) *string { return &c.TLSKey }),
		durationSetting("gateway_timeout", "how long a request may wait for a client or a permit", func(c *S) *time.Duration { return &c.GatewayTimeout }),
		durationSetting("gateway_response_timeout", "how long a dispatched request may wait for its response head", func(c *S) *time.Duration { return &c.GatewayResponseTimeout }),
		intSetting("max_concurrent_requests", "proxied requests in flight on the whole server", func(c *S) *int { return &c.MaxConcurrentRequests }),
		sizeSetting("max_body_size", "request body ceiling (10MiB, bytes)", func(c *S) *int64 { return &c.MaxBodyBytes }),
		intSetting("ip_limit_max", "per-visitor token bucket size", func(c *S) *int { return &c.IPLimitMax }),
		floatSetting("ip_limit_refill", "per-visitor refill, tokens per second", func(c *S) *float64 { return &c.IPLimitRefill }),
		durationSetting("read_header_timeout", "time a visitor may take to send a request head", func(c *S) *time.Duration { return &c.ReadHeaderTimeout }),
		sizeSetting("max_header_bytes", "request head ceiling (1MiB, bytes); larger heads get 431", func(c *S) *int64 { return &c.MaxHeaderBytes }),
		durationSetting("keepalive_timeout", "idle time of a keep-alive connection between requests", func(c *S) *time.Duration { return &c.KeepAliveTimeout }),
		durationSetting("visitor_idle_timeout", "end a request whose visitor neither reads nor sends for this long", func(c *S) *time.Duration { return &c.VisitorIdleTimeout }),
		intSetting("visitor_min_bytes_per_second", "slowest visitor read or upload rate, judged after visitor_idle_timeout of waiting", func(c *S) *int { return &c.VisitorMinBytesPerSecond }),
		intSetting("max_connections_per_ip", "concurrent connections of one visitor address; 0 = no cap", func(c *S) *int { return &c.MaxConnectionsPerIP }),
		durationSetting("tunnel_handshake_timeout", "time from a tunnel upgrade to the client's hello", func(c *S) *time.Duration { return &c.TunnelHandshakeTimeout }),
		durationSetting("client_down_threshold", "heartbeat age after which a client is dropped", func(c *S) *time.Duration { return &c.ClientDownThreshold }),
		sizeSetting("tunnel_max_header_bytes", "largest response head a client may send (1MiB, bytes)", func(c *S) *int64 { return &c.TunnelMaxHeaderBytes }),
		intSetting("tunnel_max_streams", "streams open per tunnel session", func(c *S) *int { return &c.TunnelMaxStreams }),
		durationSetting("tunnel_announce_interval", "least time between announcements applied per session", func(c *S) *time.Duration { return &c.TunnelAnnounceInterval }),
		durationSetting("shutdown_timeout", "how long SIGTERM waits for in-flight requests", func(c *S) *time.Duration { return &c.ShutdownTimeout }),
		enumSetting("lb_strategy", "round-robin, least-inflight or primary-standby", func(c *S) *string { return &c.LBStrategy }),
		enumSetting("failover", "fail, retry, wait or retry-wait", func(c *S) *string { return &c.Failover }),
		boolSetting("failover_all_methods", "fail over non-idempotent methods too", func(c *S) *bool { return &c.FailoverAllMethods }),
		intSetting("failover_max_jumps", "re-dispatches of one request", func(c *S) *int { return &c.FailoverMaxJumps }),
		durationSetting("failover_window", "time one request may spend failing over", func(c *S) *time.Duration { return &c.FailoverWindow }),
		mapSetting("fallbacks", "hostname=URL redirects when no client can serve", func(c *S) *map[string]string { return &c.Fallbacks }),
		boolSetting("cache", "serve-stale cache for services that opt into resilience", func(c *S) *bool { return &c.Cache }),
		sizeSetting("cache_max_bytes", "cache size (64MiB, bytes)", func(c *S) *int64 { return &c.CacheMaxBytes }),
		durationSetting("cache_max_stale", "oldest cached answer served", func(c *S) *time.Duration { return &c.CacheMaxStale }),
		boolSetting("scaling", "honor client scaling declarations", func(c *S) *bool { return &c.Scaling }),
		boolSetting("scaling_allow_http", "permit plain-http scaling endpoints", func(c *S) *bool { return &c.ScalingAllowHTTP }),
		boolSetting("scaling_allow_private", "permit scaling endpoints on private addresses", func(c *S) *bool { return &c.ScalingAllowPrivate }),
		durationSetting("scaling_record_ttl", "drop scaling records not re-announced for this long", func(c *S) *time.Duration { return &c.ScalingRecordTTL }),
		intSetting("scaling_max_held", "requests held across all cold starts", func(c *S) *int { return &c.ScalingMaxHeld }),
		intSetting("scaling_max_calls_per_minute", "scaling hook calls per minute", func(c *S) *int { return &c.ScalingMaxCallsPerMinute }),
		intSetting("scaling_max_records_per_org", "scaling records one organization may hold", func(c *S) *int { return &c.ScalingMaxRecordsPerOrg }),
		intSetting("scaling_max_records_per_token", "scaling records one client token may arm", func(c *S) *int { return &c.ScalingMaxRecordsPerToken }),
		listSetting("outbound_allowlist", "host, *.domain and CIDR patterns outbound calls may reach", func(c *S) *[]string { return &c.OutboundAllowlist }, nil),
		boolSetting("outbound_block_private", "refuse outbound calls to internal addresses", func(c *S) *bool { return &c.OutboundBlockPrivate }),
		stringSetting("metrics_token", "bearer token of /aperio/metrics; unset answers 404", func(c *S) *string { return &c.MetricsToken }).secret(),
		boolSetting("access_log", "one log line per proxied request (logger=access)", func(c *S) *bool { return &c.AccessLog }),
		boolSetting("access_log_ips", "visitor addresses in access log lines", func(c *S) *bool { return &c.AccessLogIPs }),
		boolSetting("server_timing", "Server-Timing header on answers that waited", func(c *S) *bool { return &c.ServerTiming }),
		floatSetting("otel_sample_rate", "fraction of traces sampled when OTEL_EXPORTER_OTLP_* turns tracing on", func(c *S) *float64 { return &c.OTelSampleRate }),
		enumSetting("log_level", "debug, info, warn or error", func(c *S) *string { return &c.LogLevel }).alias("LOG_LEVEL"),
		enumSetting("log_format", "text or json", func(c *S) *string { return &c.LogFormat }),
		// The edge: who may speak for the visitor, who is refused.
		listSetting("trusted_proxies", "CIDRs/IPs whose forwarding headers and PROXY headers are believed", func(c *S) *[]string { return &c.TrustedProxies }, nil),
		stringSetting("real_ip_header", "header a trusted proxy names the visitor in (X-Forwarded-For)", func(c *S) *string { return &c.RealIPHeader }),
		boolSetting("proxy_protocol", "PROXY protocol v1/v2 on the public port, from trusted_proxies only", func(c *S) *bool { return &c.ProxyProtocol }),
		listSetting("denied_ips", "CIDRs/IPs answered 403 before any handler", func(c *S) *[]string { return &c.DeniedIPs }, nil),
		listSetting("admin_allowed_ips", "CIDRs/IPs that may reach the admin API and metrics; empty = all", func(c *S) *[]string { return &c.AdminAllowedIPs }, nil),
		stringSetting("metrics_listen", "host:port of a separate metrics listener; empty = /aperio/metrics on the public port", func(c *S) *string { return &c.MetricsListen }),
	}
	for i := range tab {
		tab[i].Flag = ""
	}
	return tab
}

// ServerKeys returns every key of aperio-server, in --print-config order.
// Flag is empty: the server takes no per-key flags.
func ServerKeys() []Key {
	return keysOf(serverSettings())
}

func keysOf[C any](tab []setting[C]) []Key {
	keys := make([]Key, len(tab))
	for i, s := range tab {
		keys[i] = s.Key
	}
	return keys
}

// ServerOptions says where LoadServer finds its surfaces.
type ServerOptions struct {
	// File is the yaml file to read. Empty means the file named by
	// APERIO_SERVER_CONFIG, which must then exist, or else ServerFile if it
	// exists.
	File string
	// FileMustExist makes a missing File an error (--config FILE).
	FileMustExist bool
	// Env is the environment; main passes os.LookupEnv. Nil is empty.
	Env Env
	// ReadFile reads a file; nil means os.ReadFile.
	ReadFile func(name string) ([]byte, error)
}

// LoadServer builds the server configuration, field by field: the yaml file
// wins over the environment, which wins over DefaultServer. ${VAR} and
// ${VAR:-default} in the file's values expand from o.Env.
//
// The error joins every problem, loading and validation alike, each an
// *Error. The configuration and sources are returned even then, with the
// defaults in place of values that did not load.
func LoadServer(o ServerOptions) (Server, *Sources, error) {
	file, mustExist := o.File, o.FileMustExist
	if file == "" {
		if v, ok := o.Env.lookup(ServerConfigEnv); ok && v != "" {
			file, mustExist = v, true
		} else {
			file = ServerFile
		}
	}
	l := newLoader()
	tab := serverSettings()
	sch := newSchema()
	addSettings(sch, tab)
	fileLayer, _ := l.readYAML(o.ReadFile, file, mustExist, o.Env, sch)
	envVals := layer{}
	envLayer(envVals, tab, o.Env, nil)

	cfg := DefaultServer()
	apply(l, &cfg, tab, []layer{fileLayer, envVals}, func() *Server {
		s := DefaultServer()
		return &s
	}, "")
	return cfg, l.src, l.result(cfg.problems(l.src))
}

// Validate reports every problem of s, each an *Error, joined with
// errors.Join; nil when there is none. Errors name no source: LoadServer
// returns the same problems with their sources.
func (s Server) Validate() error {
	return joinProblems(s.problems(nil))
}

func (s Server) problems(src *Sources) []*Error {
	v := &checker{src: src}
	if s.Port < 0 || s.Port > 65535 {
		v.add("port", "%d is not a port (0 to 65535)", s.Port)
	}
	if s.Token == "" {
		v.add("server.token", "required: set server.token in %s or APERIO_SERVER_TOKEN", ServerFile)
	} else if msg := shortMasterToken(s.Token, MinMasterTokenLen); msg != "" {
		v.add("server.token", "%s required", msg)
	}
	if s.DatabaseURL != "" && checkURL(s.DatabaseURL, databaseSchemes...) != "" {
		// The URL carries a password: never echo it.
		v.add("database_url", "must be a postgres:// or postgresql:// URL")
	}
	if s.TLSCert != "" && s.TLSKey == "" {
		v.add("tls_key", "required when tls_cert is set")
	}
	if s.TLSKey != "" && s.TLSCert == "" {
		v.add("tls_cert", "required when tls_key is set")
	}
	v.positive("gateway_timeout", s.GatewayTimeout)
	v.positive("gateway_response_timeout", s.GatewayResponseTimeout)
	if s.MaxConcurrentRequests < 1 {
		v.add("max_concurrent_requests", "must be at least 1, got %d", s.MaxConcurrentRequests)
	}
	v.nonNegative("max_body_size", s.MaxBodyBytes)
	v.nonNegative("ip_limit_max", int64(s.IPLimitMax))
	if !(s.IPLimitRefill >= 0) {
		v.add("ip_limit_refill", "must not be negative, got %g", s.IPLimitRefill)
	}
	v.nonNegativeDuration("read_header_timeout", s.ReadHeaderTimeout)
	v.nonNegative("max_header_bytes", s.MaxHeaderBytes)
	v.nonNegativeDuration("keepalive_timeout", s.KeepAliveTimeout)
	v.nonNegativeDuration("visitor_idle_timeout", s.VisitorIdleTimeout)
	v.nonNegative("visitor_min_bytes_per_second", int64(s.VisitorMinBytesPerSecond))
	v.nonNegative("max_connections_per_ip", int64(s.MaxConnectionsPerIP))
	v.nonNegativeDuration("tunnel_handshake_timeout", s.TunnelHandshakeTimeout)
	v.positive("client_down_threshold", s.ClientDownThreshold)
	if s.TunnelMaxHeaderBytes < 1 {
		v.add("tunnel_max_header_bytes", "must be positive, got %d", s.TunnelMaxHeaderBytes)
	}
	if s.TunnelMaxStreams < 2 {
		v.add("tunnel_max_streams", "must be at least 2, got %d", s.TunnelMaxStreams)
	}
	v.positive("tunnel_announce_interval", s.TunnelAnnounceInterval)
	v.nonNegativeDuration("shutdown_timeout", s.ShutdownTimeout)
	v.oneOf("lb_strategy", s.LBStrategy, lbStrategies)
	v.oneOf("failover", s.Failover, failovers)
	v.nonNegative("failover_max_jumps", int64(s.FailoverMaxJumps))
	v.nonNegativeDuration("failover_window", s.FailoverWindow)
	for _, host := range slices.Sorted(maps.Keys(s.Fallbacks)) {
		if !validHostname(host) {
			v.add("fallbacks", "%q is not a valid hostname", host)
		}
		if msg := checkURL(s.Fallbacks[host], hookSchemes...); msg != "" {
			v.add("fallbacks", "%s: %s", host, msg)
		}
	}
	v.nonNegative("cache_max_bytes", s.CacheMaxBytes)
	v.nonNegativeDuration("cache_max_stale", s.CacheMaxStale)
	v.nonNegativeDuration("scaling_record_ttl", s.ScalingRecordTTL)
	v.nonNegative("scaling_max_held", int64(s.ScalingMaxHeld))
	v.nonNegative("scaling_max_calls_per_minute", int64(s.ScalingMaxCallsPerMinute))
	if s.ScalingMaxRecordsPerOrg < 1 {
		v.add("scaling_max_records_per_org", "must be at least 1, got %d", s.ScalingMaxRecordsPerOrg)
	}
	if s.ScalingMaxRecordsPerToken < 1 {
		v.add("scaling_max_records_per_token", "must be at least 1, got %d", s.ScalingMaxRecordsPerToken)
	}
	for _, p := range s.OutboundAllowlist {
		if !validOutboundPattern(p) {
			v.add("outbound_allowlist", "%q is not a hostname, *.domain, IP address or CIDR prefix", p)
		}
	}
	if s.OTelSampleRate < 0 || s.OTelSampleRate > 1 || s.OTelSampleRate != s.OTelSampleRate {
		v.add("otel_sample_rate", "must be between 0 and 1, got %g", s.OTelSampleRate)
	}
	v.oneOf("log_level", s.LogLevel, logLevels)
	v.oneOf("log_format", s.LogFormat, logFormats)
	s.edgeProblems(v)
	return v.errs
}

// checker collects validation problems, naming each key's source.
type checker struct {
	src  *Sources
	errs []*Error
}

func (v *checker) add(key, format string, args ...any) {
	v.errs = append(v.errs, newError(key, v.src.Of(key), fmt.Sprintf(format, args...)))
}

func (v *checker) positive(key string, d time.Duration) {
	if d <= 0 {
		v.add(key, "must be positive, got %s", formatDuration(d))
	}
}

func (v *checker) nonNegativeDuration(key string, d time.Duration) {
	if d < 0 {
		v.add(key, "must not be negative, got %s", formatDuration(d))
	}
}

func (v *checker) nonNegative(key string, n int64) {
	if n < 0 {
		v.add(key, "must not be negative, got %d", n)
	}
}

func (v *checker) oneOf(key, got string, set []string) {
	if !slices.Contains(set, got) {
		v.add(key, "%q is not %s", got, orList(set))
	}
}

func joinProblems(problems []*Error) error {
	errs := make([]error, len(problems))
	for i, p := range problems {
		errs[i] = p
	}
	return errors.Join(errs...)
}
