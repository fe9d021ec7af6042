package tunnel

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aperio-dev/aperio/internal/bufpool"
	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/internal/recovery"
	"github.com/hashicorp/yamux"
)

// Raw streams carry bytes, not HTTP: a visitor's TCP connection to a
// public port, the datagrams of one UDP flow, a TLS connection passed
// through by its SNI. The server opens one per visitor connection
// (Session.OpenRaw); its first byte is rawMagic, which no HTTP method
// starts with, then a frame holding the RawHeader (a 4-byte big-endian
// length and JSON, at most maxRawFrame bytes). The client answers with one
// frame of the same shape, a rawReply; after an accepting reply both
// directions are the connection's bytes, and each side's close is a
// half-close (yamux's Close), so a shutdown(SHUT_WR) on one end reaches
// the other as EOF while the other direction goes on.

// Kinds of raw stream (RawHeader.Kind).
const (
	RawTCP = "tcp" // a TCP connection to an exposed port
	RawUDP = "udp" // one UDP flow of an exposed port, framed datagrams
	RawTLS = "tls" // a TLS connection passed through by its SNI
)

// rawMagic is the first byte of a raw stream.
const rawMagic = 0x00

// maxRawFrame bounds the header and the reply of a raw stream.
const maxRawFrame = 4 << 10

// RawOpenTimeout bounds the wait for the client's reply to a raw stream
// when the caller's context has no earlier deadline: the client dials its
// target before it replies, with its own connect timeout.
const RawOpenTimeout = 15 * time.Second

// RawHeader says what a raw stream is for. The server sets every field;
// the client checks Kind and Name against its configuration and trusts
// nothing else in it beyond passing the addresses on (PROXY protocol).
type RawHeader struct {
	// Kind is RawTCP, RawUDP or RawTLS.
	Kind string `json:"kind"`
	// Name is what the client configured: the name of its expose entry
	// (RawTCP, RawUDP), or the ID of the announced service (RawTLS).
	Name string `json:"name"`
	// Port is the public port the visitor reached; 0 for RawTLS.
	Port int `json:"port,omitempty"`
	// Hostname is the SNI of a passed-through TLS connection.
	Hostname string `json:"hostname,omitempty"`
	// Visitor is the visitor's address (ip:port) as the server resolved
	// it; Local the server's address the visitor connected to.
	Visitor string `json:"visitor,omitempty"`
	Local   string `json:"local,omitempty"`
}

// validate checks a header's syntax (the client's side of a hostile
// server, and the server's own mistakes).
func (h *RawHeader) validate() error {
	switch h.Kind {
	case RawTCP, RawUDP, RawTLS:
	default:
		return fmt.Errorf("tunnel: raw stream of unknown kind %q", h.Kind)
	}
	if h.Name == "" || len(h.Name) > 255 || !printable(h.Name) {
		return errors.New("tunnel: raw stream without a valid name")
	}
	if h.Port < 0 || h.Port > 65535 {
		return fmt.Errorf("tunnel: raw stream port %d out of range", h.Port)
	}
	for _, a := range []string{h.Visitor, h.Local} {
		if a == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a); err != nil || len(a) > 64 {
			return fmt.Errorf("tunnel: raw stream address %q: not host:port", a)
		}
	}
	if len(h.Hostname) > 253 || !printable(h.Hostname) {
		return errors.New("tunnel: raw stream hostname invalid")
	}
	return nil
}

// rawReply is the client's answer to a raw stream's header.
type rawReply struct {
	OK bool `json:"ok"`
	// Reason says why the client refused (no such entry, the target
	// refused the connection); shown in the server's log, never to the
	// visitor.
	Reason string `json:"reason,omitempty"`
}

// RawRefusedError is a client's refusal of a raw stream.
type RawRefusedError struct{ Reason string }

func (e *RawRefusedError) Error() string { return "tunnel: client refused the raw stream: " + e.Reason }

// ErrRawUnsupported is the refusal of a client with no RawForwarder.
var ErrRawUnsupported = errors.New("tunnel: the client serves no raw streams")

// RawForwarder connects the raw streams a client receives to their
// targets. ForwardRaw is called concurrently, once per stream, and returns
// a connection to the target (a TCP connection, a UDP flow's framing
// adapter); ctx ends when the client shuts down. An error refuses the
// stream; its text goes to the server's log. A returned connection that
// implements CloseWrite() error is half-closed when the visitor's side
// ends; otherwise it is closed once both directions have ended.
type RawForwarder interface {
	ForwardRaw(ctx context.Context, h RawHeader) (io.ReadWriteCloser, error)
}

func writeRawFrame(w io.Writer, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(body) > maxRawFrame {
		return fmt.Errorf("tunnel: raw frame of %d bytes exceeds %d", len(body), maxRawFrame)
	}
	buf := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(buf, uint32(len(body)))
	copy(buf[4:], body)
	_, err = w.Write(buf)
	return err
}

func readRawFrame(r io.Reader, v any) error {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return fmt.Errorf("tunnel: read raw frame: %w", err)
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 || n > maxRawFrame {
		return fmt.Errorf("tunnel: raw frame of %d bytes (limit %d)", n, maxRawFrame)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return fmt.Errorf("tunnel: read raw frame: %w", err)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("tunnel: decode raw frame: %w", err)
	}
	return nil
}

// RawConn is the server's end of a raw stream: the bytes of the client's
// target connection. Close ends both directions at once; CloseWrite only
// the direction towards the client, which sees EOF. It is a net.Conn.
type RawConn struct {
	st        *yamux.Stream
	closeOnce sync.Once
}

func (c *RawConn) Read(p []byte) (int, error)  { return c.st.Read(p) }
func (c *RawConn) Write(p []byte) (int, error) { return c.st.Write(p) }

// CloseWrite half-closes the stream: the client's target sees EOF.
func (c *RawConn) CloseWrite() error { return c.st.Close() }

// Close abandons the stream in both directions.
func (c *RawConn) Close() error {
	c.closeOnce.Do(func() { resetStream(c.st) })
	return nil
}

func (c *RawConn) LocalAddr() net.Addr                { return c.st.LocalAddr() }
func (c *RawConn) RemoteAddr() net.Addr               { return c.st.RemoteAddr() }
func (c *RawConn) SetDeadline(t time.Time) error      { return c.st.SetDeadline(t) }
func (c *RawConn) SetReadDeadline(t time.Time) error  { return c.st.SetReadDeadline(t) }
func (c *RawConn) SetWriteDeadline(t time.Time) error { return c.st.SetWriteDeadline(t) }

var _ net.Conn = (*RawConn)(nil)

// OpenRaw opens a raw stream to the client for h and waits for the
// client's reply: it has connected to its target when OpenRaw returns a
// conn. The wait ends with ctx, or after RawOpenTimeout. A refusal is a
// *RawRefusedError. Raw streams count towards tunnel_max_streams like
// pooled ones.
func (s *Session) OpenRaw(ctx context.Context, h RawHeader) (*RawConn, error) {
	if err := h.validate(); err != nil {
		return nil, err
	}
	ds, _, err := s.getFreshStream(ctx, false)
	if err != nil {
		return nil, err
	}
	st := ds.st
	ctx, cancel := context.WithTimeout(ctx, RawOpenTimeout)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { resetStream(st) })
	fail := func(err error) (*RawConn, error) {
		stop()
		resetStream(st)
		if cerr := context.Cause(ctx); cerr != nil {
			return nil, fmt.Errorf("tunnel: open raw stream: %w", cerr)
		}
		return nil, err
	}
	bw := getWriter(st)
	err = bw.WriteByte(rawMagic)
	if err == nil {
		err = writeRawFrame(bw, &h)
	}
	if err == nil {
		err = bw.Flush()
	}
	putWriter(bw)
	if err != nil {
		return fail(fmt.Errorf("%w: write raw header: %w", ErrSessionClosed, err))
	}
	var reply rawReply
	if err := readRawFrame(st, &reply); err != nil {
		return fail(err)
	}
	if !stop() {
		// The deadline fired as the reply arrived: the stream is reset.
		return fail(context.DeadlineExceeded)
	}
	if !reply.OK {
		resetStream(st)
		if reply.Reason == "" {
			reply.Reason = "no reason given"
		}
		return nil, &RawRefusedError{Reason: printableOr(reply.Reason, 200)}
	}
	return &RawConn{st: st}, nil
}

// printableOr returns s cut to n bytes, with every byte that is not
// printable ASCII replaced, for a peer's words that go into logs.
func printableOr(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = '?'
		}
	}
	return string(b)
}

// rawHeaderTimeout bounds the client's wait for a raw stream's header
// after its first byte: the server writes both at once.
const rawHeaderTimeout = 10 * time.Second

// serveRaw answers a raw stream whose first byte (rawMagic, still in br)
// the stream loop has seen. It refuses or relays, and never lets the
// stream carry anything else.
func (c *Client) serveRaw(ctx context.Context, st *yamux.Stream, br *bufio.Reader) {
	c.active.Add(1)
	defer c.active.Add(-1)
	br.Discard(1)
	st.SetReadDeadline(time.Now().Add(rawHeaderTimeout))
	var h RawHeader
	if err := readRawFrame(br, &h); err != nil {
		c.log.Warn("bad raw stream header; stream closed", logkey.Err, err)
		resetStream(st)
		return
	}
	st.SetReadDeadline(time.Time{})
	refuse := func(err error) {
		st.SetWriteDeadline(time.Now().Add(rawHeaderTimeout))
		writeRawFrame(st, &rawReply{Reason: printableOr(err.Error(), 200)})
		st.Close()
	}
	if err := h.validate(); err != nil {
		c.log.Warn("bad raw stream header; refused", logkey.Err, err)
		refuse(err)
		return
	}
	if c.cfg.RawForwarder == nil {
		refuse(ErrRawUnsupported)
		return
	}
	backend, err := c.cfg.RawForwarder.ForwardRaw(ctx, h)
	if err != nil {
		c.backendWarn.warn(h.Name, err)
		refuse(err)
		return
	}
	defer backend.Close()
	st.SetWriteDeadline(time.Now().Add(rawHeaderTimeout))
	if err := writeRawFrame(st, &rawReply{OK: true}); err != nil {
		resetStream(st)
		return
	}
	st.SetWriteDeadline(time.Time{})
	Relay(&streamEnd{st: st, r: br}, backend, RelayOptions{Log: c.log})
}

// streamEnd is one end of a relay on a yamux stream whose first bytes
// were read into a bufio.Reader.
type streamEnd struct {
	st *yamux.Stream
	r  io.Reader
}

func (e *streamEnd) Read(p []byte) (int, error)  { return e.r.Read(p) }
func (e *streamEnd) Write(p []byte) (int, error) { return e.st.Write(p) }
func (e *streamEnd) CloseWrite() error           { return e.st.Close() }
func (e *streamEnd) Close() error                { resetStream(e.st); return nil }
func (e *streamEnd) SetWriteDeadline(t time.Time) error {
	return e.st.SetWriteDeadline(t)
}

// RelayOptions tune Relay.
type RelayOptions struct {
	// Idle closes both ends when no byte has moved either way for this
	// long; zero means no idle bound.
	Idle time.Duration
	// Log receives a recovered panic; nil discards it.
	Log *slog.Logger
	// Charge, when set, is told the bytes of each read before they are
	// written on, a to b or b to a (the other 0), from both directions'
	// goroutines at once. It returns false to refuse them (a byte quota
	// reached by earlier ones): they are dropped, not counted, and both
	// ends are closed. Called per read (up to bufpool's 32 KiB), never
	// per byte.
	Charge func(aToB, bToA int64) bool
}

// errRelayRefused ends a relay whose Charge refused a read.
var errRelayRefused = errors.New("tunnel: relay refused by its charge")

// chargeReader asks charge about each read of r, as one direction of a
// relay (toB: a to b).
type chargeReader struct {
	r      io.Reader
	charge func(aToB, bToA int64) bool
	toB    bool
}

func (c *chargeReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		ab, ba := int64(n), int64(0)
		if !c.toB {
			ab, ba = 0, int64(n)
		}
		if !c.charge(ab, ba) {
			return 0, errRelayRefused
		}
	}
	return n, err
}

// Relay copies a to b and b to a until both directions have ended, and
// returns the bytes copied each way. A clean end of one direction (EOF)
// half-closes the other end's writing side when it can (CloseWrite), so
// half-closed protocols keep working; an error in either direction, an
// end that cannot be half-closed, opts.Idle without traffic, or a read
// opts.Charge refuses closes both ends, which ends the other direction too. A write blocked on a peer
// that stopped reading is released by that close only if the end has
// SetWriteDeadline, which Relay then sets in the past. Both ends are
// closed when Relay returns. A panic in a copy is recovered (logged and
// counted) and closes both ends.
func Relay(a, b io.ReadWriteCloser, opts RelayOptions) (aToB, bToA int64) {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var once sync.Once
	closeBoth := func() {
		once.Do(func() {
			for _, e := range []io.ReadWriteCloser{a, b} {
				if d, ok := e.(interface{ SetWriteDeadline(time.Time) error }); ok {
					d.SetWriteDeadline(time.Unix(1, 0))
				}
				e.Close()
			}
		})
	}
	var last atomic.Int64 // unix nanoseconds of the last byte moved
	last.Store(time.Now().UnixNano())
	src := func(r io.Reader, toB bool) io.Reader {
		if opts.Charge != nil {
			r = &chargeReader{r: r, charge: opts.Charge, toB: toB}
		}
		if opts.Idle <= 0 {
			return r
		}
		return &touchReader{r: r, last: &last}
	}
	half := func(dst io.ReadWriteCloser, from io.Reader, n *int64) {
		defer func() {
			if r := recover(); r != nil {
				closeBoth()
				panic(r)
			}
		}()
		var err error
		*n, err = bufpool.Copy(dst, from)
		cw, ok := dst.(interface{ CloseWrite() error })
		if err != nil || !ok || cw.CloseWrite() != nil {
			closeBoth()
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer recovery.Recover(log, "raw relay")
		half(b, src(a, true), &aToB)
	}()
	if opts.Idle > 0 {
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			defer recovery.Recover(log, "raw relay idle")
			tick := opts.Idle / 4
			if tick < 10*time.Millisecond {
				tick = 10 * time.Millisecond
			}
			t := time.NewTicker(tick)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					if time.Since(time.Unix(0, last.Load())) >= opts.Idle {
						closeBoth()
						return
					}
				}
			}
		}()
	}
	func() {
		defer recovery.Recover(log, "raw relay")
		half(a, src(b, false), &bToA)
	}()
	<-done
	closeBoth()
	return aToB, bToA
}

// touchReader records the time of each read that moved bytes.
type touchReader struct {
	r    io.Reader
	last *atomic.Int64
}

func (t *touchReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if n > 0 {
		t.last.Store(time.Now().UnixNano())
	}
	return n, err
}
