package policy

import (
	"fmt"
	"path"
	"strings"

	"github.com/aperio-dev/aperio/internal/hostname"
)

// Check reports the route rules of p that meet each other: an error for
// each rule an earlier one fully covers (it can never match: the earlier
// one always wins), and a warning for each pair that partly overlaps
// (some request matches both; the earlier wins it). Both name the two
// rules. A glob is judged by its literal directory, so a partial overlap
// between globs is a "may overlap".
func (p *Policy) Check() (warnings, problems []string) {
	if p == nil {
		return nil, nil
	}
	for j := range p.rules {
		b := &p.rules[j]
		for i := range j {
			a := &p.rules[i]
			switch {
			case covers(a, b):
				problems = append(problems, fmt.Sprintf("%s is unreachable: %s, earlier, matches every request it does", b.Name, a.Name))
			case overlaps(a, b):
				warnings = append(warnings, fmt.Sprintf("%s and %s may both match some requests: %s, earlier, wins those", a.Name, b.Name, a.Name))
			}
		}
	}
	return warnings, problems
}

// covers reports whether every request b matches, a matches too.
func covers(a, b *Rule) bool {
	if a.host != "" && (b.host == "" || !hostname.Covers(a.host, b.host)) {
		return false
	}
	if !methodsCover(a.methods, b.methods) {
		return false
	}
	switch {
	case a.path == "":
		return true
	case b.path == "":
		return false
	case !a.glob && !b.glob:
		return prefixMatch(a.path, b.path)
	case !a.glob:
		// Every path b's glob matches starts with its literal directory.
		return prefixMatch(a.path, globDir(b.path))
	case !b.glob:
		return false // a prefix matches paths of any depth; a glob does not
	default:
		return a.path == b.path
	}
}

// overlaps reports whether some request may match both a and b.
func overlaps(a, b *Rule) bool {
	if a.host != "" && b.host != "" && !hostname.Overlaps(a.host, b.host) {
		return false
	}
	if !methodsMeet(a.methods, b.methods) {
		return false
	}
	if a.path == "" || b.path == "" {
		return true
	}
	pa, pb := a.path, b.path
	switch {
	case !a.glob && !b.glob:
	case a.glob && b.glob:
		pa, pb = globDir(pa), globDir(pb)
	case a.glob:
		if ok, _ := path.Match(pa, pb); ok {
			return true
		}
		pa = globDir(pa)
	default:
		if ok, _ := path.Match(pb, pa); ok {
			return true
		}
		pb = globDir(pb)
	}
	return prefixMatch(pa, pb) || prefixMatch(pb, pa)
}

// globDir returns the literal directory of a glob: the part before its
// first meta character, up to its last slash ("/api/v*/x" → "/api").
func globDir(g string) string {
	lit := g
	if i := strings.IndexAny(g, "*?[\\"); i >= 0 {
		lit = g[:i]
	}
	if i := strings.LastIndexByte(lit, '/'); i > 0 {
		return lit[:i]
	}
	return "/"
}

func methodsCover(a, b []string) bool {
	if len(a) == 0 {
		return true
	}
	if len(b) == 0 {
		return false
	}
	for _, m := range b {
		if !contains(a, m) {
			return false
		}
	}
	return true
}

func methodsMeet(a, b []string) bool {
	if len(a) == 0 || len(b) == 0 {
		return true
	}
	for _, m := range b {
		if contains(a, m) {
			return true
		}
	}
	return false
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
