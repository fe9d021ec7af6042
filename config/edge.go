package config

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
)

// ParsePrefixes parses a list of CIDR prefixes and single addresses (a
// single address is its own /32 or /128), as trusted_proxies, denied_ips
// and admin_allowed_ips hold them. IPv4-mapped IPv6 forms are unmapped so
// that they match the addresses visitors are seen with. The error names
// the first bad item.
func ParsePrefixes(items []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(items))
	for _, it := range items {
		if p, err := netip.ParsePrefix(it); err == nil {
			if p.Addr().Is4In6() && p.Bits() >= 96 {
				p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
			}
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(it)
		if err != nil || a.Zone() != "" {
			return nil, fmt.Errorf("%q is not an IP address or CIDR prefix", it)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// edgeProblems checks the keys of the edge: address lists, the real-ip
// header's name and the metrics listener's address.
func (s Server) edgeProblems(v *checker) {
	lists := []struct {
		key  string
		list []string
	}{{"trusted_proxies", s.TrustedProxies}, {"denied_ips", s.DeniedIPs}, {"admin_allowed_ips", s.AdminAllowedIPs}}
	for _, l := range lists {
		if _, err := ParsePrefixes(l.list); err != nil {
			v.add(l.key, "%v", err)
		}
	}
	// Empty means X-Forwarded-For, as in DefaultServer.
	if s.RealIPHeader != "" && !validHeaderName(s.RealIPHeader) {
		v.add("real_ip_header", "%q is not an HTTP header name", s.RealIPHeader)
	}
	if s.ProxyProtocol && len(s.TrustedProxies) == 0 {
		v.add("proxy_protocol", "needs trusted_proxies: PROXY headers are accepted only from them")
	}
	if s.MetricsListen != "" {
		_, port, err := net.SplitHostPort(s.MetricsListen)
		if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 0 || n > 65535 {
			v.add("metrics_listen", "%q is not a host:port address", s.MetricsListen)
		}
	}
}

// validHeaderName reports whether h is a non-empty HTTP field name (an
// RFC 9110 token) of sane length.
func validHeaderName(h string) bool {
	if h == "" || len(h) > 64 {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-' || c == '_' || c == '.' || c == '!' || c == '#' || c == '$' || c == '%' || c == '&' ||
			c == '\'' || c == '*' || c == '+' || c == '^' || c == '`' || c == '|' || c == '~':
		default:
			return false
		}
	}
	return true
}
