package access

import (
	"errors"
	"net/http"
	"net/url"
)

// Calls out (a jwt method's key set, a forward method's auth service) go
// through the *http.Client the caller gives: the server's outbound policy
// (package fence) lives there, so this package never builds a client of
// its own and never uses http.DefaultClient.

// outboundOrigin returns raw's scheme://host when raw is an absolute
// http(s) URL. Errors and reasons name only the origin: a URL's path or
// query may hold a credential.
func outboundOrigin(raw string) (string, bool) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "", false
	}
	return u.Scheme + "://" + u.Host, true
}

// noRedirects returns a copy of c that never follows a redirect: the 3xx
// is the answer. A redirect would take the call to a URL nobody
// configured, past the checks made on the configured one.
func noRedirects(c *http.Client) *http.Client {
	cc := *c
	cc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &cc
}

// outboundError strips the *url.Error wrapper, whose message repeats the
// whole URL.
func outboundError(err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return ue.Err
	}
	return err
}
