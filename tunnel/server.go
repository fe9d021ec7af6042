package tunnel

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/internal/recovery"
	"github.com/hashicorp/yamux"
)

// Authenticator checks the token a client presents.
type Authenticator interface {
	// Authenticate returns the identity of token, or an error whose text is
	// safe to show to the client: a refusal, or one wrapping ErrUnavailable
	// when the token could not be checked (the store is down), which the
	// client is told to retry.
	Authenticate(ctx context.Context, token string) (Identity, error)
}

// ErrUnavailable is wrapped by an Authenticator's error when the check
// itself failed; the upgrade is answered 503 instead of 401.
var ErrUnavailable = errors.New("tunnel: token check unavailable")

// Registry receives sessions as they come and go. The server calls it from
// each session's goroutine; implementations must be safe for concurrent use.
//
// Every method gets the session's context, which ends once Detach has
// returned. The control loop waits for Update before it acks a heartbeat,
// so an implementation that does I/O there must bound it well within the
// heartbeat interval (or do it asynchronously): a client that goes three
// intervals without an ack drops the session.
type Registry interface {
	// Attach is called once per session after its hello; an error refuses
	// the session and its text is sent to the client, with the code of a
	// PermanentRefusal.
	Attach(ctx context.Context, s *Session) error
	// Update is called once right after Attach, before the welcome is
	// written (its notices go in the welcome), then after each heartbeat
	// with the session's new announcement in place. It returns notices
	// for the client (binds it refused, for example), which the client
	// logs.
	Update(ctx context.Context, s *Session) []string
	// Detach is called once when an attached session ends. The server
	// waits for it before the session's handler returns.
	Detach(ctx context.Context, s *Session)
}

// ServerConfig configures a Server.
type ServerConfig struct {
	// Auth checks tokens. Required.
	Auth Authenticator
	// Registry receives sessions. Required.
	Registry Registry
	// DownThreshold is how long a session may go without a heartbeat
	// before it is dropped (client_down_threshold). Zero means
	// DefaultServerConfig's 15s.
	DownThreshold time.Duration
	// ResponseHeaderTimeout bounds the wait for a response head after a
	// request was sent (gateway_response_timeout). Zero means no bound.
	ResponseHeaderTimeout time.Duration
	// HandshakeTimeout bounds the time from the upgrade to the welcome;
	// zero means the protocol default, HandshakeTimeout. Negative settings
	// are refused (Validate).
	HandshakeTimeout time.Duration
	// MaxHeaderBytes bounds each response head a client sends
	// (tunnel_max_header_bytes); a larger one fails the exchange with
	// ErrBadResponse wrapping ErrHeadTooLarge. Zero means
	// DefaultMaxHeaderBytes (1 MiB).
	MaxHeaderBytes int64
	// MaxStreams bounds the yamux streams open on one session
	// (tunnel_max_streams), the control stream and streams still closing
	// included; a request that would need one more waits up to 2 s for
	// one to free (streams of answered requests do within milliseconds),
	// then fails with ErrTooManyStreams. Each stream buffers at most its receive window
	// (2 MiB), so a session holds at most MaxStreams × 2 MiB of data the
	// server has not read. Zero means DefaultMaxStreams.
	MaxStreams int
	// AnnounceInterval is the least time between two announcements applied
	// for one session (tunnel_announce_interval). A heartbeat that comes
	// sooner is held, a newer one replacing it, and applied and acked when
	// the interval has passed; one after a quiet interval is applied at
	// once. Zero means DefaultAnnounceInterval (200ms).
	AnnounceInterval time.Duration
	// MaxSessions bounds the sessions attached at once (max_tunnels):
	// the handshake of one more is refused, with a reason naming the
	// setting, until one ends. Zero means no bound.
	MaxSessions int
	// Logger receives session lifecycle logs; nil discards them.
	Logger *slog.Logger
}

// Server accepts tunnels on Path. It is an http.Handler; the handler blocks
// for the life of the session it accepted.
type Server struct {
	cfg ServerConfig
	log *slog.Logger

	mu       sync.Mutex // guards the following fields
	sessions map[*Session]struct{}
	closing  bool

	wg sync.WaitGroup // one per running session handler

	bytesIn, bytesOut atomic.Int64 // tunnel bytes, every session's
	refusedFull       atomic.Int64 // handshakes refused by MaxSessions
}

// RefusedFull returns the handshakes refused because MaxSessions sessions
// were attached, since the server started.
func (s *Server) RefusedFull() int64 { return s.refusedFull.Load() }

// Bytes returns the bytes received from and sent to clients over every
// tunnel since the server started: yamux frames (requests, responses and
// control messages), WebSocket framing excluded. It does not block.
func (s *Server) Bytes() (in, out int64) { return s.bytesIn.Load(), s.bytesOut.Load() }

// NewServer returns a Server, or an error if cfg is incomplete.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Auth == nil || cfg.Registry == nil {
		return nil, errors.New("tunnel: server needs Auth and Registry")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	def := DefaultServerConfig()
	if cfg.DownThreshold == 0 {
		cfg.DownThreshold = def.DownThreshold
	}
	if cfg.HandshakeTimeout == 0 {
		cfg.HandshakeTimeout = def.HandshakeTimeout
	}
	if cfg.MaxHeaderBytes == 0 {
		cfg.MaxHeaderBytes = def.MaxHeaderBytes
	}
	if cfg.MaxStreams == 0 {
		cfg.MaxStreams = def.MaxStreams
	}
	if cfg.AnnounceInterval == 0 {
		cfg.AnnounceInterval = def.AnnounceInterval
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{cfg: cfg, log: log, sessions: make(map[*Session]struct{})}, nil
}

// heartbeatsPerThreshold is how many heartbeats fit in the down threshold:
// three, so one lost beat never drops a client.
const heartbeatsPerThreshold = 3

// heartbeatInterval is what the server asks clients to use.
func (s *Server) heartbeatInterval() time.Duration {
	return s.cfg.DownThreshold / heartbeatsPerThreshold
}

// PermanentRefusal returns the error by which a Registry's Attach refuses
// a session for good: the client is told code (a Refusal* constant) and
// that retrying the same announcement is no use. Its text is reason.
func PermanentRefusal(code, reason string) error {
	return &permanentRefusal{code: code, reason: reason}
}

type permanentRefusal struct{ code, reason string }

func (p *permanentRefusal) Error() string { return p.reason }

// RefusalCode returns the code of the PermanentRefusal in err's chain, ""
// when there is none (err may be nil).
func RefusalCode(err error) string {
	var p *permanentRefusal
	if errors.As(err, &p) {
		return p.code
	}
	return ""
}

// refusalBody is the JSON answer to an upgrade that cannot become a
// tunnel: the reason, and, for a permanent refusal, its code (a Refusal*
// constant). Clients that predate code and permanent read error alone.
type refusalBody struct {
	Error     string `json:"error"`
	Code      string `json:"code,omitempty"`
	Permanent bool   `json:"permanent,omitempty"`
}

// refuse answers a request that cannot become a tunnel; code is "" for a
// refusal that may pass on its own, a Refusal* constant for a permanent one.
func refuse(w http.ResponseWriter, status int, code, reason string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(refusalBody{Error: reason, Code: code, Permanent: code != ""})
}

// ServeHTTP upgrades an authenticated request to a tunnel session and runs
// it until it ends.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	upgrade := r.Header.Get("Upgrade")
	raw := strings.EqualFold(upgrade, Subprotocol)
	if r.Method != http.MethodGet || !IsUpgrade(r.Header) || !raw && !strings.EqualFold(upgrade, "websocket") {
		if len(upgrade) < 64 && strings.HasPrefix(strings.ToLower(upgrade), "aperio-tunnel") {
			refuse(w, http.StatusUpgradeRequired, RefusalVersion, "unsupported tunnel protocol: this server speaks "+Subprotocol)
			return
		}
		refuse(w, http.StatusBadRequest, "", "the tunnel endpoint expects a WebSocket upgrade, or an upgrade to "+Subprotocol+" (use aperio-client)")
		return
	}
	if raw && r.ProtoMajor != 1 {
		refuse(w, http.StatusBadRequest, "", "an upgrade to "+Subprotocol+" needs HTTP/1.1")
		return
	}
	if !raw && !offersSubprotocol(r.Header) {
		refuse(w, http.StatusUpgradeRequired, RefusalVersion, "unsupported tunnel protocol: this server speaks "+Subprotocol)
		return
	}
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		refuse(w, http.StatusUnauthorized, RefusalToken, "missing token: send Authorization: Bearer <token>")
		return
	}
	ident, err := s.cfg.Auth.Authenticate(r.Context(), token)
	if errors.Is(err, ErrUnavailable) {
		s.log.Error("tunnel token check failed", logkey.RemoteAddr, r.RemoteAddr, logkey.Err, err)
		refuse(w, http.StatusServiceUnavailable, "", "tokens cannot be checked right now; retry later")
		return
	}
	if err != nil {
		s.log.Warn("tunnel refused", logkey.RemoteAddr, r.RemoteAddr, logkey.Reason, err.Error())
		refuse(w, http.StatusUnauthorized, RefusalToken, err.Error())
		return
	}
	s.mu.Lock()
	closing := s.closing
	if !closing {
		s.wg.Add(1)
	}
	s.mu.Unlock()
	if closing {
		refuse(w, http.StatusServiceUnavailable, "", "server is shutting down")
		return
	}
	upgraded := false
	defer func() {
		if !upgraded {
			s.wg.Done()
		}
	}()

	var conn *muxConn
	if raw {
		c, rd, err := acceptTCPUpgrade(w, r)
		if err != nil {
			s.log.Debug("tunnel upgrade failed", logkey.RemoteAddr, r.RemoteAddr, logkey.Err, err)
			return
		}
		conn = newConnMux(c, rd)
	} else {
		ws, err := upgrader.Upgrade(w, r, nil)
		if err != nil {
			s.log.Debug("tunnel upgrade failed", logkey.RemoteAddr, r.RemoteAddr, logkey.Err, err)
			return
		}
		conn = newWSConn(ws)
	}
	ctx := context.WithoutCancel(r.Context())
	conn.rx, conn.tx = &s.bytesIn, &s.bytesOut
	mux, err := yamux.Server(conn, yamuxConfig(s.cfg.MaxStreams))
	if err != nil {
		conn.Close()
		return
	}
	sess := &Session{
		id:             newID(),
		remoteAddr:     r.RemoteAddr,
		mux:            mux,
		headTimeout:    s.cfg.ResponseHeaderTimeout,
		maxHeaderBytes: s.cfg.MaxHeaderBytes,
		maxStreams:     s.cfg.MaxStreams,
	}
	sess.ident.Store(&ident)
	sess.log = s.log.With(logkey.SessionID, sess.id, logkey.RemoteAddr, sess.remoteAddr)
	sess.headWarn = newWarnLimiter(sess.log, "tunnel response head too large", headWarnEvery)
	// The session runs on a goroutine of its own and ServeHTTP returns,
	// so that net/http lets go of what it holds for the hijacked
	// connection (its read and write buffers, the request, the stack of
	// its serving goroutine): about 10 KiB of heap per connected client.
	upgraded = true
	go func() {
		defer s.wg.Done()
		defer mux.Close()
		defer recovery.Recover(sess.log, "tunnel session")
		s.run(ctx, sess)
	}()
}

func offersSubprotocol(h http.Header) bool {
	for _, v := range h["Sec-Websocket-Protocol"] {
		for _, p := range splitComma(v) {
			if p == Subprotocol {
				return true
			}
		}
	}
	return false
}

// run performs the handshake and then serves the control stream until the
// session ends. ctx is the session's context: it ends when run returns,
// after the registry's Detach.
func (s *Server) run(ctx context.Context, sess *Session) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	log := sess.log
	hctx, hcancel := context.WithTimeout(ctx, s.cfg.HandshakeTimeout)
	ctrl, err := sess.mux.AcceptStreamWithContext(hctx)
	hcancel()
	if err != nil {
		log.Info("tunnel handshake failed", logkey.Reason, "no control stream", logkey.Err, err)
		return
	}
	sess.ctrlMu.Lock()
	sess.ctrl = ctrl
	sess.ctrlMu.Unlock()
	// refuseHello answers the hello with a refusal; code as for refuse.
	refuseHello := func(code, reason string) {
		sess.writeControl(&message{Type: msgRefused, Reason: reason, Code: code, Permanent: code != ""}, time.Second)
	}
	ctrl.SetReadDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	hello, err := readMessage(ctrl)
	if err != nil {
		log.Info("tunnel handshake failed", logkey.Err, err)
		refuseHello("", "bad hello: "+err.Error())
		return
	}
	if hello.Type != msgHello {
		log.Info("tunnel handshake failed", logkey.Err, "first frame is "+hello.Type)
		refuseHello("", "expected hello")
		return
	}
	if hello.Version != Version {
		reason := fmt.Sprintf("unsupported protocol version %d: this server speaks version %d", hello.Version, Version)
		log.Info("tunnel handshake failed", logkey.Err, reason)
		refuseHello(RefusalVersion, reason)
		return
	}
	if err := hello.Announcement.Validate(); err != nil {
		log.Info("tunnel handshake failed", logkey.Err, err)
		refuseHello("", err.Error())
		return
	}
	sess.ann.Store(hello.Announcement)
	sess.connectedAt = time.Now()

	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		refuseHello("", "server is shutting down")
		return
	}
	if s.cfg.MaxSessions > 0 && len(s.sessions) >= s.cfg.MaxSessions {
		s.mu.Unlock()
		s.refusedFull.Add(1)
		log.Warn("tunnel refused", logkey.Reason, "max_tunnels", logkey.Limit, s.cfg.MaxSessions)
		refuseHello("", fmt.Sprintf("server is full: it has its max_tunnels %d sessions; retry later", s.cfg.MaxSessions))
		return
	}
	s.sessions[sess] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.sessions, sess)
		s.mu.Unlock()
	}()

	if err := s.cfg.Registry.Attach(ctx, sess); err != nil {
		log.Info("tunnel refused", logkey.Reason, err.Error())
		refuseHello(RefusalCode(err), err.Error())
		return
	}
	defer s.cfg.Registry.Detach(ctx, sess)
	notices := identityNotices(s.cfg.Registry.Update(ctx, sess), sess)
	sess.routed.Store(true)
	err = sess.writeControl(&message{
		Type:        msgWelcome,
		Version:     Version,
		SessionID:   sess.id,
		HeartbeatMS: s.heartbeatInterval().Milliseconds(),
		Notices:     notices,
		Exposed:     sess.Exposed(),
		// The client tells a request abandoned at this deadline (a
		// timeout, which its adaptive limit counts as a failure) from one
		// abandoned earlier (the visitor left: no verdict on the backend).
		ResponseTimeoutMS: s.cfg.ResponseHeaderTimeout.Milliseconds(),
	}, s.cfg.HandshakeTimeout)
	if err != nil {
		log.Info("tunnel handshake failed", logkey.Err, err)
		return
	}
	log.Info("client connected", logkey.ClientName, hello.Announcement.Name, logkey.Services, len(hello.Announcement.Services))

	// The client never opens streams of its own after the control stream.
	refused := make(chan struct{})
	go func() {
		defer close(refused)
		refuseStreams(sess)
	}()

	err = s.serveControl(ctx, sess, ctrl)
	sess.close(err)
	<-refused
	log.Info("client disconnected", logkey.ClientName, sess.Announcement().Name, logkey.Reason, errString(sess.closeErr))
}

// errClientStream ends a session whose client opened a data stream, which
// the protocol reserves to the server. Refusing streams one by one would
// leave each buffering up to its window until StreamCloseTimeout.
var errClientStream = errors.New("tunnel: protocol violation: the client opened a stream")

// goAwayLinger is how long a session told to go away for a protocol
// violation stays open for the client to read why.
const goAwayLinger = time.Second

// refuseStreams ends the session at the first stream the client opens, and
// returns when the session has ended.
func refuseStreams(sess *Session) {
	st, err := sess.mux.AcceptStream()
	if err != nil {
		return
	}
	resetStream(st)
	sess.log.Warn("client opened a stream; ending the session", logkey.Err, errClientStream)
	if sess.writeControl(&message{Type: msgGoAway, Reason: errClientStream.Error()}, time.Second) == nil {
		// Closing at once, with the client's stream data still unread,
		// makes the kernel reset the connection, and a reset can discard
		// the goaway before the client reads it. Give the client a moment
		// to read it and hang up; the refused stream's data is bounded by
		// its window meanwhile.
		t := time.NewTimer(goAwayLinger)
		select {
		case <-sess.mux.CloseChan():
		case <-t.C:
		}
		t.Stop()
	}
	sess.close(errClientStream)
}

// errTokenExpired ends a session at the first heartbeat after its token's
// expiry.
var errTokenExpired = errors.New("tunnel: token expired")

// errHeartbeatMissed ends a session whose client went quiet.
var errHeartbeatMissed = errors.New("tunnel: heartbeat missed")

// Shutdown tells every client to go away, closes their sessions and waits
// for the session handlers to return or ctx to end. New tunnels are refused
// from the first call on. It is safe to call more than once.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	sessions := make([]*Session, 0, len(s.sessions))
	for sess := range s.sessions {
		sessions = append(sessions, sess)
	}
	s.mu.Unlock()
	for _, sess := range sessions {
		sess.goAway("server shutting down")
	}
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Sessions returns the sessions connected now.
func (s *Server) Sessions() []*Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Session, 0, len(s.sessions))
	for sess := range s.sessions {
		out = append(out, sess)
	}
	return out
}

// RoutedSessions returns how many connected sessions are routed
// (Session.Routed): the clients a visitor can reach, as a list of
// connected clients shows them.
func (s *Server) RoutedSessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for sess := range s.sessions {
		if sess.Routed() {
			n++
		}
	}
	return n
}

// goAway closes the session. The client reconnects after its backoff; a
// shutting-down server refuses it, so it finds another server or waits.
func (sess *Session) goAway(reason string) {
	sess.writeControl(&message{Type: msgGoAway, Reason: reason}, time.Second)
	sess.close(errors.New("tunnel: " + reason))
}

// GoAway tells the client why it is being disconnected and closes the
// session (a revoked token, for example).
func (sess *Session) GoAway(reason string) { sess.goAway(reason) }

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func newID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
