package hostname

import (
	"fmt"
	"strings"
	"testing"
)

func TestCovers(t *testing.T) {
	tests := []struct {
		pattern, p string
		want       bool
	}{
		{"a.example", "a.example", true},
		{"A.example", "a.EXAMPLE", true},
		{"a.example", "b.example", false},
		{"a.example", "*.a.example", false},
		{"*.example", "a.example", true},
		{"*.example", "a.b.example", true},
		{"*.example", "*.example", true},
		{"*.example", "*.a.example", true},
		{"*.example", "example", false},
		{"*.example", "badexample", false},
		{"*.a.example", "*.example", false},
		{"*.a.example", "b.example", false},
	}
	for _, tt := range tests {
		if got := Covers(tt.pattern, tt.p); got != tt.want {
			t.Errorf("Covers(%q, %q) = %v, want %v", tt.pattern, tt.p, got, tt.want)
		}
	}
}

func TestOverlaps(t *testing.T) {
	tests := []struct {
		p, q string
		want bool
	}{
		{"a.example", "a.example", true},
		{"a.example", "b.example", false},
		{"*.example", "a.example", true},
		{"a.example", "*.example", true},
		{"*.a.example", "*.example", true},
		{"*.a.example", "*.b.example", false},
		{"*.a.example", "a.example", false},
	}
	for _, tt := range tests {
		if got := Overlaps(tt.p, tt.q); got != tt.want {
			t.Errorf("Overlaps(%q, %q) = %v, want %v", tt.p, tt.q, got, tt.want)
		}
	}
}

func TestOwners(t *testing.T) {
	o := NewOwners(map[string]string{
		"a.example":     "A",
		"*.b.example":   "B",
		"*.c.b.example": "C", // overlapping B: Owners indexes, it does not judge
		"x.example":     "X",
	})
	owner := []struct{ p, who, pattern string }{
		{"a.example", "A", "a.example"},
		{"A.EXAMPLE", "A", "a.example"},
		{"q.b.example", "B", "*.b.example"},
		{"*.q.b.example", "B", "*.b.example"},
		{"*.b.example", "B", "*.b.example"},
		{"z.c.b.example", "C", "*.c.b.example"},
		{"b.example", "", ""},
		{"y.example", "", ""},
		{"*.example", "", ""},
	}
	for _, tt := range owner {
		who, pat, ok := o.Owner(tt.p)
		if who != tt.who || pat != tt.pattern || ok != (tt.who != "") {
			t.Errorf("Owner(%q) = %q, %q, %v, want %q, %q", tt.p, who, pat, ok, tt.who, tt.pattern)
		}
	}
	overlap := []struct {
		p  string
		ok bool
	}{
		{"*.example", true},
		{"*.a.example", false},
		{"*.b.example", true},
		{"*.q.b.example", true},
		{"*.y.example", false},
		{"b.example", false},
		{"*.ample", false},
	}
	for _, tt := range overlap {
		who, pat, ok := o.Overlap(tt.p)
		if ok != tt.ok || ok && !Overlaps(pat, tt.p) {
			t.Errorf("Overlap(%q) = %q, %q, %v, want ok=%v", tt.p, who, pat, ok, tt.ok)
		}
	}
	var none *Owners
	if _, _, ok := none.Overlap("*.example"); ok {
		t.Errorf("nil Owners: Overlap(*.example) found a pattern")
	}
}

// FuzzOwners checks the index against the definition: Owner finds a
// pattern exactly when some pattern covers the name, and Overlap exactly
// when some pattern overlaps it.
func FuzzOwners(f *testing.F) {
	f.Add("a.example", "*.b.example", "*.c.b.example", "x.b.example")
	f.Add("*.example", "a.example", "b.a.example", "*.a.example")
	f.Add("x", "*.x", "*.y.x", "*.x")
	f.Fuzz(func(t *testing.T, p1, p2, p3, name string) {
		patterns := map[string]string{}
		for i, p := range []string{p1, p2, p3} {
			if Validate(p) == nil {
				patterns[strings.ToLower(p)] = fmt.Sprint(i)
			}
		}
		if Validate(name) != nil {
			return
		}
		o := NewOwners(patterns)
		covered, overlapped := false, false
		for p := range patterns {
			covered = covered || Covers(p, name)
			overlapped = overlapped || Overlaps(p, name)
		}
		if _, pat, ok := o.Owner(name); ok != covered || ok && !Covers(pat, name) {
			t.Errorf("Owner(%q) in %v = %q, %v; want found=%v", name, patterns, pat, ok, covered)
		}
		if _, pat, ok := o.Overlap(name); ok != overlapped || ok && !Overlaps(pat, name) {
			t.Errorf("Overlap(%q) in %v = %q, %v; want found=%v", name, patterns, pat, ok, overlapped)
		}
	})
}
