package tunnel

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"github.com/aperio-dev/aperio/internal/portspec"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/aperio-dev/aperio/internal/recovery"
)

// Errors a RoundTrip may return. The router translates them into visitor
// answers in one place.
var (
	// ErrSessionClosed means the client went away before answering.
	ErrSessionClosed = errors.New("tunnel: session closed")
	// ErrResponseTimeout means no response head arrived in time.
	ErrResponseTimeout = errors.New("tunnel: response head timed out")
	// ErrBadResponse means the client answered with something that is not
	// HTTP/1.1.
	ErrBadResponse = errors.New("tunnel: malformed response from client")
	// ErrTooManyStreams means the session already has its maximum of
	// streams open (ServerConfig.MaxStreams); the request is not sent.
	ErrTooManyStreams = errors.New("tunnel: session has tunnel_max_streams streams open")
)

// maxIdleStreams bounds the data streams a session keeps open for reuse.
// Each idle stream costs two small buffers and one parked goroutine on the
// client; more than this many concurrent requests open fresh streams.
const maxIdleStreams = 512

// Identity is what an authenticated token grants. A zero TokenID is the
// master token, which may bind every hostname.
type Identity struct {
	TokenID string // "" for the master token
	OrgID   string
	Name    string
	// Hostnames are the patterns the token may bind (exact or "*."); empty
	// for the master token.
	Hostnames []string
	// AllowedIPs are the visitors allowed on the routes the token publishes;
	// empty means every visitor.
	AllowedIPs []netip.Prefix
	// ExpiresAt ends the sessions of the token; zero means never.
	ExpiresAt time.Time
	// AllowCatchAll is set when the token may serve a catch-all (a
	// service with no hostname); the master token always may.
	AllowCatchAll bool
	// Paths are the path prefixes the token may bind; empty means any.
	Paths []string
	// MaxRPS is the visitor requests per second the token's clients
	// serve together; 0 means no limit.
	MaxRPS float64
	// ClientAllowedIPs are the addresses the token's tunnels may connect
	// from; empty means anywhere. The registry enforces it.
	ClientAllowedIPs []netip.Prefix
	// MaxConnections bounds the token's sessions at once; 0 means no
	// bound. The registry enforces it.
	MaxConnections int
	// AllowTCPPorts are the public ports (TCP and UDP) the token's clients
	// may expose, within the server's tcp_port_range; empty means none.
	// The master token may use any port of the range (AnyTCPPort).
	AllowTCPPorts []portspec.Range
	// AnyTCPPort is set for the master token: every port of the server's
	// tcp_port_range is allowed.
	AnyTCPPort bool
	// Generation is the rotation of the token's secret the session
	// authenticated with (the store's Token.Generation, or one less for
	// the previous secret).
	Generation int64
	// EndReason is what the client is told when ExpiresAt ends the
	// session; "" means "token expired".
	EndReason string
	// Notice, when set, is repeated to the client with every heartbeat's
	// ack (a secret in its rotation grace, for example).
	Notice string
}

// Session is one connected client as the server sees it. It is safe for
// concurrent use. It is created by Server after a successful handshake and
// closed by Server; the registry only reads it.
type Session struct {
	id          string
	ident       atomic.Pointer[Identity] // replaced by SetIdentity when the token is edited
	remoteAddr  string
	connectedAt time.Time
	mux         *yamux.Session
	headTimeout time.Duration
	log         *slog.Logger
	// maxHeaderBytes bounds each response head read from the client;
	// maxStreams bounds the streams open on mux, the control stream and
	// streams still closing included.
	maxHeaderBytes int64
	maxStreams     int
	// headWarn rate-limits the warning of an oversized response head.
	headWarn *warnLimiter

	ann atomic.Pointer[Announcement]
	// drainAsked is set once an operator asked the client to retire
	// (AskDrain); every later ack carries it.
	drainAsked atomic.Bool
	// exposed is the server's answer to the announcement's Expose entries,
	// sent with the welcome and every ack (SetExposed).
	exposed atomic.Pointer[[]ExposeStatus]
	// routed is set once the registry has applied the first announcement
	// (Registry.Update in the handshake): see Routed.
	routed atomic.Bool

	openMu sync.Mutex // makes the stream count and an open one step (openBelowMax)

	mu   sync.Mutex // guards the following fields
	idle []*dataStream

	ctrlMu sync.Mutex // serializes writes on ctrl
	ctrl   *yamux.Stream

	closeOnce sync.Once
	closeErr  error // the error that closed the session first; set once, read by the disconnect log line after close
}

// dataStream is a data stream with its buffered reader; writers come from
// a pool for the length of one exchange.
type dataStream struct {
	st  *yamux.Stream
	br  *bufio.Reader
	lim *headLimiter // under br: bounds each response head
}

// ID returns the session id the server assigned.
func (s *Session) ID() string { return s.id }

// Identity returns the token identity the session authenticated with, as
// SetIdentity last replaced it.
func (s *Session) Identity() Identity { return *s.ident.Load() }

// SetIdentity replaces the session's identity: the token was edited or
// rotated. The registry applies the new rights at the next heartbeat
// (Update), and the control loop the new ExpiresAt; id's slices must not
// be modified afterwards. Safe for concurrent use.
func (s *Session) SetIdentity(id Identity) { s.ident.Store(&id) }

// RemoteAddr returns the client's address as the server saw it.
func (s *Session) RemoteAddr() string { return s.remoteAddr }

// ConnectedAt returns when the handshake completed.
func (s *Session) ConnectedAt() time.Time { return s.connectedAt }

// Announcement returns the latest announcement. Callers must not modify it.
func (s *Session) Announcement() *Announcement { return s.ann.Load() }

// AskDrain asks the client to retire: every ack of a heartbeat from now
// until the session ends says drain, so the client learns it within one
// heartbeat interval. A client that understands it announces draining to
// every server it holds a tunnel to, finishes its requests in flight and
// exits; one that predates it ignores it. It is idempotent, never blocks
// and is safe for concurrent use.
func (s *Session) AskDrain() { s.drainAsked.Store(true) }

// SetExposed records the answer to the announcement's Expose entries
// that the welcome and each later ack carry to the client. The registry
// sets it from Update, before the server writes the frame.
func (s *Session) SetExposed(st []ExposeStatus) { s.exposed.Store(&st) }

// Routed reports whether the registry has applied the session's first
// announcement, so its hostnames are served. A session is in
// Server.Sessions from its hello on (a revocation must reach it), but a
// list of connected clients shows it only once it is routed: until then a
// visitor of its hostnames would still be told no client serves them.
func (s *Session) Routed() bool { return s.routed.Load() }

// Exposed returns what SetExposed last recorded.
func (s *Session) Exposed() []ExposeStatus {
	if p := s.exposed.Load(); p != nil {
		return *p
	}
	return nil
}

// DrainAsked reports whether AskDrain was called on the session.
func (s *Session) DrainAsked() bool { return s.drainAsked.Load() }

// Done is closed when the session has ended.
func (s *Session) Done() <-chan struct{} { return s.mux.CloseChan() }

// writeControl sends one control frame, bounded by timeout.
func (s *Session) writeControl(m *message, timeout time.Duration) error {
	s.ctrlMu.Lock()
	defer s.ctrlMu.Unlock()
	if s.ctrl == nil {
		return ErrSessionClosed
	}
	s.ctrl.SetWriteDeadline(time.Now().Add(timeout))
	defer s.ctrl.SetWriteDeadline(time.Time{})
	return writeMessage(s.ctrl, m)
}

// close ends the session once.
func (s *Session) close(err error) {
	s.closeOnce.Do(func() {
		s.closeErr = err
		s.mux.Close()
		s.mu.Lock()
		s.idle = nil
		s.mu.Unlock()
	})
}

func (s *Session) getStream(ctx context.Context) (ds *dataStream, reused bool, err error) {
	if ds := s.popIdle(); ds != nil {
		return ds, true, nil
	}
	return s.getFreshStream(ctx, true)
}

// popIdle takes a stream from the pool, or returns nil.
func (s *Session) popIdle() *dataStream {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.idle)
	if n == 0 {
		return nil
	}
	ds := s.idle[n-1]
	s.idle[n-1] = nil
	s.idle = s.idle[:n-1]
	return ds
}

func (s *Session) putStream(ds *dataStream) {
	s.mu.Lock()
	if len(s.idle) < maxIdleStreams && !s.mux.IsClosed() {
		s.idle = append(s.idle, ds)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	ds.st.Close()
}

// RoundTrip sends req to the client and returns its response head; the
// body streams from the tunnel as the caller reads it, and the caller must
// close it. req.Header goes out as given (the caller has removed hop-by-hop
// headers and added forwarding headers); service names the announced
// service that should answer. Cancelling req's context aborts the exchange
// at any point. A response to an upgrade request (101) has a Body that is
// an io.ReadWriteCloser connected to the backend.
func (s *Session) RoundTrip(req *http.Request, service string) (*http.Response, error) {
	resp, err := s.roundTrip(req, service, true)
	if errors.Is(err, errStaleStream) {
		resp, err = s.roundTrip(req, service, false)
	}
	return resp, err
}

// responseTimeoutKey is the context key of WithResponseTimeout.
type responseTimeoutKey struct{}

// WithResponseTimeout returns a context under which RoundTrip waits up to
// d for the response head, instead of the server's ResponseHeaderTimeout
// (a route's own timeout). Zero means no bound.
func WithResponseTimeout(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, responseTimeoutKey{}, d)
}

// ResponseTimeout returns the response timeout WithResponseTimeout put in
// ctx, and whether there is one.
func ResponseTimeout(ctx context.Context) (time.Duration, bool) {
	d, ok := ctx.Value(responseTimeoutKey{}).(time.Duration)
	return d, ok
}

// smallBody is the largest known-length request body that is sent together
// with its head.
const smallBody = 16 << 10

// errStaleStream means a reused stream was found closed before anything was
// sent back; a request without a body can safely go again on a fresh one.
var errStaleStream = errors.New("tunnel: stale stream")

// errAborted stands for a response read after the exchange was aborted; the
// recorded cause replaces it.
var errAborted = errors.New("tunnel: exchange aborted")

func (s *Session) roundTrip(req *http.Request, service string, mayReuse bool) (*http.Response, error) {
	var ds *dataStream
	var reused bool
	var err error
	if mayReuse {
		ds, reused, err = s.getStream(req.Context())
	} else {
		ds, reused, err = s.getFreshStream(req.Context(), false)
	}
	if err != nil {
		return nil, err
	}
	upgrade := IsUpgrade(req.Header)
	hasBody := req.Body != nil && req.Body != http.NoBody && req.ContentLength != 0
	chunked := hasBody && req.ContentLength < 0

	// The tunnel always carries origin-form targets: an absolute-form
	// target (HTTP/2 lets a visitor put any host in :path) would make the
	// client's backend see a Host other than the one the request was
	// routed on.
	uri := originForm(req)
	if service != "" {
		req.Header[ServiceHeader] = []string{service}
	}
	bw := getWriter(ds.st)
	err = writeRequestHead(bw, req, uri, chunked)
	// A small body of known length leaves with its head in one frame; the
	// head of anything else goes first so the backend can start on it.
	if err == nil && !(hasBody && !chunked && !upgrade && req.ContentLength <= smallBody) {
		err = bw.Flush()
	}
	if err != nil || !hasBody || upgrade {
		putWriter(bw)
	}
	if err != nil {
		ds.st.Close()
		return nil, fmt.Errorf("%w: write request: %w", ErrSessionClosed, err)
	}

	// Abort on cancellation, on the head deadline and on a failing request
	// body by resetting the stream: the client sees EOF and cancels its
	// backend request, and a head read in progress returns at once.
	var body io.Closer
	if hasBody && !upgrade {
		body = req.Body
	}
	ab := newExchangeAbort(ds.st, body)
	stopCtx := context.AfterFunc(req.Context(), func() {
		defer recovery.Recover(s.log, "tunnel exchange cancel")
		ab.abortAndCloseBody(context.Cause(req.Context()))
	})
	var headTimer *time.Timer
	headTimeout := s.headTimeout
	if d, ok := ResponseTimeout(req.Context()); ok {
		headTimeout = d
	}
	if headTimeout > 0 {
		headTimer = time.AfterFunc(headTimeout, func() {
			defer recovery.Recover(s.log, "tunnel head timer")
			ab.abortAndCloseBody(ErrResponseTimeout)
		})
	}
	stopHeadTimer := func() bool { return headTimer == nil || headTimer.Stop() }

	var bodyDone chan error
	if hasBody && !upgrade {
		bodyDone = make(chan error, 1)
		bc := &bodyCopier{bw: bw, src: &abortableReader{r: req.Body, a: ab}, length: req.ContentLength, flushEach: chunked}
		if chunked {
			bc.trailer = func() http.Header { return req.Trailer }
		}
		go s.copyRequestBody(bc, ab, bodyDone)
	}

	// A reused stream that the client closed while it sat in the pool
	// answers with EOF before any byte; ReadResponse would report that as
	// ErrUnexpectedEOF, so look first.
	ds.lim.startHead()
	if _, perr := ds.br.Peek(1); errors.Is(perr, io.EOF) && reused && !hasBody && ab.err() == nil {
		stopCtx()
		stopHeadTimer()
		ds.st.Close()
		return nil, errStaleStream
	}
	resp, err := http.ReadResponse(ds.br, req)
	ds.lim.endHead()
	if err == nil && !stopHeadTimer() {
		// The deadline fired as the head arrived; the stream is closing.
		resp.Body.Close()
		resp, err = nil, ErrResponseTimeout
	}
	if err == nil && ab.err() != nil {
		// We closed the stream before the head was read, so the head is the
		// client's reaction to a truncated request (its backend's failure
		// to read an oversized body, say), not an answer to pass on; the
		// cause below decides the visitor's answer (413 for max_body_size).
		resp.Body.Close()
		resp, err = nil, errAborted
	}
	if err != nil {
		stopCtx()
		stopHeadTimer()
		// The body copier may be blocked reading the visitor; closing the
		// body here would wait for that read, so only the stream is reset
		// and the copier stops after its read in progress.
		if errors.Is(err, ErrHeadTooLarge) {
			ab.abort(fmt.Errorf("%w: %w", ErrBadResponse, err))
			s.headWarn.warn(service, err)
		} else {
			ab.abort(errAborted)
		}
		if cause := ab.err(); cause != errAborted {
			// A body copier that already failed knows best (413 for a body
			// over max_body_size); one still blocked reading a slow upload
			// is not waited for.
			if bodyDone != nil {
				select {
				case berr := <-bodyDone:
					if berr != nil {
						return nil, berr
					}
				default:
				}
			}
			return nil, cause
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || s.mux.IsClosed() {
			return nil, fmt.Errorf("%w: %w", ErrSessionClosed, err)
		}
		return nil, fmt.Errorf("%w: %w", ErrBadResponse, err)
	}
	restoreContentLength(resp)
	if resp.StatusCode == http.StatusSwitchingProtocols {
		stopCtx() // the upgraded connection now lives as long as its users keep it
		resp.Body = &upgradedConn{ds: ds}
		return resp, nil
	}
	// A stream that carried an upgrade request is never reused: a client
	// whose backend refused the upgrade may not read from it again.
	keep := !resp.Close && !upgrade
	resp.Body = &responseBody{s: s, ds: ds, ab: ab, body: resp.Body, stop: stopCtx, bodyDone: bodyDone, keep: keep}
	return resp, nil
}

// copyRequestBody runs bc on its own goroutine and reports its result on
// done; a failing body aborts the exchange.
func (s *Session) copyRequestBody(bc *bodyCopier, ab *exchangeAbort, done chan<- error) {
	defer recovery.Recover(s.log, "tunnel request body")
	err := bc.copy()
	putWriter(bc.bw)
	if err != nil {
		ab.abort(fmt.Errorf("request body: %w", err))
	}
	done <- err
}

// streamWait bounds how long a request waits for a stream while the
// session has tunnel_max_streams open, and streamPoll how often it looks.
// Streams of answered requests free their slots within milliseconds (back
// to the pool, or closed once the client's close arrives), so a burst at
// the limit (a release of held requests) queues briefly instead of failing.
const (
	streamWait = 2 * time.Second
	streamPoll = 2 * time.Millisecond
)

// getFreshStream opens a stream; at tunnel_max_streams it waits up to
// streamWait (or ctx) for a slot. With mayReuse a stream returned to the
// pool meanwhile is taken too.
func (s *Session) getFreshStream(ctx context.Context, mayReuse bool) (*dataStream, bool, error) {
	st, err := s.openBelowMax()
	if st == nil && err == nil {
		var ds *dataStream
		ds, st, err = s.waitStream(ctx, mayReuse)
		if ds != nil {
			return ds, true, nil
		}
	}
	if err != nil {
		return nil, false, err
	}
	lim := newHeadLimiter(st, s.maxHeaderBytes)
	return &dataStream{st: st, br: bufio.NewReaderSize(lim, 4096), lim: lim}, false, nil
}

// openBelowMax opens a stream if the session has fewer than
// tunnel_max_streams open, and returns nil, nil if it has not. The count
// and the open are one step under openMu, so concurrent requests never
// take the session past the limit: the server's yamux backlog is sized to
// it (yamuxConfig), and an open past the backlog would wait for the
// client's acknowledgement with no timeout.
func (s *Session) openBelowMax() (*yamux.Stream, error) {
	s.openMu.Lock()
	defer s.openMu.Unlock()
	if s.maxStreams > 0 && s.mux.NumStreams() >= s.maxStreams {
		return nil, nil
	}
	st, err := s.mux.OpenStream()
	if err != nil {
		return nil, fmt.Errorf("%w: open stream: %w", ErrSessionClosed, err)
	}
	return st, nil
}

// waitStream waits until the session is below tunnel_max_streams and opens
// a stream (nil, it, nil) or, with mayReuse, a pooled stream is free (it,
// nil, nil).
func (s *Session) waitStream(ctx context.Context, mayReuse bool) (*dataStream, *yamux.Stream, error) {
	deadline := time.NewTimer(streamWait)
	defer deadline.Stop()
	tick := time.NewTicker(streamPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("%w (%d): %w", ErrTooManyStreams, s.maxStreams, context.Cause(ctx))
		case <-deadline.C:
			return nil, nil, fmt.Errorf("%w (%d)", ErrTooManyStreams, s.maxStreams)
		case <-tick.C:
		}
		if s.mux.IsClosed() {
			return nil, nil, fmt.Errorf("%w: open stream: %w", ErrSessionClosed, yamux.ErrSessionShutdown)
		}
		if mayReuse {
			if ds := s.popIdle(); ds != nil {
				return ds, nil, nil
			}
		}
		if st, err := s.openBelowMax(); st != nil || err != nil {
			return nil, st, err
		}
	}
}

// responseBody returns its stream to the pool when the exchange completed
// cleanly, and closes it otherwise.
type responseBody struct {
	s        *Session
	ds       *dataStream
	ab       *exchangeAbort
	body     io.ReadCloser
	stop     func() bool
	bodyDone chan error
	keep     bool
	eof      bool
	closed   bool
}

func (b *responseBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if err == io.EOF {
		b.eof = true
	} else if err != nil {
		err = fmt.Errorf("%w: response body: %w", ErrSessionClosed, err)
	}
	return n, err
}

func (b *responseBody) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	stopped := b.stop()
	reuse := b.eof && b.keep && stopped && b.ab.err() == nil
	if reuse && b.bodyDone != nil {
		select {
		case err := <-b.bodyDone:
			reuse = err == nil
		default:
			reuse = false // the request body is still going out
		}
	}
	if reuse {
		b.s.putStream(b.ds)
	} else {
		b.ds.st.Close()
	}
	return nil
}

// upgradedConn is the body of a 101 response: bytes in both directions
// between the visitor and the backend.
type upgradedConn struct{ ds *dataStream }

func (u *upgradedConn) Read(p []byte) (int, error)  { return u.ds.br.Read(p) }
func (u *upgradedConn) Write(p []byte) (int, error) { return u.ds.st.Write(p) }
func (u *upgradedConn) Close() error                { return u.ds.st.Close() }

// CloseWrite half-closes the tunnel side so the backend sees EOF.
func (u *upgradedConn) CloseWrite() error { return u.ds.st.Close() }
