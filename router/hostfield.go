package router

import (
	"net/http"
	"strings"
)

// hostFieldConflicts reports whether an HTTP/2 request carries a host field
// other than its :authority, which RFC 9113 §8.3.1 makes malformed: a
// backend or cache could take the other one. net/http moves an HTTP/1
// Host header into Request.Host, so only HTTP/2 requests keep one in
// Header. authority is the request's Host and h its header.
func hostFieldConflicts(authority string, h http.Header) bool {
	v, ok := h["Host"]
	if !ok {
		return false
	}
	return len(v) != 1 || !strings.EqualFold(v[0], authority)
}
