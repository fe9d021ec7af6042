package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/control/events"
	"github.com/aperio-dev/aperio/store"
)

// Audit events of a configuration reload.
const (
	// EventConfigReloaded is audited when a reload applied a new
	// configuration; its detail names the reason, the keys applied and
	// those that need a restart.
	EventConfigReloaded = apitype.EventConfigReloaded
	// EventConfigReloadFailed is audited when a reload was refused (the
	// file did not load or validate, a certificate did not load): the
	// server runs on as it was; its detail holds the reason and the error.
	EventConfigReloadFailed = "config_reload_failed"
)

// maxReloadDetailBytes bounds an audited reload's detail: a broken file
// may yield a long list of problems.
const maxReloadDetailBytes = 2000

// reloadKey is one key of the server's configuration: the Config field
// it is bound to (a dotted path of field names), its name, and whether
// Reload applies a change of it while the server runs.
type reloadKey struct {
	field string
	name  string
	live  bool
}

// reloadKeys are the keys Reload compares, in --print-config order. A key
// not live keeps its running value until a restart.
var reloadKeys = []reloadKey{
	{"Host", "host", false},
	{"Port", "port", false},
	{"Token", "server.token", false},
	{"Store.DataDir", "data_dir", false},
	{"Store.DatabaseURL", "database_url", false},
	{"TLSCert", "tls_cert", true},
	{"ACME.Email", "acme.email", false},
	{"ACME.CA", "acme.ca", false},
	{"ACME.CARoot", "acme.ca_root", false},
	{"ACME.Challenges", "acme.challenges", false},
	{"ACME.OnDemand", "acme.on_demand", false},
	{"ACME.OnDemandGrace", "acme.on_demand_grace", false},
	{"ACME.HTTPPort", "acme.http_port", false},
	{"ACME.Redirect", "acme.redirect", false},
	{"ACME.Hostnames", "acme.hostnames", false},
	{"TLSKey", "tls_key", true},
	{"Router.GatewayTimeout", "gateway_timeout", true},
	{"Tunnel.ResponseHeaderTimeout", "gateway_response_timeout", false},
	{"Router.MaxConcurrentRequests", "max_concurrent_requests", true},
	{"Router.MaxBodyBytes", "max_body_size", true},
	{"DefaultAccess", "default_access", true},
	{"IdentityKeyRotation", "identity_key_rotation", false},
	{"OIDC.Issuer", "oidc.issuer", false},
	{"OIDC.ClientID", "oidc.client_id", false},
	{"OIDC.ClientSecret", "oidc.client_secret", false},
	{"OIDC.Scopes", "oidc.scopes", false},
	{"OIDC.RedirectURL", "oidc.redirect_url", false},
	{"AdminOIDC", "admin_oidc", false},
	{"Router.IPLimitMax", "ip_limit_max", true},
	{"Router.IPLimitRefill", "ip_limit_refill", true},
	{"ReadHeaderTimeout", "read_header_timeout", false},
	{"MaxHeaderBytes", "max_header_bytes", false},
	{"KeepAliveTimeout", "keepalive_timeout", false},
	{"Router.VisitorIdleTimeout", "visitor_idle_timeout", true},
	{"Router.VisitorMinRate", "visitor_min_bytes_per_second", true},
	{"MaxConnectionsPerIP", "max_connections_per_ip", false},
	{"Router.MaxStreamsPerIP", "max_streams_per_ip", false},
	{"Router.MaxWSConnections", "max_ws_connections", false},
	{"Tunnel.MaxSessions", "max_tunnels", false},
	{"TCPPortRange", "tcp_port_range", false},
	{"MaxTCPConnections", "max_tcp_connections", false},
	{"PortMaxConnectionsPerIP", "port_max_connections_per_ip", false},
	{"PortFirstByteTimeout", "port_first_byte_timeout", false},
	{"UDPIdleTimeout", "udp_idle_timeout", false},
	{"UsageFlushInterval", "usage_flush_interval", false},
	{"Tunnel.HandshakeTimeout", "tunnel_handshake_timeout", false},
	{"Tunnel.DownThreshold", "client_down_threshold", false},
	{"Tunnel.MaxHeaderBytes", "tunnel_max_header_bytes", false},
	{"Tunnel.MaxStreams", "tunnel_max_streams", false},
	{"Tunnel.AnnounceInterval", "tunnel_announce_interval", false},
	{"ShutdownTimeout", "shutdown_timeout", false},
	{"Router.Strategy", "lb_strategy", false},
	{"Router.OutlierEjectionTime", "outlier_ejection_time", false},
	{"Router.OutlierMaxEjectedPercent", "outlier_max_ejected_percent", false},
	{"RequireHostnameBind", "require_hostname_bind", false},
	{"Router.Failover", "failover", false},
	{"Router.FailoverAllMethods", "failover_all_methods", false},
	{"Router.FailoverMaxJumps", "failover_max_jumps", false},
	{"Router.FailoverWindow", "failover_window", false},
	{"Router.FailoverReplayMaxBody", "failover_replay_max_body", false},
	{"Router.Policy.Routes", "routes", true},
	{"Router.Policy.RateLimits", "rate_limits", true},
	{"Router.Policy.Headers", "headers", true},
	{"Router.Policy.SecurityHeaders", "security_headers", true},
	{"CacheEnabled", "cache", false},
	{"Cache.MaxBytes", "cache_max_bytes", false},
	{"Cache.MaxStale", "cache_max_stale", false},
	{"ScalingEnabled", "scaling", false},
	{"Outbound.AllowHTTP", "scaling_allow_http", false},
	{"Outbound.AllowPrivate", "scaling_allow_private", false},
	{"ScalingRecordTTL", "scaling_record_ttl", false},
	{"Router.MaxHeld", "scaling_max_held", true},
	{"Scaling.MaxCallsPerMinute", "scaling_max_calls_per_minute", false},
	{"Scaling.MaxRecordsPerOrg", "scaling_max_records_per_org", false},
	{"Scaling.MaxRecordsPerToken", "scaling_max_records_per_token", false},
	{"Outbound.Allowlist", "outbound_allowlist", false},
	{"Outbound.BlockPrivate", "outbound_block_private", false},
	{"MetricsToken", "metrics_token", false},
	{"AccessLog", "access_log", false},
	{"AccessLogIPs", "access_log_ips", false},
	{"ServerTiming", "server_timing", false},
	{"MaxStreamSubscribers", "max_stream_subscribers", false},
	{"TrustedProxies", "trusted_proxies", false},
	{"RealIPHeader", "real_ip_header", false},
	{"Router.UnderscoreHeaders", "underscore_headers", true},
	{"ProxyProtocol", "proxy_protocol", false},
	{"DeniedIPs", "denied_ips", true},
	{"AdminAllowedIPs", "admin_allowed_ips", true},
	{"AdminHosts", "admin_hosts", true},
	{"Inspect.RedactHeaders", "inspect_redact_headers", false},
	{"MetricsListen", "metrics_listen", false},
	{"DebugListen", "debug_listen", false},
	{"Router.ErrorPages", "error_pages", true},
	{"Router.MaintenanceWindows", "maintenance_windows", true},
	{"Router.Fallbacks", "fallbacks", true},
	{"Router.RetryOn5xx", "retry_on_5xx", false},
	{"Router.OutlierConsecutive5xx", "outlier_consecutive_5xx", false},
	{"AdminOIDCRoles", "admin_oidc_roles", false},
}

// ReloadKey is one key of the server's configuration as Reload treats
// it: its name, and whether a change of it applies while the server runs
// (Live) or keeps its running value until a restart.
type ReloadKey struct {
	Name string
	Live bool
}

// ReloadKeys returns every key Reload compares, in --print-config order,
// for the documentation and its test. The process settings main applies
// itself (log_level, log_format, otel_sample_rate) are not among them.
func ReloadKeys() []ReloadKey {
	keys := make([]ReloadKey, len(reloadKeys))
	for i, k := range reloadKeys {
		keys[i] = ReloadKey{Name: k.name, Live: k.live}
	}
	return keys
}

// fieldOf returns the field of c that path names.
func fieldOf(c *Config, path string) reflect.Value {
	v := reflect.ValueOf(c).Elem()
	for name := range strings.SplitSeq(path, ".") {
		v = v.FieldByName(name)
	}
	return v
}

// loadCertificate reads the public port's certificate and key.
func loadCertificate(certFile, keyFile string) (*tls.Certificate, error) {
	c, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("gateway: tls_cert %s and tls_key %s: %w", certFile, keyFile, err)
	}
	return &c, nil
}

// getCertificate serves every TLS handshake the certificate loaded last,
// so that a reload changes it for new connections and leaves open ones be.
func (g *Gateway) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return g.cert.Load(), nil
}

// Reload applies cfg as far as it can while the server runs, in one step:
// a visitor request admitted before it finishes on the old settings, the
// next on the new. It applies the limits (max_body_size, gateway_timeout,
// max_concurrent_requests, ip_limit_*, scaling_max_held, the visitor
// pacing), the traffic policy (routes, rate_limits, headers,
// security_headers), error_pages, maintenance_windows, fallbacks,
// default_access (for services announcing no access block, and those
// whose announced block leaves their openness to it), denied_ips,
// admin_allowed_ips and the TLS certificate (tls_cert, tls_key: read
// again even when their names did not change). applied names the live
// keys that changed, plus "tls certificate" when the certificate's content
// changed; restart names the keys that changed and keep their running
// value until a restart (turning TLS on or off is one). On error (cfg does
// not validate, the certificate does not load) nothing changes. Safe for
// concurrent use; calls are serialized.
func (g *Gateway) Reload(cfg Config) (applied, restart []string, err error) {
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	if err := cfg.Validate(); err != nil {
		return nil, nil, fmt.Errorf("gateway: reload: %w", err)
	}
	old := g.current.Load()
	next := cfg
	for _, k := range reloadKeys {
		was, now := fieldOf(old, k.field), fieldOf(&cfg, k.field)
		if reflect.DeepEqual(was.Interface(), now.Interface()) {
			continue
		}
		live := k.live
		if k.name == "tls_cert" || k.name == "tls_key" {
			live = (old.TLSCert == "") == (cfg.TLSCert == "") // on or off needs a new listener
		}
		if !live {
			restart = append(restart, k.name)
			fieldOf(&next, k.field).Set(was)
			continue
		}
		applied = append(applied, k.name)
	}
	e, err := newEdge(next)
	if err != nil {
		return nil, nil, fmt.Errorf("gateway: reload: %w", err)
	}
	var cert *tls.Certificate
	if next.TLSCert != "" {
		if cert, err = loadCertificate(next.TLSCert, next.TLSKey); err != nil {
			return nil, nil, fmt.Errorf("gateway: reload: %w", err)
		}
		if prev := g.cert.Load(); prev == nil || !sameCertificate(prev, cert) {
			applied = append(applied, "tls certificate")
		}
	}
	posture, err := next.posture()
	if err != nil {
		return nil, nil, fmt.Errorf("gateway: reload: %w", err)
	}
	rc := next.Router
	rc.Access.Default = posture
	if err := g.router.Reconfigure(rc); err != nil {
		return nil, nil, fmt.Errorf("gateway: reload: %w", err)
	}
	// The router's new settings reach requests through the edge (admit
	// pins them): both switch at this one store.
	e.settings = g.router.Snapshot()
	g.edge.Store(e)
	if cert != nil {
		g.cert.Store(cert)
	}
	g.current.Store(&next)
	g.reloads.Add(1)
	g.reloadedAt.Store(time.Now().UnixNano())
	return applied, restart, nil
}

// sameCertificate reports whether a and b hold the same chain.
func sameCertificate(a, b *tls.Certificate) bool {
	return reflect.DeepEqual(a.Certificate, b.Certificate)
}

// AuditReload writes the audit entry of one reload: EventConfigReloaded
// when err is nil, with the keys applied and those that need a restart,
// else EventConfigReloadFailed with err. reason says what triggered it
// ("SIGHUP", "file changed: PATH"). A failure to write is logged.
func (g *Gateway) AuditReload(ctx context.Context, reason string, applied, restart []string, err error) {
	ev := EventConfigReloaded
	detail := fmt.Sprintf("%s; applied: %s; restart needed for: %s", reason, listOrNone(applied), listOrNone(restart))
	if err != nil {
		ev = EventConfigReloadFailed
		detail = reason + ": " + err.Error()
	}
	if len(detail) > maxReloadDetailBytes {
		detail = strings.ToValidUTF8(detail[:maxReloadDetailBytes], "") + "…"
	}
	// A reload is the operator's: its webhook goes to the default
	// organization's subscriptions, and the entry is in its audit log.
	e := events.Event{Kind: ev, OrgID: g.defaultOrg, Actor: store.ServerActor, Detail: detail,
		Fields: map[string]any{"reason": reason, "applied": nonNil(applied), "restart_needed": nonNil(restart)}}
	if err != nil {
		e.Fields = map[string]any{"reason": reason, "error": err.Error()}
	}
	g.events.Emit(ctx, e)
}

// nonNil is keys, or an empty list: a payload says [] rather than null.
func nonNil(keys []string) []string {
	if keys == nil {
		return []string{}
	}
	return keys
}

// listOrNone joins keys, or says none.
func listOrNone(keys []string) string {
	if len(keys) == 0 {
		return "none"
	}
	return strings.Join(keys, ", ")
}
