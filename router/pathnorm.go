package router

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
)

// Path normalization. A prefix bind is a confinement boundary: a request
// routed to the "/api" bind must not name anything outside /api once the
// backend resolves it. So before matching, the request path is rewritten
// to its normal form and the backend receives that form:
//
//   - percent-encoded unreserved characters (RFC 3986 §2.3: ALPHA, DIGIT,
//     "-", ".", "_", "~") are decoded, in any case: "%2e" and "%2E" become
//     "." before dot segments are judged, "%61" becomes "a";
//   - "." and ".." segments are removed (RFC 3986 §5.2.4); a ".." that
//     would climb above the root is refused with 400;
//   - every other percent-encoding is kept as sent, in particular "%2F": an
//     encoded slash is data inside one segment, not a separator, so it
//     neither splits a segment for matching nor ends a bind's prefix. A
//     segment that would hold a dot segment once "%2F" or "%5C" is decoded
//     ("..%2F..") is refused with 400, since some backends decode those
//     before resolving dots;
//   - empty segments ("//") are kept: they are not dot segments.
//
// The query is untouched. Requests whose path is already normal (nearly
// all) cost one scan and no allocation.

// errBadPath is the answer to a path that cannot be normalized safely.
var errBadPath = errors.New("router: request path climbs above the root or hides a dot segment")

// normalizePath rewrites r's path to its normal form (see above), keeping
// r.URL.Path, r.URL.RawPath and r.RequestURI consistent, and returns the
// form bind prefixes are matched against: the normal path decoded, with
// "%2F" left encoded.
func normalizePath(r *http.Request) (string, error) {
	escaped := r.URL.EscapedPath()
	if !needsNormalizing(escaped) {
		return r.URL.Path, nil
	}
	norm, err := normalEscapedPath(escaped)
	if err != nil {
		return "", err
	}
	key, err := matchKey(norm)
	if err != nil {
		return "", err
	}
	if norm == escaped {
		return key, nil
	}
	path, err := url.PathUnescape(norm)
	if err != nil {
		return "", errBadPath
	}
	r.URL.Path, r.URL.RawPath = path, ""
	if r.URL.EscapedPath() != norm {
		r.URL.RawPath = norm
	}
	if r.RequestURI != "" && !strings.HasPrefix(r.RequestURI, "/") {
		// Absolute-form or "*": rebuilt from URL below like any other.
		r.RequestURI = ""
	}
	if r.RequestURI != "" {
		r.RequestURI = r.URL.RequestURI()
	}
	return key, nil
}

// needsNormalizing reports whether escaped may change: it has a "%" or a
// segment starting with ".".
func needsNormalizing(escaped string) bool {
	return strings.Contains(escaped, "%") || strings.Contains(escaped, "/.")
}

// normalEscapedPath decodes unreserved characters and removes dot
// segments of an escaped path.
func normalEscapedPath(escaped string) (string, error) {
	if escaped == "" || escaped[0] != '/' {
		return "", errBadPath
	}
	segs := strings.Split(escaped[1:], "/")
	out := make([]string, 0, len(segs))
	for i, seg := range segs {
		seg = decodeUnreserved(seg)
		last := i == len(segs)-1
		switch seg {
		case ".":
			if last {
				out = append(out, "") // "/a/." is "/a/"
			}
		case "..":
			if len(out) == 0 {
				return "", errBadPath
			}
			out = out[:len(out)-1]
			if last {
				out = append(out, "")
			}
		default:
			if hidesDotSegment(seg) {
				return "", errBadPath
			}
			out = append(out, seg)
		}
	}
	return "/" + strings.Join(out, "/"), nil
}

// hidesDotSegment reports whether seg holds "." or ".." as a piece once
// encoded slashes and backslashes are taken for separators.
func hidesDotSegment(seg string) bool {
	if !strings.Contains(seg, "%") {
		return false
	}
	r := strings.NewReplacer("%2F", "/", "%2f", "/", "%5C", "/", "%5c", "/", "\\", "/")
	for piece := range strings.SplitSeq(r.Replace(seg), "/") {
		if piece == "." || piece == ".." {
			return true
		}
	}
	return false
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

// matchKey returns the decoded form of a normal escaped path with "%2F"
// kept encoded, so that an encoded slash never reads as a bind boundary.
func matchKey(norm string) (string, error) {
	key, err := url.PathUnescape(strings.ReplaceAll(norm, "%2F", "%252F"))
	if err != nil {
		return "", errBadPath
	}
	return key, nil
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
