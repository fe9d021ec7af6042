package tunnel

import (
	"errors"
	"net/url"
	"strings"
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
// With TrimBind and a Path bind, the bind's segments are removed from the
// front of the path when they match its first segments, compared decoded,
// one segment at a time: the "/api" bind forwards "/api/x" as "/x" and
// "/api" (or "/api/") as "/", and leaves "/apix" and "/api%2Fx" alone (an
// encoded slash is data within a segment, never the end of the prefix).
// The prefix returned is the bind's Path without a trailing slash, for
// X-Forwarded-Prefix. Without TrimBind, or for "*" (OPTIONS *), the path
// is returned unchanged.
//
// Every path is checked, trimmed or not: one holding a dot segment, or a
// percent-encoding that does not decode, or longer than 64 KiB, is
// ErrDotSegment. The method only reads s; safe for concurrent use.
func (s *Service) ForwardedPath(escaped string) (string, string, error) {
	if escaped == "*" {
		return escaped, "", nil
	}
	if escaped == "" || escaped[0] != '/' || len(escaped) > maxForwardedPath {
		return "", "", ErrDotSegment
	}
	rest := escaped[1:]
	if err := checkSegments(rest); err != nil {
		return "", "", err
	}
	bind := strings.Trim(s.Path, "/")
	if !s.TrimBind || bind == "" {
		return escaped, "", nil
	}
	// Walk the bind's segments and the path's side by side.
	for b := range strings.SplitSeq(bind, "/") {
		seg, tail, more := strings.Cut(rest, "/")
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
// p (without its leading slash) is, or hides, a dot segment.
func checkSegments(p string) error {
	for seg := range strings.SplitSeq(p, "/") {
		if seg == "." || seg == ".." {
			return ErrDotSegment
		}
		if !strings.ContainsAny(seg, "%\\") {
			continue
		}
		dec, err := url.PathUnescape(seg)
		if err != nil {
			return ErrDotSegment
		}
		for piece := range strings.SplitSeq(strings.ReplaceAll(dec, "\\", "/"), "/") {
			if piece == "." || piece == ".." {
				return ErrDotSegment
			}
		}
	}
	return nil
}
