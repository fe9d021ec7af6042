package server

import (
	"errors"
	"fmt"
	"time"

	"github.com/aperio-dev/aperio/internal/ports"
	"github.com/aperio-dev/aperio/internal/portspec"

	"github.com/aperio-dev/aperio/autoscale"
	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/control/admin"
	"github.com/aperio-dev/aperio/internal/debughttp"
	"github.com/aperio-dev/aperio/internal/edge/acme"
	"github.com/aperio-dev/aperio/internal/outbound"
	"github.com/aperio-dev/aperio/internal/telemetry"
	"github.com/aperio-dev/aperio/internal/visitor/access"
	"github.com/aperio-dev/aperio/internal/visitor/inspect"
	"github.com/aperio-dev/aperio/internal/visitor/signing"
	"github.com/aperio-dev/aperio/internal/visitor/stale"
	"github.com/aperio-dev/aperio/internal/visitor/usage"
	"github.com/aperio-dev/aperio/router"
	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/tunnel"
)

// Config is the configuration of a Gateway: the settings of each package
// the server assembles, passed through as they are, and the gateway's own
// (the listener, the edge, shutdown, metrics). DefaultConfig holds every
// default; a Config built by hand should start from it, since several zero
// values mean "off". The server's keys (config/serverconfig) bind to these
// fields; each field's doc names its key.
type Config struct {
	// Host is the listen address of the public port (host, also HOST).
	// Default 0.0.0.0; empty listens on every address.
	Host string
	// Port is the public port for visitors, tunnels and /aperio/
	// (port, also PORT). Default 8080; 0 lets the kernel pick one.
	Port int
	// Token is the master token (server.token). Required: it authorizes
	// tunnels and the admin API. Secret.
	Token string

	// Store is where state lives: DataDir (data_dir, default ./data) or
	// PostgreSQL at DatabaseURL (database_url, secret). New fills its
	// Logger. Unused when Options.Store is set.
	Store store.Config

	// TLSCert is a PEM certificate file (tls_cert). With TLSKey the server
	// speaks HTTPS and HTTP/2; with both empty it speaks plain HTTP and h2c.
	TLSCert string
	// ACME is the acme: block: automatic TLS from an ACME CA when it
	// is Enabled (an email or a CA set); tls_cert and tls_key are then
	// refused.
	ACME acme.Config
	// TLSKey is the PEM key file of TLSCert (tls_key).
	TLSKey string

	// Router holds the routing settings: gateway_timeout,
	// max_concurrent_requests, max_body_size, ip_limit_*, lb_strategy,
	// failover*, fallbacks, scaling_max_held and the visitor pacing. New
	// fills its Scaler, Cache, Logger and Tracer, and its DownThreshold
	// from Tunnel.DownThreshold: one client_down_threshold both drops a
	// silent client and ends the wait for one to return.
	Router router.Config
	// Tunnel holds the tunnel endpoint's settings: client_down_threshold,
	// gateway_response_timeout, tunnel_handshake_timeout and tunnel_max_*.
	// New fills its Auth, Registry and Logger.
	Tunnel tunnel.ServerConfig

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
	// MaxConnectionsPerIP bounds the concurrent connections of one visitor
	// address on the public port; more are closed at accept
	// (max_connections_per_ip). Default 256. Behind a proxy that is not
	// exempted (trusted proxies), every visitor shares its address: raise
	// it or set 0.
	MaxConnectionsPerIP int
	// ShutdownTimeout bounds how long SIGTERM waits for in-flight requests
	// (shutdown_timeout). Default 10s; 0 means the default.
	ShutdownTimeout time.Duration

	// CacheEnabled is the switch of the serve-stale cache (cache). Default
	// off.
	CacheEnabled bool
	// Cache bounds the serve-stale cache (cache_max_bytes,
	// cache_max_stale); New fills its clock.
	Cache stale.Config

	// ScalingEnabled is the switch that honors client scaling declarations
	// (scaling). Default off.
	ScalingEnabled bool
	// Scaling holds the autoscaling controller's settings
	// (scaling_max_calls_per_minute, scaling_max_records_per_org,
	// scaling_max_records_per_token). New fills its seams, and its
	// DeclareRefresh from ScalingRecordTTL when that is shorter than twice
	// the default, so a live client's record is never old enough to be
	// swept.
	Scaling autoscale.Config
	// ScalingRecordTTL drops scaling records nothing has re-announced for
	// this long (scaling_record_ttl). Default 30d; 0 keeps them forever.
	ScalingRecordTTL time.Duration
	// Outbound is the policy of every call the server makes to a URL
	// someone else chose, scaling hooks and webhooks alike:
	// scaling_allow_http, scaling_allow_private, outbound_allowlist and
	// outbound_block_private. The zero value is the default: https only,
	// no private addresses, no allowlist.
	Outbound outbound.Policy

	// DefaultAccess is default_access: "allow" (the default; also "")
	// opens every service without auth methods; "deny" closes those not
	// public, and a closed service answers like an unclaimed hostname.
	DefaultAccess string
	// IdentityKeyRotation is the identity JWT signing key's lifetime
	// (identity_key_rotation): an older key is replaced, by whichever
	// server notices first, the old one still published in the JWKS
	// beside the new one. Default 720h; 0 never rotates; otherwise 1h
	// to 87600h (MinIdentityKeyRotation, MaxIdentityKeyRotation).
	IdentityKeyRotation time.Duration
	// OIDC is the server's OpenID Connect provider (the oidc: block), for
	// services with auth: {oidc: …}; an empty Issuer means none.
	OIDC OIDCConfig
	// AdminOIDC lets people log in to the admin API through OIDC's
	// provider (admin_oidc): /aperio/admin/login, a session cookie in
	// place of a bearer credential. Default off; it needs OIDC.
	AdminOIDC bool
	// AdminOIDCRoles maps the users who log in to an organization and a
	// role, first match wins (admin_oidc_roles); at most
	// admin.MaxOIDCRoles. Empty maps nobody: every login is refused.
	AdminOIDCRoles []AdminOIDCRole

	// MetricsToken is the bearer token of /aperio/metrics (metrics_token).
	// Empty means /aperio/metrics answers 404 (on metrics_listen: no token
	// is asked). Secret.
	MetricsToken string
	// MetricsListen is the host:port of a listener of its own for metrics
	// (metrics_listen); /aperio/metrics then answers 404 on the public
	// port. Empty serves metrics at /aperio/metrics on the public port.
	MetricsListen string
	// DebugListen is the loopback host:port of the debug listener
	// (debug_listen): pprof, runtime/trace and runtime metrics, for
	// operators (internal/debughttp). Empty, the default, opens none; an
	// address that is not loopback fails New.
	DebugListen string
	// AccessLog writes one line per proxied request, in log_format, with
	// logger=access (access_log). Default on.
	AccessLog bool
	// AccessLogIPs adds the visitor's address to access log lines
	// (access_log_ips). Default off.
	AccessLogIPs bool
	// RequireHostnameBind refuses services that name no hostname unless
	// their token lists exact hostnames to auto-bind
	// (require_hostname_bind). Default on; off, the master token's and
	// allow_catch_all tokens' services with no hostname are catch-alls.
	RequireHostnameBind bool
	// ServerTiming adds Server-Timing (aperio-queue, aperio-hold) to
	// answers that waited for a permit or a cold start (server_timing).
	// Default on.
	ServerTiming bool
	// MaxStreamSubscribers bounds the followers of GET /aperio/api/stream
	// at once (max_stream_subscribers); one more is answered 503. Default
	// telemetry.DefaultMaxStreamSubscribers (128); 0 means that default.
	MaxStreamSubscribers int

	// TCPPortRange lists the public ports ("N" or "N-M") clients may
	// expose over TCP and UDP (tcp_port_range); empty, the default, turns
	// the feature off. A token's allow_tcp_ports picks within it.
	TCPPortRange []string
	// MaxTCPConnections bounds the open visitor connections of one public
	// TCP port (max_tcp_connections); 0 means ports.DefaultMaxTCPConnections.
	MaxTCPConnections int
	// PortMaxConnectionsPerIP bounds the open connections of one visitor
	// address (an IPv6 address's /64) on one public TCP port
	// (port_max_connections_per_ip); 0 means a quarter of
	// MaxTCPConnections, at least 1.
	PortMaxConnectionsPerIP int
	// PortFirstByteTimeout closes a visitor connection to a public TCP
	// port that has sent no byte this long after connecting
	// (port_first_byte_timeout); 0 means ports.DefaultTCPFirstByte (30 s).
	// At or above the TCP idle timeout it changes nothing.
	PortFirstByteTimeout time.Duration
	// UDPIdleTimeout ends a UDP flow of a public port after this long
	// without a datagram either way (udp_idle_timeout); 0 means
	// ports.DefaultUDPIdle.
	UDPIdleTimeout time.Duration

	// TrustedProxies lists the CIDR prefixes and addresses of the proxies
	// in front of the server (trusted_proxies). Only a peer inside them may
	// name the visitor (RealIPHeader), the scheme (X-Forwarded-Proto) and
	// the request id, or send a PROXY protocol header. Empty trusts nobody.
	TrustedProxies []string
	// RealIPHeader is the header a trusted proxy names the visitor in
	// (real_ip_header): X-Forwarded-For (default, read rightmost-untrusted
	// first), or a single-address header such as X-Real-IP,
	// CF-Connecting-IP or True-Client-IP. Empty means X-Forwarded-For.
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
	// AdminHosts lists the hostnames the operators' pages answer on
	// (admin_hosts): the dashboard, the admin API, the admin login and its
	// callback. Each entry is an exact hostname, a "*." wildcard or an IP
	// address; at most MaxAdminHosts. Empty means IP addresses, localhost
	// and *.localhost (AdminHostsDefault). On any other hostname those
	// paths answer 404, so that no tenant's app shares an origin with an
	// admin session.
	AdminHosts []string

	// UsageFlushInterval is the time between two writes of the usage
	// counts to the store (usage_flush_interval), which also refresh this
	// server's view of the byte quotas from every server's counts. Default
	// 5s; 0 means the default; otherwise MinUsageFlushInterval to
	// MaxUsageFlushInterval. A quota may be passed by about this long of
	// traffic on each server sharing the store.
	UsageFlushInterval time.Duration

	// Inspect is the request inspector's server side: the headers it
	// redacts in every capture (inspect_redact_headers). Captures are
	// started through the admin API; the zero value redacts only the
	// credentials every capture redacts.
	Inspect inspect.Config
}

// Bounds of IdentityKeyRotation when it is not 0: a key lives at least
// an hour (rotations are checked every signing.DefaultRefresh, and a
// backend caches the key set), and at most ten years.
const (
	MinIdentityKeyRotation = time.Hour
	MaxIdentityKeyRotation = 87600 * time.Hour
)

// DefaultConfig returns every default of aperio-server: the packages' own
// (router, tunnel, cache, autoscale) and the gateway's, each written once.
// Token is empty, so New refuses it as it is.
func DefaultConfig() Config {
	return Config{
		Host:                 "0.0.0.0",
		Port:                 8080,
		Store:                store.Config{DataDir: "./data"},
		ACME:                 acme.DefaultConfig(),
		Router:               router.DefaultConfig(),
		Tunnel:               tunnel.DefaultServerConfig(),
		ReadHeaderTimeout:    10 * time.Second,
		MaxHeaderBytes:       1 << 20,
		KeepAliveTimeout:     2 * time.Minute,
		MaxConnectionsPerIP:  256,
		DefaultAccess:        "allow",
		IdentityKeyRotation:  signing.DefaultIdentityRotation,
		ShutdownTimeout:      10 * time.Second,
		Cache:                stale.DefaultConfig(),
		Scaling:              autoscale.DefaultConfig(),
		ScalingRecordTTL:     30 * 24 * time.Hour,
		AccessLog:            true,
		ServerTiming:         true,
		MaxStreamSubscribers: telemetry.DefaultMaxStreamSubscribers,
		RequireHostnameBind:  true,
		RealIPHeader:         "X-Forwarded-For",
		UsageFlushInterval:   usage.DefaultFlushInterval,
	}
}

// Validate reports every problem of cfg that New would meet, joined; nil
// when there is none: each package's settings (Router, Tunnel, Cache,
// Scaling) and the gateway's own bounds. The server's loader checks the
// same values key by key, naming each key's source.
func (cfg Config) Validate() error {
	errs := []error{cfg.Router.Validate(), cfg.Tunnel.Validate(), cfg.Cache.Validate(), cfg.Scaling.Validate()}
	if cfg.Token == "" {
		errs = append(errs, errors.New("gateway: server.token is required"))
	}
	if _, err := cfg.posture(); err != nil {
		errs = append(errs, err)
	}
	if cfg.Port < 0 || cfg.Port > 65535 {
		errs = append(errs, fmt.Errorf("gateway: port %d is not a port (0 to 65535)", cfg.Port))
	}
	if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
		errs = append(errs, errors.New("gateway: tls_cert and tls_key go together"))
	}
	if cfg.ACME.Enabled() {
		if cfg.TLSCert != "" {
			errs = append(errs, errors.New("gateway: acme and tls_cert exclude each other: certificates come from the CA or from the files"))
		}
		if err := cfg.ACME.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("gateway: %w", err))
		}
		if cfg.ACME.HTTPPort != 0 && cfg.ACME.HTTPPort == cfg.Port {
			errs = append(errs, fmt.Errorf("gateway: acme.http_port %d is the public port", cfg.Port))
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"read_header_timeout", cfg.ReadHeaderTimeout}, {"keepalive_timeout", cfg.KeepAliveTimeout}, {"shutdown_timeout", cfg.ShutdownTimeout}, {"scaling_record_ttl", cfg.ScalingRecordTTL}, {"identity_key_rotation", cfg.IdentityKeyRotation}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("gateway: %s must not be negative, got %v", d.name, d.v))
		}
	}
	if f := cfg.UsageFlushInterval; f != 0 && (f < MinUsageFlushInterval || f > MaxUsageFlushInterval) {
		errs = append(errs, fmt.Errorf("gateway: usage_flush_interval %v is not between %v and %v", f, MinUsageFlushInterval, MaxUsageFlushInterval))
	}
	if cfg.DebugListen != "" {
		if err := debughttp.CheckAddr(cfg.DebugListen); err != nil {
			errs = append(errs, fmt.Errorf("gateway: debug_listen: %w", err))
		}
	}
	if cfg.MaxStreamSubscribers < 0 {
		errs = append(errs, fmt.Errorf("gateway: max_stream_subscribers must not be negative, got %d", cfg.MaxStreamSubscribers))
	}
	if r := cfg.IdentityKeyRotation; r != 0 && (r < MinIdentityKeyRotation || r > MaxIdentityKeyRotation) {
		errs = append(errs, fmt.Errorf("gateway: identity_key_rotation %v is neither 0 nor between %v and %v", r, MinIdentityKeyRotation, MaxIdentityKeyRotation))
	}
	if o := cfg.OIDC; o.Issuer == "" && (o.ClientID != "" || o.ClientSecret != "" || o.RedirectURL != "" || len(o.Scopes) > 0) {
		errs = append(errs, errors.New("gateway: oidc.issuer is required when the oidc block sets anything"))
	} else if o.Issuer != "" && (o.ClientID == "" || o.ClientSecret == "") {
		errs = append(errs, errors.New("gateway: oidc.client_id and oidc.client_secret are required with oidc.issuer"))
	}
	if cfg.AdminOIDC && cfg.OIDC.Issuer == "" {
		errs = append(errs, errors.New("gateway: admin_oidc needs the oidc: block (oidc.issuer, oidc.client_id, oidc.client_secret)"))
	}
	if len(cfg.AdminOIDCRoles) > admin.MaxOIDCRoles {
		errs = append(errs, fmt.Errorf("gateway: admin_oidc_roles has %d entries, limit %d", len(cfg.AdminOIDCRoles), admin.MaxOIDCRoles))
	}
	for i, r := range cfg.AdminOIDCRoles {
		if err := r.Entry().Check(); err != nil {
			errs = append(errs, fmt.Errorf("gateway: admin_oidc_roles[%d]: %w", i, err))
		}
	}
	if _, err := portspec.ParseList(cfg.TCPPortRange); err != nil {
		errs = append(errs, fmt.Errorf("gateway: tcp_port_range: %w", err))
	}
	if cfg.UDPIdleTimeout < 0 || cfg.UDPIdleTimeout > 24*time.Hour {
		errs = append(errs, fmt.Errorf("gateway: udp_idle_timeout %s: want 0 (the default, %s) to 24h", cfg.UDPIdleTimeout, ports.DefaultUDPIdle))
	}
	if cfg.MaxTCPConnections < 0 || cfg.MaxTCPConnections > 1_000_000 {
		errs = append(errs, fmt.Errorf("gateway: max_tcp_connections %d: want 0 (the default, %d) to 1000000", cfg.MaxTCPConnections, ports.DefaultMaxTCPConnections))
	}
	if _, err := newAdminHosts(cfg.AdminHosts); err != nil {
		errs = append(errs, fmt.Errorf("gateway: admin_hosts: %w", err))
	}
	if cfg.PortMaxConnectionsPerIP < 0 || cfg.PortMaxConnectionsPerIP > 1_000_000 {
		errs = append(errs, fmt.Errorf("gateway: port_max_connections_per_ip %d: want 0 (a quarter of max_tcp_connections) to 1000000", cfg.PortMaxConnectionsPerIP))
	}
	if cfg.PortFirstByteTimeout < 0 || cfg.PortFirstByteTimeout > 24*time.Hour {
		errs = append(errs, fmt.Errorf("gateway: port_first_byte_timeout %s: want 0 (the default, %s) to 24h", cfg.PortFirstByteTimeout, ports.DefaultTCPFirstByte))
	}
	if cfg.MaxHeaderBytes < 0 || cfg.MaxConnectionsPerIP < 0 {
		errs = append(errs, fmt.Errorf("gateway: max_header_bytes %d and max_connections_per_ip %d must not be negative", cfg.MaxHeaderBytes, cfg.MaxConnectionsPerIP))
	}
	return errors.Join(errs...)
}

// posture parses DefaultAccess; "" is allow.
func (cfg Config) posture() (access.Posture, error) {
	if cfg.DefaultAccess == "" {
		return access.Allow, nil
	}
	return access.ParsePosture(cfg.DefaultAccess)
}

// AdminOIDCRole is one entry of admin_oidc_roles, as the config file
// spells it: exactly one of Email, Domain, Group; the organization's name;
// the role (viewer, operator or admin).
type AdminOIDCRole struct {
	// Line is the entry's line in the config file; 0 when it came from
	// the environment.
	Line   config.Line `yaml:"-"`
	Email  string      `yaml:"email,omitempty"`
	Domain string      `yaml:"domain,omitempty"`
	Group  string      `yaml:"group,omitempty"`
	Org    string      `yaml:"org"`
	Role   string      `yaml:"role"`
}

// Entry returns r as the admin API takes it.
func (r AdminOIDCRole) Entry() admin.OIDCRole {
	return admin.OIDCRole{Email: r.Email, Domain: r.Domain, Group: r.Group, Org: r.Org, Role: r.Role}
}

// OIDCConfig is the server's oidc: block. The login and session cookies
// are sealed with a key derived from the master token, so every server
// sharing the token accepts every session and changing the token ends
// them all.
type OIDCConfig struct {
	// Issuer is the provider's issuer URL (oidc.issuer); "" means no
	// provider.
	Issuer string
	// ClientID and ClientSecret identify the server to the provider
	// (oidc.client_id, oidc.client_secret).
	ClientID, ClientSecret string
	// Scopes asked for (oidc.scopes); empty means openid email profile.
	Scopes []string
	// RedirectURL is the callback registered for the one hostname it
	// names (oidc.redirect_url); empty derives every callback.
	RedirectURL string
}
