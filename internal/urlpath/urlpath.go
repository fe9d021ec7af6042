// Package urlpath owns the path rule: the one reading of a request path
// that every place matching a path uses (the server's binds, route rules,
// rate limits, share links, explain, forward auth's X-Forwarded-Uri; the
// client's trim_bind and serve: folders), so that a path means one thing
// on both sides of aperio. docs/routing.md states the rule:
//
//   - percent-encoded unreserved characters are decoded ("%61" is "a",
//     "%2e" is "."), the hex of every other encoding upper-cased;
//   - "." and ".." segments are resolved (RFC 3986 §5.2.4), and a ".."
//     above the root is refused;
//   - empty segments collapse ("//a" is "/a"; a trailing slash stays);
//   - a ";" parameter of a segment ("admin;jsessionid=1") is kept in the
//     path the backend receives but ignored for matching, and a segment
//     whose name is a dot segment ("..;x", ".;", "%2e%2e;") is refused;
//   - an encoded slash or backslash ("%2F", "%5C") is data within its
//     segment, and a segment that would hold a dot segment once they are
//     read as separators is refused.
//
// The functions take and return escaped paths (as on the wire) unless
// they say otherwise. None allocates for a path Plain reports true of.
package urlpath

import (
	"errors"
	"net/url"
	"strings"
)

// ErrBadPath is the error of a path that has no safe normal form: it
// climbs above the root, holds or hides a dot segment (a parameter or an
// encoded separator around it), is not absolute, or does not decode.
var ErrBadPath = errors.New("urlpath: request path climbs above the root or hides a dot segment")

// Plain reports whether escaped, an absolute escaped path, is its own
// normal form, its own key and its only reading, as far as one scan can
// tell: it has no "%", ";" or "\", no empty segment and no segment
// starting with ".". Nearly every request path is plain.
func Plain(escaped string) bool {
	for i := 0; i < len(escaped); i++ {
		switch escaped[i] {
		case '%', ';', '\\':
			return false
		case '/':
			if i+1 < len(escaped) && (escaped[i+1] == '/' || escaped[i+1] == '.') {
				return false
			}
		}
	}
	return true
}

// Normal returns the normal form of escaped (see the package doc): what
// the backend receives, parameters included. It is ErrBadPath when
// escaped has none. Normal(Normal(p)) is Normal(p).
func Normal(escaped string) (string, error) {
	if escaped == "" || escaped[0] != '/' {
		return "", ErrBadPath
	}
	if Plain(escaped) {
		return escaped, nil
	}
	if !validEscapes(escaped) {
		return "", ErrBadPath // "%7%30" would decode to a new escape, "%70"
	}
	segs := strings.Split(escaped[1:], "/")
	out := make([]string, 0, len(segs))
	for i, seg := range segs {
		seg = decodeUnreserved(seg)
		last := i == len(segs)-1
		switch {
		case seg == "":
			if last {
				out = append(out, "") // "/a/" keeps its slash; "/a//b" is "/a/b"
			}
		case seg == ".":
			if last {
				out = append(out, "") // "/a/." is "/a/"
			}
		case seg == "..":
			// A ".." after a segment of parameters alone (";x") removes
			// that segment here, but the segment before it where the
			// parameters are dropped first (Tomcat); after a segment
			// holding an encoded slash ("a%2Fb"), one segment here but
			// half of it where the slash separates (nginx): readers
			// disagree on what it removes.
			if len(out) == 0 || paramsOnly(out[len(out)-1]) || hasEncodedSeparator(out[len(out)-1]) {
				return "", ErrBadPath
			}
			out = out[:len(out)-1]
			if last {
				out = append(out, "")
			}
		case DotSegment(seg):
			return "", ErrBadPath
		default:
			out = append(out, seg)
		}
	}
	return "/" + strings.Join(out, "/"), nil
}

// paramsOnly reports whether seg is parameters without a name (";x").
func paramsOnly(seg string) bool { return seg != "" && seg[0] == ';' }

// DotSegment reports whether the escaped segment seg is a dot segment, or
// hides one: "." or ".." (encoded or not), the same followed by a
// parameter ("..;x", ".%3B"), or, once encoded slashes and backslashes are
// read as separators, a piece that is one of those ("a%2F..").
func DotSegment(seg string) bool {
	if dotName(seg) {
		return true
	}
	if !strings.ContainsAny(seg, "%\\") {
		return false
	}
	for piece := range strings.SplitSeq(separatorsReplacer.Replace(seg), "/") {
		if dotName(decodeUnreserved(piece)) {
			return true
		}
	}
	return false
}

// separatorsReplacer reads encoded slashes and backslashes, and
// backslashes, as slashes.
var separatorsReplacer = strings.NewReplacer("%2F", "/", "%2f", "/", "%5C", "/", "%5c", "/", "\\", "/")

// dotName reports whether the escaped segment s, its unreserved
// characters decoded, is "." or ".." with or without a parameter (";" or
// "%3B") after it.
func dotName(s string) bool {
	if s == "" || s[0] != '.' {
		return false
	}
	name := s
	if i := strings.IndexByte(name, ';'); i >= 0 {
		name = name[:i]
	}
	for _, semi := range [...]string{"%3B", "%3b"} {
		if i := strings.Index(name, semi); i >= 0 {
			name = name[:i]
		}
	}
	return name == "." || name == ".."
}

// hasEncodedSeparator reports whether the escaped segment seg holds an
// encoded slash or backslash, or a backslash.
func hasEncodedSeparator(seg string) bool {
	return strings.ContainsAny(seg, "%\\") && separatorsReplacer.Replace(seg) != seg
}

// StripParams returns the normal path norm with the ";" parameters of
// every segment removed, and the segments that leaves empty collapsed (a
// trailing one kept): the escaped form of what is matched. "%3B" is not a
// parameter delimiter: it is data, as in Tomcat and Spring.
func StripParams(norm string) string {
	if strings.IndexByte(norm, ';') < 0 {
		return norm
	}
	segs := strings.Split(norm[1:], "/")
	out := make([]string, 0, len(segs))
	for i, seg := range segs {
		if j := strings.IndexByte(seg, ';'); j >= 0 {
			seg = seg[:j]
		}
		if seg != "" || i == len(segs)-1 {
			out = append(out, seg)
		}
	}
	return "/" + strings.Join(out, "/")
}

// Decode decodes the normal (or parameter-stripped) path p. With split
// false, "%2F" stays encoded, so that an encoded slash never reads as a
// separator (aperio's reading); with split true, encoded slashes and
// backslashes are separators, and the empty segments that makes
// collapse (nginx's reading, and a file system's). It is ErrBadPath when
// p does not decode.
func Decode(p string, split bool) (string, error) {
	if !strings.ContainsAny(p, "%\\") {
		return p, nil
	}
	if !split {
		d, err := url.PathUnescape(strings.ReplaceAll(p, "%2F", "%252F"))
		if err != nil {
			return "", ErrBadPath
		}
		return d, nil
	}
	d, err := url.PathUnescape(separatorsReplacer.Replace(p))
	if err != nil {
		return "", ErrBadPath
	}
	return collapseSlashes(d), nil
}

// collapseSlashes turns every run of slashes of p into one.
func collapseSlashes(p string) string {
	if !strings.Contains(p, "//") {
		return p
	}
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); i++ {
		if p[i] == '/' && i > 0 && p[i-1] == '/' {
			continue
		}
		b.WriteByte(p[i])
	}
	return b.String()
}

// Key returns what norm, a normal path, is matched as: its parameters
// stripped, decoded but for "%2F" (Decode with split false).
func Key(norm string) (string, error) {
	return Decode(StripParams(norm), false)
}

// Readings returns the keys other common backends make of norm that
// differ from key (Key(norm)): parameters kept as data (nginx, Go, most
// servers), encoded slashes read as separators (nginx decodes them), and
// both. Only a path with a ";" or an encoded slash or backslash has any;
// they are appended to dst, each once.
func Readings(dst []string, norm, key string) ([]string, error) {
	params := strings.IndexByte(norm, ';') >= 0
	slashes := hasEncodedSeparator(norm)
	add := func(p string, split bool) error {
		r, err := Decode(p, split)
		if err != nil {
			return err
		}
		for _, d := range dst {
			if d == r {
				return nil
			}
		}
		if r != key {
			dst = append(dst, r)
		}
		return nil
	}
	var err error
	if params {
		err = errors.Join(err, add(norm, false))
	}
	if slashes {
		err = errors.Join(err, add(StripParams(norm), true))
		if params {
			err = errors.Join(err, add(norm, true))
		}
	}
	if err != nil {
		return nil, ErrBadPath
	}
	return dst, nil
}

// validEscapes reports whether every "%" of s starts an escape of two hex
// digits.
func validEscapes(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '%' {
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return false
			}
			i += 2
		}
	}
	return true
}

// decodeUnreserved decodes the percent-encoded unreserved characters of
// seg and upper-cases the hex digits of the encodings it keeps.
func decodeUnreserved(seg string) string {
	if !strings.Contains(seg, "%") {
		return seg
	}
	var b strings.Builder
	b.Grow(len(seg))
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if c == '%' && i+2 < len(seg) && isHex(seg[i+1]) && isHex(seg[i+2]) {
			d := unhex(seg[i+1])<<4 | unhex(seg[i+2])
			if unreserved(d) {
				b.WriteByte(d)
			} else {
				b.WriteByte('%')
				b.WriteByte(upperHex(seg[i+1]))
				b.WriteByte(upperHex(seg[i+2]))
			}
			i += 2
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

func upperHex(c byte) byte {
	if 'a' <= c && c <= 'f' {
		return c - 'a' + 'A'
	}
	return c
}
