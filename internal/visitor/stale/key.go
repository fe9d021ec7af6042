package stale

import (
	"net/http"

	"github.com/aperio-dev/aperio/internal/hostname"
)

// Key identifies the resource a stored response belongs to. Its fields are
// kept apart rather than joined into one string so that no host and path
// can be forged to collide with another (a Host header "a/b" with path "/c"
// is not host "a" with path "/b/c"), and so that computing a key for a
// lookup allocates nothing. The method is not part of the key: only GET
// responses are stored, and GET and HEAD requests look them up.
type Key struct {
	// Host is the request's host, normalized as routing does: lowercase,
	// without port or trailing dot.
	Host string
	// Path is the escaped path as the visitor sent it, so "/a%2Fb" and
	// "/a/b" are different resources.
	Path string
	// Query is the raw query, without "?". A bare "?" counts as no query.
	Query string
}

// KeyOf returns the key of r.
func KeyOf(r *http.Request) Key {
	host := r.Host
	if host == "" && r.URL != nil {
		host = r.URL.Host
	}
	k := Key{Host: hostname.Normalize(host)}
	if r.URL != nil {
		k.Path = r.URL.EscapedPath()
		k.Query = r.URL.RawQuery
	}
	return k
}

// String returns k as host, path and query, for logs.
func (k Key) String() string {
	if k.Query == "" {
		return k.Host + k.Path
	}
	return k.Host + k.Path + "?" + k.Query
}

// size is what k's strings cost once stored.
func (k Key) size() int64 { return int64(len(k.Host) + len(k.Path) + len(k.Query)) }

// clone returns k with strings of its own in one allocation, so a stored
// entry does not pin the request's larger strings (RequestURI, Host).
func (k Key) clone() Key {
	s := k.Host + k.Path + k.Query
	h, p := len(k.Host), len(k.Host)+len(k.Path)
	return Key{Host: s[:h], Path: s[h:p], Query: s[p:]}
}
