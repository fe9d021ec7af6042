package serverconfig

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/aperio-dev/aperio/internal/config"
)

// Schema returns the JSON Schema (draft 2020-12) of aperio-server.yaml,
// generated from the key table.
func Schema() ([]byte, error) {
	return config.Schema("aperio-server configuration (aperio-server.yaml)", Keys(),
		map[string]any{"include": config.IncludeSchema()})
}

// helpSections group the keys in --help: a key goes to the first section
// one of whose prefixes it starts with, or else to the last, "Other".
var helpSections = []struct {
	title    string
	prefixes []string
}{
	{"Listener", []string{"host", "port", "tls_", "read_header_timeout", "max_header_bytes", "keepalive_timeout", "proxy_protocol", "shutdown_timeout"}},
	{"Automatic TLS", []string{"acme."}},
	{"Credentials and store", []string{"server.token", "data_dir", "database_url", "metrics_token", "usage_flush_interval"}},
	{"Admin API", []string{"admin_"}},
	{"Visitors and the edge", []string{"visitor_", "ip_limit_", "max_connections_per_ip", "max_streams_per_ip", "max_ws_connections", "max_body_size",
		"trusted_proxies", "real_ip_header", "underscore_headers", "denied_ips", "default_access", "identity_key_rotation", "oidc."}},
	{"Tunnels", []string{"tunnel_", "max_tunnels", "client_down_threshold", "tcp_port_range", "max_tcp_connections", "port_max_connections_per_ip", "port_first_byte_timeout", "udp_idle_timeout"}},
	{"Routing and failover", []string{"gateway_", "max_concurrent_requests", "lb_strategy", "outlier_", "require_hostname_bind", "failover", "retry_on_5xx",
		"fallbacks", "error_pages", "maintenance_windows"}},
	{"Traffic policy", []string{"routes", "rate_limits", "headers", "security_headers"}},
	{"Cache", []string{"cache"}},
	{"Scaling and outbound calls", []string{"scaling", "outbound_"}},
	{"Logs, metrics and tracing", []string{"log_", "access_log", "server_timing", "metrics_listen", "debug_listen", "max_stream_subscribers", "otel_", "inspect_"}},
	{"Other", nil},
}

func helpSection(name string) int {
	for i, s := range helpSections {
		for _, p := range s.prefixes {
			if strings.HasPrefix(name, p) {
				return i
			}
		}
	}
	return len(helpSections) - 1
}

// HelpText lists every key of aperio-server.yaml for --help, grouped by
// section: its name, the kind of value it takes, its usage and its
// default.
func HelpText() string {
	bySection := make([][]config.Key, len(helpSections))
	for _, k := range Keys() {
		i := helpSection(k.Name)
		bySection[i] = append(bySection[i], k)
	}
	var fileOnly []string
	for _, k := range Keys() {
		if k.FileOnly {
			fileOnly = append(fileOnly, k.Name)
		}
	}
	var b strings.Builder
	b.WriteString("Settings: the keys of " + File + ", each also APERIO_<KEY> in the environment\n" +
		"(server.token is APERIO_SERVER_TOKEN) but the lists with no one-line form, file only:\n" +
		strings.Join(fileOnly, ", ") + ". The file wins. See --print-config and --print-schema.\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for i, keys := range bySection {
		if len(keys) == 0 {
			continue
		}
		fmt.Fprintf(tw, "\n%s:\n", helpSections[i].title)
		for _, k := range keys {
			line := "  " + k.Name + "\t" + kindName(k) + "\t" + k.Usage
			if d := helpDefault(k); d != "" {
				line += " (default " + d + ")"
			}
			fmt.Fprintln(tw, line)
		}
	}
	tw.Flush()
	return b.String()
}

// kindName is how --help names the kind of k's value. An enum's usage
// lists its values.
func kindName(k config.Key) string {
	switch k.Kind {
	case config.KindBlock:
		return "yaml"
	case config.KindList:
		return "list"
	case config.KindIntList:
		return "ints"
	}
	return string(k.Kind)
}

// helpDefault is k's default as --help shows it: none for an empty or
// zero one.
func helpDefault(k config.Key) string {
	switch k.Default {
	case "", "0", "0s", "false", "[]", "{}":
		return ""
	}
	if k.Kind == config.KindBlock {
		return ""
	}
	if k.Kind == config.KindString {
		return fmt.Sprintf("%q", k.Default)
	}
	return k.Default
}
