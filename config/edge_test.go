package config

import (
	"net/netip"
	"slices"
	"testing"
)

func TestEdgeValidate(t *testing.T) {
	s := DefaultServer()
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

	s = DefaultServer()
	s.Token = "token-0123456789abcdef"
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
