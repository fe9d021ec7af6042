package access

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// MaxIPRules bounds allowed_ips and denied_ips, each.
const MaxIPRules = 1000

// IPRules are a service's allowed_ips and denied_ips, judged on the
// visitor's real address. Denied wins; an empty Allowed admits every
// address Denied does not name. The zero IPRules admits everyone.
type IPRules struct {
	Allowed []netip.Prefix
	Denied  []netip.Prefix
}

// ParseIPRules parses allowed and denied entries, each an IP address or a
// CIDR prefix (surrounding spaces ignored). It reports every bad entry,
// by list and index, joined with errors.Join.
func ParseIPRules(allowed, denied []string) (IPRules, error) {
	var errs []error
	parse := func(key string, entries []string) []netip.Prefix {
		if len(entries) > MaxIPRules {
			errs = append(errs, fmt.Errorf("access: %s has %d entries, at most %d", key, len(entries), MaxIPRules))
			return nil
		}
		var out []netip.Prefix
		for i, e := range entries {
			p, err := parsePrefix(strings.TrimSpace(e))
			if err != nil {
				errs = append(errs, fmt.Errorf("access: %s entry %d %s: %w", key, i, quote(e), err))
				continue
			}
			out = append(out, p)
		}
		return out
	}
	r := IPRules{Allowed: parse("allowed_ips", allowed), Denied: parse("denied_ips", denied)}
	if len(errs) > 0 {
		return IPRules{}, errors.Join(errs...)
	}
	return r, nil
}

func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, errors.New("not a CIDR prefix")
		}
		if p.Addr().Zone() != "" {
			return netip.Prefix{}, errors.New("a zone has no place in a prefix")
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0))
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, errors.New("neither an IP address nor a CIDR prefix")
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// Admits reports whether a may reach the service: in no Denied prefix,
// and in an Allowed prefix when there are any. The zero Addr (unknown) is
// in no prefix.
func (r IPRules) Admits(a netip.Addr) bool {
	ok, _ := r.admits(a)
	return ok
}

func (r IPRules) admits(a netip.Addr) (bool, string) {
	a = a.Unmap()
	for _, p := range r.Denied {
		if p.Contains(a) {
			return false, "visitor " + a.String() + " is in denied_ips " + p.String()
		}
	}
	if len(r.Allowed) == 0 {
		return true, ""
	}
	for _, p := range r.Allowed {
		if p.Contains(a) {
			return true, ""
		}
	}
	return false, "visitor " + a.String() + " is not in allowed_ips"
}
