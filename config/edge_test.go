package config

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestEdgeKeys(t *testing.T) {
	tests := []struct {
		name string
		file string
		env  map[string]string
		want []string
	}{
		{
			name: "defaults",
			file: "server.token: t\n",
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
			name: "file",
			file: "server.token: t\ntrusted_proxies: [10.0.0.0/8, 192.0.2.7]\nreal_ip_header: CF-Connecting-IP\nproxy_protocol: true\ndenied_ips: [203.0.113.0/24]\nadmin_allowed_ips: [127.0.0.1, '::1']\nmetrics_listen: 127.0.0.1:9100\n",
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
			name: "environment",
			file: "server.token: t\n",
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
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, src, err := LoadServer(ServerOptions{File: ServerFile, Env: envOf(tc.env), ReadFile: filesOf(map[string]string{ServerFile: tc.file})})
			if err != nil {
				t.Fatalf("LoadServer: %v", err)
			}
			printed := printedServer(t, c, src)
			for _, w := range tc.want {
				key, _, _ := strings.Cut(w, " = ")
				if got := printed[key]; got != w {
					t.Errorf("--print-config %s = %q, want %q", key, got, w)
				}
			}
		})
	}
}

func TestEdgeValidate(t *testing.T) {
	s := DefaultServer()
	s.Token = "t"
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

	s = DefaultServer()
	s.Token = "t"
	s.ProxyProtocol = true
	diffLines(t, "Validate()", problems(t, s.Validate()), []string{
		"config: proxy_protocol: needs trusted_proxies: PROXY headers are accepted only from them",
	})
}

func TestParsePrefixes(t *testing.T) {
	got, err := ParsePrefixes([]string{"10.1.2.3/8", "192.0.2.7", "::ffff:198.51.100.0/120", "2001:db8::1"})
	if err != nil {
		t.Fatalf("ParsePrefixes: %v", err)
	}
	want := []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.7/32"),
		netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("2001:db8::1/128"),
	}
	if !slices.Equal(got, want) {
		t.Errorf("ParsePrefixes = %v, want %v", got, want)
	}
}
