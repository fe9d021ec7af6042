package outbound

import (
	"net/netip"
	"slices"
)

// Cloud metadata services answer, on an address the instance reaches
// without any route, with the instance's credentials. A hook or webhook URL
// that reaches one hands those credentials to whoever chose the URL, so
// these destinations stay refused even under AllowPrivate, unless the
// operator lists the address itself in Allowlist (a single address entry:
// a wider prefix does not count), and, for a metadata name, the name too.

// linkLocal are the link-local ranges; every cloud's metadata service but
// the ones in metadataAddrs lives in 169.254.0.0/16.
var linkLocal = []netip.Prefix{
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("fe80::/10"),
}

// metadataAddrs are metadata services outside the link-local ranges.
var metadataAddrs = []netip.Addr{
	netip.MustParseAddr("fd00:ec2::254"),   // AWS instance metadata over IPv6
	netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
}

// metadataNames are well-known names of metadata services, lowercased and
// without a trailing dot.
var metadataNames = []string{
	"metadata",
	"metadata.google.internal",
	"metadata.goog",
	"instance-data",
	"instance-data.ec2.internal",
	"metadata.tencentyun.com",
}

// guarded reports whether a (any zone dropped, IPv4-mapped read as IPv4)
// is a link-local or metadata address.
func guarded(a netip.Addr) bool {
	a = a.WithZone("").Unmap()
	if slices.Contains(metadataAddrs, a) {
		return true
	}
	for _, p := range linkLocal {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// exact reports whether a (IPv4-mapped read as IPv4) is listed as a single
// address entry. A zoned address is never listed: entries carry no zone.
func (al allowlist) exact(a netip.Addr) bool {
	if a.Zone() != "" {
		return false
	}
	a = a.Unmap()
	for _, p := range al.prefixes {
		if p.IsSingleIP() && p.Addr() == a {
			return true
		}
	}
	return false
}

// exactName reports whether name is listed as a name entry, as written
// (a wildcard entry does not count).
func (al allowlist) exactName(name string) bool {
	return slices.Contains(al.names, name)
}
