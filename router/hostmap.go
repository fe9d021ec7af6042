package router

import "strings"

// hostMap finds the value for a hostname: its exact entry, else the most
// specific "*." wildcard that covers it, else the default. Maintenance,
// error pages and fallbacks share it, so that the three agree on which
// entry a hostname gets. It is built once and then only read: safe for
// concurrent reads.
type hostMap[T any] struct {
	exact    map[string]T
	wildcard map[string]T // by suffix: "*.example.com" is ".example.com"
	def      T
	hasDef   bool
}

// set stores v for pattern: an exact hostname, a "*." wildcard, or "" or
// "*" for the default. pattern must be normalized. A later set of the same
// pattern replaces the earlier.
func (m *hostMap[T]) set(pattern string, v T) {
	switch {
	case pattern == "" || pattern == "*":
		m.def, m.hasDef = v, true
	case strings.HasPrefix(pattern, "*."):
		if m.wildcard == nil {
			m.wildcard = make(map[string]T)
		}
		m.wildcard[pattern[1:]] = v
	default:
		if m.exact == nil {
			m.exact = make(map[string]T)
		}
		m.exact[pattern] = v
	}
}

// lookup returns the value for host (normalized), and whether there is
// one. It does not allocate.
func (m *hostMap[T]) lookup(host string) (T, bool) {
	if v, ok := m.exact[host]; ok {
		return v, true
	}
	if len(m.wildcard) > 0 {
		// Every suffix that starts at a dot, longest first: the most
		// specific wildcard wins, and a wildcard needs a label in front.
		for i := 1; i < len(host); i++ {
			if host[i] != '.' {
				continue
			}
			if v, ok := m.wildcard[host[i:]]; ok {
				return v, true
			}
		}
	}
	return m.def, m.hasDef
}

// empty reports whether m has no entry at all.
func (m *hostMap[T]) empty() bool {
	return len(m.exact) == 0 && len(m.wildcard) == 0 && !m.hasDef
}
