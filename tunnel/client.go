package tunnel

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/hashicorp/yamux"

	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/internal/recovery"
)

// ErrAbandoned is the cause (context.Cause) of a forwarded request's
// context when the server abandoned the request before its response head:
// the visitor left, or the server or the session went away. It says
// nothing about the backend.
var ErrAbandoned = errors.New("tunnel: the server abandoned the request")

// ErrAbandonedTimeout is the cause of a forwarded request's context when
// the server abandoned it at or near its response timeout (announced in
// the welcome): the backend did not answer in time. It wraps ErrAbandoned.
var ErrAbandonedTimeout = fmt.Errorf("%w at its response timeout", ErrAbandoned)

// timeoutShare is the share of the server's response timeout after which
// an abandoned request counts as timed out: the server's timer starts when
// it has written the request, and the client sees the request and the
// stream's end each one trip later, so the two clocks agree within the
// latency; a visitor who gave up after waiting that long is evidence of a
// slow backend too.
const timeoutShare = 0.9

// Forwarder answers the requests a client receives. Forward is called
// concurrently, once per request, with ctx cancelled when the server
// abandons the request; context.Cause(ctx) is then ErrAbandonedTimeout
// when it gave up at its response timeout, ErrAbandoned (or the cause of
// the client's own shutdown) otherwise. The returned response's body is read to the end or
// until the exchange is abandoned, then closed. A 101 response must have a
// Body that is an io.ReadWriteCloser connected to the backend.
type Forwarder interface {
	Forward(ctx context.Context, service string, req *http.Request) (*http.Response, error)
}

// ClientConfig configures a Client.
type ClientConfig struct {
	// URL is the server to dial: http, https, ws or wss, optionally with a
	// path prefix in front of Path. Required.
	URL string
	// Token authenticates the client. Required.
	Token string
	// Announce returns the announcement to send; it is called for the
	// hello and for every heartbeat. Required.
	Announce func() Announcement
	// Forwarder answers requests. Required.
	Forwarder Forwarder
	// Logger receives connection lifecycle logs; nil discards them.
	Logger *slog.Logger
	// DialContext dials the server's TCP connection; nil uses net.Dialer.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// TLSConfig is used for https and wss URLs; nil uses the defaults.
	TLSConfig *tls.Config
	// Transport is how the session's frames travel: TransportWebSocket
	// (the default when empty) or TransportTCP.
	Transport string
	// Jitter returns a number in [0,1) for reconnect backoff; nil uses
	// math/rand/v2. Tests script it.
	Jitter func() float64
	// OnConnect and OnDisconnect, when set, are called as sessions begin and
	// end (notices from the welcome are logged regardless). OnDisconnect
	// is also called after each attempt that did not connect, with its
	// error: a *RefusedError when the server refused the tunnel.
	OnConnect    func(sessionID string)
	OnDisconnect func(err error)
	// OnDrain, when set, is called on each ack by which the server asks
	// the client to retire (an operator's drain); it is called on the
	// control loop's goroutine, so it must not block. Nil ignores the
	// request, as clients that predate it do.
	OnDrain func()
	// OnExposed, when set, is called with the server's answer to the
	// announcement's Expose entries: on the welcome, and on each ack
	// whose answer differs from the last. It runs on the control loop's
	// goroutine, so it must not block.
	OnExposed func([]ExposeStatus)
	// RawForwarder connects raw streams (TCP and UDP of exposed ports,
	// TLS passed through by SNI) to their targets; nil refuses them.
	RawForwarder RawForwarder
	// MaxHeaderBytes bounds each request head the server sends on a data
	// stream; a larger one closes the stream. Zero means
	// DefaultMaxHeaderBytes (1 MiB).
	MaxHeaderBytes int64
}

// Reconnect backoff (contract §3): 1 s doubling to 60 s, full jitter, reset
// once a session has been up for 30 s.
const (
	backoffMin   = time.Second
	backoffMax   = 60 * time.Second
	backoffReset = 30 * time.Second
)

// RefusedError is a server's refusal of a tunnel: a wrong token, an
// unsupported version, an invalid announcement.
type RefusedError struct {
	Status int    // HTTP status of the upgrade answer; 0 after the upgrade
	Reason string // the server's words
	// Code is the refusal's cause, a Refusal* constant; "" when the
	// server gave none.
	Code string
	// Permanent says that retrying with the same token and announcement
	// gets the same answer. The server says so; a 401 or 426 answer to the
	// upgrade from a server that predates the flag is permanent too.
	Permanent bool
}

func (e *RefusedError) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("tunnel: server refused the tunnel (%d): %s", e.Status, e.Reason)
	}
	return "tunnel: server refused the tunnel: " + e.Reason
}

// Client holds one tunnel to one server, reconnecting forever.
type Client struct {
	cfg     ClientConfig
	log     *slog.Logger
	wsURL   string
	dialer  *websocket.Dialer
	jitter  func() float64
	nudge   chan chan error // announce now; the reply arrives with the ack
	poke    chan struct{}   // announce soon; nobody waits (capacity 1)
	streams sync.WaitGroup  // every session's accept loop and request goroutines
	active  atomic.Int64    // requests being served now
	// watched counts the requests still running after abandonWatchDelay,
	// whose streams a watch looked at.
	watched atomic.Int64
	// connected is set while a session's control loop runs, the only
	// receiver of nudge.
	connected atomic.Bool
	// live is closed when the current session's control loop stops
	// receiving nudges, before its wind-down (which may wait a second for
	// a goaway's reason): AnnounceNow must not wait on a loop that is
	// gone.
	live    atomic.Pointer[chan struct{}]
	upSince atomic.Int64 // unix nanoseconds of the last welcome
	// responseTimeout is the server's response timeout in nanoseconds, as
	// the last welcome said; 0 when it did not say.
	responseTimeout atomic.Int64
	// backendWarn rate-limits the warning of an unreachable backend.
	backendWarn *warnLimiter
}

// NewClient checks cfg and returns a Client; Run starts it.
func NewClient(cfg ClientConfig) (*Client, error) {
	if cfg.URL == "" || cfg.Token == "" || cfg.Announce == nil || cfg.Forwarder == nil {
		return nil, errors.New("tunnel: client needs URL, Token, Announce and Forwarder")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	wsURL, err := tunnelURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dial := cfg.DialContext
	if dial == nil {
		dial = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	dialer := &websocket.Dialer{
		NetDialContext:   dial,
		TLSClientConfig:  cfg.TLSConfig,
		Proxy:            nil, // ambient HTTP_PROXY must not capture the tunnel
		HandshakeTimeout: HandshakeTimeout,
		ReadBufferSize:   wsBufferSize,
		WriteBufferSize:  wsBufferSize,
		WriteBufferPool:  wsWriteBuffers,
		Subprotocols:     []string{Subprotocol},
	}
	jitter := cfg.Jitter
	if jitter == nil {
		jitter = rand.Float64
	}
	log = log.With(logkey.ServerURL, cfg.URL)
	return &Client{
		cfg:         cfg,
		log:         log,
		wsURL:       wsURL,
		dialer:      dialer,
		jitter:      jitter,
		nudge:       make(chan chan error),
		poke:        make(chan struct{}, 1),
		backendWarn: newWarnLimiter(log, "backend unreachable", backendWarnEvery),
	}, nil
}

// tunnelURL maps server.url onto the WebSocket URL of the tunnel endpoint.
func tunnelURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("tunnel: server url: %w", err)
	}
	switch u.Scheme {
	case "http", "ws":
		u.Scheme = "ws"
	case "https", "wss":
		u.Scheme = "wss"
	default:
		return "", fmt.Errorf("tunnel: server url %q: scheme must be http, https, ws or wss", raw)
	}
	if u.Host == "" {
		return "", fmt.Errorf("tunnel: server url %q has no host", raw)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + Path
	u.RawQuery, u.Fragment = "", ""
	return u.String(), nil
}

// Active returns the number of requests the client is serving now.
func (c *Client) Active() int64 { return c.active.Load() }

// Connected reports whether a session with the server is up: the welcome
// was received and the session has not ended since.
func (c *Client) Connected() bool { return c.connected.Load() }

// URL is the server this client dials, as configured.
func (c *Client) URL() string { return c.cfg.URL }

// Run connects and keeps the tunnel up until ctx is done, then closes the
// session and waits for the requests it was serving. It returns nil when
// ctx ends it.
func (c *Client) Run(ctx context.Context) error {
	defer c.streams.Wait()
	b := reconnectBackoff{jitter: c.jitter}
	for {
		start := time.Now()
		err := c.runSession(ctx)
		if ctx.Err() != nil {
			return nil
		}
		var up time.Duration
		if at := c.upSince.Load(); at > start.UnixNano() {
			up = time.Since(time.Unix(0, at))
		}
		wait := b.next(up)
		var refused *RefusedError
		if errors.As(err, &refused) {
			c.log.Error("tunnel refused", logkey.Reason, refused.Reason, logkey.Status, refused.Status, logkey.Code, refused.Code, logkey.RetryIn, wait.Round(time.Millisecond))
		} else {
			c.log.Warn("tunnel down", logkey.Err, errString(err), logkey.RetryIn, wait.Round(time.Millisecond))
		}
		if c.cfg.OnDisconnect != nil {
			c.cfg.OnDisconnect(err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// reconnectBackoff spaces reconnect attempts: 1 s doubling to 60 s, each
// wait drawn uniformly from [0, backoff) (full jitter, so a fleet of clients
// that lost one server does not reconnect in lockstep), and back to 1 s
// after a session that stayed up for 30 s.
type reconnectBackoff struct {
	cur    time.Duration
	jitter func() float64 // in [0,1)
}

// next returns the wait before the next attempt, given how long the last
// session was up (0 if it never connected).
func (b *reconnectBackoff) next(up time.Duration) time.Duration {
	if b.cur == 0 || up >= backoffReset {
		b.cur = backoffMin
	}
	wait := time.Duration(b.jitter() * float64(b.cur))
	b.cur = min(b.cur*2, backoffMax)
	return wait
}

// AnnounceNow sends the current announcement at once and waits until the
// server has acknowledged it (so a draining flag is in force), or ctx ends.
// While disconnected it returns ErrSessionClosed at once: no server routes
// anything here then, and the next hello carries the current state anyway.
func (c *Client) AnnounceNow(ctx context.Context) error {
	live := c.live.Load()
	if live == nil || !c.connected.Load() {
		return ErrSessionClosed
	}
	reply := make(chan error, 1)
	select {
	case c.nudge <- reply:
	case <-*live:
		return ErrSessionClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Nudge asks for the announcement to go out at once instead of at the next
// heartbeat. It never blocks; while disconnected it is a no-op beyond the
// next hello, which carries the current state anyway.
func (c *Client) Nudge() {
	select {
	case c.poke <- struct{}{}:
	default:
	}
}

// dial performs the upgrade and returns the yamux session.
func (c *Client) dial(ctx context.Context) (*yamux.Session, error) {
	dctx, cancel := context.WithTimeout(ctx, HandshakeTimeout)
	defer cancel()
	if c.cfg.Transport == TransportTCP {
		conn, r, err := c.dialTCPTransport(dctx)
		if err != nil {
			return nil, err
		}
		// A client has one session: a buffer as large as the WebSocket
		// transport's takes several frames per read syscall, where yamux's
		// own 4 KiB one would take a few.
		return yamux.Client(newConnMux(conn, bufio.NewReaderSize(r, wsBufferSize)), yamuxConfig(clientAcceptBacklog))
	}
	ws, resp, err := c.dialer.DialContext(dctx, c.wsURL, http.Header{"Authorization": {"Bearer " + c.cfg.Token}})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return nil, refusal(resp)
		}
		return nil, fmt.Errorf("tunnel: dial %s: %w", c.wsURL, err)
	}
	if ws.Subprotocol() != Subprotocol {
		ws.Close()
		return nil, &RefusedError{Status: resp.StatusCode, Reason: "server did not accept subprotocol " + Subprotocol}
	}
	return yamux.Client(newWSConn(ws), yamuxConfig(clientAcceptBacklog))
}

// refusal reads the server's JSON reason from a failed upgrade. A 401
// (the token) or 426 (the protocol) is permanent whatever the body says:
// servers that predate the code send none.
func refusal(resp *http.Response) error {
	var body refusalBody
	r := &RefusedError{Status: resp.StatusCode, Reason: http.StatusText(resp.StatusCode)}
	if resp.Body != nil {
		if json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&body) == nil && body.Error != "" {
			r.Reason = body.Error
			r.Code, r.Permanent = printableCode(body.Code), body.Permanent
		}
		resp.Body.Close()
	}
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		r.Permanent = true
		if r.Code == "" {
			r.Code = RefusalToken
		}
	case http.StatusUpgradeRequired:
		r.Permanent = true
		if r.Code == "" {
			r.Code = RefusalVersion
		}
	}
	return r
}

// helloRefusal is the error of a refused frame.
func helloRefusal(m *message) *RefusedError {
	return &RefusedError{Reason: m.Reason, Code: printableCode(m.Code), Permanent: m.Permanent}
}

// printableCode returns code when it is a short printable word, "" for
// anything else: the client logs it and branches on it, and the server
// that sent it is not trusted to keep it short.
func printableCode(code string) string {
	if len(code) > 64 || !printable(code) {
		return ""
	}
	return code
}

// runSession holds one session from dial to its end.
func (c *Client) runSession(ctx context.Context) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	mux, ctrl, welcome, err := c.handshake(sctx, c.cfg.Announce, true)
	if mux != nil {
		defer mux.Close()
	}
	if err != nil {
		return err
	}
	ctrl.SetDeadline(time.Time{})
	interval := time.Duration(welcome.HeartbeatMS) * time.Millisecond
	if interval <= 0 {
		interval = defaultHeartbeat()
	}
	log := c.log.With(logkey.SessionID, welcome.SessionID)
	transport := c.cfg.Transport
	if transport == "" {
		transport = TransportWebSocket
	}
	log.Info("tunnel connected", logkey.Heartbeat, interval, logkey.Transport, transport)
	for _, n := range welcome.Notices {
		log.Warn("server notice", logkey.Notice, n)
	}
	// Connected before OnConnect runs, so that a caller woken by it may
	// announce at once (AnnounceNow) instead of finding no session.
	live := make(chan struct{})
	c.live.Store(&live)
	c.connected.Store(true)
	defer c.connected.Store(false)
	c.upSince.Store(time.Now().UnixNano())
	c.responseTimeout.Store(max(welcome.ResponseTimeoutMS, 0) * int64(time.Millisecond))
	if c.cfg.OnConnect != nil {
		c.cfg.OnConnect(welcome.SessionID)
	}
	if c.cfg.OnExposed != nil {
		c.cfg.OnExposed(welcome.Exposed)
	}
	return c.controlLoop(sctx, log, mux, ctrl, interval, welcome, live)
}

// handshake dials the server and exchanges the hello, announcing what
// announce returns once dialed, for the welcome; the exchange is bounded
// by HandshakeTimeout, or by ctx's deadline if earlier. With serve, data
// streams are served from the hello on: the server may dispatch to the
// session as soon as it has attached it,
// before its welcome is written (requests held for a cold start are
// released then), and a stream opened before the welcome would otherwise
// wait for it. The caller closes the returned session, which is non-nil
// whenever the dial succeeded, error or not.
func (c *Client) handshake(ctx context.Context, announce func() Announcement, serve bool) (*yamux.Session, *yamux.Stream, *message, error) {
	mux, err := c.dial(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	ctrl, err := mux.OpenStream()
	if err != nil {
		return mux, nil, nil, fmt.Errorf("tunnel: open control stream: %w", err)
	}
	if serve {
		// The loop is counted in c.streams here, by the goroutine whose
		// Run waits for them, so that its own Add of each stream never
		// takes the count up from zero concurrently with that Wait (which
		// could return before a stream accepted at the session's end), and
		// so that Run also waits for the loop itself.
		c.streams.Add(1)
		go func() {
			defer c.streams.Done()
			c.acceptLoop(ctx, mux)
		}()
	}
	ann := announce()
	deadline := time.Now().Add(HandshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	ctrl.SetDeadline(deadline)
	if err := writeMessage(ctrl, &message{Type: msgHello, Version: Version, Announcement: &ann}); err != nil {
		// A server that refused the hello closes the session right after
		// its answer, and yamux may report that close to this write even
		// though the hello went out: the answer, if it came, is still in
		// the stream's buffer and says why.
		if m, rerr := readMessage(ctrl); rerr == nil && m.Type == msgRefused {
			return mux, nil, nil, helloRefusal(m)
		}
		return mux, nil, nil, fmt.Errorf("tunnel: send hello: %w", err)
	}
	welcome, err := readMessage(ctrl)
	if err != nil {
		return mux, nil, nil, fmt.Errorf("tunnel: read welcome: %w", err)
	}
	if welcome.Type == msgRefused {
		return mux, nil, nil, helloRefusal(welcome)
	}
	if welcome.Type != msgWelcome {
		return mux, nil, nil, fmt.Errorf("tunnel: expected welcome, got %s", welcome.Type)
	}
	return mux, ctrl, welcome, nil
}

// Handshake checks, without serving anything, that the server accepts ann
// from this client: it dials, sends ann in a hello, reads the answer and
// closes the session. It returns the welcome's notices (binds the server
// left out, for one), or the refusal (*RefusedError) or network error.
// ann should be Draining, so that the server routes nothing to the
// session while it lasts. It blocks for at most HandshakeTimeout, less
// when ctx has an earlier deadline; it is safe to call while Run runs.
func (c *Client) Handshake(ctx context.Context, ann Announcement) ([]string, error) {
	a, err := c.HandshakeAnswer(ctx, ann)
	return a.Notices, err
}

// HandshakeAnswer is the welcome's answer to a Handshake.
type HandshakeAnswer struct {
	// Notices are the welcome's notices. One that ends in NotRouted
	// names a bind the server took the session with but routes nothing
	// to.
	Notices []string
	// Exposed answers the announcement's Expose entries: the port open,
	// or why the entry was refused.
	Exposed []ExposeStatus
}

// HandshakeAnswer is Handshake with the welcome's whole answer: its
// notices and the status of each expose entry.
func (c *Client) HandshakeAnswer(ctx context.Context, ann Announcement) (HandshakeAnswer, error) {
	hctx, cancel := context.WithTimeout(ctx, HandshakeTimeout)
	defer cancel()
	mux, _, welcome, err := c.handshake(hctx, func() Announcement { return ann }, false)
	if mux != nil {
		mux.Close()
	}
	if err != nil {
		return HandshakeAnswer{}, err
	}
	return HandshakeAnswer{Notices: welcome.Notices, Exposed: welcome.Exposed}, nil
}

// acceptLoop serves every data stream the server opens.
func (c *Client) acceptLoop(ctx context.Context, mux *yamux.Session) {
	for {
		st, err := mux.AcceptStream()
		if err != nil {
			return
		}
		c.streams.Add(1)
		go func() {
			defer c.streams.Done()
			// The stream closes after a panic is recovered and counted, so
			// the server never sees the close of a stream whose panic is
			// not counted yet.
			defer st.Close()
			defer recovery.Recover(c.log, "tunnel stream")
			c.serveStream(ctx, st)
		}()
	}
}

// controlLoop sends heartbeats and reads acks until the session ends. The
// server must ack within three heartbeat intervals or the session is
// considered dead.
func (c *Client) controlLoop(ctx context.Context, log *slog.Logger, mux *yamux.Session, ctrl *yamux.Stream, interval time.Duration, welcome *message, live chan struct{}) (err error) {
	acks := make(chan ackMsg, 1)
	done := make(chan struct{})
	defer close(done)
	// The reader hands over every message, up to and including the read
	// error, until controlLoop returns: a goaway the server wrote just
	// before closing the session is still delivered from the stream's
	// buffer after the close.
	go func() {
		for {
			m, err := readMessage(ctrl)
			select {
			case acks <- ackMsg{m, err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	// The server writes goaway and closes the session at once, so the
	// close can win: the heartbeat write fails, or the closed session is
	// seen first. The goaway's reason, still in the control stream's
	// buffer, says more than either.
	defer func() {
		var ga *goAwayError
		if err != nil && !errors.As(err, &ga) && ctx.Err() == nil && mux.IsClosed() {
			if r := closeReason(acks); errors.As(r, &ga) {
				err = r
			}
		}
	}()

	var seq uint64
	waiting := make(map[uint64]chan error) // nudges awaiting their ack
	defer func() {
		for _, r := range waiting {
			r <- ErrSessionClosed
		}
	}()
	send := func() error {
		seq++
		ann := c.cfg.Announce()
		ctrl.SetWriteDeadline(time.Now().Add(interval))
		return writeMessage(ctrl, &message{Type: msgHeartbeat, Announcement: &ann, Seq: seq})
	}
	beat := time.NewTicker(interval)
	defer beat.Stop()
	defer close(live) // first of the defers: no nudge is taken after this
	lastAck := time.Now()
	lastNotices := welcome.Notices
	lastExposed := welcome.Exposed
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-mux.CloseChan():
			return ErrSessionClosed
		case reply := <-c.nudge:
			if err := send(); err != nil {
				reply <- err
				return fmt.Errorf("tunnel: send heartbeat: %w", err)
			}
			waiting[seq] = reply
		case <-c.poke:
			if err := send(); err != nil {
				return fmt.Errorf("tunnel: send heartbeat: %w", err)
			}
		case <-beat.C:
			if time.Since(lastAck) > 3*interval {
				return errors.New("tunnel: server stopped acknowledging heartbeats")
			}
			if err := send(); err != nil {
				return fmt.Errorf("tunnel: send heartbeat: %w", err)
			}
		case a := <-acks:
			if a.err != nil {
				return fmt.Errorf("tunnel: control stream: %w", a.err)
			}
			switch a.m.Type {
			case msgAck:
				lastAck = time.Now()
				// The server repeats its notices (a refused hostname, an
				// invalid scaling block) on every ack; say each once.
				if !slices.Equal(a.m.Notices, lastNotices) {
					for _, n := range a.m.Notices {
						log.Warn("server notice", logkey.Notice, n)
					}
					lastNotices = a.m.Notices
				}
				if c.cfg.OnExposed != nil && !slices.Equal(a.m.Exposed, lastExposed) {
					lastExposed = a.m.Exposed
					c.cfg.OnExposed(lastExposed)
				}
				if a.m.Drain && c.cfg.OnDrain != nil {
					c.cfg.OnDrain()
				}
				for s, r := range waiting {
					if s <= a.m.Seq {
						r <- nil
						delete(waiting, s)
					}
				}
			case msgGoAway:
				return &goAwayError{a.m.Reason}
			default:
				return fmt.Errorf("tunnel: unexpected %s frame", a.m.Type)
			}
		}
	}
}

// ackMsg is one message read from the control stream, or the error that
// ended the reading.
type ackMsg struct {
	m   *message
	err error
}

// goAwayError is the error a session told to go away ends with.
type goAwayError struct{ reason string }

func (e *goAwayError) Error() string { return "tunnel: server said goaway: " + e.reason }

// closeReason says why a closed session ended: the reason of a goaway
// still in the control stream's buffer (the server writes it just before
// closing), or ErrSessionClosed. It reads what is left, for at most a
// second.
func closeReason(acks <-chan ackMsg) error {
	t := time.NewTimer(time.Second)
	defer t.Stop()
	for {
		select {
		case a := <-acks:
			if a.err != nil {
				return ErrSessionClosed
			}
			if a.m.Type == msgGoAway {
				return &goAwayError{a.m.Reason}
			}
		case <-t.C:
			return ErrSessionClosed
		}
	}
}

// serveStream answers the requests of one data stream in turn; its caller
// closes the stream.
func (c *Client) serveStream(ctx context.Context, st *yamux.Stream) {
	lim := newHeadLimiter(st, c.cfg.MaxHeaderBytes)
	br := bufio.NewReaderSize(lim, 4096)
	w := newAbandonWatch(c, br)
	// A raw stream (raw.go) says so in its first byte, which no request
	// starts with; it never carries a request.
	if b, err := br.Peek(1); err == nil && b[0] == rawMagic {
		c.serveRaw(ctx, st, br)
		return
	}
	for {
		lim.startHead()
		req, err := http.ReadRequest(br)
		lim.endHead()
		if err != nil {
			switch {
			case errors.Is(err, ErrHeadTooLarge):
				c.log.Warn("tunnel request head too large; stream closed", logkey.Err, err)
			case !errors.Is(err, io.EOF) && !errors.Is(err, yamux.ErrStreamClosed):
				c.log.Debug("tunnel stream ended", logkey.Err, err)
			}
			return
		}
		if !c.serveOne(ctx, st, br, w, req) {
			return
		}
	}
}
