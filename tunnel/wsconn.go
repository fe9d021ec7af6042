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
// frame carries at most one 32 KiB copy buffer, so a 64 KiB write buffer
// sends each frame (header, body and WebSocket framing) in one write, and a
// 64 KiB read buffer takes several frames per read syscall.
const wsBufferSize = 64 << 10

// wsConn presents a WebSocket connection as the byte stream yamux runs on.
// Every yamux frame becomes one binary message: yamux's send loop writes a
// data frame's 12-byte header and its body in two calls, and wsConn holds
// the header until the body arrives so both leave in one message (one
// syscall instead of two per proxied chunk). yamux's single send goroutine
// is the only writer, which the held header relies on.
type wsConn struct {
	ws *websocket.Conn

	rmu sync.Mutex // guards r
	r   io.Reader  // the message being read

	wmu  sync.Mutex // guards held and hbuf
	held bool
	hbuf [yamuxHeaderSize]byte

	closeOnce sync.Once

	// rx and tx, when set, count the bytes read and written (yamux frames,
	// WebSocket framing excluded) into totals shared by every session.
	rx, tx *atomic.Int64
}

func newWSConn(ws *websocket.Conn) *wsConn {
	ws.SetReadLimit(-1) // yamux bounds its own frames by the stream window
	return &wsConn{ws: ws}
}

// yamux frame layout: version, type, flags(2), stream id(4),
// length(4). A data frame's body follows its header.
const (
	yamuxHeaderSize = 12
	yamuxTypeData   = 0
)

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

func (c *wsConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if !c.held {
		if len(p) == yamuxHeaderSize && p[1] == yamuxTypeData && binary.BigEndian.Uint32(p[8:12]) > 0 {
			copy(c.hbuf[:], p)
			c.held = true
			return len(p), nil
		}
		if err := c.ws.WriteMessage(websocket.BinaryMessage, p); err != nil {
			return 0, err
		}
		c.count(len(p))
		return len(p), nil
	}
	// p is the body of the held header.
	c.held = false
	w, err := c.ws.NextWriter(websocket.BinaryMessage)
	if err != nil {
		return 0, err
	}
	if _, err := w.Write(c.hbuf[:]); err != nil {
		return 0, err
	}
	if _, err := w.Write(p); err != nil {
		return 0, err
	}
	if err := w.Close(); err != nil {
		return 0, err
	}
	c.count(yamuxHeaderSize + len(p))
	return len(p), nil
}

// count adds n written bytes to tx, if set.
func (c *wsConn) count(n int) {
	if c.tx != nil {
		c.tx.Add(int64(n))
	}
}

// Close sends a close message (best effort, bounded) and closes the
// connection. It is safe to call more than once.
func (c *wsConn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		msg := websocket.FormatCloseMessage(websocket.CloseNormalClosure, "")
		c.ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
		err = c.ws.Close()
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

// wsWriteBuffers shares WebSocket write buffers between sessions: a
// session holds one only while it writes a message, so a server with many
// idle clients does not keep 64 KiB per session for writing.
var wsWriteBuffers = &sync.Pool{}

// upgrader accepts tunnel upgrades. Origin checks protect browsers; the
// tunnel's peer is aperio-client, authenticated by its token instead.
var upgrader = websocket.Upgrader{
	ReadBufferSize:  wsBufferSize,
	WriteBufferSize: wsBufferSize,
	WriteBufferPool: wsWriteBuffers,
	Subprotocols:    []string{Subprotocol},
	CheckOrigin:     func(*http.Request) bool { return true },
}
