package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// What a client service does with its backend: how the request's path,
// Host and TLS are set, how long it may take, when it is retried, when the
// service stops taking requests, and how its health is probed. The server
// sees none of it but trim_bind and the health it leads to.

// Retry is a service's retry: block: requests tried again on a connect
// error (the backend refused or could not be reached), never once any of
// the request's body went out.
type Retry struct {
	// Attempts is how many times a request is tried in all, the first
	// included (retry.attempts). 0 and 1 mean no retry; at most 10.
	Attempts int
	// Backoff is the wait before each further try (retry.backoff).
	// Default 100ms; at most 10s.
	Backoff time.Duration
	// AllMethods retries every method, not only the idempotent ones (GET,
	// HEAD, OPTIONS, TRACE, PUT, DELETE) (retry.all_methods). Default
	// false. A body already sent is never sent again either way.
	AllMethods bool
}

// CircuitBreaker is a service's circuit_breaker: block: after Failures
// consecutive failed exchanges with the backend (no answer: refused,
// reset, timed out) the client announces the service unhealthy, so the
// server routes elsewhere, and answers 502 without dialing for OpenFor;
// then one request is let through (half-open), whose outcome closes the
// breaker or opens it again.
type CircuitBreaker struct {
	// Failures is the streak that opens the breaker
	// (circuit_breaker.failures). 0, the default, is no breaker; at most
	// 1000.
	Failures int
	// OpenFor is how long the breaker stays open (circuit_breaker.open_for).
	// Default 30s; within (0, 1h].
	OpenFor time.Duration
}

// Health probe types (health.type) and success ranges (health.success).
const (
	HealthHTTP = "http"
	HealthGRPC = "grpc"

	Success2xx    = "2xx"
	Success2xx3xx = "2xx-3xx"
)

var (
	healthTypes     = []string{HealthHTTP, HealthGRPC}
	healthSuccesses = []string{Success2xx, Success2xx3xx}
)

// Bounds of the backend settings.
const (
	maxTimeout        = time.Hour
	maxConnectTimeout = 5 * time.Minute
	maxRetryAttempts  = 10
	maxRetryBackoff   = 10 * time.Second
	maxBreakerStreak  = 1000
	maxBreakerOpen    = time.Hour
	// MaxPEMBytes bounds a certificate or key file a service names.
	MaxPEMBytes = 1 << 20
	// maxUnixPath is the longest socket path Linux takes (sun_path holds
	// 108 bytes with the terminating NUL).
	maxUnixPath = 107
	maxHostLen  = 255
)

// DefaultConnectTimeout is how long dialing a service's backend may take
// when connect_timeout is unset.
const DefaultConnectTimeout = 10 * time.Second

// DefaultService returns the defaults of one entry of services:; the
// loader starts every service from it, with the client's health laid over
// Health.
func DefaultService() Service {
	return Service{
		TrimBind:       true,
		Weight:         1,
		ConnectTimeout: DefaultConnectTimeout,
		Retry:          Retry{Backoff: 100 * time.Millisecond},
		CircuitBreaker: CircuitBreaker{OpenFor: 30 * time.Second},
		Health:         DefaultClient().Health,
	}
}

// backendSettings are the service keys of this file, in --print-config
// order.
func backendSettings() []setting[Service] {
	type S = Service
	return []setting[S]{
		boolSetting("trim_bind", "strip the path bind's prefix before forwarding (X-Forwarded-Prefix keeps it)", func(c *S) *bool { return &c.TrimBind }),
		invertedBoolSetting("pass_hostname", "send the visitor's Host to the target (false: the target's own)", func(c *S) *bool { return &c.RewriteHost }),
		stringSetting("host_header", "fixed Host sent to the target (wins over pass_hostname)", func(c *S) *string { return &c.HostHeader }),
		stringSetting("tls_server_name", "name verified in an https target's certificate (default: its host)", func(c *S) *string { return &c.TLSServerName }),
		stringSetting("tls_ca_file", "PEM file of the CAs an https target's certificate must chain to", func(c *S) *string { return &c.TLSCAFile }),
		boolSetting("tls_insecure_skip_verify", "do not verify an https target's certificate (warned at start)", func(c *S) *bool { return &c.TLSInsecureSkipVerify }),
		stringSetting("tls_client_cert", "PEM certificate presented to an https target (mTLS)", func(c *S) *string { return &c.TLSClientCert }),
		stringSetting("tls_client_key", "PEM key of tls_client_cert", func(c *S) *string { return &c.TLSClientKey }),
		durationSetting("timeout", "how long the target may take to start its answer (0 = no bound of the client's)", func(c *S) *time.Duration { return &c.Timeout }),
		durationSetting("connect_timeout", "how long dialing the target may take", func(c *S) *time.Duration { return &c.ConnectTimeout }),
		intSetting("retry.attempts", "tries in all of a request whose target could not be reached (0, 1 = none)", func(c *S) *int { return &c.Retry.Attempts }),
		durationSetting("retry.backoff", "wait before each retry", func(c *S) *time.Duration { return &c.Retry.Backoff }),
		boolSetting("retry.all_methods", "retry every method, not only idempotent ones", func(c *S) *bool { return &c.Retry.AllMethods }),
		intSetting("circuit_breaker.failures", "consecutive failures that open the breaker (0 = none)", func(c *S) *int { return &c.CircuitBreaker.Failures }),
		durationSetting("circuit_breaker.open_for", "how long an open breaker keeps the service out", func(c *S) *time.Duration { return &c.CircuitBreaker.OpenFor }),
		boolSetting("wait_for_backend", "announce the service only after its first probe passed", func(c *S) *bool { return &c.WaitForBackend }),
	}
}

// invertedBoolSetting binds a boolean key to a field that holds its
// negation, so that the field's zero value is the key's default true.
func invertedBoolSetting[C any](name, usage string, field func(*C) *bool) setting[C] {
	s := scalarSetting(name, usage, field, func(v string) (bool, error) {
		b, err := parseBool(v)
		return !b, err
	}, func(b bool) string { return strconv.FormatBool(!b) })
	s.Bool = true
	return s.kind(KindBool)
}

// isBackendKey reports whether norm is a key of backendSettings or one
// of their blocks, for the hint given when one is written at the top
// level.
func isBackendKey(norm string) bool {
	if norm == "retry" || norm == "circuit_breaker" {
		return true
	}
	for _, s := range backendSettings() {
		if s.norm == norm {
			return true
		}
	}
	return false
}

// TargetUnix is the scheme of a target that is a unix socket:
// unix:///path/to.sock, HTTP/1.1 over the socket.
const TargetUnix = "unix"

// checkTarget returns what is wrong with raw as a service target, or "".
func checkTarget(raw string) string {
	if !strings.HasPrefix(raw, TargetUnix+":") {
		return checkURL(raw, targetSchemes...)
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return fmt.Sprintf("%q is not a valid URL", raw)
	case u.Opaque != "" || u.Host != "" || !strings.HasPrefix(u.Path, "/"):
		return fmt.Sprintf("%q: a unix target names an absolute socket path: unix:///path/to.sock", raw)
	case len(u.Path) > maxUnixPath:
		return fmt.Sprintf("%q: socket path longer than %d bytes", raw, maxUnixPath)
	case u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		return fmt.Sprintf("%q: a unix target has no query, fragment or user", raw)
	case strings.ContainsAny(u.Path, "\x00\r\n"):
		return fmt.Sprintf("%q: control characters in the socket path", raw)
	}
	return ""
}

// backend checks the backend settings of service s under prefix p.
func (v *checker) backend(p string, s Service) {
	u, _ := url.Parse(s.Target)
	scheme := ""
	if u != nil {
		scheme = u.Scheme
	}
	if s.HostHeader != "" && !validHostHeader(s.HostHeader) {
		v.add(p+"host_header", "%q is not a host or host:port (no spaces, control characters or paths; at most %d bytes)", s.HostHeader, maxHostLen)
	}
	tlsKeys := []struct {
		key string
		set bool
	}{
		{"tls_server_name", s.TLSServerName != ""}, {"tls_ca_file", s.TLSCAFile != ""},
		{"tls_insecure_skip_verify", s.TLSInsecureSkipVerify},
		{"tls_client_cert", s.TLSClientCert != ""}, {"tls_client_key", s.TLSClientKey != ""},
	}
	for _, k := range tlsKeys {
		if k.set && scheme != "https" && s.Target != "" {
			v.add(p+k.key, "applies to https:// targets only, the target is %q", s.Target)
		}
	}
	if s.TLSServerName != "" && !validHostname(s.TLSServerName) && net.ParseIP(s.TLSServerName) == nil {
		v.add(p+"tls_server_name", "%q is not a DNS name or IP address", s.TLSServerName)
	}
	if (s.TLSClientCert == "") != (s.TLSClientKey == "") {
		if s.TLSClientCert == "" {
			v.add(p+"tls_client_cert", "required with tls_client_key")
		} else {
			v.add(p+"tls_client_key", "required with tls_client_cert")
		}
	}
	v.durationWithin(p+"timeout", s.Timeout, 0, maxTimeout)
	v.durationWithin(p+"connect_timeout", s.ConnectTimeout, 0, maxConnectTimeout)
	if n := s.Retry.Attempts; n < 0 || n > maxRetryAttempts {
		v.add(p+"retry.attempts", "%d is outside [0, %d]", n, maxRetryAttempts)
	}
	v.durationWithin(p+"retry.backoff", s.Retry.Backoff, 0, maxRetryBackoff)
	if n := s.CircuitBreaker.Failures; n < 0 || n > maxBreakerStreak {
		v.add(p+"circuit_breaker.failures", "%d is outside [0, %d]", n, maxBreakerStreak)
	}
	if s.CircuitBreaker.Failures > 0 {
		if d := s.CircuitBreaker.OpenFor; d <= 0 || d > maxBreakerOpen {
			v.add(p+"circuit_breaker.open_for", "%s is outside (0s, %s]", formatDuration(d), formatDuration(maxBreakerOpen))
		}
	}
	if s.Health.Type == HealthGRPC && scheme != "h2c" && s.Target != "" {
		v.add(p+"health.type", "grpc probes need an h2c:// target, the target is %q", s.Target)
	}
	if s.WaitForBackend && !s.Health.Probes() {
		v.add(p+"wait_for_backend", "needs a probe: set health.endpoint or health.type grpc")
	}
}

// durationWithin reports a duration outside [lo, hi].
func (v *checker) durationWithin(key string, d, lo, hi time.Duration) {
	if d < lo || d > hi {
		v.add(key, "%s is outside [%s, %s]", formatDuration(d), formatDuration(lo), formatDuration(hi))
	}
}

// validHostHeader reports whether h is a host or host:port fit for a Host
// header: a DNS name (underscores allowed) or an IP address, with an
// optional port.
func validHostHeader(h string) bool {
	if h == "" || len(h) > maxHostLen {
		return false
	}
	host := h
	if hp, port, err := net.SplitHostPort(h); err == nil {
		if !isPort(port) {
			return false
		}
		host = hp
	} else if strings.HasPrefix(h, "[") {
		return false
	}
	if net.ParseIP(host) != nil {
		return true
	}
	return validHostname(strings.ReplaceAll(host, "_", "-")) && !strings.HasPrefix(host, "*.")
}

// Probes reports whether h probes at all: an HTTP endpoint or a gRPC
// health check.
func (h Health) Probes() bool { return h.Endpoint != "" || h.Type == HealthGRPC }

// checkBackendFiles reads the certificate files the services name and
// reports each one that is missing, too large or not PEM of the right
// kind.
func checkBackendFiles(c Client, read func(string) ([]byte, error), v *checker) {
	for i, s := range c.Services {
		p := fmt.Sprintf("services[%d].", i)
		if s.TLSCAFile != "" {
			if data, msg := readPEM(read, s.TLSCAFile); msg != "" {
				v.add(p+"tls_ca_file", "%s", msg)
			} else if !x509.NewCertPool().AppendCertsFromPEM(data) {
				v.add(p+"tls_ca_file", "%s holds no PEM certificate", s.TLSCAFile)
			}
		}
		if s.TLSClientCert == "" || s.TLSClientKey == "" {
			continue
		}
		cert, msg := readPEM(read, s.TLSClientCert)
		if msg != "" {
			v.add(p+"tls_client_cert", "%s", msg)
		}
		key, kmsg := readPEM(read, s.TLSClientKey)
		if kmsg != "" {
			v.add(p+"tls_client_key", "%s", kmsg)
		}
		if msg == "" && kmsg == "" {
			if _, err := tls.X509KeyPair(cert, key); err != nil {
				v.add(p+"tls_client_cert", "%s and %s are not a certificate and its key: %v", s.TLSClientCert, s.TLSClientKey, err)
			}
		}
	}
}

// readPEM reads a certificate or key file of at most MaxPEMBytes, with
// read (nil: ReadPEM); the message says what is wrong, "" when nothing is.
func readPEM(read func(string) ([]byte, error), name string) ([]byte, string) {
	if read == nil {
		read = ReadPEM
	}
	data, err := read(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Sprintf("%s does not exist", name)
	case errors.Is(err, errPEMTooLarge) || err == nil && len(data) > MaxPEMBytes:
		return nil, fmt.Sprintf("%s is larger than %d bytes", name, MaxPEMBytes)
	case err != nil:
		return nil, fmt.Sprintf("cannot read %s: %v", name, err)
	}
	return data, ""
}

// errPEMTooLarge is ReadPEM's error for a file above MaxPEMBytes.
var errPEMTooLarge = fmt.Errorf("config: file larger than %d bytes", MaxPEMBytes)

// ReadPEM reads a certificate or key file a service names, reading no
// more than MaxPEMBytes and failing if the file holds more. The loader
// checks the files with it; the agent reads them with it when it builds
// the service's TLS settings.
func ReadPEM(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxPEMBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if len(data) > MaxPEMBytes {
		return nil, fmt.Errorf("%s: %w", name, errPEMTooLarge)
	}
	return data, nil
}
