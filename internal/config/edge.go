package config

import (
	"fmt"
	"net/netip"
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
