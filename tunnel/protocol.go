package tunnel

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/aperio-dev/aperio/internal/hostname"
)

// Wire constants. Changing any of them is a protocol change: bump Version.
const (
	// Path is the HTTP path of the tunnel endpoint on the public port.
	Path = "/aperio/tunnel"
	// Subprotocol is the WebSocket subprotocol both ends must agree on.
	Subprotocol = "aperio-tunnel.v1"
	// Version is the handshake version this build speaks.
	Version = 1
	// MaxFrameSize bounds one control-stream frame (an announcement with
	// hundreds of hostnames fits in a few KiB; 1 MiB is generous).
	MaxFrameSize = 1 << 20
	// ServiceHeader names the header that tells the client which of its
	// announced services a request is for. The server sets it on every
	// request it sends; the client removes it before forwarding.
	ServiceHeader = "X-Aperio-Service"
	// ErrorHeader names the header the client sets, to ErrorBackend, on
	// the answer it makes up when a service's target cannot be reached, so
	// that the server can tell that answer from the app's own 502.
	ErrorHeader = "X-Aperio-Error"
	// ErrorBackend is ErrorHeader's value: the service's target failed.
	ErrorBackend = "backend"
	// HandshakeTimeout is the default bound on the time from the upgrade
	// to the welcome (ServerConfig.HandshakeTimeout).
	HandshakeTimeout = 10 * time.Second
)

// Message types on the control stream.
const (
	msgHello     = "hello"     // client → server: version and first announcement
	msgWelcome   = "welcome"   // server → client: accepted, session id, heartbeat interval
	msgRefused   = "refused"   // server → client: handshake refused, reason; then close
	msgHeartbeat = "heartbeat" // client → server: the full announcement again
	msgAck       = "ack"       // server → client: heartbeat applied, notices
	msgGoAway    = "goaway"    // server → client: close and reconnect (shutdown, revoke)
)

// NotRouted ends every notice about a bind the server accepted the
// session with but routes nothing to (a hostname the token may not bind,
// access settings that disagree with the pool's, an access block the
// server cannot build): `aperio-client check` counts such a notice as a
// failure.
const NotRouted = "; not routed"

// Refusal codes: the machine-readable cause of a refused tunnel
// (RefusedError.Code), in the refused frame and in the JSON body of a
// refused upgrade. Each of these refusals is permanent: retrying the same
// token and announcement gets the same answer. A refusal with no code
// (a full server, one shutting down) may pass on its own.
const (
	// RefusalToken: the token is missing, unknown, revoked or expired.
	RefusalToken = "token"
	// RefusalHostname: no bind of the announcement may be taken; the
	// token or its organization may not bind the hostnames (or paths).
	RefusalHostname = "hostname_not_allowed"
	// RefusalVersion: the two ends speak different protocol versions.
	RefusalVersion = "version_mismatch"
)

// Announcement is everything a client declares about itself. It is sent in
// the hello and again on every heartbeat; the server applies it
// idempotently, so a heartbeat that repeats the last one changes nothing.
type Announcement struct {
	// Name is the client's display name (config `name`).
	Name string `json:"name"`
	// InstanceID identifies the client process across reconnects; the
	// server treats two sessions with one InstanceID as the same instance.
	InstanceID string `json:"instance_id"`
	// Draining is set once the client stops taking new requests.
	Draining bool `json:"draining,omitempty"`
	// Retiring, with Draining, says why the client leaves when it leaves
	// of its own accord: RetiringIdle after idle_timeout. "" for any other
	// drain (a signal, an operator's ask). Servers that predate it ignore
	// the field.
	Retiring string `json:"retiring,omitempty"`
	// IdleAction, with Retiring, is what the process does once retired
	// (config idle_action): "exit", or "wait" for its supervisor to stop
	// it (a pod whose replicas the provider lowers).
	IdleAction string `json:"idle_action,omitempty"`
	// Version is the client's release (its `version` command's first
	// word), shown to operators in GET /clients; at most MaxVersionLen
	// printable bytes. Clients that predate it send none.
	Version string `json:"version,omitempty"`
	// Services lists what the client publishes.
	Services []Service `json:"services"`
	// Scaling is the client's scaling declaration, nil when none.
	Scaling *Scaling `json:"scaling,omitempty"`
	// Expose lists the public TCP and UDP ports the client asks for
	// (config `expose:`); servers that predate it ignore the field.
	Expose []Expose `json:"expose,omitempty"`
}

// Expose is one public port a client asks the server to open. Visitors'
// connections to it reach the client as raw streams named Name
// (RawHeader.Name); where the client connects them (target,
// proxy_protocol) stays on the client.
type Expose struct {
	// Name identifies the entry within its client: printable, at most
	// 63 bytes, unique.
	Name string `json:"name"`
	// Protocol is "tcp" or "udp".
	Protocol string `json:"protocol"`
	// RemotePort is the public port asked for; 0 asks the server to
	// allocate one from its tcp_port_range.
	RemotePort int `json:"remote_port,omitempty"`
	// AllowedIPs are the visitor addresses (IPs or CIDR prefixes) that may
	// connect; empty admits every visitor the server's own rules admit.
	AllowedIPs []string `json:"allowed_ips,omitempty"`
}

// ExposeStatus is the server's answer to one Expose entry, in the welcome
// and every ack: the port it listens on for the client, or why not.
type ExposeStatus struct {
	Name     string `json:"name"`
	Protocol string `json:"protocol"`
	// Port is the public port open for the entry; 0 when refused.
	Port int `json:"port,omitempty"`
	// Error says why the entry was refused ("" when open).
	Error string `json:"error,omitempty"`
}

// RetiringIdle is Announcement.Retiring of a client retiring after
// idle_timeout.
const RetiringIdle = "idle"

// Protocols of an Expose entry.
const (
	ExposeTCP = "tcp"
	ExposeUDP = "udp"
)

// Service is one published target as announced.
type Service struct {
	// ID names the service within its client; the server echoes it in
	// ServiceHeader. The client numbers its services from 0 in config
	// order and gives a service a reload adds the next unused number, so
	// an ID is never reused within one process.
	ID string `json:"id"`
	// Name is the service's handle (services[].name), "" when it has
	// none; shown in the server's client list and explain, nothing routes
	// on it. Servers that predate it ignore the field. At most 63 bytes,
	// printable.
	Name string `json:"name,omitempty"`
	// Hostnames are the hostnames the service binds. Empty asks the
	// server for the token's exact hostnames (auto-bind) or, where the
	// token and server allow it, the catch-all; the registry decides.
	Hostnames     []string `json:"hostnames"`
	Path          string   `json:"path,omitempty"`
	MaxConcurrent int      `json:"max_concurrent,omitempty"` // 0 = not announced
	Priority      int      `json:"priority,omitempty"`       // >0 = standby tier
	Healthy       bool     `json:"healthy"`
	Resilience    bool     `json:"resilience,omitempty"`
	// TrimBind says the client removes Path from the front of a request's
	// path before its backend sees it (ForwardedPath); the server only
	// shows it, in explain. False from clients that predate it, which
	// never trimmed.
	TrimBind bool `json:"trim_bind,omitempty"`
	// AllowConnect lets visitors' CONNECT requests reach the service;
	// without it the server answers them 405.
	AllowConnect bool `json:"allow_connect,omitempty"`
	// Weight is the service's share among the clients of one bind under
	// weighted round-robin; 0 (not announced) counts as 1. The server
	// clamps it to 1..1000.
	Weight int `json:"weight,omitempty"`
	// LBStrategy overrides the server's lb_strategy for the binds of this
	// service; empty means the server's.
	LBStrategy string `json:"lb_strategy,omitempty"`
	// Concurrency is the client's limiter of the service, nil when the
	// client has none (no limit) or predates it. MaxConcurrent always
	// carries its Desired, so a server that ignores this field still
	// enforces the effective limit.
	Concurrency *Concurrency `json:"concurrency,omitempty"`
	// Access is the service's visitor access control, nil when it sets
	// none: the server's default_access then decides.
	Access *Access `json:"access,omitempty"`
	// Headers are response header rules the service asks the server to
	// apply to its answers, nil when none. The server checks them again
	// (its rules win on conflict) and drops bad entries with a notice.
	Headers *HeaderRules `json:"headers,omitempty"`
	// Draining says the client is about to withdraw the service (a
	// reload removed it): the server routes no new request to it, as for
	// a draining client, while the requests in flight finish. The client
	// announces such a service unhealthy too, so that servers that predate
	// the field stop routing to it as well.
	Draining bool `json:"draining,omitempty"`
	// TLSPassthrough asks the server to pass TLS connections for the
	// service's hostnames through untouched, routed by their SNI, as raw
	// streams (RawTLS named by ID) instead of terminating TLS and sending
	// HTTP. Servers that predate it ignore it.
	TLSPassthrough bool `json:"tls_passthrough,omitempty"`
}

// HeaderRules are a service's response header operations, applied
// remove, then set, then add. Names are header names other than
// hop-by-hop, framing and X-Aperio-* headers; values have no control
// character; at most 64 entries in all.
type HeaderRules struct {
	Set    map[string]string `json:"set,omitempty"`
	Add    map[string]string `json:"add,omitempty"`
	Remove []string          `json:"remove,omitempty"`
}

// Concurrency is a service's concurrency limiter as its client announces
// it: the mode (fixed, aimd or load-signal), the current limit and its
// bounds.
type Concurrency struct {
	Mode    string `json:"mode"`
	Desired int    `json:"desired"`
	Min     int    `json:"min"`
	Max     int    `json:"max"`
	Fixed   bool   `json:"fixed"`
}

// message is the envelope of every control-stream frame.
type message struct {
	Type         string        `json:"type"`
	Version      int           `json:"version,omitempty"`
	Announcement *Announcement `json:"announcement,omitempty"`
	SessionID    string        `json:"session_id,omitempty"`
	HeartbeatMS  int64         `json:"heartbeat_ms,omitempty"`
	Reason       string        `json:"reason,omitempty"`
	// Code and Permanent, in a refused frame, say why in a word the
	// client can act on (a Refusal* constant) and whether retrying the
	// same configuration can succeed. Both are optional: servers that
	// predate them send neither, clients that predate them ignore them.
	Code      string   `json:"code,omitempty"`
	Permanent bool     `json:"permanent,omitempty"`
	Notices   []string `json:"notices,omitempty"`
	// Seq numbers heartbeats; the ack carries the heartbeat's Seq.
	Seq uint64 `json:"seq,omitempty"`
	// ResponseTimeoutMS is, in a welcome, how long the server waits for a
	// response head before it abandons the request (0: it does not say).
	ResponseTimeoutMS int64 `json:"response_timeout_ms,omitempty"`
	// Drain is set, in an ack, on every ack of a session an operator asked
	// to drain (Session.AskDrain), until the session ends: the client
	// should retire. Clients that predate it ignore the unknown field
	// (json.Unmarshal does), so it needs no new Version.
	Drain bool `json:"drain,omitempty"`
	// Exposed, in a welcome or an ack, answers the announcement's Expose
	// entries (Session.SetExposed); clients that predate it ignore it.
	Exposed []ExposeStatus `json:"exposed,omitempty"`
}

// ErrFrameTooLarge reports a control frame above MaxFrameSize.
var ErrFrameTooLarge = errors.New("tunnel: control frame too large")

// writeMessage writes one frame: a 4-byte big-endian length, then JSON.
func writeMessage(w io.Writer, m *message) error {
	body, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("tunnel: encode %s: %w", m.Type, err)
	}
	if len(body) > MaxFrameSize {
		return fmt.Errorf("%w: %d bytes", ErrFrameTooLarge, len(body))
	}
	buf := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(buf, uint32(len(body)))
	copy(buf[4:], body)
	_, err = w.Write(buf)
	return err
}

// readMessage reads one frame. It never allocates more than MaxFrameSize,
// whatever the length prefix claims.
func readMessage(r io.Reader) (*message, error) {
	body, err := readFrame(r)
	if err != nil {
		return nil, err
	}
	return decodeMessage(body)
}

// readFrame reads one frame's body, bounded by MaxFrameSize.
func readFrame(r io.Reader) ([]byte, error) {
	var f frameReader
	return f.next(r)
}

// frameReader reads frames across calls: a read that
// fails mid-frame (its deadline passed) keeps the bytes it had, and the
// next call goes on from there. After any other error it is not used
// again.
type frameReader struct {
	hdr   [4]byte
	nhdr  int    // bytes of hdr read
	body  []byte // the frame's body, made once hdr is whole
	nbody int    // bytes of body read
}

// next returns the next frame's body, bounded by MaxFrameSize.
func (f *frameReader) next(r io.Reader) ([]byte, error) {
	for f.nhdr < len(f.hdr) {
		n, err := r.Read(f.hdr[f.nhdr:])
		f.nhdr += n
		if err != nil && f.nhdr < len(f.hdr) {
			if err == io.EOF && f.nhdr > 0 {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	if f.body == nil {
		n := binary.BigEndian.Uint32(f.hdr[:])
		if n > MaxFrameSize {
			return nil, fmt.Errorf("%w: %d bytes", ErrFrameTooLarge, n)
		}
		f.body = make([]byte, n)
	}
	for f.nbody < len(f.body) {
		n, err := r.Read(f.body[f.nbody:])
		f.nbody += n
		if err != nil && f.nbody < len(f.body) {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, fmt.Errorf("tunnel: read frame: %w", err)
		}
	}
	body := f.body
	*f = frameReader{}
	return body, nil
}

// decodeMessage parses and checks one frame's JSON body.
func decodeMessage(body []byte) (*message, error) {
	m := new(message)
	if err := json.Unmarshal(body, m); err != nil {
		return nil, fmt.Errorf("tunnel: decode frame: %w", err)
	}
	switch m.Type {
	case msgHello, msgHeartbeat:
		if m.Announcement == nil {
			return nil, fmt.Errorf("tunnel: %s without announcement", m.Type)
		}
	case msgWelcome, msgRefused, msgAck, msgGoAway:
	default:
		return nil, fmt.Errorf("tunnel: unknown frame type %q", m.Type)
	}
	return m, nil
}

// Bounds on one announcement, so that a hostile client cannot make the
// server hold or index an unbounded route table.
const (
	maxServices  = 256
	maxHostnames = 1024 // over all services
)

// MaxVersionLen bounds Announcement.Version: a semantic version with its
// pre-release and build parts fits in it.
const MaxVersionLen = 64

// Validate checks an announcement's syntax: hostnames, paths and numbers.
// Whether the token may bind the hostnames is the registry's decision.
func (a *Announcement) Validate() error {
	if len(a.Services) > maxServices {
		return fmt.Errorf("announcement: %d services, at most %d", len(a.Services), maxServices)
	}
	if len(a.Name) > 256 || len(a.InstanceID) > 256 {
		return errors.New("announcement: name or instance_id longer than 256 bytes")
	}
	if !printable(a.Name) || !printable(a.InstanceID) {
		return fmt.Errorf("announcement: name %q or instance_id %q is not printable UTF-8 (control or formatting characters)", a.Name, a.InstanceID)
	}
	if len(a.Version) > MaxVersionLen || !printable(a.Version) {
		return fmt.Errorf("announcement: version %q longer than %d bytes or not printable", a.Version, MaxVersionLen)
	}
	total := 0
	seen := make(map[string]bool, len(a.Services))
	var errs []error
	for i, svc := range a.Services {
		if len(svc.Name) > 63 || !printable(svc.Name) {
			errs = append(errs, fmt.Errorf("announcement: service %d: name longer than 63 bytes or not printable", i))
		}
		if svc.ID == "" || seen[svc.ID] {
			errs = append(errs, fmt.Errorf("announcement: service %d: empty or duplicate id %q", i, svc.ID))
		}
		seen[svc.ID] = true
		total += len(svc.Hostnames)
		for _, h := range svc.Hostnames {
			if err := hostname.Validate(h); err != nil {
				errs = append(errs, fmt.Errorf("announcement: service %s: %w", svc.ID, err))
			}
		}
		if svc.Path != "" && (svc.Path[0] != '/' || len(svc.Path) > 1024) {
			errs = append(errs, fmt.Errorf("announcement: service %s: path %q must start with '/'", svc.ID, svc.Path))
		}
		if svc.MaxConcurrent < 0 || svc.Priority < 0 {
			errs = append(errs, fmt.Errorf("announcement: service %s: negative max_concurrent or priority", svc.ID))
		}
		if c := svc.Concurrency; c != nil && (c.Desired < 0 || c.Min < 0 || c.Max < 0 || len(c.Mode) > 32) {
			errs = append(errs, fmt.Errorf("announcement: service %s: invalid concurrency %+v", svc.ID, *c))
		}
		errs = append(errs, svc.Access.validate(svc.ID)...)
	}
	if total > maxHostnames {
		errs = append(errs, fmt.Errorf("announcement: %d hostnames, at most %d", total, maxHostnames))
	}
	for _, p := range CheckExpose(a.Expose) {
		if p.Field == "" {
			errs = append(errs, fmt.Errorf("announcement: expose: %s", p.Msg))
			continue
		}
		errs = append(errs, fmt.Errorf("announcement: expose %d: %s: %s", p.Index, p.Field, p.Msg))
	}
	return errors.Join(errs...)
}
