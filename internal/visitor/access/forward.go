package access

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aperio-dev/aperio/internal/urlpath"
)

// Defaults and bounds of the forward method.
const (
	DefaultForwardTimeout   = 5 * time.Second
	MaxForwardTimeout       = 30 * time.Second
	MaxForwardCacheTTL      = 5 * time.Minute
	DefaultForwardCacheSize = 1024
	// MaxForwardBodyBytes bounds the body of a refusal passed on to the
	// visitor; a longer one is dropped, the status and headers kept.
	MaxForwardBodyBytes = 64 << 10
	maxCopyHeaders      = 32
	maxCopiedValueLen   = 4096
)

// forwardAnswerHeaders are the headers of an auth service's refusal that
// reach the visitor: enough for a login redirect, a challenge and the
// cookies a login flow sets.
var forwardAnswerHeaders = []string{"Location", "Www-Authenticate", "Set-Cookie", "Content-Type", "Retry-After", "Cache-Control"}

// ForwardConfig configures the forward method (auth: {forward: ...}), in
// the manner of Traefik's ForwardAuth or nginx's auth_request.
type ForwardConfig struct {
	// URL is the auth service's address. Required.
	URL string
	// Client calls URL. Required: it must be the caller's client under
	// the outbound policy (the fence), never http.DefaultClient.
	// Redirects are never followed whatever its CheckRedirect says.
	Client *http.Client
	// Timeout bounds one call; 0 means DefaultForwardTimeout, at most
	// MaxForwardTimeout. A call that times out or fails refuses with 503.
	Timeout time.Duration
	// CopyHeaders names headers of a 2xx answer to set on the backend
	// request (such as X-Forwarded-User, Remote-Groups); at most 32,
	// never X-Aperio-*, Host or hop-by-hop headers.
	CopyHeaders []string
	// UserHeader names the header of a 2xx answer that names the user
	// (HeaderUser); "" means none.
	UserHeader string
	// CacheTTL is how long an admission is remembered for the same
	// hostname and the same Authorization and Cookie headers; 0 (the
	// default) remembers nothing, at most MaxForwardCacheTTL. Refusals are
	// never remembered. Turn it on only when the service's answer depends
	// on nothing else (not on the path or the method).
	CacheTTL time.Duration
	// CacheSize bounds the admissions remembered; 0 means
	// DefaultForwardCacheSize.
	CacheSize int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Forward is the forward method: each request is put to an external auth
// service (GET with the visitor's Authorization and Cookie, and the
// original method, scheme, host, URI and address as X-Forwarded-*); a 2xx
// admits, a 3xx or 4xx is the visitor's answer, anything else, a timeout
// or an error refuses with 503.
type Forward struct {
	url, origin string
	client      *http.Client
	timeout     time.Duration
	copy        []string // canonical
	userHeader  string   // canonical; "" for none
	cacheTTL    time.Duration
	cache       *ttlCache[forwardAdmission] // nil when CacheTTL is 0
	now         func() time.Time
}

type forwardAdmission struct {
	user     string
	upstream http.Header
}

// NewForward returns the forward method for cfg, or every problem of cfg
// joined with errors.Join.
func NewForward(cfg ForwardConfig) (*Forward, error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("access: forward "+format, args...)) }
	f := &Forward{url: cfg.URL, timeout: cfg.Timeout, cacheTTL: cfg.CacheTTL, now: clock(cfg.Now)}
	var ok bool
	if f.origin, ok = outboundOrigin(cfg.URL); !ok {
		bad("url must be an absolute http(s) URL")
	}
	if cfg.Client == nil {
		bad("needs the outbound client to call its auth service")
	} else {
		f.client = noRedirects(cfg.Client)
	}
	switch {
	case f.timeout < 0 || f.timeout > MaxForwardTimeout:
		bad("timeout must be 0 to %s", MaxForwardTimeout)
	case f.timeout == 0:
		f.timeout = DefaultForwardTimeout
	}
	if len(cfg.CopyHeaders) > maxCopyHeaders {
		bad("copy_headers: at most %d", maxCopyHeaders)
	}
	for _, h := range cfg.CopyHeaders {
		if reason := copyable(h); reason != "" {
			bad("copy header %s %s", quote(h), reason)
		}
	}
	if cfg.UserHeader != "" {
		if reason := copyable(cfg.UserHeader); reason != "" {
			bad("user header %s %s", quote(cfg.UserHeader), reason)
		}
	}
	for _, h := range cfg.CopyHeaders {
		f.copy = append(f.copy, http.CanonicalHeaderKey(h))
	}
	if cfg.UserHeader != "" {
		f.userHeader = http.CanonicalHeaderKey(cfg.UserHeader)
	}
	if f.cacheTTL < 0 || f.cacheTTL > MaxForwardCacheTTL {
		bad("cache TTL must be 0 to %s", MaxForwardCacheTTL)
	}
	if cfg.CacheSize < 0 {
		bad("cache size must not be negative")
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if f.cacheTTL > 0 {
		size := cfg.CacheSize
		if size == 0 {
			size = DefaultForwardCacheSize
		}
		f.cache = newTTLCache[forwardAdmission](size, f.now)
	}
	return f, nil
}

// copyable returns why header h may not be copied to the backend, or "".
func copyable(h string) string {
	if h == "" || strings.ContainsAny(h, " \t\r\n:") || !printableASCII(h) {
		return "is not a header name"
	}
	c := http.CanonicalHeaderKey(h)
	switch {
	case strings.HasPrefix(c, "X-Aperio-"):
		return "is the server's own"
	case strings.HasPrefix(c, "Proxy-"):
		return "is hop-by-hop"
	}
	switch c {
	case "Host", "Connection", "Keep-Alive", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Content-Length":
		return "is hop-by-hop or framing"
	}
	return ""
}

// UpstreamHeaders returns copy_headers and user_header: the names the
// backend is told to trust as the auth service's, which the gate removes
// from the visitor's request in every spelling before any answer is
// applied (a 2xx that leaves one out must not let the visitor's copy
// through: Authelia's bypass policy, a user without groups).
func (f *Forward) UpstreamHeaders() []string {
	if f.userHeader == "" {
		return f.copy
	}
	return append(slices.Clip(f.copy), f.userHeader)
}

// Name returns "forward".
func (f *Forward) Name() string { return MethodForward }

// Credentials returns nothing: the visitor's Authorization and Cookie
// are the backend's as much as the auth service's (an app behind an
// authenticating proxy reads its own session cookie), so they pass on.
func (f *Forward) Credentials() (headers, cookies []string) { return nil, nil }

// Check asks the auth service about r.
func (f *Forward) Check(r *http.Request, v Visitor) Result {
	var key [32]byte
	if f.cache != nil {
		key = f.cacheKey(r, v)
		if a, ok := f.cache.get(key); ok {
			return Result{Outcome: Admit, User: a.user, Upstream: a.upstream, Reason: "auth service admitted (cached)"}
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), f.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.url, nil)
	if err != nil {
		return Result{Outcome: Unavailable, Reason: "auth service " + f.origin + ": bad request"}
	}
	h := req.Header
	proto := "http"
	if v.HTTPS {
		proto = "https"
	}
	uri := forwardedURI(r, v)
	if r.URL.RawQuery != "" {
		uri += "?" + r.URL.RawQuery
	}
	h.Set("X-Forwarded-Method", r.Method)
	h.Set("X-Forwarded-Proto", proto)
	h.Set("X-Forwarded-Host", v.Host)
	h.Set("X-Forwarded-Uri", uri)
	if v.Addr.IsValid() {
		h.Set("X-Forwarded-For", v.Addr.String())
	}
	for _, k := range [...]string{"Authorization", "Cookie", "X-Request-Id"} {
		if vv := r.Header[k]; len(vv) > 0 {
			h[k] = vv
		}
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return Result{Outcome: Unavailable, Reason: "auth service " + f.origin + ": " + outboundError(err).Error()}
	}
	defer resp.Body.Close()
	status := resp.StatusCode
	switch {
	case status >= 200 && status < 300:
		return f.admit(resp, key)
	case status == http.StatusMultipleChoices || status == http.StatusNotModified || status >= 500 || status < 200:
		return Result{Outcome: Unavailable, Reason: "auth service " + f.origin + " answered status " + strconv.Itoa(status)}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxForwardBodyBytes+1))
	reason := "auth service refused with status " + strconv.Itoa(status)
	if err != nil || len(body) > MaxForwardBodyBytes {
		body = nil
		reason += " (body dropped: unreadable or above 64 KiB)"
	}
	answer := http.Header{}
	for _, k := range forwardAnswerHeaders {
		if vv := resp.Header[k]; len(vv) > 0 {
			answer[k] = vv
		}
	}
	if body == nil {
		delete(answer, "Content-Type")
	}
	return Result{Outcome: Answer, Status: status, Header: answer, Body: body, Reason: reason}
}

// forwardedURI is the path the auth service judges (X-Forwarded-Uri,
// before the query): as routing matched it, escaped, which is its normal
// form with its ";" parameters dropped. The auth service judges "/admin"
// for "/admin;x", as the bind did, and never reads a decoded "?" or
// "%2F". The router hands the gate a request already in normal form;
// a path with none falls back to v.Path, escaped.
func forwardedURI(r *http.Request, v Visitor) string {
	norm, err := urlpath.Normal(r.URL.EscapedPath())
	if err != nil {
		return (&url.URL{Path: v.Path}).EscapedPath()
	}
	return urlpath.StripParams(norm)
}

// admit turns a 2xx answer into an admission, remembered when caching.
func (f *Forward) admit(resp *http.Response, key [32]byte) Result {
	var a forwardAdmission
	if f.userHeader != "" {
		a.user = resp.Header.Get(f.userHeader)
		if !validUser(a.user) {
			return Result{Outcome: Unavailable, Reason: "auth service named a user that is not printable text of at most 256 bytes"}
		}
	}
	for _, k := range f.copy {
		vv := resp.Header[k]
		if len(vv) == 0 {
			continue
		}
		for _, v := range vv {
			if len(v) > maxCopiedValueLen {
				return Result{Outcome: Unavailable, Reason: "auth service header " + k + " longer than 4096 bytes"}
			}
		}
		if a.upstream == nil {
			a.upstream = http.Header{}
		}
		a.upstream[k] = vv
	}
	if f.cache != nil {
		f.cache.add(key, a, f.now().Add(f.cacheTTL))
	}
	reason := "auth service admitted"
	if a.user != "" {
		reason += " " + quote(a.user)
	}
	return Result{Outcome: Admit, User: a.user, Upstream: a.upstream, Reason: reason}
}

// cacheKey is the digest of what an admission is remembered for: the
// hostname and the visitor's Authorization and Cookie lines, each list
// preceded by its length.
func (f *Forward) cacheKey(r *http.Request, v Visitor) [32]byte {
	fields := []string{v.Host}
	for _, k := range [...]string{"Authorization", "Cookie"} {
		vv := r.Header[k]
		fields = append(fields, strconv.Itoa(len(vv)))
		fields = append(fields, vv...)
	}
	return fieldsDigest(nil, fields...)
}
