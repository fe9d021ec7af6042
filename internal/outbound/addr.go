package outbound

import "net/netip"

// The classes of non-public addresses, as they appear in
// RefusedError.Reason. public is the absence of a class.
const (
	public           = ""
	classInvalid     = "invalid"
	classUnspecified = "unspecified"
	classLoopback    = "loopback"
	classPrivate     = "private"
	classLinkLocal   = "link-local"
	classMetadata    = "link-local (cloud metadata)"
	classCGNAT       = "carrier-grade NAT"
	classUniqueLocal = "unique-local"
	classSiteLocal   = "site-local"
	classMulticast   = "multicast"
	classBroadcast   = "broadcast"
	classBenchmark   = "benchmarking"
	classDoc         = "documentation"
	classIETF        = "IETF protocol assignments"
	classReserved    = "reserved"
	class6to4Relay   = "6to4 relay anycast"
	classCompatible  = "IPv4-compatible IPv6 (deprecated)"
	classNAT64       = "NAT64"
	class6to4        = "6to4"
	classTeredo      = "Teredo"
	classTranslated  = "IPv4-translated IPv6"
	classDiscard     = "discard-only"
	classSRv6        = "SRv6 SIDs"
	classNotGlobal   = "outside IPv6 global unicast 2000::/3"
	classZoned       = "scoped (has an IPv6 zone)"
)

// span is one explicit range that netip's predicates do not cover.
type span struct {
	prefix netip.Prefix
	class  string
	never  bool // refused even with AllowPrivate
}

// spans are checked in order after netip's predicates, so a narrower
// range must come before a wider one that contains it (Teredo before the
// rest of 2001::/23, broadcast before 240.0.0.0/4). IPv4 and IPv6 share
// the list: a prefix never contains an address of the other family.
var spans = []span{
	// IPv4 (RFC 6890 and its updates).
	{netip.MustParsePrefix("0.0.0.0/8"), classUnspecified, true},
	{netip.MustParsePrefix("100.64.0.0/10"), classCGNAT, false},
	{netip.MustParsePrefix("192.0.0.0/24"), classIETF, false},
	{netip.MustParsePrefix("192.0.2.0/24"), classDoc, false},
	{netip.MustParsePrefix("192.88.99.0/24"), class6to4Relay, false},
	{netip.MustParsePrefix("198.18.0.0/15"), classBenchmark, false},
	{netip.MustParsePrefix("198.51.100.0/24"), classDoc, false},
	{netip.MustParsePrefix("203.0.113.0/24"), classDoc, false},
	{netip.MustParsePrefix("255.255.255.255/32"), classBroadcast, true},
	{netip.MustParsePrefix("240.0.0.0/4"), classReserved, false},

	// IPv6. Everything outside 2000::/3 is refused afterwards anyway;
	// these entries only name the range more precisely.
	{netip.MustParsePrefix("::/96"), classCompatible, false},
	{netip.MustParsePrefix("::ffff:0:0:0/96"), classTranslated, false},
	{netip.MustParsePrefix("64:ff9b::/96"), classNAT64, false},
	{netip.MustParsePrefix("64:ff9b:1::/48"), classNAT64, false},
	{netip.MustParsePrefix("100::/64"), classDiscard, false},
	{netip.MustParsePrefix("2001::/32"), classTeredo, false},
	{netip.MustParsePrefix("2001::/23"), classIETF, false},
	{netip.MustParsePrefix("2001:db8::/32"), classDoc, false},
	{netip.MustParsePrefix("2002::/16"), class6to4, false},
	{netip.MustParsePrefix("3fff::/20"), classDoc, false},
	{netip.MustParsePrefix("5f00::/16"), classSRv6, false},
	{netip.MustParsePrefix("fec0::/10"), classSiteLocal, false},
}

var (
	globalUnicast6 = netip.MustParsePrefix("2000::/3")
	metadataAddr   = netip.MustParseAddr("169.254.169.254")
)

// classify returns why a is not a public unicast address, or public ("")
// if it is. never reports a class no TCP connection can legitimately go
// to (unspecified, multicast, broadcast), which AllowPrivate does not
// permit either: connecting to 0.0.0.0 or :: reaches the local host on
// Linux, a classic way around loopback filters.
//
// An IPv4-mapped IPv6 address (::ffff:10.0.0.1) is judged as the IPv4
// address it carries. Other embeddings (NAT64, 6to4, Teredo,
// IPv4-compatible, IPv4-translated) are never public: each hands the
// packet to a translator or relay whose reach is not ours to judge. Under
// AllowPrivate the IPv4 address they carry is judged too (embedded4), so
// that 64:ff9b::169.254.169.254 stays as refused as 169.254.169.254. A
// zone is only meaningful on a scoped address, so a zoned address is
// never public.
func classify(a netip.Addr) (class string, never bool) {
	if !a.IsValid() {
		return classInvalid, true
	}
	zoned := a.Zone() != ""
	a = a.WithZone("").Unmap()
	switch {
	case a.IsUnspecified():
		return classUnspecified, true
	case a.IsLoopback():
		return classLoopback, false
	case a.IsMulticast():
		return classMulticast, true
	case a == metadataAddr:
		return classMetadata, false
	case a.IsLinkLocalUnicast():
		return classLinkLocal, false
	case a.IsPrivate() && a.Is4():
		return classPrivate, false
	case a.IsPrivate():
		return classUniqueLocal, false
	}
	for _, s := range spans {
		if s.prefix.Contains(a) {
			return s.class, s.never
		}
	}
	if a.Is6() && !globalUnicast6.Contains(a) {
		return classNotGlobal, false
	}
	if zoned {
		return classZoned, false
	}
	return public, false
}

// The IPv6 ranges that carry an IPv4 address a translator or relay
// delivers to.
var (
	nat64WellKnown = netip.MustParsePrefix("64:ff9b::/96")    // RFC 6052
	nat64LocalUse  = netip.MustParsePrefix("64:ff9b:1::/48")  // RFC 8215
	sixToFour      = netip.MustParsePrefix("2002::/16")       // RFC 3056
	teredo         = netip.MustParsePrefix("2001::/32")       // RFC 4380
	compatible     = netip.MustParsePrefix("::/96")           // RFC 4291, deprecated
	translated     = netip.MustParsePrefix("::ffff:0:0:0/96") // RFC 2765
)

// carried is an IPv4 address an IPv6 address embeds, and how.
type carried struct {
	v4   netip.Addr
	form string // a class name: classNAT64, class6to4, …
	// sure is false for a position that is one of several the operator
	// of a local-use NAT64 prefix may have chosen (RFC 6052 allows /48,
	// /56, /64 and /96 inside 64:ff9b:1::/48): such a position is judged
	// only for metadata and link-local, since the bytes there are padding
	// (often zero, which would read as 0.0.0.0) under the other layouts.
	sure bool
}

// embedded4 returns the IPv4 addresses a (unmapped, without zone) hands
// to a translator or relay: the NAT64 address (RFC 6052, every layout a
// local-use prefix allows), the 6to4 router (bits 16-47), the Teredo
// client (the last 32 bits inverted) and the IPv4-compatible and
// IPv4-translated forms (the last 32 bits). It returns nil for any other
// address, IPv4 included.
func embedded4(a netip.Addr) []carried {
	if !a.Is6() || a.Is4In6() || a.IsLoopback() || a.IsUnspecified() {
		return nil
	}
	b := a.As16()
	at := func(i, j, k, l int) netip.Addr { return netip.AddrFrom4([4]byte{b[i], b[j], b[k], b[l]}) }
	last := at(12, 13, 14, 15)
	switch {
	case nat64WellKnown.Contains(a):
		return []carried{{last, classNAT64, true}}
	case nat64LocalUse.Contains(a):
		// RFC 6052 section 2.2: bits 64-71 (byte 8) are never used.
		return []carried{
			{last, classNAT64, false},              // /96
			{at(6, 7, 9, 10), classNAT64, false},   // /48
			{at(7, 9, 10, 11), classNAT64, false},  // /56
			{at(9, 10, 11, 12), classNAT64, false}, // /64
		}
	case sixToFour.Contains(a):
		return []carried{{at(2, 3, 4, 5), class6to4, true}}
	case teredo.Contains(a):
		return []carried{{netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}), classTeredo, true}}
	case translated.Contains(a):
		return []carried{{last, classTranslated, true}}
	case compatible.Contains(a):
		return []carried{{last, classCompatible, true}}
	}
	return nil
}
