package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/tunnel"
)

// unixHost is the host of the requests sent to a unix socket target: the
// socket needs none, HTTP/1.1 needs one.
const unixHost = "localhost"

// errBreakerOpen is what Forward reports for a request it did not send
// because the service's circuit breaker is open; the visitor gets 502.
var errBreakerOpen = errors.New("agent: circuit breaker open, backend not dialed")

// backendTransport builds the transport of one service: newTransport's
// keep-alive pool with the service's dial bound, response-head bound,
// unix socket and upstream TLS. It reads the certificate files sc names.
func backendTransport(sc config.Service, target *url.URL) (*http.Transport, error) {
	tr := newTransport(target.Scheme == "https", target.Scheme == "h2c", backendPingAfter)
	connect := sc.ConnectTimeout
	if connect <= 0 {
		connect = config.DefaultConnectTimeout
	}
	d := &net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second}
	tr.DialContext = d.DialContext
	tr.ResponseHeaderTimeout = sc.Timeout
	if target.Scheme == config.TargetUnix {
		sock := target.Path
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", sock)
		}
	}
	if target.Scheme != "https" {
		return tr, nil
	}
	tc := &tls.Config{
		ServerName:         sc.TLSServerName,
		InsecureSkipVerify: sc.TLSInsecureSkipVerify,
		MinVersion:         tls.VersionTLS12,
	}
	if sc.TLSCAFile != "" {
		pem, err := config.ReadPEM(sc.TLSCAFile)
		if err != nil {
			return nil, err
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls_ca_file %s holds no PEM certificate", sc.TLSCAFile)
		}
	}
	if sc.TLSClientCert != "" || sc.TLSClientKey != "" {
		cert, err := config.ReadPEM(sc.TLSClientCert)
		if err != nil {
			return nil, err
		}
		key, err := config.ReadPEM(sc.TLSClientKey)
		if err != nil {
			return nil, err
		}
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("tls_client_cert %s: %w", sc.TLSClientCert, err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	tr.TLSClientConfig = tc
	return tr, nil
}

// rewrite points req at svc's target: the path with the bind's prefix
// trimmed (X-Forwarded-Prefix says which) under the target's own path,
// the Host the service asks for. A path that holds a dot segment is
// refused with tunnel.ErrDotSegment.
func (svc *service) rewrite(req *http.Request) error {
	fwd, prefix, err := svc.bind.ForwardedPath(req.URL.EscapedPath())
	if err != nil {
		return err
	}
	delete(req.Header, "X-Forwarded-Prefix") // only ours reaches the backend
	if prefix != "" {
		req.Header["X-Forwarded-Prefix"] = []string{prefix}
	}
	req.RequestURI = ""
	req.URL.Scheme = svc.target.Scheme
	req.URL.Host = svc.target.Host
	switch svc.target.Scheme {
	case "h2c":
		req.URL.Scheme = "http"
	case config.TargetUnix:
		req.URL.Scheme, req.URL.Host = "http", unixHost
	}
	if p := svc.target.EscapedPath(); fwd != "*" && svc.target.Scheme != config.TargetUnix && p != "" && p != "/" {
		fwd = strings.TrimSuffix(p, "/") + fwd
	}
	if fwd != "*" {
		path, err := url.PathUnescape(fwd)
		if err != nil {
			return tunnel.ErrDotSegment
		}
		req.URL.Path, req.URL.RawPath = path, ""
		if req.URL.EscapedPath() != fwd {
			req.URL.RawPath = fwd
		}
	}
	switch {
	case svc.cfg.HostHeader != "":
		req.Host = svc.cfg.HostHeader
	case svc.cfg.RewriteHost:
		req.Host = "" // the transport sends req.URL.Host
	}
	return nil
}

// send sends req to the backend, trying again per the service's retry
// block: only after a connect error (nothing reached the backend), only
// idempotent methods unless all_methods, and never once a byte of the
// request's body was read.
func (svc *service) send(ctx context.Context, req *http.Request) (*http.Response, error) {
	r := svc.cfg.Retry
	tries := max(1, r.Attempts)
	if tries > 1 && !r.AllMethods && !idempotent(req.Method) {
		tries = 1
	}
	var body *watchedBody
	if tries > 1 && req.Body != nil && req.Body != http.NoBody {
		body = &watchedBody{ReadCloser: req.Body}
		req.Body = body
	}
	for try := 1; ; try++ {
		resp, err := svc.transport.RoundTrip(req)
		if err == nil || try >= tries || !connectError(err) || ctx.Err() != nil || (body != nil && body.read.Load()) {
			return resp, err
		}
		if r.Backoff > 0 {
			t := time.NewTimer(r.Backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, err
			case <-t.C:
			}
		}
	}
}

// idempotent reports whether a request of method may be sent twice (RFC
// 9110 §9.2.2).
func idempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// connectError reports whether err happened while dialing the backend,
// before any byte of the request left.
func connectError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// watchedBody records whether any of a request body was read, which rules
// out sending the request again.
type watchedBody struct {
	io.ReadCloser
	read atomic.Bool
}

func (b *watchedBody) Read(p []byte) (int, error) {
	b.read.Store(true)
	return b.ReadCloser.Read(p)
}

// badRequest is the answer to a request path the client refuses.
func badRequest() *http.Response {
	return plainAnswer(http.StatusBadRequest, "aperio-client: bad request path\n")
}

// misdirected is the answer to an HTTP request for a tls_passthrough
// service: its target speaks TLS to visitors, and a request must never
// reach it as plaintext (a server that routed one there is older, or
// the bind mixes passthrough and terminated services).
func misdirected() *http.Response {
	return plainAnswer(http.StatusMisdirectedRequest, "aperio-client: this service takes TLS connections only\n")
}

// plainAnswer is the client's own answer of status with the text msg.
func plainAnswer(status int, msg string) *http.Response {
	return &http.Response{
		StatusCode:    status,
		Header:        http.Header{"Content-Type": {"text/plain; charset=utf-8"}, "Content-Length": {strconv.Itoa(len(msg))}},
		ContentLength: int64(len(msg)),
		Body:          io.NopCloser(strings.NewReader(msg)),
	}
}

// Circuit breaker results of one exchange.
const (
	exchangeOK      = iota // the backend answered
	exchangeFailed         // it did not: refused, reset, timed out
	exchangeIgnored        // says nothing of the backend: the server abandoned it
)

// breaker is a service's circuit breaker: closed, open for openFor after
// failures consecutive failed exchanges, then half-open, when one trial
// exchange is let through; its success closes the breaker, its failure
// opens it again. While open the service is announced unhealthy. Safe for
// concurrent use.
type breaker struct {
	failures int
	openFor  time.Duration
	// changed is called, without the lock, when the announced health
	// changes: as the breaker opens, and as it turns half-open.
	changed func()

	mu        sync.Mutex // guards the following fields
	streak    int        // consecutive failures while closed
	openUntil time.Time  // zero while closed
	trial     bool       // half-open: the trial exchange is out
	timer     *time.Timer
}

// newBreaker returns the breaker of cb; nil when it has none.
func newBreaker(cb config.CircuitBreaker, changed func()) *breaker {
	if cb.Failures <= 0 {
		return nil
	}
	return &breaker{failures: cb.Failures, openFor: cb.OpenFor, changed: changed}
}

// allow reports whether an exchange may go to the backend now: always
// while closed, never while open, the trial alone while half-open.
func (b *breaker) allow() bool {
	if b == nil {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.openUntil.IsZero():
		return true
	case time.Now().Before(b.openUntil) || b.trial:
		return false
	}
	b.trial = true
	return true
}

// done records the result of an exchange allow let through and reports
// whether it opened the breaker.
func (b *breaker) done(result int) bool {
	if b == nil {
		return false
	}
	b.mu.Lock()
	notify := false
	halfOpen := !b.openUntil.IsZero() && !time.Now().Before(b.openUntil)
	switch {
	case b.openUntil.IsZero() && result == exchangeOK:
		b.streak = 0
	case b.openUntil.IsZero() && result == exchangeFailed:
		if b.streak++; b.streak >= b.failures {
			b.openLocked()
			notify = true
		}
	case halfOpen && b.trial && result == exchangeOK:
		b.streak, b.openUntil, b.trial = 0, time.Time{}, false
	case halfOpen && b.trial && result == exchangeFailed:
		b.openLocked()
		notify = true
	case halfOpen && result == exchangeIgnored:
		b.trial = false // the trial told nothing: let the next one try
	}
	b.mu.Unlock()
	if notify {
		b.changed()
	}
	return notify
}

// openLocked opens the breaker for openFor and arranges for changed to
// run when it turns half-open, so that the service is announced healthy
// again without waiting for the next heartbeat.
func (b *breaker) openLocked() {
	b.openUntil, b.trial, b.streak = time.Now().Add(b.openFor), false, 0
	if b.timer != nil {
		b.timer.Stop()
	}
	b.timer = time.AfterFunc(b.openFor, b.changed)
}

// open reports whether the breaker is open now (not half-open): the
// service is then announced unhealthy.
func (b *breaker) open() bool {
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.openUntil.IsZero() && time.Now().Before(b.openUntil)
}

// stop stops the half-open timer.
func (b *breaker) stop() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.timer != nil {
		b.timer.Stop()
	}
}
