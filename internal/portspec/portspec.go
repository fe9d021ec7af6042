// Package portspec parses the port ranges of the server's tcp_port_range
// and of a token's allow_tcp_ports: "2222" or "3000-3100", inclusive.
package portspec

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MaxSpecs bounds the entries of one list (a token's allow_tcp_ports).
const MaxSpecs = 64

// Range is an inclusive range of ports, 1 to 65535. The zero Range is
// empty: it contains no port.
type Range struct{ Lo, Hi int }

// Contains reports whether port is in r.
func (r Range) Contains(port int) bool { return r.Lo != 0 && port >= r.Lo && port <= r.Hi }

// Size is the number of ports in r.
func (r Range) Size() int {
	if r.Lo == 0 {
		return 0
	}
	return r.Hi - r.Lo + 1
}

// String is r in the form Parse reads.
func (r Range) String() string {
	if r.Lo == r.Hi {
		return strconv.Itoa(r.Lo)
	}
	return fmt.Sprintf("%d-%d", r.Lo, r.Hi)
}

// Parse reads "N" or "N-M" (1 ≤ N ≤ M ≤ 65535).
func Parse(s string) (Range, error) {
	if len(s) > 32 {
		return Range{}, fmt.Errorf("port range %.16q…: too long", s)
	}
	lo, hi, isRange := strings.Cut(strings.TrimSpace(s), "-")
	a, err := port(lo)
	if err != nil {
		return Range{}, fmt.Errorf("port range %q: %w", s, err)
	}
	b := a
	if isRange {
		if b, err = port(hi); err != nil {
			return Range{}, fmt.Errorf("port range %q: %w", s, err)
		}
	}
	if b < a {
		return Range{}, fmt.Errorf("port range %q: %d is below %d", s, b, a)
	}
	return Range{a, b}, nil
}

func port(s string) (int, error) {
	s = strings.TrimSpace(s)
	if s == "" || len(s) > 5 {
		return 0, errors.New("want a port from 1 to 65535")
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, errors.New("want a port from 1 to 65535")
		}
	}
	n, _ := strconv.Atoi(s)
	if n < 1 || n > 65535 {
		return 0, errors.New("want a port from 1 to 65535")
	}
	return n, nil
}

// ParseList reads a list of specs, at most MaxSpecs, reporting every bad
// entry.
func ParseList(specs []string) ([]Range, error) {
	if len(specs) > MaxSpecs {
		return nil, fmt.Errorf("%d port ranges, at most %d", len(specs), MaxSpecs)
	}
	out := make([]Range, 0, len(specs))
	var errs []error
	for _, s := range specs {
		r, err := Parse(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, r)
	}
	return out, errors.Join(errs...)
}

// AnyContains reports whether a range of rs contains port.
func AnyContains(rs []Range, port int) bool {
	for _, r := range rs {
		if r.Contains(port) {
			return true
		}
	}
	return false
}
