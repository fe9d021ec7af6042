package serverconfig

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/server"
	"github.com/aperio-dev/aperio/router"
)

// serverLoadCases is shared by TestLoadServer and FuzzLoadServerYAML's
// seeds. Each case loads File (when not empty) as aperio-server.yaml with
// Env, and checks the --print-config line of every key in want.
var serverLoadCases = []struct {
	name string
	file string
	env  map[string]string
	want []string
}{
	{
		name: "defaults",
		env:  map[string]string{"APERIO_SERVER_TOKEN": "token-0123456789abcdef"},
		want: []string{
			"host = 0.0.0.0  # default",
			"port = 8080  # default",
			"data_dir = ./data  # default",
			"database_url = <unset>  # default",
			"gateway_timeout = 10s  # default",
			"gateway_response_timeout = 30s  # default",
			"max_concurrent_requests = 100  # default",
			"max_body_size = 10MiB  # default",
			"ip_limit_max = 100  # default",
			"ip_limit_refill = 5  # default",
			"read_header_timeout = 10s  # default",
			"max_header_bytes = 1MiB  # default",
			"keepalive_timeout = 2m  # default",
			"visitor_idle_timeout = 1m  # default",
			"visitor_min_bytes_per_second = 512  # default",
			"max_connections_per_ip = 256  # default",
			"tunnel_handshake_timeout = 10s  # default",
			"client_down_threshold = 15s  # default",
			"tunnel_max_header_bytes = 1MiB  # default",
			"tunnel_max_streams = 256  # default",
			"tunnel_announce_interval = 200ms  # default",
			"shutdown_timeout = 10s  # default",
			"lb_strategy = round-robin  # default",
			"failover = fail  # default",
			"failover_max_jumps = 2  # default",
			"failover_window = 15s  # default",
			"cache = false  # default",
			"cache_max_bytes = 64MiB  # default",
			"cache_max_stale = 1h  # default",
			"scaling = false  # default",
			"scaling_record_ttl = 30d  # default",
			"scaling_max_held = 1000  # default",
			"scaling_max_calls_per_minute = 60  # default",
			"scaling_max_records_per_org = 100  # default",
			"scaling_max_records_per_token = 32  # default",
			"metrics_token = <unset>  # default",
			"access_log = true  # default",
			"access_log_ips = false  # default",
			"server_timing = true  # default",
			"otel_sample_rate = 1  # default",
			"log_level = info  # default",
			"log_format = text  # default",
		},
	},
	{
		name: "bare env",
		env:  map[string]string{"APERIO_SERVER_TOKEN": "token-0123456789abcdef", "PORT": "9000", "HOST": "127.0.0.1", "LOG_LEVEL": "debug"},
		want: []string{
			"port = 9000  # env PORT",
			"host = 127.0.0.1  # env HOST",
			"log_level = debug  # env LOG_LEVEL",
		},
	},
	{
		name: "APERIO_ spelling wins over the bare one",
		env:  map[string]string{"APERIO_SERVER_TOKEN": "token-0123456789abcdef", "PORT": "9000", "APERIO_PORT": "9001", "LOG_LEVEL": "debug", "APERIO_LOG_LEVEL": "WARN"},
		want: []string{
			"port = 9001  # env APERIO_PORT",
			"log_level = warn  # env APERIO_LOG_LEVEL",
		},
	},
	{
		name: "empty env var counts as unset",
		env:  map[string]string{"APERIO_SERVER_TOKEN": "token-0123456789abcdef", "APERIO_PORT": "", "PORT": "9000"},
		want: []string{"port = 9000  # env PORT"},
	},
	{
		name: "file wins over env",
		file: "server:\n  token: from-file-0123456789\nport: 7000\n",
		env:  map[string]string{"APERIO_SERVER_TOKEN": "from-env-0123456789", "APERIO_PORT": "9001", "PORT": "9000"},
		want: []string{
			"server.token = <set>  # file:aperio-server.yaml:2",
			"port = 7000  # file:aperio-server.yaml:3",
		},
	},
	{
		name: "env fills the fields the file leaves unset",
		file: "port: 7000\n",
		env:  map[string]string{"APERIO_SERVER_TOKEN": "token-0123456789abcdef", "APERIO_HOST": "::", "APERIO_GATEWAY_TIMEOUT": "20"},
		want: []string{
			"port = 7000  # file:aperio-server.yaml:1",
			"host = ::  # env APERIO_HOST",
			"gateway_timeout = 20s  # env APERIO_GATEWAY_TIMEOUT",
			"server.token = <set>  # env APERIO_SERVER_TOKEN",
		},
	},
	{
		name: "tunnel limits from file and env",
		file: "server.token: a-master-token-of-32-characters-xx\ntunnel_max_header_bytes: 64KiB\ntunnel_max_streams: 64\n",
		env:  map[string]string{"APERIO_TUNNEL_ANNOUNCE_INTERVAL": "1s", "APERIO_TUNNEL_MAX_STREAMS": "9"},
		want: []string{
			"tunnel_max_header_bytes = 64KiB  # file:aperio-server.yaml:2",
			"tunnel_max_streams = 64  # file:aperio-server.yaml:3",
			"tunnel_announce_interval = 1s  # env APERIO_TUNNEL_ANNOUNCE_INTERVAL",
		},
	},
	{
		name: "env fills one field of a block the file declares",
		file: "server.token: token-0123456789abcdef\nscaling:\n  enabled: true\n  allow_http: true\n",
		env: map[string]string{
			"APERIO_SCALING":               "0",
			"APERIO_SCALING_ALLOW_HTTP":    "0",
			"APERIO_SCALING_ALLOW_PRIVATE": "1",
			"APERIO_SCALING_RECORD_TTL":    "2d",
		},
		want: []string{
			"scaling = true  # file:aperio-server.yaml:3",
			"scaling_allow_http = true  # file:aperio-server.yaml:4",
			"scaling_allow_private = true  # env APERIO_SCALING_ALLOW_PRIVATE",
			"scaling_record_ttl = 2d  # env APERIO_SCALING_RECORD_TTL",
		},
	},
	{
		name: "scaling record caps from the file and the environment",
		file: "server.token: token-0123456789abcdef\nscaling:\n  max_records_per_org: 20\n",
		env:  map[string]string{"APERIO_SCALING_MAX_RECORDS_PER_TOKEN": "4"},
		want: []string{
			"scaling_max_records_per_org = 20  # file:aperio-server.yaml:3",
			"scaling_max_records_per_token = 4  # env APERIO_SCALING_MAX_RECORDS_PER_TOKEN",
		},
	},
	{
		name: "group switch as a plain value",
		file: "server.token: token-0123456789abcdef\nscaling: true\nscaling_allow_private: TRUE\ncache: 1\n",
		want: []string{
			"scaling = true  # file:aperio-server.yaml:2",
			"scaling_allow_private = true  # file:aperio-server.yaml:3",
			"cache = true  # file:aperio-server.yaml:4",
		},
	},
	{
		name: "nested and dashed spellings",
		file: "server: {token: token-0123456789abcdef}\ncache:\n  enabled: true\n  max-bytes: 1GiB\n  max_stale: 2h\nLog-Level: DEBUG\noutbound:\n  allowlist: [hooks.example.com, 10.0.0.0/8]\n",
		env:  map[string]string{"APERIO_OUTBOUND_BLOCK_PRIVATE": "true"},
		want: []string{
			"cache = true  # file:aperio-server.yaml:3",
			"cache_max_bytes = 1GiB  # file:aperio-server.yaml:4",
			"cache_max_stale = 2h  # file:aperio-server.yaml:5",
			"log_level = debug  # file:aperio-server.yaml:6",
			"outbound_allowlist = hooks.example.com,10.0.0.0/8  # file:aperio-server.yaml:8",
			"outbound_block_private = true  # env APERIO_OUTBOUND_BLOCK_PRIVATE",
		},
	},
	{
		name: "env lists and maps",
		env: map[string]string{
			"APERIO_SERVER_TOKEN":       "token-0123456789abcdef",
			"APERIO_OUTBOUND_ALLOWLIST": "a.example.com, *.b.example.com,,192.0.2.0/24",
			"APERIO_FALLBACKS":          "App.example.com=https://status.example.com,www.example.com=https://example.org/down",
		},
		want: []string{
			"outbound_allowlist = a.example.com,*.b.example.com,192.0.2.0/24  # env APERIO_OUTBOUND_ALLOWLIST",
			"fallbacks = [{hostname: app.example.com, url: 'https://status.example.com'}, {hostname: www.example.com, url: 'https://example.org/down'}]  # env APERIO_FALLBACKS",
		},
	},
	{
		name: "fallbacks map in the file",
		file: "server.token: token-0123456789abcdef\nfallbacks:\n  app.example.com: https://status.example.com\n  API.example.com: http://backup.example.com\n",
		env:  map[string]string{"APERIO_FALLBACKS": "x.example.com=https://x.example.com"},
		want: []string{
			"fallbacks = [{hostname: app.example.com, url: 'https://status.example.com'}, {hostname: api.example.com, url: 'http://backup.example.com'}]  # file:aperio-server.yaml:2",
		},
	},
	{
		name: "variables expand in file values",
		file: "server:\n  token: ${TOKEN}\ndata_dir: ${DATA:-/var/lib/aperio}\ntls_cert: ${CERT_DIR}/cert.pem\nhost: ${NOPE:-}\nmetrics_token: $${TOKEN}\nport: ${PORT_NUMBER}\ntls_key: '${CERT_DIR}/$$key.pem'\n",
		env:  map[string]string{"TOKEN": "abc-0123456789abcdef", "CERT_DIR": "/etc/aperio", "PORT_NUMBER": "8443"},
		want: []string{
			"server.token = <set>  # file:aperio-server.yaml:2",
			"data_dir = /var/lib/aperio  # file:aperio-server.yaml:3",
			"tls_cert = /etc/aperio/cert.pem  # file:aperio-server.yaml:4",
			`host = ""  # file:aperio-server.yaml:5`,
			"metrics_token = <set>  # file:aperio-server.yaml:6",
			"port = 8443  # file:aperio-server.yaml:7",
			"tls_key = /etc/aperio/$key.pem  # file:aperio-server.yaml:8",
		},
	},
	{
		name: "null values count as unset",
		file: "server.token: token-0123456789abcdef\nport:\nhost: ~\nscaling:\n",
		env:  map[string]string{"APERIO_PORT": "9001", "APERIO_SCALING": "1"},
		want: []string{
			"port = 9001  # env APERIO_PORT",
			"host = 0.0.0.0  # default",
			"scaling = true  # env APERIO_SCALING",
		},
	},
	{
		name: "durations and sizes in every spelling",
		file: "server.token: token-0123456789abcdef\ngateway_timeout: 1.5\nfailover_window: 1d\nmax_body_size: 512KiB\ncache_max_bytes: 100000000\nscaling_record_ttl: 36h\n",
		want: []string{
			"gateway_timeout = 1.5s  # file:aperio-server.yaml:2",
			"failover_window = 1d  # file:aperio-server.yaml:3",
			"max_body_size = 512KiB  # file:aperio-server.yaml:4",
			"cache_max_bytes = 100000000  # file:aperio-server.yaml:5",
			"scaling_record_ttl = 1d12h  # file:aperio-server.yaml:6",
		},
	},
	{
		name: "visitor limits from file and env",
		file: "server.token: token-0123456789abcdef\nread_header_timeout: 5s\nmax_header_bytes: 64KiB\nkeepalive_timeout: 1m\nvisitor_idle_timeout: 0\n",
		env: map[string]string{
			"APERIO_VISITOR_MIN_BYTES_PER_SECOND": "2048",
			"APERIO_MAX_CONNECTIONS_PER_IP":       "0",
			"APERIO_TUNNEL_HANDSHAKE_TIMEOUT":     "3s",
		},
		want: []string{
			"read_header_timeout = 5s  # file:aperio-server.yaml:2",
			"max_header_bytes = 64KiB  # file:aperio-server.yaml:3",
			"keepalive_timeout = 1m  # file:aperio-server.yaml:4",
			"visitor_idle_timeout = 0s  # file:aperio-server.yaml:5",
			"visitor_min_bytes_per_second = 2048  # env APERIO_VISITOR_MIN_BYTES_PER_SECOND",
			"max_connections_per_ip = 0  # env APERIO_MAX_CONNECTIONS_PER_IP",
			"tunnel_handshake_timeout = 3s  # env APERIO_TUNNEL_HANDSHAKE_TIMEOUT",
		},
	},
	{
		name: "empty file",
		file: "",
		env:  map[string]string{"APERIO_SERVER_TOKEN": "token-0123456789abcdef"},
		want: []string{"port = 8080  # default"},
	},
	{
		name: "aliases",
		file: "server.token: token-0123456789abcdef\ncache: &on {enabled: true}\nscaling: *on\ndata_dir: &d /srv/aperio\nmetrics_token: *d\n",
		want: []string{
			"cache = true  # file:aperio-server.yaml:2",
			"scaling = true  # file:aperio-server.yaml:2",
			"data_dir = /srv/aperio  # file:aperio-server.yaml:4",
			"metrics_token = <set>  # file:aperio-server.yaml:5",
		},
	},
	{
		name: "comment-only file",
		file: "# nothing here\n",
		env:  map[string]string{"APERIO_SERVER_TOKEN": "token-0123456789abcdef"},
		want: []string{"port = 8080  # default"},
	},
	// The edge keys.
	{
		name: "edge keys by default",
		file: "server.token: token-0123456789abcdef\n",
		want: []string{
			`trusted_proxies = ""  # default`,
			"real_ip_header = X-Forwarded-For  # default",
			"proxy_protocol = false  # default",
			`denied_ips = ""  # default`,
			`admin_allowed_ips = ""  # default`,
			`metrics_listen = ""  # default`,
		},
	},
	{
		name: "edge keys in the file",
		file: "server.token: token-0123456789abcdef\ntrusted_proxies: [10.0.0.0/8, 192.0.2.7]\nreal_ip_header: CF-Connecting-IP\nproxy_protocol: true\ndenied_ips: [203.0.113.0/24]\nadmin_allowed_ips: [127.0.0.1, '::1']\nmetrics_listen: 127.0.0.1:9100\n",
		want: []string{
			"trusted_proxies = 10.0.0.0/8,192.0.2.7  # file:aperio-server.yaml:2",
			"real_ip_header = CF-Connecting-IP  # file:aperio-server.yaml:3",
			"proxy_protocol = true  # file:aperio-server.yaml:4",
			"denied_ips = 203.0.113.0/24  # file:aperio-server.yaml:5",
			"admin_allowed_ips = 127.0.0.1,::1  # file:aperio-server.yaml:6",
			"metrics_listen = 127.0.0.1:9100  # file:aperio-server.yaml:7",
		},
	},
	{
		name: "edge keys in the environment",
		file: "server.token: token-0123456789abcdef\n",
		env: map[string]string{
			"APERIO_TRUSTED_PROXIES": "10.0.0.0/8,fd00::/8", "APERIO_REAL_IP_HEADER": "X-Real-IP",
			"APERIO_PROXY_PROTOCOL": "true", "APERIO_DENIED_IPS": "198.51.100.1",
			"APERIO_ADMIN_ALLOWED_IPS": "10.1.0.0/16", "APERIO_METRICS_LISTEN": ":9100",
		},
		want: []string{
			"trusted_proxies = 10.0.0.0/8,fd00::/8  # env APERIO_TRUSTED_PROXIES",
			"real_ip_header = X-Real-IP  # env APERIO_REAL_IP_HEADER",
			"proxy_protocol = true  # env APERIO_PROXY_PROTOCOL",
			"denied_ips = 198.51.100.1  # env APERIO_DENIED_IPS",
			"admin_allowed_ips = 10.1.0.0/16  # env APERIO_ADMIN_ALLOWED_IPS",
			"metrics_listen = :9100  # env APERIO_METRICS_LISTEN",
		},
	},
}

func TestLoad(t *testing.T) {
	for _, tc := range serverLoadCases {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{}
			if tc.file != "" || tc.name == "empty file" {
				files[File] = tc.file
			}
			cfg, src, err := Load(Options{Env: envOf(tc.env), ReadFile: filesOf(files)})
			if err != nil {
				t.Fatalf("Load() error = %v, want nil", err)
			}
			lines := printed(t, cfg, src)
			for _, want := range tc.want {
				key, _, _ := strings.Cut(want, " = ")
				if got := lines[key]; got != want {
					t.Errorf("Load() %s = %q, want %q", key, got, want)
				}
			}
		})
	}
}

func TestLoadServerValues(t *testing.T) {
	files := filesOf(map[string]string{
		File: `
server: {token: master-0123456789abc}
port: 8443
tls_cert: /c.pem
tls_key: /k.pem
ip_limit_refill: 2.5
failover: retry-wait
failover_all_methods: true
fallbacks: {app.example.com: "https://status.example.com"}
outbound.allowlist: [hooks.example.com]
`,
	})
	env := envOf(map[string]string{"APERIO_DATABASE_URL": "postgres://u:p@db/aperio", "APERIO_SCALING_MAX_HELD": "10"})
	got, _, err := Load(Options{Env: env, ReadFile: files})
	if err != nil {
		t.Fatalf("Load() error = %v", err)
	}
	want := Default()
	want.Token = "master-0123456789abc"
	want.Port = 8443
	want.TLSCert, want.TLSKey = "/c.pem", "/k.pem"
	want.Router.IPLimitRefill = 2.5
	want.Router.Failover = "retry-wait"
	want.Router.FailoverAllMethods = true
	want.Fallbacks = FallbackEntries{{Line: 9, Hostname: "app.example.com", URL: "https://status.example.com"}}
	want.Router.Fallbacks = []router.Fallback{{Hostname: "app.example.com", URL: "https://status.example.com"}}
	want.Outbound.Allowlist = []string{"hooks.example.com"}
	want.Store.DatabaseURL = "postgres://u:p@db/aperio"
	want.Router.MaxHeld = 10
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Load() = %+v, want %+v", got, want)
	}
}

func TestLoadFileChoice(t *testing.T) {
	files := filesOf(map[string]string{
		File:                "server.token: default-file-0123456789\n",
		"/etc/aperio/s.yml": "server.token: env-file-0123456789\n",
		"explicit.yaml":     "server.token: explicit-0123456789\n",
	})
	tests := []struct {
		name    string
		opts    Options
		want    string // token
		wantSrc string
		wantErr []string
	}{
		{
			name:    "working directory file",
			opts:    Options{},
			want:    "default-file-0123456789",
			wantSrc: "file:aperio-server.yaml:1",
		},
		{
			name:    "APERIO_SERVER_CONFIG",
			opts:    Options{Env: envOf(map[string]string{FileEnv: "/etc/aperio/s.yml"})},
			want:    "env-file-0123456789",
			wantSrc: "file:/etc/aperio/s.yml:1",
		},
		{
			name:    "explicit file wins over APERIO_SERVER_CONFIG",
			opts:    Options{File: "explicit.yaml", FileMustExist: true, Env: envOf(map[string]string{FileEnv: "/etc/aperio/s.yml"})},
			want:    "explicit-0123456789",
			wantSrc: "file:explicit.yaml:1",
		},
		{
			name:    "missing APERIO_SERVER_CONFIG file",
			opts:    Options{Env: envOf(map[string]string{FileEnv: "/nope.yaml", "APERIO_SERVER_TOKEN": "token-0123456789abcdef"})},
			want:    "token-0123456789abcdef",
			wantSrc: "env APERIO_SERVER_TOKEN",
			wantErr: []string{"config: /nope.yaml: file does not exist"},
		},
		{
			name:    "missing explicit file",
			opts:    Options{File: "missing.yaml", FileMustExist: true, Env: envOf(map[string]string{"APERIO_SERVER_TOKEN": "token-0123456789abcdef"})},
			want:    "token-0123456789abcdef",
			wantSrc: "env APERIO_SERVER_TOKEN",
			wantErr: []string{"config: missing.yaml: file does not exist"},
		},
		{
			name:    "missing optional file",
			opts:    Options{File: "missing.yaml", Env: envOf(map[string]string{"APERIO_SERVER_TOKEN": "token-0123456789abcdef"})},
			want:    "token-0123456789abcdef",
			wantSrc: "env APERIO_SERVER_TOKEN",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.ReadFile = files
			cfg, src, err := Load(tc.opts)
			diffLines(t, "Load() errors", problems(t, err), tc.wantErr)
			if cfg.Token != tc.want {
				t.Errorf("Load() token = %q, want %q", cfg.Token, tc.want)
			}
			if got := src.Of("server.token").String(); got != tc.wantSrc {
				t.Errorf("Sources.Of(server.token) = %q, want %q", got, tc.wantSrc)
			}
		})
	}
}

func TestLoadServerReadError(t *testing.T) {
	read := func(string) ([]byte, error) { return nil, errors.New("permission denied") }
	_, _, err := Load(Options{ReadFile: read, Env: envOf(map[string]string{"APERIO_SERVER_TOKEN": "token-0123456789abcdef"})})
	diffLines(t, "Load() errors", problems(t, err), []string{"config: aperio-server.yaml: cannot read file"})
}

// serverErrorCases is shared by TestLoadServerErrors and FuzzLoadServerYAML's
// seeds.
var serverErrorCases = []struct {
	name string
	file string
	env  map[string]string
	want []string
}{
	{
		name: "missing token",
		want: []string{"config: server.token: required: set server.token in aperio-server.yaml or APERIO_SERVER_TOKEN"},
	},
	{
		name: "unknown key with did you mean",
		file: "server.token: token-0123456789abcdef\nprot: 80\n",
		want: []string{"config: prot (aperio-server.yaml:2): unknown key, did you mean port?"},
	},
	{
		name: "unknown nested key with did you mean",
		file: "server.token: token-0123456789abcdef\nscaling:\n  enabled: true\n  alow_http: true\n",
		want: []string{"config: scaling.alow_http (aperio-server.yaml:4): unknown key, did you mean scaling_allow_http?"},
	},
	{
		// visitor_min_bytes_per_second binds the router's int64 rate:
		// it still reads a plain integer, and nothing past int64 or
		// written as a size.
		name: "visitor rate is a plain integer",
		file: "server.token: token-0123456789abcdef\nvisitor_min_bytes_per_second: 1KiB\n",
		env:  map[string]string{"APERIO_VISITOR_MIN_BYTES_PER_SECOND": "99999999999999999999"},
		want: []string{
			`config: visitor_min_bytes_per_second (aperio-server.yaml:2): invalid integer "1KiB"`,
			`config: visitor_min_bytes_per_second (env APERIO_VISITOR_MIN_BYTES_PER_SECOND): invalid integer "99999999999999999999"`,
		},
	},
	{
		name: "unknown key without a suggestion",
		file: "server.token: token-0123456789abcdef\nfrobnicate: yes\n",
		want: []string{"config: frobnicate (aperio-server.yaml:2): unknown key"},
	},
	{
		name: "suffix suggestion",
		file: "token: t\n",
		want: []string{
			"config: token (aperio-server.yaml:1): unknown key, did you mean server.token?",
			"config: server.token: required: set server.token in aperio-server.yaml or APERIO_SERVER_TOKEN",
		},
	},
	{
		name: "client key in the server file",
		file: "server:\n  token: token-0123456789abcdef\n  url: https://x\n",
		want: []string{"config: server.url (aperio-server.yaml:3): unknown key"},
	},
	{
		name: "malformed file value",
		file: "server.token: token-0123456789abcdef\nport: eighty\n",
		want: []string{`config: port (aperio-server.yaml:2): invalid integer "eighty"`},
	},
	{
		name: "negative visitor limits",
		file: "server.token: token-0123456789abcdef\nvisitor_min_bytes_per_second: -1\nmax_connections_per_ip: -2\nvisitor_idle_timeout: -1s\n",
		want: []string{
			`config: visitor_idle_timeout (aperio-server.yaml:4): duration "-1s" is negative`,
			`config: visitor_min_bytes_per_second (aperio-server.yaml:2): must not be negative, got -1`,
			`config: max_connections_per_ip (aperio-server.yaml:3): must not be negative, got -2`,
		},
	},
	{
		name: "unparseable env var",
		env:  map[string]string{"APERIO_SERVER_TOKEN": "token-0123456789abcdef", "APERIO_GATEWAY_TIMEOUT": "soon"},
		want: []string{`config: gateway_timeout (env APERIO_GATEWAY_TIMEOUT): invalid duration "soon" (want e.g. 45s, 15m, 2d, or a number of seconds)`},
	},
	{
		name: "unparseable env var under a file value",
		file: "server.token: token-0123456789abcdef\nscaling: true\n",
		env:  map[string]string{"APERIO_SCALING": "maybe"},
		want: []string{`config: scaling (env APERIO_SCALING): invalid boolean "maybe" (want true, false, 1 or 0)`},
	},
	{
		name: "unparseable bare env var",
		env:  map[string]string{"APERIO_SERVER_TOKEN": "token-0123456789abcdef", "PORT": "x"},
		want: []string{`config: port (env PORT): invalid integer "x"`},
	},
	{
		name: "negative duration",
		file: "server.token: token-0123456789abcdef\nshutdown_timeout: -1s\n",
		want: []string{`config: shutdown_timeout (aperio-server.yaml:2): duration "-1s" is negative`},
	},
	{
		name: "negative size",
		file: "server.token: token-0123456789abcdef\nmax_body_size: -1\n",
		want: []string{`config: max_body_size (aperio-server.yaml:2): size "-1" is negative`},
	},
	{
		name: "negative counts",
		file: "server.token: token-0123456789abcdef\nip_limit_max: -1\nfailover_max_jumps: -2\nscaling_max_held: -3\n",
		env:  map[string]string{"APERIO_IP_LIMIT_REFILL": "-0.5"},
		want: []string{
			"config: ip_limit_max (aperio-server.yaml:2): must not be negative, got -1",
			"config: ip_limit_refill (env APERIO_IP_LIMIT_REFILL): must not be negative, got -0.5",
			"config: failover_max_jumps (aperio-server.yaml:3): must not be negative, got -2",
			"config: scaling_max_held (aperio-server.yaml:4): must not be negative, got -3",
		},
	},
	{
		name: "sample rate outside [0,1]",
		file: "server.token: token-0123456789abcdef\notel_sample_rate: 1.5\n",
		want: []string{"config: otel_sample_rate (aperio-server.yaml:2): must be between 0 and 1, got 1.5"},
	},
	{
		name: "negative sample rate from env",
		env:  map[string]string{"APERIO_SERVER_TOKEN": "token-0123456789abcdef", "APERIO_OTEL_SAMPLE_RATE": "-0.1"},
		want: []string{"config: otel_sample_rate (env APERIO_OTEL_SAMPLE_RATE): must be between 0 and 1, got -0.1"},
	},
	{
		name: "zero where it cannot work",
		file: "server.token: token-0123456789abcdef\ngateway_timeout: 0\nmax_concurrent_requests: 0\n",
		want: []string{
			"config: gateway_timeout (aperio-server.yaml:2): must be positive, got 0s",
			"config: max_concurrent_requests (aperio-server.yaml:3): must be at least 1, got 0",
		},
	},
	{
		name: "port out of range",
		file: "server.token: token-0123456789abcdef\nport: 70000\n",
		want: []string{"config: port (aperio-server.yaml:2): 70000 is not a port (0 to 65535)"},
	},
	{
		name: "values outside their sets",
		file: "server.token: token-0123456789abcdef\nlb_strategy: random\nfailover: sometimes\nlog_level: trace\n",
		env:  map[string]string{"APERIO_LOG_FORMAT": "xml"},
		want: []string{
			`config: lb_strategy (aperio-server.yaml:2): "random" is not round-robin, least-inflight, primary-standby or sticky`,
			`config: failover (aperio-server.yaml:3): "sometimes" is not fail, retry, wait or retry-wait`,
			`config: log_level (aperio-server.yaml:4): "trace" is not debug, info, warn or error`,
			`config: log_format (env APERIO_LOG_FORMAT): "xml" is not text or json`,
		},
	},
	{
		name: "hostile balancing values",
		file: "server.token: token-0123456789abcdef\noutlier_consecutive_5xx: -1\noutlier_max_ejected_percent: 150\nfailover_replay_max_body: -1\nretry_on_5xx: [503, 404, 500, 501, 502, 503, 504, 505, 506, 507, 508, 509, 510, 511, 512, 513, 514]\n",
		want: []string{
			`config: failover_replay_max_body (aperio-server.yaml:4): size "-1" is negative`,
			"config: outlier_consecutive_5xx (aperio-server.yaml:2): must not be negative, got -1",
			"config: outlier_max_ejected_percent (aperio-server.yaml:3): must be within 0..100, got 150",
			"config: retry_on_5xx (aperio-server.yaml:5): lists 17 statuses, at most 16",
			"config: retry_on_5xx (aperio-server.yaml:5): 404 is not a 5xx status",
		},
	},
	{
		name: "retry_on_5xx not a number",
		file: "server.token: token-0123456789abcdef\nretry_on_5xx: [503, five]\n",
		want: []string{`config: retry_on_5xx (aperio-server.yaml:2): invalid integer "five"`},
	},
	{
		name: "tls cert without key",
		file: "server.token: token-0123456789abcdef\ntls_cert: /c.pem\n",
		want: []string{"config: tls_key: required when tls_cert is set"},
	},
	{
		name: "database url is checked but never echoed",
		env:  map[string]string{"APERIO_SERVER_TOKEN": "token-0123456789abcdef", "APERIO_DATABASE_URL": "mysql://root:hunter2@db"},
		want: []string{"config: database_url (env APERIO_DATABASE_URL): must be a postgres:// or postgresql:// URL"},
	},
	{
		name: "bad fallbacks",
		file: "server.token: token-0123456789abcdef\nfallbacks:\n  bad_host: https://x.example.com\n  ok.example.com: ftp://x\n",
		want: []string{
			`config: fallbacks (aperio-server.yaml:2): entry 0 (line 3): "bad_host" is not a valid hostname`,
			`config: fallbacks (aperio-server.yaml:2): entry 1 (line 4): url "ftp://x" is not an absolute http or https URL`,
		},
	},
	{
		name: "fallbacks env without equals",
		env:  map[string]string{"APERIO_SERVER_TOKEN": "token-0123456789abcdef", "APERIO_FALLBACKS": "app.example.com"},
		want: []string{`config: fallbacks (env APERIO_FALLBACKS): invalid entry "app.example.com" (want host=url)`},
	},
	{
		name: "bad outbound pattern",
		env:  map[string]string{"APERIO_SERVER_TOKEN": "token-0123456789abcdef", "APERIO_OUTBOUND_ALLOWLIST": "ok.example.com,not a host"},
		want: []string{`config: outbound_allowlist (env APERIO_OUTBOUND_ALLOWLIST): "not a host" is not a hostname, *.domain, IP address or CIDR prefix`},
	},
	{
		name: "list where a value belongs",
		file: "server.token: token-0123456789abcdef\nport: [1, 2]\n",
		want: []string{"config: port (aperio-server.yaml:2): expected a single value, got a list"},
	},
	{
		name: "mapping where a value belongs",
		file: "server.token: token-0123456789abcdef\nhost: {a: 1}\n",
		want: []string{"config: host (aperio-server.yaml:2): expected a single value, got a mapping"},
	},
	{
		name: "value where a block belongs",
		file: "server: t\n",
		want: []string{
			"config: server (aperio-server.yaml:1): expected a block of settings, got a single value",
			"config: server.token: required: set server.token in aperio-server.yaml or APERIO_SERVER_TOKEN",
		},
	},
	{
		name: "set twice",
		file: "server.token: token-0123456789abcdef\nscaling_allow_http: true\nscaling:\n  allow-http: false\n",
		want: []string{"config: scaling_allow_http (aperio-server.yaml:4): set twice in this file (also at line 2)"},
	},
	{
		name: "bad variable reference",
		file: "server.token: ${TOKEN\n",
		want: []string{`config: server.token (aperio-server.yaml:1): unterminated "${" in "${TOKEN"`},
	},
	{
		name: "yaml syntax error",
		file: "server.token: token-0123456789abcdef\nport: 80\n  x: 1\n",
		env:  map[string]string{"APERIO_PORT": "x"},
		want: []string{
			"config: aperio-server.yaml:3: mapping values are not allowed in this context",
			`config: port (env APERIO_PORT): invalid integer "x"`,
		},
	},
	{
		name: "top level is not a mapping",
		file: "- port: 80\n",
		env:  map[string]string{"APERIO_SERVER_TOKEN": "token-0123456789abcdef"},
		want: []string{"config: aperio-server.yaml:1: the top level must be a mapping of settings"},
	},
	{
		name: "scaling record caps below one",
		file: "server.token: token-0123456789abcdef\nscaling_max_records_per_org: 0\n",
		env:  map[string]string{"APERIO_SCALING_MAX_RECORDS_PER_TOKEN": "-1"},
		want: []string{
			"config: scaling_max_records_per_org (aperio-server.yaml:2): must be at least 1, got 0",
			"config: scaling_max_records_per_token (env APERIO_SCALING_MAX_RECORDS_PER_TOKEN): must be at least 1, got -1",
		},
	},
	{
		name: "identity key rotation out of bounds",
		file: "server.token: token-0123456789abcdef\nidentity_key_rotation: 30m\n",
		want: []string{
			"config: identity_key_rotation (aperio-server.yaml:2): must be 0 (never) or between 1h0m0s and 87600h0m0s, got 30m0s",
		},
	},
	{
		name: "usage flush interval out of bounds",
		file: "server.token: token-0123456789abcdef\nusage_flush_interval: 500ms\n",
		env:  map[string]string{},
		want: []string{
			"config: usage_flush_interval (aperio-server.yaml:2): must be between 1s and 5m0s, got 500ms",
		},
	},
	{
		name: "usage flush interval above its bound from the environment",
		file: "server.token: token-0123456789abcdef\n",
		env:  map[string]string{"APERIO_USAGE_FLUSH_INTERVAL": "6m"},
		want: []string{
			"config: usage_flush_interval (env APERIO_USAGE_FLUSH_INTERVAL): must be between 1s and 5m0s, got 6m0s",
		},
	},
	{
		name: "two documents",
		file: "server.token: token-0123456789abcdef\n---\nport: 80\n",
		want: []string{"config: aperio-server.yaml:2: only one yaml document is allowed"},
	},
	{
		name: "merge keys",
		file: "base: &b {port: 80}\n<<: *b\nserver.token: token-0123456789abcdef\n",
		want: []string{
			"config: base (aperio-server.yaml:1): unknown key",
			"config: aperio-server.yaml:2: keys must be plain names (yaml merge keys are not supported)",
		},
	},
	{
		name: "self-referencing alias",
		file: "server.token: token-0123456789abcdef\nscaling: &s {enabled: true, allow: *s}\n",
		want: []string{
			"config: scaling.allow.enabled (aperio-server.yaml:2): unknown key",
			"config: scaling.allow.allow (aperio-server.yaml:2): unknown key",
		},
	},
	{
		name: "every problem at once",
		file: "prot: 80\nlb_strategy: random\nmax_body_size: lots\n",
		env:  map[string]string{"APERIO_FAILOVER_WINDOW": "forever"},
		want: []string{
			"config: prot (aperio-server.yaml:1): unknown key, did you mean port?",
			`config: max_body_size (aperio-server.yaml:3): invalid size "lots" (want e.g. 10MiB, 64MB, 512KiB or a number of bytes)`,
			`config: failover_window (env APERIO_FAILOVER_WINDOW): invalid duration "forever" (want e.g. 45s, 15m, 2d, or a number of seconds)`,
			"config: server.token: required: set server.token in aperio-server.yaml or APERIO_SERVER_TOKEN",
			`config: lb_strategy (aperio-server.yaml:2): "random" is not round-robin, least-inflight, primary-standby or sticky`,
		},
	},
}

func TestLoadServerErrors(t *testing.T) {
	for _, tc := range serverErrorCases {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{}
			if tc.file != "" {
				files[File] = tc.file
			}
			_, _, err := Load(Options{Env: envOf(tc.env), ReadFile: filesOf(files)})
			diffLines(t, "Load() errors", problems(t, err), tc.want)
		})
	}
}

// maxSteps is config's bound on the yaml nodes one document may expand to.
const maxSteps = 10_000

func TestLoadServerBudget(t *testing.T) {
	var b strings.Builder
	b.WriteString("server.token: token-0123456789abcdef\nscaling: &s {allow_http: true, allow_private: true, record_ttl: 1d}\n")
	for range maxSteps {
		b.WriteString("scaling: *s\n")
	}
	_, _, err := Load(Options{ReadFile: filesOf(map[string]string{File: b.String()})})
	got := problems(t, err)
	if len(got) == 0 || len(got) > maxSteps+1 {
		t.Fatalf("Load(%d aliases) = %d problems, want 1 to %d", maxSteps, len(got), maxSteps+1)
	}
	want := "config: aperio-server.yaml: document nests too deeply or expands too far (yaml aliases?)"
	if last := got[len(got)-1]; last != want {
		t.Errorf("Load(%d aliases) last problem = %q, want %q", maxSteps, last, want)
	}
}

func TestErrorAs(t *testing.T) {
	files := filesOf(map[string]string{File: "server.token: token-0123456789abcdef\nscaling:\n  record_ttl: soon\n"})
	_, _, err := Load(Options{ReadFile: files})
	var ce *config.Error
	if !errors.As(err, &ce) {
		t.Fatalf("errors.As(%v, *config.Error) = false, want true", err)
	}
	want := &config.Error{
		Key:    "scaling_record_ttl",
		Source: config.Source{Kind: config.SourceFile, Name: File, Line: 3},
		Msg:    `invalid duration "soon" (want e.g. 45s, 15m, 2d, or a number of seconds)`,
	}
	if !reflect.DeepEqual(ce, want) {
		t.Errorf("errors.As(Load()) = %+v, want %+v", ce, want)
	}
}

func TestServerValidate(t *testing.T) {
	ok := Default()
	ok.Token = "token-0123456789abcdef"
	tests := []struct {
		name string
		cfg  func() Config
		want []string
	}{
		{"valid", func() Config { return ok }, nil},
		{"default lacks token", Default, []string{
			"config: server.token: required: set server.token in aperio-server.yaml or APERIO_SERVER_TOKEN",
		}},
		{"zero value", func() Config { return Config{Config: server.Config{Token: "token-0123456789abcdef"}} }, []string{
			"config: gateway_timeout: must be positive, got 0s",
			"config: gateway_response_timeout: must be positive, got 0s",
			"config: max_concurrent_requests: must be at least 1, got 0",
			"config: client_down_threshold: must be positive, got 0s",
			"config: tunnel_max_header_bytes: must be positive, got 0",
			"config: tunnel_max_streams: must be at least 2, got 0",
			"config: tunnel_announce_interval: must be positive, got 0s",
			`config: lb_strategy: "" is not round-robin, least-inflight, primary-standby or sticky`,
			`config: failover: "" is not fail, retry, wait or retry-wait`,
			`config: underscore_headers: "" is not allow, drop or refuse`,
			"config: usage_flush_interval: must be between 1s and 5m0s, got 0s",
			"config: scaling_max_records_per_org: must be at least 1, got 0",
			"config: scaling_max_records_per_token: must be at least 1, got 0",
			`config: log_level: "" is not debug, info, warn or error`,
			`config: log_format: "" is not text or json`,
		}},
		{"negative durations and sizes", func() Config {
			s := ok
			s.Cache.MaxBytes = -1
			s.Cache.MaxStale = -time.Second
			return s
		}, []string{
			"config: cache_max_bytes: must not be negative, got -1",
			"config: cache_max_stale: must not be negative, got -1s",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			diffLines(t, "Validate()", problems(t, tc.cfg().Validate()), tc.want)
		})
	}
}

func TestServerKeys(t *testing.T) {
	keys := Keys()
	byName := make(map[string]config.Key)
	for _, k := range keys {
		if k.Flag != "" {
			t.Errorf("Keys() %s.Flag = %q, want empty", k.Name, k.Flag)
		}
		byName[k.Name] = k
	}
	tests := []struct {
		name    string
		env     string
		aliases []string
		secret  bool
	}{
		{"port", "APERIO_PORT", []string{"PORT"}, false},
		{"host", "APERIO_HOST", []string{"HOST"}, false},
		{"log_level", "APERIO_LOG_LEVEL", []string{"LOG_LEVEL"}, false},
		{"server.token", "APERIO_SERVER_TOKEN", nil, true},
		{"database_url", "APERIO_DATABASE_URL", nil, true},
		{"metrics_token", "APERIO_METRICS_TOKEN", nil, true},
		{"scaling", "APERIO_SCALING", nil, false},
		{"scaling_allow_http", "APERIO_SCALING_ALLOW_HTTP", nil, false},
		{"scaling_record_ttl", "APERIO_SCALING_RECORD_TTL", nil, false},
		{"usage_flush_interval", "APERIO_USAGE_FLUSH_INTERVAL", nil, false},
		{"outbound_allowlist", "APERIO_OUTBOUND_ALLOWLIST", nil, false},
		{"outbound_block_private", "APERIO_OUTBOUND_BLOCK_PRIVATE", nil, false},
		{"max_body_size", "APERIO_MAX_BODY_SIZE", nil, false},
		{"access_log", "APERIO_ACCESS_LOG", nil, false},
		{"access_log_ips", "APERIO_ACCESS_LOG_IPS", nil, false},
		{"server_timing", "APERIO_SERVER_TIMING", nil, false},
		{"debug_listen", "APERIO_DEBUG_LISTEN", nil, false},
		{"max_stream_subscribers", "APERIO_MAX_STREAM_SUBSCRIBERS", nil, false},
		{"otel_sample_rate", "APERIO_OTEL_SAMPLE_RATE", nil, false},
		{"tunnel_max_header_bytes", "APERIO_TUNNEL_MAX_HEADER_BYTES", nil, false},
		{"tunnel_max_streams", "APERIO_TUNNEL_MAX_STREAMS", nil, false},
		{"tunnel_announce_interval", "APERIO_TUNNEL_ANNOUNCE_INTERVAL", nil, false},
		{"read_header_timeout", "APERIO_READ_HEADER_TIMEOUT", nil, false},
		{"max_header_bytes", "APERIO_MAX_HEADER_BYTES", nil, false},
		{"keepalive_timeout", "APERIO_KEEPALIVE_TIMEOUT", nil, false},
		{"visitor_idle_timeout", "APERIO_VISITOR_IDLE_TIMEOUT", nil, false},
		{"visitor_min_bytes_per_second", "APERIO_VISITOR_MIN_BYTES_PER_SECOND", nil, false},
		{"max_connections_per_ip", "APERIO_MAX_CONNECTIONS_PER_IP", nil, false},
		{"tunnel_handshake_timeout", "APERIO_TUNNEL_HANDSHAKE_TIMEOUT", nil, false},
		{"require_hostname_bind", "APERIO_REQUIRE_HOSTNAME_BIND", nil, false},
		{"admin_hosts", "APERIO_ADMIN_HOSTS", nil, false},
		{"acme.on_demand_grace", "APERIO_ACME_ON_DEMAND_GRACE", nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k, ok := byName[tc.name]
			if !ok {
				t.Fatalf("Keys() has no %s", tc.name)
			}
			if k.Env != tc.env || !slices.Equal(k.EnvAliases, tc.aliases) || k.Secret != tc.secret {
				t.Errorf("Keys() %s = %+v, want Env %s, EnvAliases %v, Secret %v", tc.name, k, tc.env, tc.aliases, tc.secret)
			}
			if k.Usage == "" {
				t.Errorf("Keys() %s.Usage is empty", tc.name)
			}
		})
	}
	if !byName["scaling"].Bool || !byName["outbound_block_private"].Bool || byName["port"].Bool {
		t.Errorf("Keys() Bool: scaling %v, outbound_block_private %v, port %v; want true, true, false",
			byName["scaling"].Bool, byName["outbound_block_private"].Bool, byName["port"].Bool)
	}
	if len(keys) != 101 {
		t.Errorf("len(Keys()) = %d, want 101", len(keys))
	}
}

func TestInspectRedactHeadersValidate(t *testing.T) {
	s := Default()
	s.Token = "token-0123456789abcdef"
	s.Inspect.RedactHeaders = []string{"X-Api-Key", "bad name"}
	diffLines(t, "Validate()", problems(t, s.Validate()), []string{
		`config: inspect_redact_headers: "bad name" is not a header name`,
	})
	s.Inspect.RedactHeaders = []string{"X-Api-Key"}
	if err := s.Validate(); err != nil {
		t.Errorf("Validate() with inspect_redact_headers [X-Api-Key] = %v, want nil", err)
	}
}

func TestEdgeValidate(t *testing.T) {
	s := Default()
	s.Token = "token-0123456789abcdef"
	s.TrustedProxies = []string{"10.0.0.0/8", "nope"}
	s.DeniedIPs = []string{"1.2.3.4/33"}
	s.AdminAllowedIPs = []string{"fe80::1%eth0"}
	s.RealIPHeader = "X Real IP"
	s.MetricsListen = "localhost"
	diffLines(t, "Validate()", problems(t, s.Validate()), []string{
		`config: trusted_proxies: "nope" is not an IP address or CIDR prefix`,
		`config: denied_ips: "1.2.3.4/33" is not an IP address or CIDR prefix`,
		`config: admin_allowed_ips: "fe80::1%eth0" is not an IP address or CIDR prefix`,
		`config: real_ip_header: "X Real IP" is not an HTTP header name`,
		`config: metrics_listen: "localhost" is not a host:port address`,
	})

	s = Default()
	s.Token = "token-0123456789abcdef"
	s.ProxyProtocol = true
	diffLines(t, "Validate()", problems(t, s.Validate()), []string{
		"config: proxy_protocol: needs trusted_proxies: PROXY headers are accepted only from them",
	})
}

// TestDebugListenValidate proves debug_listen takes a loopback address
// only: profiles must never be exposed by accident.
func TestDebugListenValidate(t *testing.T) {
	const notLoopback = "debughttp: debug_listen must be a loopback address (127.0.0.1, ::1 or localhost)"
	for _, tc := range []struct {
		addr string
		want []string
	}{
		{"127.0.0.1:6060", nil},
		{"127.0.0.1:0", nil},
		{"[::1]:6060", nil},
		{"localhost:6060", nil},
		{"0.0.0.0:6060", []string{`config: debug_listen: 0.0.0.0 in "0.0.0.0:6060": ` + notLoopback}},
		{"[::]:6060", []string{`config: debug_listen: :: in "[::]:6060": ` + notLoopback}},
		{":6060", []string{`config: debug_listen: an empty host (every interface) in ":6060": ` + notLoopback}},
		{"203.0.113.9:6060", []string{`config: debug_listen: 203.0.113.9 in "203.0.113.9:6060": ` + notLoopback}},
		{"10.1.2.3:6060", []string{`config: debug_listen: 10.1.2.3 in "10.1.2.3:6060": ` + notLoopback}},
		{"example.com:6060", []string{`config: debug_listen: example.com in "example.com:6060": ` + notLoopback}},
		{"localhost", []string{`config: debug_listen: "localhost" is not a host:port address`}},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			s := Default()
			s.Token = "token-0123456789abcdef"
			s.DebugListen = tc.addr
			diffLines(t, "Validate()", problems(t, s.Validate()), tc.want)
		})
	}
	files := filesOf(map[string]string{File: "server.token: token-0123456789abcdef\n"})
	_, _, err := Load(Options{ReadFile: files, Env: envOf(map[string]string{"APERIO_DEBUG_LISTEN": "0.0.0.0:6060"})})
	diffLines(t, "Load() errors", problems(t, err), []string{
		`config: debug_listen (env APERIO_DEBUG_LISTEN): 0.0.0.0 in "0.0.0.0:6060": ` + notLoopback,
	})
}

// TestSuggest proves an unknown key's problem names the server key it
// most likely meant, or none when nothing is close.
func TestSuggest(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		{"prot", "port"},
		{"hots", "host"},
		{"lb_stratgy", "lb_strategy"},
		{"gatway_timeout", "gateway_timeout"},
		{"scaling_alow_http", "scaling_allow_http"},
		{"ip_limit_refil", "ip_limit_refill"},
		{"token", "server.token"},
		{"completely_unrelated_setting", ""},
		{"x", ""},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			files := filesOf(map[string]string{File: "server.token: token-0123456789abcdef\n" + tc.in + ": 1\n"})
			_, _, err := Load(Options{ReadFile: files})
			want := []string{"config: " + tc.in + " (aperio-server.yaml:2): unknown key"}
			if tc.want != "" {
				want[0] += ", did you mean " + tc.want + "?"
			}
			diffLines(t, "Load() errors", problems(t, err), want)
		})
	}
}

// An unset ${VAR} used to become "" silently, so a secret that was not
// exported meant an empty one (issue 19); now it stops startup naming the
// variable and the file:line.
func TestLoadUnsetVariable(t *testing.T) {
	files := filesOf(map[string]string{File: "server:\n  token: token-0123456789abcdef\nmetrics_token: ${METRICS_SECRET}\noidc:\n  client_secret: ${OIDC_SECRET:?export OIDC_SECRET from the vault}\n"})
	_, _, err := Load(Options{ReadFile: files})
	diffLines(t, "Load() errors", problems(t, err), []string{
		"config: oidc.client_secret (aperio-server.yaml:5): variable OIDC_SECRET is unset or empty: export OIDC_SECRET from the vault",
		"config: metrics_token (aperio-server.yaml:3): variable METRICS_SECRET is not set (write ${METRICS_SECRET:-default} for a default, or ${METRICS_SECRET:-} for empty)",
	})
}

// The server's file wins over its environment, as documented; the load
// warns about each key where that hides an exported variable.
func TestLoadWarnsFileOverridingEnv(t *testing.T) {
	files := filesOf(map[string]string{File: "server:\n  token: token-0123456789abcdef\nport: 9000\nlog_level: info\n"})
	env := envOf(map[string]string{"APERIO_PORT": "8080", "LOG_LEVEL": "info", "APERIO_SERVER_TOKEN": "other-0123456789abcdef"})
	_, src, err := Load(Options{Env: env, ReadFile: files})
	if err != nil {
		t.Fatalf("Load() error = %v", err)
	}
	diffLines(t, "Warnings()", src.Warnings(), []string{
		"aperio-server.yaml:3 sets port, overriding APERIO_PORT",
		"aperio-server.yaml:2 sets server.token, overriding APERIO_SERVER_TOKEN",
	})
	if got, want := src.Files(), []string{mustAbs(t, File)}; !slices.Equal(got, want) {
		t.Errorf("Files() = %q, want %q", got, want)
	}
}

func mustAbs(tb testing.TB, p string) string {
	tb.Helper()
	abs, err := filepath.Abs(p)
	if err != nil {
		tb.Fatal(err)
	}
	return abs
}

func TestLoadInclude(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("aperio-server.yaml", "include: [limits.yaml, secret.yaml]\nport: 9000\n")
	write("limits.yaml", "port: 1\nmax_concurrent_requests: 7\n")
	write("secret.yaml", "server:\n  token: token-0123456789abcdef\n")
	main := filepath.Join(dir, "aperio-server.yaml")
	cfg, src, err := Load(Options{File: main, FileMustExist: true})
	if err != nil {
		t.Fatalf("Load() error = %v", err)
	}
	if cfg.Port != 9000 || cfg.Router.MaxConcurrentRequests != 7 || cfg.Token != "token-0123456789abcdef" {
		t.Errorf("Load() port, max_concurrent_requests, token = %d, %d, %q, want 9000, 7, the included one", cfg.Port, cfg.Router.MaxConcurrentRequests, cfg.Token)
	}
	if got, want := src.Of("max_concurrent_requests").String(), "file:"+filepath.Join(dir, "limits.yaml")+":2"; got != want {
		t.Errorf("Sources.Of(max_concurrent_requests) = %q, want %q", got, want)
	}
	if got := len(src.Files()); got != 3 {
		t.Errorf("Files() = %q, want the main file and both includes", src.Files())
	}
}

func TestCo3mozServerKeysRefused(t *testing.T) {
	for _, key := range config.Co3mozKeys("server") {
		t.Run(key, func(t *testing.T) {
			file := "server: {token: token-0123456789abcdef}\n" + key + ": 1\n"
			if key == "failover_mode" {
				file = "server: {token: token-0123456789abcdef}\nfailover:\n  mode: 1\n"
			}
			_, _, err := Load(Options{ReadFile: filesOf(map[string]string{File: file})})
			got := problems(t, err)
			if len(got) != 1 || !strings.Contains(got[0], "a co3moz/aperio key that Aperio does not support: ") || !strings.Contains(got[0], "(aperio-server.yaml:") {
				t.Errorf("Load(%s) errors = %q, want one naming the co3moz key and its line", key, got)
			}
		})
	}
}
