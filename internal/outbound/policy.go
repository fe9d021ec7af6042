package outbound

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/aperio-dev/aperio/internal/hostname"
)

// Policy is the operator's outbound policy. The zero Policy is the
// strictest: https only, public addresses only, any public destination.
type Policy struct {
	// AllowHTTP permits http:// URLs (scaling_allow_http). When false,
	// only https:// is permitted.
	AllowHTTP bool

	// AllowPrivate permits destinations that are not public
	// (scaling_allow_private): loopback, private, link-local, carrier-grade
	// NAT, unique-local, documentation, reserved and the other ranges
	// Client refuses by default. Unspecified, multicast and broadcast
	// addresses stay refused: no legitimate connection goes there.
	// Link-local addresses (169.254.0.0/16, fe80::/10) and cloud metadata
	// services (169.254.169.254, fd00:ec2::254, …) stay refused too,
	// unless the address is an Allowlist entry of its own (a wider prefix
	// does not count); a metadata name (metadata.google.internal, …) also
	// needs its own name entry.
	// An IPv6 address that carries an IPv4 address for a translator or
	// relay (NAT64, 6to4, Teredo, IPv4-compatible or -translated) is
	// permitted only when that IPv4 address would be: a metadata or
	// link-local one stays refused unless the IPv6 address itself is an
	// Allowlist entry.
	AllowPrivate bool

	// Allowlist restricts destinations (outbound_allowlist). An entry is a
	// host name ("hooks.example.com"), a wildcard matching every subdomain
	// at any depth but not the name itself ("*.example.com"), an IP address
	// or a CIDR prefix. A destination is permitted when its host matches a
	// name entry, or when it is an IP literal or a name whose resolved
	// addresses all fall in IP or CIDR entries. Empty or nil means no
	// restriction. The address rules still apply on top: an allowlisted
	// destination with a private address needs AllowPrivate too.
	Allowlist []string

	// BlockPrivate refuses destinations that are not public even when
	// AllowPrivate would permit them (outbound_block_private). It has an
	// effect only when Allowlist is empty: an allowlist is already the
	// operator's exact word on where calls may go.
	BlockPrivate bool
}

// errBadEntry is wrapped by every allowlist problem Validate reports.
var errBadEntry = errors.New("bad outbound allowlist entry")

// entryError is one allowlist problem, naming the entry by index so that
// an operator with a long list can find it.
type entryError struct {
	index  int
	entry  string
	reason string
}

func (e *entryError) Error() string {
	return fmt.Sprintf("fence: outbound allowlist entry %d %q: %s", e.index, e.entry, e.reason)
}

func (e *entryError) Unwrap() error { return errBadEntry }

// Validate reports every malformed Allowlist entry, joined with
// errors.Join, or nil. Surrounding spaces in an entry are ignored.
func (p Policy) Validate() error {
	var errs []error
	for i, e := range p.Allowlist {
		if _, reason := parseEntry(e); reason != "" {
			errs = append(errs, &entryError{index: i, entry: e, reason: reason})
		}
	}
	return errors.Join(errs...)
}

// entry is one parsed Allowlist entry: a lowercased name pattern, or a
// prefix (an IP address is a single-address prefix).
type entry struct {
	name   string
	prefix netip.Prefix
}

// parseEntry parses one Allowlist entry, or returns why it is malformed.
func parseEntry(s string) (entry, string) {
	s = strings.TrimSpace(s)
	if s == "" {
		return entry{}, "empty"
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		switch {
		case err != nil:
			return entry{}, "not a CIDR prefix"
		case p.Addr().Is4In6():
			return entry{}, "write an IPv4 prefix in IPv4 form"
		case p.Masked() != p:
			return entry{}, fmt.Sprintf("host bits set; the prefix is %s", p.Masked())
		}
		return entry{prefix: p}, ""
	}
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Zone() != "" {
			return entry{}, "an IP address with a zone is never a destination"
		}
		a = a.Unmap()
		return entry{prefix: netip.PrefixFrom(a, a.BitLen())}, ""
	}
	name := strings.ToLower(strings.TrimSuffix(s, "."))
	if err := hostname.Validate(name); err != nil {
		return entry{}, "neither an IP address, a CIDR prefix nor a host name"
	}
	if numericLike(strings.TrimPrefix(name, "*.")) {
		return entry{}, "looks like an IPv4 address in a non-standard form"
	}
	return entry{name: name}, ""
}

// allowlist is a compiled Policy.Allowlist. The zero value permits
// everything.
type allowlist struct {
	names    []string
	prefixes []netip.Prefix
}

// compileAllowlist compiles entries, which Validate has accepted.
func compileAllowlist(entries []string) allowlist {
	var al allowlist
	for _, s := range entries {
		e, _ := parseEntry(s)
		if e.name != "" {
			al.names = append(al.names, e.name)
		} else {
			al.prefixes = append(al.prefixes, e.prefix)
		}
	}
	return al
}

func (al allowlist) empty() bool { return len(al.names) == 0 && len(al.prefixes) == 0 }

// matchName reports whether name, lowercased and without a trailing dot,
// matches a name entry.
func (al allowlist) matchName(name string) bool {
	for _, pattern := range al.names {
		if hostname.Match(pattern, name) {
			return true
		}
	}
	return false
}

// contains reports whether a falls in an IP or CIDR entry.
func (al allowlist) contains(a netip.Addr) bool {
	a = a.WithZone("").Unmap()
	for _, p := range al.prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// numericLike reports whether name ends in a label that URL parsers and
// C resolvers read as a number, making it an IPv4 address in disguise:
// "2130706433", "127.1", "0x7f.1". No top-level domain looks like that.
func numericLike(name string) bool {
	last := name[strings.LastIndexByte(name, '.')+1:]
	if hex, ok := strings.CutPrefix(strings.ToLower(last), "0x"); ok {
		last = hex
		for i := 0; i < len(last); i++ {
			if c := last[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return false
			}
		}
		return true
	}
	if last == "" {
		return false
	}
	for i := 0; i < len(last); i++ {
		if c := last[i]; c < '0' || c > '9' {
			return false
		}
	}
	return true
}
