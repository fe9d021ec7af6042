package hostname

import "strings"

// Covers reports whether every name p matches is also matched by pattern,
// ignoring case: p may be an exact name or a "*." wildcard. An exact
// pattern covers only itself; "*.example.com" covers every name below
// example.com and every wildcard at or below it ("*.example.com",
// "*.a.example.com"), but not "example.com". It is the rule for "this
// pattern lies inside that one": a token's hostname inside an
// organization's pattern, a bind inside a token's hostname.
func Covers(pattern, p string) bool {
	if strings.EqualFold(pattern, p) {
		return true
	}
	suffix, ok := strings.CutPrefix(pattern, "*") // ".example.com"
	if !ok {
		return false
	}
	name := strings.TrimPrefix(p, "*") // "a.example.com" or ".a.example.com"
	return len(name) > len(suffix) && strings.EqualFold(name[len(name)-len(suffix):], suffix)
}

// Overlaps reports whether some name matches both patterns, ignoring case.
// Two exact names overlap when equal, an exact name and a wildcard when the
// wildcard matches the name, and two wildcards when one lies below the
// other: so Overlaps(p, q) is Covers(p, q) || Covers(q, p).
func Overlaps(p, q string) bool {
	return Covers(p, q) || Covers(q, p)
}
