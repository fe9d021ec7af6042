package listen

import (
	"errors"
	"net"
	"sync/atomic"
	"time"
)

// On a TLS listener with SNI passthrough, every connection is a HelloConn
// that records what the visitor sent until crypto/tls has parsed the
// ClientHello and called GetConfigForClient. There the gateway looks the
// SNI up: it either takes the connection (Take), to relay it as it is,
// the recorded bytes first, or lets the handshake go on (Stop). The
// hello itself is bounded by the handshake deadline http.Server sets
// (read_header_timeout) and by maxHelloRecord.

// maxHelloRecord bounds what a HelloConn keeps: a ClientHello with every
// extension fits in a few KiB; one above this is never passed through.
const maxHelloRecord = 64 << 10

// errConnTaken is what crypto/tls gets from a HelloConn once taken.
var errConnTaken = errors.New("listen: connection taken for passthrough")

// helloListener wraps each accepted connection in a HelloConn.
type helloListener struct{ net.Listener }

func (l helloListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &HelloConn{Conn: c}, nil
}

// HelloConn records the bytes read until Stop, and, once taken, keeps
// crypto/tls off the connection: its reads and writes fail and its
// deadlines are ignored, while Close still closes it. Conn is the
// connection underneath: whoever took the HelloConn reads, writes and
// closes it there. The record is only touched by the goroutine that runs
// the handshake (its reads, then GetConfigForClient, where Stop and Take
// are called); the state is atomic because a close or a write may come
// from elsewhere. After the handshake a read costs one atomic load.
type HelloConn struct {
	net.Conn
	state atomic.Int32 // helloRecording, helloPlain or helloTaken
	rec   []byte
}

const (
	helloRecording int32 = iota
	helloPlain
	helloTaken
)

// Read reads from Conn, recording the bytes until Stop or Take; once
// taken it fails.
func (c *HelloConn) Read(p []byte) (int, error) {
	switch c.state.Load() {
	case helloPlain:
		return c.Conn.Read(p)
	case helloTaken:
		return 0, errConnTaken
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		if len(c.rec)+n > maxHelloRecord {
			c.Stop()
		} else {
			c.rec = append(c.rec, p[:n]...)
		}
	}
	return n, err
}

// Write writes to Conn; once taken it fails.
func (c *HelloConn) Write(p []byte) (int, error) {
	if c.state.Load() == helloTaken {
		return 0, errConnTaken
	}
	return c.Conn.Write(p)
}

// SetDeadline sets Conn's deadlines; once taken it does nothing.
func (c *HelloConn) SetDeadline(t time.Time) error {
	if c.state.Load() == helloTaken {
		return nil
	}
	return c.Conn.SetDeadline(t)
}

// SetReadDeadline sets Conn's read deadline; once taken it does nothing.
func (c *HelloConn) SetReadDeadline(t time.Time) error {
	if c.state.Load() == helloTaken {
		return nil
	}
	return c.Conn.SetReadDeadline(t)
}

// SetWriteDeadline sets Conn's write deadline; once taken it does
// nothing.
func (c *HelloConn) SetWriteDeadline(t time.Time) error {
	if c.state.Load() == helloTaken {
		return nil
	}
	return c.Conn.SetWriteDeadline(t)
}

// Stop ends the recording: the handshake is terminated here. It is called
// on the handshake's goroutine.
func (c *HelloConn) Stop() {
	c.state.CompareAndSwap(helloRecording, helloPlain)
	c.rec = nil
}

// Take hands the connection over and returns what was read so far, or
// false when the record overflowed (or was stopped). It is called on the
// handshake's goroutine; from then on the taker owns Conn.
func (c *HelloConn) Take() ([]byte, bool) {
	if !c.state.CompareAndSwap(helloRecording, helloTaken) {
		return nil, false
	}
	rec := c.rec
	c.rec = nil
	return rec, true
}
