package router

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/aperio-dev/aperio/internal/urlpath"
)

// The path rule (urlpath, docs/routing.md). A prefix bind is a
// confinement boundary: a request routed to the "/api" bind must not name
// anything outside /api once the backend reads it, and a path must not
// skip a gated bind, a route rule or a share link's scope by a spelling a
// backend reads as the guarded path. So before matching, the request path
// is rewritten to its normal form, which the backend receives:
// unreserved escapes decoded, dot segments resolved (a ".." above the root
// is 400), empty segments collapsed ("//admin" is "/admin"), ";"
// parameters kept ("/app;jsessionid=1"), and a dot segment hidden by a
// parameter ("..;") or an encoded separator ("..%2F") refused with 400.
// What is matched is the key: the normal form with its parameters
// dropped, decoded but for "%2F" ("/admin;x" matches "/admin").
//
// Backends read what is left differently: nginx keeps parameters as data
// and decodes "%2F" into a separator; Tomcat, Jetty and Spring drop the
// parameters. A path holding a ";" or an encoded slash has such other
// readings (urlpath.Readings); where one of them names another bind that
// is not open to the visitor, or another route rule, the request is
// refused with 400 (checkRoute, checkRouteRule), and a share link opens it
// only when it covers it with its parameters kept (access.Keyring).
//
// Requests whose path is plain (nearly all) cost one scan and no
// allocation.

// Reserved reports whether path belongs to aperio-server itself on every
// hostname (everything under /aperio/): such a request is answered by the
// server and never proxied. Every other path, /metrics included, is the
// app's.
func Reserved(path string) bool {
	return strings.HasPrefix(path, "/aperio/")
}

// anyReserved reports whether one of paths is Reserved.
func anyReserved(paths []string) bool {
	for _, p := range paths {
		if Reserved(p) {
			return true
		}
	}
	return false
}

// normalizePath rewrites r's path to its normal form, keeping
// r.URL.Path, r.URL.RawPath and r.RequestURI consistent, and returns its
// key and, for a path with other readings, their keys. The error is
// urlpath.ErrBadPath.
func normalizePath(r *http.Request) (string, []string, error) {
	escaped := r.URL.EscapedPath()
	if urlpath.Plain(escaped) {
		return r.URL.Path, nil, nil
	}
	norm, err := urlpath.Normal(escaped)
	if err != nil {
		return "", nil, err
	}
	key, err := urlpath.Key(norm)
	if err != nil {
		return "", nil, err
	}
	other, err := urlpath.Readings(nil, norm, key)
	if err != nil {
		return "", nil, err
	}
	if norm == escaped {
		return key, other, nil
	}
	path, err := url.PathUnescape(norm)
	if err != nil {
		return "", nil, urlpath.ErrBadPath
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
	return key, other, nil
}
