// Package hostname owns the syntax of the hostnames Aperio routes: what a
// bind may declare (an exact name or a `*.` wildcard), how a visitor's Host
// header is normalized, and how a pattern matches a name.
package hostname

import (
	"errors"
	"fmt"
	"net"
	"strings"
)

// MaxLen is the longest hostname accepted (RFC 1035).
const MaxLen = 253

// Normalize turns a Host header into the name routing uses: the port and
// a trailing dot are removed and letters are lowercased. It allocates only
// when the name has upper-case letters.
func Normalize(host string) string {
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.Contains(host[i:], "]") {
		host = host[:i]
	}
	host = strings.TrimSuffix(host, ".")
	for i := 0; i < len(host); i++ {
		if c := host[i]; 'A' <= c && c <= 'Z' {
			return strings.ToLower(host)
		}
	}
	return host
}

// ErrInvalid is wrapped by every error Validate returns. Its text opens
// the messages the admin API and the configuration print about a bad
// hostname (`invalid hostname "x": ...`), so unlike other sentinels it
// carries no package prefix.
var ErrInvalid = errors.New("invalid hostname")

// Validate reports whether pattern is a hostname a bind may declare: a DNS
// name of letters, digits and hyphens (labels of 1 to 63 bytes, not
// starting or ending with a hyphen), optionally prefixed by "*." for every
// direct or deeper subdomain. IP literals and a bare "*" are refused.
func Validate(pattern string) error {
	name := pattern
	if rest, ok := strings.CutPrefix(pattern, "*."); ok {
		name = rest
	}
	if name == "" {
		return fmt.Errorf("%w %q: empty", ErrInvalid, pattern)
	}
	if len(name) > MaxLen {
		return fmt.Errorf("%w %q: longer than %d bytes", ErrInvalid, pattern, MaxLen)
	}
	if net.ParseIP(name) != nil {
		return fmt.Errorf("%w %q: an IP address is not a hostname", ErrInvalid, pattern)
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("%w %q: labels must be 1 to 63 bytes", ErrInvalid, pattern)
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("%w %q: a label may not start or end with '-'", ErrInvalid, pattern)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("%w %q: unexpected character %q", ErrInvalid, pattern, c)
			}
		}
	}
	return nil
}

// Match reports whether name matches pattern, ignoring case. "*.example.com"
// matches "a.example.com" and "a.b.example.com" but not "example.com".
func Match(pattern, name string) bool {
	if suffix, ok := strings.CutPrefix(pattern, "*"); ok {
		return len(name) > len(suffix) && strings.EqualFold(name[len(name)-len(suffix):], suffix)
	}
	return strings.EqualFold(pattern, name)
}
