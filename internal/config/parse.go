package config

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
)

const day = 24 * time.Hour

// ParseDuration parses a duration as every duration setting of both binaries
// spells it: Go syntax (45s, 15m, 1h30m, 250ms) plus d for days (2d, 1d12h,
// 1.5d), or a bare number (integer or decimal) of seconds (45, 0.5).
// Surrounding spaces are ignored. Negative durations and values that overflow
// time.Duration are refused.
func ParseDuration(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, errors.New("empty duration")
	}
	if t[0] == '-' {
		return 0, fmt.Errorf("duration %q is negative", s)
	}
	t = strings.TrimPrefix(t, "+")
	bad := fmt.Errorf("invalid duration %q (want e.g. 45s, 15m, 2d, or a number of seconds)", s)
	if t == "" {
		return 0, bad
	}
	if isDecimal(t) {
		d, err := time.ParseDuration(t + "s")
		if err != nil {
			return 0, bad
		}
		return d, nil
	}
	// Days are not Go syntax: take every "<number>d" component out, convert
	// it through hours, and hand the rest to time.ParseDuration.
	var total time.Duration
	var rest strings.Builder
	for i := 0; i < len(t); {
		j := i
		for j < len(t) && isNumberByte(t[j]) {
			j++
		}
		if j == i {
			return 0, bad
		}
		k := j
		for k < len(t) && !isNumberByte(t[k]) {
			k++
		}
		if t[j:k] != "d" {
			rest.WriteString(t[i:k])
			i = k
			continue
		}
		h, err := time.ParseDuration(t[i:j] + "h")
		if err != nil || h > math.MaxInt64/24 {
			return 0, bad
		}
		if total, err = addDuration(total, h*24); err != nil {
			return 0, bad
		}
		i = k
	}
	if rest.Len() > 0 {
		d, err := time.ParseDuration(rest.String())
		if err != nil {
			return 0, bad
		}
		if total, err = addDuration(total, d); err != nil {
			return 0, bad
		}
	}
	return total, nil
}

func addDuration(a, b time.Duration) (time.Duration, error) {
	if a > math.MaxInt64-b {
		return 0, errors.New("duration overflows")
	}
	return a + b, nil
}

func isNumberByte(c byte) bool {
	return c == '.' || '0' <= c && c <= '9'
}

// ParseDurationUnit is ParseDuration without the bare-number form: the
// value must carry its unit (30d, 12h, 90m, 45s, 1d12h). It reads the spans
// of command-line flags, where a bare 1 could as well mean a day as a
// second.
func ParseDurationUnit(s string) (time.Duration, error) {
	t := strings.TrimPrefix(strings.TrimSpace(s), "+")
	if isDecimal(t) {
		return 0, fmt.Errorf("duration %q has no unit (write e.g. 30d, 12h, 90m or 45s)", s)
	}
	d, err := ParseDuration(s)
	if err != nil && !strings.Contains(err.Error(), "negative") {
		return 0, fmt.Errorf("invalid duration %q (want a number and a unit: 30d, 12h, 90m, 45s)", s)
	}
	return d, err
}

// isDecimal reports whether s is digits with at most one '.', and at least
// one digit: the bare-seconds form.
func isDecimal(s string) bool {
	digits, dots := 0, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '.':
			dots++
		case '0' <= c && c <= '9':
			digits++
		default:
			return false
		}
	}
	return digits > 0 && dots <= 1
}

// formatDuration spells d so that ParseDuration reads it back: 30d, 1d12h,
// 1h30m, 45s, 0s; sub-second values use time.Duration.String.
func formatDuration(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	if d < 0 || d%time.Second != 0 {
		return d.String()
	}
	var b strings.Builder
	for _, u := range []struct {
		unit time.Duration
		name string
	}{{day, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if n := d / u.unit; n > 0 {
			b.WriteString(strconv.FormatInt(int64(n), 10))
			b.WriteString(u.name)
			d -= n * u.unit
		}
	}
	return b.String()
}

// sizeUnits maps a lowercased size suffix to its multiplier: KB is 1000,
// KiB is 1024.
var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
}

// ParseSize parses a size in bytes: a plain number of bytes (1024) or a
// number with a unit, decimal (KB, MB, GB, TB: powers of 1000) or binary
// (KiB, MiB, GiB, TiB: powers of 1024), in any case and with optional spaces
// (10MiB, 64MB, 1.5 GiB). Negative sizes, fractions of a byte and values
// beyond int64 are refused.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if strings.HasPrefix(t, "-") {
		return 0, fmt.Errorf("size %q is negative", s)
	}
	i := 0
	for i < len(t) && isNumberByte(t[i]) {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	mult, ok := sizeUnits[unit]
	if !ok || !isDecimal(num) {
		return 0, fmt.Errorf("invalid size %q (want e.g. 10MiB, 64MB, 512KiB or a number of bytes)", s)
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, fmt.Errorf("invalid size %q", s)
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	if !r.IsInt() {
		return 0, fmt.Errorf("size %q is not a whole number of bytes", s)
	}
	if !r.Num().IsInt64() {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return r.Num().Int64(), nil
}

// formatSize spells n with the largest binary unit that divides it exactly.
func formatSize(n int64) string {
	for _, u := range []struct {
		mult int64
		name string
	}{{1 << 40, "TiB"}, {1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if n != 0 && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10)
}

func parseBool(s string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "1", "true":
		return true, nil
	case "0", "false":
		return false, nil
	}
	return false, fmt.Errorf("invalid boolean %q (want true, false, 1 or 0)", s)
}

func parseInt(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("invalid integer %q", s)
	}
	return n, nil
}

func parseFloat(s string) (float64, error) {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("invalid number %q", s)
	}
	return f, nil
}

// splitList splits a comma-separated list, trimming spaces and dropping
// empty items.
func splitList(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// normalizeTarget turns a TARGET as users write it into a URL: a port
// (3000 → http://localhost:3000), host:port (→ http://host:port), or a URL
// with scheme http, https, h2c or unix, returned as given.
func normalizeTarget(s string) (string, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return "", nil
	}
	if isPort(t) {
		return "http://localhost:" + t, nil
	}
	if !strings.Contains(t, "://") {
		host, port, err := net.SplitHostPort(t)
		if err != nil || host == "" || !isPort(port) {
			return "", fmt.Errorf("%q is not a port, host:port or URL", s)
		}
		return "http://" + t, nil
	}
	if msg := checkTarget(t); msg != "" {
		return "", errors.New(msg)
	}
	return t, nil
}

func isPort(s string) bool {
	if s == "" || len(s) > 5 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	n, err := strconv.Atoi(s)
	return err == nil && n >= 1 && n <= 65535
}

var (
	serverURLSchemes = []string{"http", "https", "ws", "wss"}
	targetSchemes    = []string{"http", "https", "h2c", TargetUnix}
	hookSchemes      = []string{"http", "https"}
	databaseSchemes  = []string{"postgres", "postgresql"}
)

// checkURL returns what is wrong with raw as a URL with one of schemes and a
// host, or "" when nothing is.
func checkURL(raw string, schemes ...string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Sprintf("%q is not a valid URL", raw)
	}
	ok := false
	for _, s := range schemes {
		ok = ok || u.Scheme == s
	}
	if !ok {
		return fmt.Sprintf("%q: scheme must be %s", raw, orList(schemes))
	}
	if u.Host == "" {
		return fmt.Sprintf("%q has no host", raw)
	}
	return ""
}

// orList spells {"a", "b", "c"} as "a, b or c".
func orList(items []string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " or " + items[len(items)-1]
}

// validHostname reports whether h is a DNS name (letters, digits and
// hyphens in labels of 1 to 63 characters, at most 253 in all) optionally
// preceded by a "*." wildcard.
func validHostname(h string) bool {
	h = strings.TrimPrefix(h, "*.")
	if h == "" || len(h) > 253 {
		return false
	}
	for label := range strings.SplitSeq(h, ".") {
		if len(label) == 0 || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// validOutboundPattern reports whether p is a CIDR prefix, an IP address, or
// a hostname pattern as validHostname accepts it.
func validOutboundPattern(p string) bool {
	if _, err := netip.ParsePrefix(p); err == nil {
		return true
	}
	if _, err := netip.ParseAddr(p); err == nil {
		return true
	}
	return validHostname(p)
}
