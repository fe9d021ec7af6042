package tunnel

import (
	"errors"
	"net/url"
	"strings"

	"github.com/aperio-dev/aperio/internal/urlpath"
)

// ErrDotSegment is returned by Service.ForwardedPath for a path that still
// holds a dot segment ("." or ".."), plainly or once its percent-encodings
// (an encoded slash or backslash included) are decoded, or that does not
// decode at all. The server normalizes every path before it routes it, so
// such a path reaches a client only from a server that does not; the
// client answers it 400 rather than let its backend resolve it outside the
// bind.
var ErrDotSegment = errors.New("tunnel: request path holds a dot segment")

// maxForwardedPath bounds the escaped path ForwardedPath examines; the
// request head it comes from is bounded at 1 MiB already, this keeps the
// per-segment work of one request far below that.
const maxForwardedPath = 64 << 10

// ForwardedPath returns the escaped path s's backend receives for a
// request whose escaped path (as sent, in origin form) is escaped, and the
// prefix it removed, "" when it removed none.
//
// The path is first put in the normal form of the path rule
// (urlpath.Normal: empty segments collapsed, unreserved characters
// decoded), which a server applying the rule has done already. With
// TrimBind and a Path bind, the bind's segments are then removed from the
// front of the path when they match its first segments, compared decoded
// and without their ";" parameters (the rule ignores those for matching),
// one segment at a time: the "/api" bind forwards "/api/x" and
// "/api;v=1/x" as "/x" and "/api" (or "/api/") as "/", and leaves "/apix"
// and "/api%2Fx" alone (an encoded slash is data within a segment, never
// the end of the prefix). The prefix returned is the bind's Path without a
// trailing slash, for X-Forwarded-Prefix. Without TrimBind the normal path
// is returned; for "*" (OPTIONS *), "*".
//
// Every path is checked, trimmed or not: one holding a dot segment
// (plainly, encoded, with a parameter as in "..;", or behind an encoded
// slash or backslash), or a percent-encoding that does not decode, or
// longer than 64 KiB, is ErrDotSegment. The method only reads s; safe for
// concurrent use.
func (s *Service) ForwardedPath(escaped string) (string, string, error) {
	if escaped == "*" {
		return escaped, "", nil
	}
	if escaped == "" || escaped[0] != '/' || len(escaped) > maxForwardedPath {
		return "", "", ErrDotSegment
	}
	if err := checkSegments(escaped[1:]); err != nil {
		return "", "", err
	}
	escaped, err := urlpath.Normal(escaped)
	if err != nil {
		return "", "", ErrDotSegment
	}
	rest := escaped[1:]
	bind := strings.Trim(s.Path, "/")
	if !s.TrimBind || bind == "" {
		return escaped, "", nil
	}
	// Walk the bind's segments and the path's side by side.
	for b := range strings.SplitSeq(bind, "/") {
		seg, tail, more := strings.Cut(rest, "/")
		if i := strings.IndexByte(seg, ';'); i >= 0 {
			seg = seg[:i] // the bind's segment's parameters go with it
		}
		dec, err := url.PathUnescape(seg)
		if err != nil || dec != b {
			return escaped, "", nil
		}
		if !more {
			return "/", "/" + bind, nil
		}
		rest = tail
	}
	return "/" + rest, "/" + bind, nil
}

// checkSegments reports ErrDotSegment when a segment of the escaped path
// p (without its leading slash) is, or hides, a dot segment
// (urlpath.DotSegment), or does not decode.
func checkSegments(p string) error {
	for seg := range strings.SplitSeq(p, "/") {
		if urlpath.DotSegment(seg) {
			return ErrDotSegment
		}
		if !strings.ContainsAny(seg, "%\\") {
			continue
		}
		if _, err := url.PathUnescape(seg); err != nil {
			return ErrDotSegment
		}
	}
	return nil
}
