// Package fence owns the outbound policy for HTTP calls the server makes
// to URLs someone else chose (scaling hooks, webhooks): which URLs may be
// called, which addresses may be connected to, and how each call is
// bounded. It is the server's defence against server-side request
// forgery: a Client checks every address a host resolves to, connects
// only to the addresses it checked and re-checks each one as the socket
// connects, never follows a redirect, ignores ambient proxies, never
// reads a response body, and gives up after Timeout.
package outbound

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aperio-dev/aperio/internal/hostname"
)

// Timeout bounds one call made with Client.Do: resolution, connection,
// TLS handshake, sending the request and reading the response header.
// A caller's context can only shorten it.
const Timeout = 10 * time.Second

// maxHeaderBytes caps the response header a Client reads. Nothing else of
// the response is read.
const maxHeaderBytes = 64 << 10

// maxURLBytes caps the URLs CheckURL accepts and maxHostBytes the hosts
// CheckURL and Do accept, so that a refusal, which is logged and audited,
// stays small. A host name is at most 253 bytes; the rest is room for a
// bracketed IPv6 literal with a zone and a port.
const (
	maxURLBytes  = 4096
	maxHostBytes = 300
)

// RefusedError reports a destination the policy does not permit. Every
// refusal by CheckURL and Do is a *RefusedError; callers find it with
// errors.As and audit its Reason.
type RefusedError struct {
	// URL is the refused destination reduced to scheme, host and port,
	// such as "https://hooks.example.com:8443". Userinfo, path and query
	// can carry credentials (a Slack-style webhook path is a secret), so
	// they are never included and the error is safe to log and audit. It
	// is empty when the URL could not be parsed.
	URL string

	// Reason says what was refused, in a lowercase phrase for logs and
	// audit records, such as "10.0.0.1 is private". It never contains a
	// credential.
	Reason string
}

// Error returns "fence: refused URL: Reason".
func (e *RefusedError) Error() string {
	if e.URL == "" {
		return "fence: refused: " + e.Reason
	}
	return "fence: refused " + e.URL + ": " + e.Reason
}

// Client makes outbound HTTP calls under a Policy. It is safe for
// concurrent use and holds no connections between calls, so it needs no
// closing.
type Client struct {
	allowHTTP    bool
	allowPrivate bool // Policy.AllowPrivate, unless BlockPrivate overrides it
	allow        allowlist
	resolve      func(ctx context.Context, host string) ([]netip.Addr, error)
	dial         func(ctx context.Context, d *net.Dialer, network, address string) (net.Conn, error)
	tlsConfig    *tls.Config // nil: system roots, ServerName from the URL
}

// An Option changes how a Client reaches the network. Every Option is for
// tests only: production code calls New with a Policy alone. A nil Option
// is ignored.
type Option func(*Client)

// WithResolverForTest returns an Option that resolves host names with
// resolve instead of the system resolver. resolve is called at most once
// per Do and never by CheckURL; its addresses are judged like any others,
// so pointing a name at an httptest server on loopback needs
// Policy.AllowPrivate. A nil resolve keeps the system resolver.
func WithResolverForTest(resolve func(ctx context.Context, host string) ([]netip.Addr, error)) Option {
	return func(c *Client) {
		if resolve != nil {
			c.resolve = resolve
		}
	}
}

// WithDialForTest returns an Option that opens connections with dial
// instead of d.DialContext(ctx, network, address). address is an
// "ip:port" that has passed every check; d is the fenced dialer, whose
// Control function re-checks the address the socket actually connects to.
// A test can record the address and fail, or connect somewhere else
// through d to prove the re-check refuses it. Connecting other than
// through d bypasses the re-check. A nil dial keeps the default.
func WithDialForTest(dial func(ctx context.Context, d *net.Dialer, network, address string) (net.Conn, error)) Option {
	return func(c *Client) {
		if dial != nil {
			c.dial = dial
		}
	}
}

// WithTLSConfigForTest returns an Option that verifies servers with a
// clone of cfg instead of the system roots, such as the configuration of
// an httptest.Server's client. A nil cfg keeps the system roots.
func WithTLSConfigForTest(cfg *tls.Config) Option {
	return func(c *Client) { c.tlsConfig = cfg.Clone() }
}

// New returns a Client enforcing p, or the errors of p.Validate.
func New(p Policy, opts ...Option) (*Client, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	c := &Client{
		allowHTTP:    p.AllowHTTP,
		allowPrivate: p.AllowPrivate && !(p.BlockPrivate && len(p.Allowlist) == 0),
		allow:        compileAllowlist(p.Allowlist),
		resolve: func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		},
		dial: func(ctx context.Context, d *net.Dialer, network, address string) (net.Conn, error) {
			return d.DialContext(ctx, network, address)
		},
	}
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
	return c, nil
}

// target is a URL that passed the static checks.
type target struct {
	origin string     // scheme://host:port, for RefusedError.URL
	name   string     // lowercased host name without a trailing dot; "" for an IP literal
	lookup string     // the host as written, for the resolver (a trailing dot stays)
	ip     netip.Addr // the IP literal, when name is ""
	port   uint16
	byName bool // name matched an allowlist name entry
}

// CheckURL reports whether raw may be called as far as can be told
// without resolving it: the scheme, the absence of userinfo, the host's
// syntax, an IP literal's address and allowlist entries, a name's
// allowlist name entries. It does no I/O, so it suits validating a URL
// when it is declared; Do repeats these checks and judges the resolved
// addresses too. A refusal is a *RefusedError.
func (c *Client) CheckURL(raw string) error {
	if len(raw) > maxURLBytes {
		return &RefusedError{Reason: fmt.Sprintf("URL longer than %d bytes", maxURLBytes)}
	}
	u, err := url.Parse(raw)
	if err != nil {
		// The parser's message would quote the malformed part, which may
		// be a mistyped credential.
		return &RefusedError{Reason: "invalid URL"}
	}
	_, err = c.check(u)
	return err
}

// check applies the static checks to u.
func (c *Client) check(u *url.URL) (target, error) {
	origin := u.Scheme + "://" + u.Host
	refuse := func(format string, args ...any) (target, error) {
		return target{}, &RefusedError{URL: origin, Reason: fmt.Sprintf(format, args...)}
	}
	if u.Opaque != "" || u.Host == "" {
		return refuse("not an absolute URL with a host")
	}
	if len(u.Host) > maxHostBytes {
		return target{}, &RefusedError{Reason: fmt.Sprintf("host longer than %d bytes", maxHostBytes)}
	}
	var t target
	switch u.Scheme {
	case "https":
		t.port = 443
	case "http":
		t.port = 80
	default:
		return refuse("scheme %q is not permitted, only https", u.Scheme)
	}
	if p := u.Port(); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return refuse("invalid port %q", p)
		}
		t.port = uint16(n)
	}
	host := u.Hostname()
	t.origin = u.Scheme + "://" + net.JoinHostPort(host, strconv.Itoa(int(t.port)))
	origin = t.origin
	if u.Scheme == "http" && !c.allowHTTP {
		return refuse("http is not permitted, only https")
	}
	if u.User != nil {
		return refuse("userinfo in a URL is not permitted")
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		t.ip = ip
		if reason := c.judge(ip); reason != "" {
			return target{}, &RefusedError{URL: t.origin, Reason: ip.String() + " is " + reason}
		}
		if !c.allow.empty() && !c.allow.contains(ip) {
			return target{}, &RefusedError{URL: t.origin, Reason: ip.String() + " is not in the outbound allowlist"}
		}
		return t, nil
	}
	t.lookup = host
	t.name = strings.ToLower(strings.TrimSuffix(host, "."))
	if strings.HasPrefix(t.name, "*") || hostname.Validate(t.name) != nil {
		return refuse("host %q is neither an IP address nor a valid host name", host)
	}
	if numericLike(t.name) {
		return refuse("host %q looks like an IPv4 address in a non-standard form", host)
	}
	if t.name == "localhost" || strings.HasSuffix(t.name, ".localhost") {
		// RFC 6761: these names are loopback wherever they resolve.
		if reason := c.judge(netip.IPv6Loopback()); reason != "" {
			return refuse("%s is %s", t.name, reason)
		}
	}
	if slices.Contains(metadataNames, t.name) && !c.allow.exactName(t.name) {
		return refuse("%s is a cloud metadata name, permitted only when it and its address are listed in the outbound allowlist", t.name)
	}
	if !c.allow.empty() {
		t.byName = c.allow.matchName(t.name)
		if !t.byName && len(c.allow.prefixes) == 0 {
			return refuse("%s is not in the outbound allowlist", t.name)
		}
	}
	return t, nil
}

// judge returns why a is refused by the address rules, or "" if it is
// permitted. It is the one check both the pre-flight and the dialer's
// Control function apply.
//
// An IPv6 address that carries an IPv4 address for a translator or
// relay (NAT64, 6to4, Teredo, IPv4-compatible, IPv4-translated) is never
// public, and AllowPrivate permits it only when the IPv4 address it
// carries would be permitted too: a metadata or link-local address stays
// refused in every spelling (unless the IPv6 address itself is an exact
// allowlist entry), and so does an unspecified, multicast or broadcast
// one.
func (c *Client) judge(a netip.Addr) string {
	class, never := classify(a)
	switch {
	case class == public:
		return ""
	case guarded(a) && !c.allow.exact(a):
		return class + ", permitted only when the address is listed in the outbound allowlist"
	}
	for _, e := range embedded4(a) {
		v4class, v4never := classify(e.v4)
		switch {
		case guarded(e.v4) && !c.allow.exact(a):
			return fmt.Sprintf("%s of %s, which is %s, permitted only when the address is listed in the outbound allowlist", e.form, e.v4, v4class)
		case e.sure && v4never:
			return fmt.Sprintf("%s of %s, which is %s", e.form, e.v4, v4class)
		}
	}
	if c.allowPrivate && !never {
		return ""
	}
	return class
}

// addresses resolves t (at most one lookup) and returns the addresses to
// dial, each of which has passed the address rules and the allowlist.
// Every address must pass: one refused address refuses the destination,
// since nothing stops the next connection from choosing it.
func (c *Client) addresses(ctx context.Context, t target) ([]netip.Addr, error) {
	if t.name == "" {
		return []netip.Addr{t.ip.Unmap()}, nil
	}
	addrs, err := c.resolve(ctx, t.lookup)
	if err != nil {
		return nil, fmt.Errorf("fence: resolve %s: %w", t.name, err)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("fence: resolve %s: no addresses", t.name)
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if reason := c.judge(a); reason != "" {
			return nil, &RefusedError{URL: t.origin, Reason: fmt.Sprintf("%s resolves to %s, which is %s", t.name, a, reason)}
		}
		if !c.allow.empty() && !t.byName && !c.allow.contains(a) {
			return nil, &RefusedError{URL: t.origin, Reason: fmt.Sprintf("%s resolves to %s, which is not in the outbound allowlist", t.name, a)}
		}
		out = append(out, a.Unmap())
	}
	return out, nil
}

// Do sends req under the policy and returns the response's status and
// header. It blocks until the response header arrives, ctx is done or
// Timeout passes, whichever is first; ctx replaces req's own context.
//
// Before anything is sent, req.URL passes the checks of CheckURL and its
// host is resolved once; every resolved address must be permitted. Do
// then connects only to those addresses, in order, at the URL's port,
// and the dialer re-checks each address as the socket connects. TLS
// verifies the server against the system roots and the URL's host. A
// redirect is not followed: the 3xx response is returned like any other
// status. Proxies from the environment are ignored.
//
// The response body is never read: Do closes it, with the connection,
// and the returned response's Body is http.NoBody. The response header
// may be at most 64 KiB. Connections are not kept alive between calls.
//
// A refusal is a *RefusedError, found with errors.As. Other errors carry
// the method, scheme, host and port but not the path or query. Like
// http.Client.Do, Do closes req.Body, if non-nil, even on errors.
func (c *Client) Do(ctx context.Context, req *http.Request) (*http.Response, error) {
	if req == nil || req.URL == nil {
		return nil, errors.New("fence: request without a URL")
	}
	t, err := c.check(req.URL)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	addrs, err := c.addresses(ctx, t)
	if err != nil {
		closeBody(req)
		return nil, err
	}

	tr := c.transport(t, addrs)
	defer tr.CloseIdleConnections()
	hc := &http.Client{
		Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	resp, err := hc.Do(req.WithContext(ctx))
	if err != nil {
		if re, ok := errors.AsType[*RefusedError](err); ok {
			return nil, re
		}
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err // its URL may carry credentials in the path or query
		}
		return nil, fmt.Errorf("fence: %s %s: %w", req.Method, t.origin, err)
	}
	// Closing unread tears the connection down (keep-alives are off); a
	// close error says nothing about the call, whose answer is the status.
	resp.Body.Close()
	resp.Body = http.NoBody
	return resp, nil
}

// transport returns the Transport for one call. It is per call: with
// keep-alives off there is no connection worth sharing, and scoping it to
// the call means no connection dialed for one URL's checked addresses can
// carry another call. Scaling hooks run at most 8 at a time (autoscale's call cap), so
// the allocation does not matter. Proxy is nil: an ambient HTTP_PROXY
// would otherwise receive the call and connect wherever it likes.
func (c *Client) transport(t target, addrs []netip.Addr) *http.Transport {
	return &http.Transport{
		Proxy:                  nil,
		DialContext:            c.dialer(t, addrs),
		TLSClientConfig:        c.tlsConfig.Clone(),
		DisableKeepAlives:      true,
		MaxResponseHeaderBytes: maxHeaderBytes,
	}
}

// dialer returns the Transport's DialContext for one call. It ignores the
// address the Transport asks for and dials the checked addresses at the
// checked port, so no second lookup happens. Each connection attempt's
// final address is judged again by the net.Dialer's Control function.
func (c *Client) dialer(t target, addrs []netip.Addr) func(ctx context.Context, network, _ string) (net.Conn, error) {
	d := &net.Dialer{
		KeepAlive: -1, // calls are short; no TCP keep-alive probes
		Control: func(network, address string, _ syscall.RawConn) error {
			return c.control(t.origin, network, address)
		},
	}
	return func(ctx context.Context, network, _ string) (net.Conn, error) {
		var errs []error
		for _, a := range addrs {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			conn, err := c.dial(ctx, d, network, netip.AddrPortFrom(a, t.port).String())
			if err == nil {
				return conn, nil
			}
			if _, ok := errors.AsType[*RefusedError](err); ok {
				return nil, err // a refusal here means the checks were evaded: stop
			}
			errs = append(errs, err)
		}
		return nil, errors.Join(errs...)
	}
}

// control is the net.Dialer Control check: it judges the address a socket
// is about to connect to, after any resolution, so that whatever picked
// the address (a rebinding resolver, a multi-address record, a test's
// dial), only a permitted one is reached. The allowlist was applied
// before dialing; this re-check is the address rules only.
func (c *Client) control(origin, network, address string) error {
	if network != "tcp4" && network != "tcp6" {
		return &RefusedError{URL: origin, Reason: fmt.Sprintf("network %q is not permitted", network)}
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &RefusedError{URL: origin, Reason: fmt.Sprintf("unparsable dial address %q", address)}
	}
	if reason := c.judge(ap.Addr()); reason != "" {
		return &RefusedError{URL: origin, Reason: fmt.Sprintf("connection to %s refused: it is %s", ap.Addr(), reason)}
	}
	return nil
}

// closeBody closes req.Body for a request that is never sent, as
// http.Client.Do would.
func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close() // nothing was sent; a close error changes nothing
	}
}

// HTTPClient returns an *http.Client whose every request is checked and
// connected like Do's (the URL under the policy, one lookup, every
// address judged, the dialer re-checking the socket's address, no
// environment proxy, no keep-alive, a 64 KiB header), but whose response
// body is returned for the caller to read and close. Redirects are never
// followed: the 3xx is the answer. Each request is bounded by Timeout,
// and by its context. For callers that need the body (a key set, an auth
// service's refusal) and bound how much of it they read themselves.
func (c *Client) HTTPClient() *http.Client {
	return &http.Client{
		Transport: fencedTransport{c: c},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
		Timeout: Timeout,
	}
}

// fencedTransport is HTTPClient's RoundTripper.
type fencedTransport struct{ c *Client }

func (ft fencedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL == nil {
		closeBody(req)
		return nil, errors.New("fence: request without a URL")
	}
	t, err := ft.c.check(req.URL)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	addrs, err := ft.c.addresses(req.Context(), t)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	tr := ft.c.transport(t, addrs)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		tr.CloseIdleConnections()
		if re, ok := errors.AsType[*RefusedError](err); ok {
			return nil, re
		}
		return nil, fmt.Errorf("fence: %s %s: %w", req.Method, t.origin, err)
	}
	return resp, nil
}
