package tunnel

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"
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
}

// Session is one connected client as the server sees it. It is safe for
// concurrent use. It is created by Server after a successful handshake and
// closed by Server; the registry only reads it.
type Session struct {
	id          string
	ident       Identity
	remoteAddr  string
	connectedAt time.Time
	mux         *yamux.Session
	headTimeout time.Duration

	ann      atomic.Pointer[Announcement]
	lastSeen atomic.Int64 // unix nanoseconds of the last heartbeat

	mu   sync.Mutex // guards the following fields
	idle []*dataStream

	ctrlMu sync.Mutex // serializes writes on ctrl
	ctrl   *yamux.Stream

	closeOnce sync.Once
	closeErr  error
}

// dataStream is a data stream with its buffered reader; writers come from
// a pool for the length of one exchange.
type dataStream struct {
	st *yamux.Stream
	br *bufio.Reader
}

// ID returns the session id the server assigned.
func (s *Session) ID() string { return s.id }

// Identity returns the token identity the session authenticated with.
func (s *Session) Identity() Identity { return s.ident }

// RemoteAddr returns the client's address as the server saw it.
func (s *Session) RemoteAddr() string { return s.remoteAddr }

// ConnectedAt returns when the handshake completed.
func (s *Session) ConnectedAt() time.Time { return s.connectedAt }

// Announcement returns the latest announcement. Callers must not modify it.
func (s *Session) Announcement() *Announcement { return s.ann.Load() }

// LastSeen returns the time of the last heartbeat (or the handshake).
func (s *Session) LastSeen() time.Time { return time.Unix(0, s.lastSeen.Load()) }

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

func (s *Session) getStream() (ds *dataStream, reused bool, err error) {
	s.mu.Lock()
	if n := len(s.idle); n > 0 {
		ds = s.idle[n-1]
		s.idle[n-1] = nil
		s.idle = s.idle[:n-1]
		s.mu.Unlock()
		return ds, true, nil
	}
	s.mu.Unlock()
	return s.getFreshStream()
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
		ds, reused, err = s.getStream()
	} else {
		ds, reused, err = s.getFreshStream()
	}
	if err != nil {
		return nil, err
	}
	upgrade := IsUpgrade(req.Header)
	hasBody := req.Body != nil && req.Body != http.NoBody && req.ContentLength != 0
	chunked := hasBody && req.ContentLength < 0

	uri := req.RequestURI
	if uri == "" {
		uri = req.URL.RequestURI()
	}
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

	// Abort on cancellation and on the head deadline by closing the
	// stream: the client sees EOF and cancels its backend request.
	var aborted atomic.Pointer[error] // the first cause; later ones are dropped
	abort := func(err error) {
		aborted.CompareAndSwap(nil, &err)
		ds.st.Close()
	}
	stopCtx := context.AfterFunc(req.Context(), func() { abort(context.Cause(req.Context())) })
	var headTimer *time.Timer
	if s.headTimeout > 0 {
		headTimer = time.AfterFunc(s.headTimeout, func() { abort(ErrResponseTimeout) })
	}

	var bodyDone chan error
	if hasBody && !upgrade {
		bodyDone = make(chan error, 1)
		bc := &bodyCopier{bw: bw, src: req.Body, length: req.ContentLength, flushEach: chunked}
		if chunked {
			bc.trailer = func() http.Header { return req.Trailer }
		}
		go func() {
			err := bc.copy()
			putWriter(bw)
			if err != nil {
				abort(fmt.Errorf("request body: %w", err))
			}
			bodyDone <- err
		}()
	}

	// A reused stream that the client closed while it sat in the pool
	// answers with EOF before any byte; ReadResponse would report that as
	// ErrUnexpectedEOF, so look first.
	if _, perr := ds.br.Peek(1); errors.Is(perr, io.EOF) && reused && !hasBody && aborted.Load() == nil {
		stopCtx()
		if headTimer != nil {
			headTimer.Stop()
		}
		ds.st.Close()
		return nil, errStaleStream
	}
	resp, err := http.ReadResponse(ds.br, req)
	if err == nil && headTimer != nil && !headTimer.Stop() {
		// The deadline fired as the head arrived; the stream is closing.
		resp.Body.Close()
		resp, err = nil, ErrResponseTimeout
	}
	if err == nil && aborted.Load() != nil {
		// We closed the stream before the head was read, so the head is the
		// client's reaction to a truncated request (its backend's failure
		// to read an oversized body, say), not an answer to pass on; the
		// cause below decides the visitor's answer (413 for max_body_size).
		resp.Body.Close()
		resp, err = nil, errAborted
	}
	if err != nil {
		stopCtx()
		ds.st.Close()
		if p := aborted.Load(); p != nil {
			cause := *p
			if bodyDone != nil {
				if berr := <-bodyDone; berr != nil {
					return nil, berr
				}
			}
			return nil, cause
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || s.mux.IsClosed() {
			return nil, fmt.Errorf("%w: %w", ErrSessionClosed, err)
		}
		return nil, fmt.Errorf("%w: %w", ErrBadResponse, err)
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		stopCtx() // the upgraded connection now lives as long as its users keep it
		resp.Body = &upgradedConn{ds: ds}
		return resp, nil
	}
	resp.Body = &responseBody{s: s, ds: ds, body: resp.Body, stop: stopCtx, bodyDone: bodyDone, keep: !resp.Close}
	return resp, nil
}

func (s *Session) getFreshStream() (*dataStream, bool, error) {
	st, err := s.mux.OpenStream()
	if err != nil {
		return nil, false, fmt.Errorf("%w: open stream: %w", ErrSessionClosed, err)
	}
	return &dataStream{st: st, br: bufio.NewReaderSize(st, 4096)}, false, nil
}

// responseBody returns its stream to the pool when the exchange completed
// cleanly, and closes it otherwise.
type responseBody struct {
	s        *Session
	ds       *dataStream
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
	reuse := b.eof && b.keep && stopped
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
