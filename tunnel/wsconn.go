package tunnel

import (
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// wsBufferSize sizes the WebSocket read and write buffers. A yamux data
// frame carries at most one 32 KiB copy buffer and a batch of small frames
// at most maxPending, so a 64 KiB write buffer sends either (with its
// WebSocket framing) in one write, and a 64 KiB read buffer takes several
// frames per read syscall.
const wsBufferSize = 64 << 10

// newWSConn returns the byte stream yamux runs on over ws, the tunnel's
// default transport: every unit muxConn sends is one binary message.
func newWSConn(ws *websocket.Conn) *muxConn {
	ws.SetReadLimit(-1) // yamux bounds its own frames by the stream window
	return newMuxConn(&wsCarrier{ws: ws})
}

// wsCarrier carries a session's frames in binary WebSocket messages.
type wsCarrier struct {
	ws *websocket.Conn

	rmu sync.Mutex // guards r
	r   io.Reader  // the message being read
}

// errNotBinary is a protocol error: the tunnel only carries binary messages.
var errNotBinary = errors.New("tunnel: non-binary websocket message")

func (c *wsCarrier) Read(p []byte) (int, error) {
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

// send writes head and body as one binary message. A body alone (every
// batch of small frames) goes through WriteMessage, which on the server's
// end writes without allocating a message writer.
func (c *wsCarrier) send(head, body []byte) error {
	if len(head) == 0 {
		return c.ws.WriteMessage(websocket.BinaryMessage, body)
	}
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

// close sends a close message (best effort, within a second) and closes
// the connection.
func (c *wsCarrier) close() error {
	msg := websocket.FormatCloseMessage(websocket.CloseNormalClosure, "")
	c.ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
	return c.ws.Close()
}

func (c *wsCarrier) LocalAddr() net.Addr                { return c.ws.LocalAddr() }
func (c *wsCarrier) RemoteAddr() net.Addr               { return c.ws.RemoteAddr() }
func (c *wsCarrier) SetReadDeadline(t time.Time) error  { return c.ws.SetReadDeadline(t) }
func (c *wsCarrier) SetWriteDeadline(t time.Time) error { return c.ws.SetWriteDeadline(t) }

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
