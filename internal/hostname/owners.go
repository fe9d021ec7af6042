package hostname

import (
	"slices"
	"strings"
)

// Owners indexes patterns (exact names and "*." wildcards, normalized) by
// who owns them, so that the owner of a name and the patterns overlapping a
// new one are found in O(labels + log n) rather than by comparing with
// every pattern. The zero value and nil hold nothing. An Owners is
// immutable once built and safe for concurrent use.
type Owners struct {
	owner map[string]string // pattern → owner
	// names holds every pattern's name part reversed ("*.a.example" →
	// "elpmaxe.a.", "b.example" → "elpmaxe.b"), sorted, so that the
	// patterns below a wildcard are one contiguous run.
	names []string
}

// NewOwners indexes owners, a map of pattern to owner. The map is not
// kept.
func NewOwners(owners map[string]string) *Owners {
	o := &Owners{owner: make(map[string]string, len(owners)), names: make([]string, 0, len(owners))}
	for p, who := range owners {
		p = strings.ToLower(p)
		o.owner[p] = who
		o.names = append(o.names, reverse(strings.TrimPrefix(p, "*")))
	}
	slices.Sort(o.names)
	return o
}

// Len returns the number of patterns indexed.
func (o *Owners) Len() int {
	if o == nil {
		return 0
	}
	return len(o.owner)
}

// Owner returns a pattern that covers p (see Covers) and its owner. p is an
// exact name or a wildcard; for a name several patterns may cover, the most
// specific is returned.
func (o *Owners) Owner(p string) (owner, pattern string, ok bool) {
	if o.Len() == 0 {
		return "", "", false
	}
	p = strings.ToLower(p)
	if who, ok := o.owner[p]; ok {
		return who, p, true
	}
	// The wildcards that cover p: "*." followed by every proper label
	// suffix of its name, longest first.
	name := strings.TrimPrefix(p, "*")
	for i := 0; i < len(name); i++ {
		if name[i] != '.' || i+1 == len(name) {
			continue
		}
		w := "*." + name[i+1:]
		if w == p {
			continue
		}
		if who, ok := o.owner[w]; ok {
			return who, w, true
		}
	}
	return "", "", false
}

// Overlap returns a pattern that overlaps p (see Overlaps) and its owner:
// one that covers p, or when p is a wildcard, one that p covers.
func (o *Owners) Overlap(p string) (owner, pattern string, ok bool) {
	if o.Len() == 0 {
		return "", "", false
	}
	if who, pat, ok := o.Owner(p); ok {
		return who, pat, true
	}
	suffix, wild := strings.CutPrefix(strings.ToLower(p), "*") // ".example.com"
	if !wild {
		return "", "", false
	}
	// Every name strictly below the suffix, reversed, starts with the
	// reversed suffix and is longer.
	rs := reverse(suffix)
	i, _ := slices.BinarySearch(o.names, rs)
	for ; i < len(o.names) && strings.HasPrefix(o.names[i], rs); i++ {
		n := o.names[i]
		if len(n) == len(rs) {
			continue // p itself, which Owner would have found
		}
		pat := reverse(n)
		if pat[0] == '.' {
			pat = "*" + pat
		}
		return o.owner[pat], pat, true
	}
	return "", "", false
}

// reverse returns s with its bytes in reverse order; hostnames are ASCII.
func reverse(s string) string {
	b := []byte(s)
	slices.Reverse(b)
	return string(b)
}
