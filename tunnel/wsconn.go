package tunnel

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// wsBufferSize sizes the WebSocket read and write buffers. A yamux data
// frame carries at most one 32 KiB copy buffer and a batch of small frames
// at most maxPending, so a 64 KiB write buffer sends either (with its
// WebSocket framing) in one write, and a 64 KiB read buffer takes several
// frames per read syscall.
const wsBufferSize = 64 << 10

// wsConn presents a WebSocket connection as the byte stream yamux runs on.
//
// yamux's send loop, the only writer, writes every frame in its own call
// (a data frame's header, then its body). Small frames (window updates,
// stream opens and closes, request heads, small bodies) are coalesced: they
// gather in a pending buffer that one flusher goroutine sends as a single
// binary message, so while a message is on the wire the frames of every
// other stream gather behind it, and under load one syscall carries the
// frames of many requests. A large body (directMin or more) is written by
// the send loop itself, after what is pending and in the same message, as
// a bulk transfer gains nothing from a hand-off. A data frame's header is
// held until its body arrives, so a frame never leaves in two messages.
// The reader treats the messages as one byte stream, so frame and message
// boundaries need not match. Pending bytes are bounded by maxPending: past
// it Write waits, which is yamux's backpressure (its
// ConnectionWriteTimeout still applies to the streams waiting on it).
type wsConn struct {
	ws *websocket.Conn

	rmu sync.Mutex // guards r
	r   io.Reader  // the message being read

	wmu     sync.Mutex // guards the fields below it
	idle    sync.Cond  // on wmu: sending ended, or the conn failed or closed
	pending []byte     // written, not yet sent
	spare   []byte     // the buffer of the last send, given back for reuse
	held    bool       // pending ends with a data frame's header, its body to come
	sending bool       // a message is being written to ws (by the flusher or Write)
	werr    error      // the first failed send; every later Write returns it
	closed  bool
	kick    chan struct{} // cap 1: pending has bytes to send; closed by Close
	flushed chan struct{} // closed when the flusher has exited

	closeOnce sync.Once

	// rx and tx, when set, count the bytes read and written (yamux frames,
	// WebSocket framing excluded) into totals shared by every session.
	rx, tx *atomic.Int64
}

// maxPending bounds the small frames a wsConn holds for sending; a Write
// that would pass it waits until they are sent.
const maxPending = 64 << 10

// directMin is the size from which Write sends a body itself rather than
// through the flusher.
const directMin = 8 << 10

// maxSpare is the largest buffer a connection keeps for its next batch, so
// that an idle session holds little.
const maxSpare = 16 << 10

func newWSConn(ws *websocket.Conn) *wsConn {
	ws.SetReadLimit(-1) // yamux bounds its own frames by the stream window
	c := &wsConn{ws: ws, kick: make(chan struct{}, 1), flushed: make(chan struct{})}
	c.idle.L = &c.wmu
	go c.flushLoop()
	return c
}

// errNotBinary is a protocol error: the tunnel only carries binary messages.
var errNotBinary = errors.New("tunnel: non-binary websocket message")

func (c *wsConn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	for {
		if c.r == nil {
			typ, r, err := c.ws.NextReader()
			if err != nil {
				return 0, wsReadError(err)
			}
			if typ != websocket.BinaryMessage {
				return 0, errNotBinary
			}
			c.r = r
		}
		n, err := c.r.Read(p)
		if c.rx != nil && n > 0 {
			c.rx.Add(int64(n))
		}
		if err == io.EOF {
			c.r = nil
			if n > 0 {
				return n, nil
			}
			continue
		}
		if err != nil {
			return n, wsReadError(err)
		}
		return n, nil
	}
}

// wsReadError turns a normal WebSocket close into io.EOF.
func wsReadError(err error) error {
	if websocket.IsCloseError(err, websocket.CloseNormalClosure, websocket.CloseGoingAway) {
		return io.EOF
	}
	return err
}

// Write sends p: a large body at once, with what is pending in front of
// it; anything else by appending it to the pending bytes and waking the
// flusher. It returns the connection's error, if it has one.
func (c *wsConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	direct := len(p) >= directMin
	// A body joins its held header even past maxPending (by less than
	// directMin), so that the frame stays in one message.
	for c.werr == nil && !c.closed && (c.sending || !direct && !c.held && len(c.pending) > 0 && len(c.pending)+len(p) > maxPending) {
		c.idle.Wait()
	}
	if c.werr != nil {
		return 0, c.werr
	}
	if c.closed {
		return 0, net.ErrClosed
	}
	c.count(len(p))
	if direct {
		head := c.pending
		c.pending, c.held = nil, false
		c.sending = true
		c.wmu.Unlock()
		err := c.send(head, p)
		c.wmu.Lock()
		c.sent(head, err)
		if err != nil {
			return 0, err
		}
		return len(p), nil
	}
	if c.pending == nil {
		c.pending, c.spare = c.spare[:0], nil
	}
	c.pending = append(c.pending, p...)
	c.held = isDataHeader(p)
	if !c.held { // a header waits for its body: the next Write
		c.wake()
	}
	return len(p), nil
}

// wake makes the flusher run; c.wmu is held.
func (c *wsConn) wake() {
	select {
	case c.kick <- struct{}{}:
	default: // the flusher is already due to run
	}
}

// yamux frame layout: version, type, flags(2), stream id(4), length(4). A
// data frame's body follows its header in a separate write.
const (
	yamuxHeaderSize = 12
	yamuxTypeData   = 0
)

// isDataHeader reports whether p is the header of a yamux data frame with
// a body.
func isDataHeader(p []byte) bool {
	return len(p) == yamuxHeaderSize && p[1] == yamuxTypeData && binary.BigEndian.Uint32(p[8:12]) > 0
}

// send writes head and body as one binary message; c.sending is set, so
// it is the only writer.
func (c *wsConn) send(head, body []byte) error {
	w, err := c.ws.NextWriter(websocket.BinaryMessage)
	if err != nil {
		return err
	}
	if _, err := w.Write(head); err != nil {
		return err
	}
	if _, err := w.Write(body); err != nil {
		return err
	}
	return w.Close()
}

// sent ends a send of buf: it keeps buf for reuse if small, records err
// and wakes the writers waiting; c.wmu is held.
func (c *wsConn) sent(buf []byte, err error) {
	c.sending = false
	if c.spare == nil && cap(buf) <= maxSpare {
		c.spare = buf[:0]
	}
	if err != nil && c.werr == nil {
		c.werr = err
	}
	c.idle.Broadcast()
}

// flushLoop sends the pending bytes, one message per wake-up, until Close
// closes kick or a send fails.
func (c *wsConn) flushLoop() {
	defer close(c.flushed)
	for range c.kick {
		c.wmu.Lock()
		for c.sending && c.werr == nil {
			c.idle.Wait()
		}
		buf := c.pending
		if len(buf) == 0 || c.held || c.werr != nil {
			c.wmu.Unlock()
			if c.werr != nil {
				return
			}
			continue
		}
		c.pending = nil
		c.sending = true
		c.wmu.Unlock()
		err := c.send(nil, buf)
		c.wmu.Lock()
		c.sent(buf, err)
		c.wmu.Unlock()
		if err != nil {
			return
		}
	}
}

// count adds n written bytes to tx, if set.
func (c *wsConn) count(n int) {
	if c.tx != nil {
		c.tx.Add(int64(n))
	}
}

// Close sends what is pending and a close message (best effort, within
// about a second each) and closes the connection. It is safe to call more
// than once; Writes after it fail.
func (c *wsConn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		c.wmu.Lock()
		c.closed = true
		close(c.kick)
		c.idle.Broadcast()
		c.wmu.Unlock()
		drained := time.NewTimer(time.Second)
		select {
		case <-c.flushed: // yamux's last frames (a go-away) are on the wire
		case <-drained.C:
		}
		drained.Stop()
		msg := websocket.FormatCloseMessage(websocket.CloseNormalClosure, "")
		c.ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
		err = c.ws.Close()
		<-c.flushed // a send blocked on a peer that stopped reading fails now
	})
	return err
}

func (c *wsConn) LocalAddr() net.Addr  { return c.ws.LocalAddr() }
func (c *wsConn) RemoteAddr() net.Addr { return c.ws.RemoteAddr() }

func (c *wsConn) SetDeadline(t time.Time) error {
	return errors.Join(c.ws.SetReadDeadline(t), c.ws.SetWriteDeadline(t))
}
func (c *wsConn) SetReadDeadline(t time.Time) error  { return c.ws.SetReadDeadline(t) }
func (c *wsConn) SetWriteDeadline(t time.Time) error { return c.ws.SetWriteDeadline(t) }

// serverReadBufferSize sizes a server session's WebSocket read buffer,
// which it holds for as long as the client is connected: 4 KiB rather than
// wsBufferSize keeps 60 KiB per connected client off the server. It costs
// a bulk transfer little: reads of a frame's body bigger than the buffer
// go straight from the socket into the reader's slice, so only frame
// headers and small frames pass through it.
const serverReadBufferSize = 4 << 10

// wsWriteBuffers shares WebSocket write buffers between sessions: a
// session holds one only while it writes a message, so a server with many
// idle clients does not keep 64 KiB per session for writing.
var wsWriteBuffers = &sync.Pool{}

// upgrader accepts tunnel upgrades. Origin checks protect browsers; the
// tunnel's peer is aperio-client, authenticated by its token instead.
var upgrader = websocket.Upgrader{
	ReadBufferSize:  serverReadBufferSize,
	WriteBufferSize: wsBufferSize,
	WriteBufferPool: wsWriteBuffers,
	Subprotocols:    []string{Subprotocol},
	CheckOrigin:     func(*http.Request) bool { return true },
}
