package config

// co3mozKey is a key of co3moz/aperio that Aperio does not take, and what
// to write instead.
type co3mozKey struct {
	// Key is the key as co3moz/aperio spells it, normalized.
	Key string
	// Where is "client" (top level of aperio.yaml), "service" (an entry
	// of services:) or "server" (aperio-server.yaml).
	Where string
	// Instead says what to use in Aperio, or why nothing is needed.
	Instead string
}

// co3mozKeys are the keys of co3moz/aperio (0.11) that Aperio refuses
// with a pointer to its own spelling instead of a bare "unknown key".
// docs/migrating-from-co3moz.md lists the same rows; a test keeps the two
// in step.
var co3mozKeys = []co3mozKey{
	{"connections", "service", "not needed: every service shares one multiplexed tunnel; run more client processes for more capacity"},
	{"multiplex", "service", "not needed: every service of a client always shares one tunnel"},
	{"bandwidth", "client", "not supported: pace traffic in front of the server"},
	{"response_timeout", "service", "use timeout on the service, or the server's gateway_response_timeout"},
	{"cache", "service", "use resilience: true on the service, with cache: true on the server"},
	{"denied", "service", "use denied_ips (a 403), or the server's fallbacks for a redirect"},
	{"custom_name", "service", "use name (a handle: a-z, 0-9 and -)"},
	{"client_id", "client", "not needed: each process has an instance id of its own; name the client with name"},
	{"max_response_body", "service", "not supported: bodies stream through without a cap"},
	{"max_request_body", "service", "use the server's max_body_size"},
	{"max_redirects", "service", "not supported: backend redirects go to the visitor"},
	{"capture", "service", "not supported per service: the server's inspector redacts with inspect_redact_headers"},
	{"webhook_inbox", "service", "not supported"},
	{"metrics_labels", "service", "not supported: the server labels its metrics by hostname"},
	{"startup_delay", "service", "use wait_for_backend or a health endpoint"},
	{"depends_on", "service", "use wait_for_backend or a health endpoint"},
	{"device_key", "client", "not supported: fence a token with client_allowed_ips"},
	{"egress_proxy", "client", "not supported: the client dials the server directly"},
	{"ip_family", "client", "not supported: write an address of the family in server.url"},
	{"tls_min_version", "client", "not needed: the client requires TLS 1.2 or later"},
	{"version", "client", "not needed: remove it"},
	{"pid_file", "client", "not supported: let the supervisor track the process"},
	{"tunnels", "client", "use expose: (public TCP and UDP ports); private peer-to-peer tunnels are not supported"},
	{"subscribe", "client", "not supported: client-to-client messaging is not available"},
	{"messages_listen", "client", "not supported: client-to-client messaging is not available"},
	{"otel_bridge", "client", "not supported: export OTLP from the app directly"},
	{"failover_mode", "server", "use failover: MODE (failover: retry)"},
	{"random_subdomain", "server", "not supported: bind explicit hostnames or *. wildcards"},
	{"preview_noindex", "server", "use headers: to set X-Robots-Tag"},
	{"tunnel_compression", "server", "not supported: it was measured as a loss"},
	{"waf", "server", "use routes: with respond rules, and denied_ips"},
	{"max_connections_per_service", "server", "not needed: one tunnel carries every service of a client"},
	{"alternate_servers", "server", "list the servers in each client's server.urls"},
	{"shutdown_drain", "server", "use shutdown_timeout"},
	{"reuseport", "server", "not supported"},
	{"trust_proxy", "server", "use trusted_proxies (the addresses of your proxies)"},
	{"trust_cf_header", "server", "use trusted_proxies with Cloudflare's ranges and real_ip_header: CF-Connecting-IP"},
	{"retry_statuses", "server", "use retry_on_5xx (the statuses to retry)"},
	{"outlier_ejection", "server", "use outlier_consecutive_5xx (0 turns ejection off)"},
	{"outlier_max_failures", "server", "use outlier_consecutive_5xx"},
	{"outlier_eject_secs", "server", "use outlier_ejection_time"},
	{"504_page", "server", "use error_pages: [{status: 504, html: ...}]"},
	{"503_page", "server", "use error_pages: [{status: 503, html: ...}]"},
	{"server_side_targets", "server", "not supported: every service is served through a client"},
	{"cache_negative_ttl", "server", "not supported: only serve-stale caching exists"},
	{"secure_cookies", "server", "not needed: cookies are Secure whenever the visitor came over HTTPS"},
	{"ui_language", "server", "not supported: the dashboard is in English"},
}

// co3mozHint returns the message for the unknown key norm when it is a
// co3moz/aperio key, or "".
func co3mozHint(norm string) string {
	for _, k := range co3mozKeys {
		if k.Key == norm {
			return "a co3moz/aperio key that Aperio does not support: " + k.Instead + " (see docs/migrating-from-co3moz.md)"
		}
	}
	return ""
}

// Co3mozKeys returns the co3moz/aperio keys Aperio refuses with a pointer
// to its own spelling, of one side: "client", "service" or "server". The
// server's table tests that each still fails there.
func Co3mozKeys(where string) []string {
	var out []string
	for _, k := range co3mozKeys {
		if k.Where == where {
			out = append(out, k.Key)
		}
	}
	return out
}
