package tunnel

import (
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// carrier is the connection a tunnel session's frames travel on: a
// WebSocket connection (wsCarrier) or the upgraded HTTP/1.1 connection
// itself (rawCarrier). It reads as one byte stream and sends in units.
type carrier interface {
	// Read reads the byte stream of yamux frames.
	Read(p []byte) (int, error)
	// send writes head and then body as one unit: one WebSocket message,
	// or one vectored write. Only one send runs at a time.
	send(head, body []byte) error
	// close says goodbye if the carrier has a way to (best effort, within
	// about a second) and closes the connection.
	close() error
	LocalAddr() net.Addr
	RemoteAddr() net.Addr
	SetReadDeadline(t time.Time) error
	SetWriteDeadline(t time.Time) error
}

// muxConn presents a carrier as the byte stream yamux runs on.
//
// yamux's send loop, the only writer, writes every frame in its own call
// (a data frame's header, then its body). Small frames (window updates,
// stream opens and closes, request heads, small bodies) are coalesced: they
// gather in a pending buffer that a flusher goroutine sends as a single
// unit, so while one send is on the wire the frames of every other stream
// gather behind it, and under load one syscall carries the frames of many
// requests. The flusher runs only while there is something to send: the
// first small frame written to an idle connection starts it, and it exits
// once nothing is pending, so an idle session (a connected client between
// heartbeats) holds no flusher goroutine nor the stack its sends grew. A large body (directMin or more) is written by the send loop
// itself, after what is pending and in the same unit, as a bulk transfer
// gains nothing from a hand-off. A data frame's header is held until its
// body arrives, so a frame never leaves in two WebSocket messages. The
// reader treats the units as one byte stream, so frame and message
// boundaries need not match. Pending bytes are bounded by maxPending: past
// it Write waits, which is yamux's backpressure (its
// ConnectionWriteTimeout still applies to the streams waiting on it).
type muxConn struct {
	car carrier

	wmu     sync.Mutex // guards the fields below it
	idle    sync.Cond  // on wmu: sending ended, or the conn failed or closed
	pending []byte     // written, not yet sent
	spare   []byte     // the buffer of the last send, given back for reuse
	held    bool       // pending ends with a data frame's header, its body to come
	sending bool       // a unit is being sent (by the flusher or Write)
	werr    error      // the first failed send; every later Write returns it
	closed  bool
	// flushing is set while a flusher goroutine runs (at most one).
	flushing bool
	// flushFn is c.flush, bound once: "go c.flush()" would allocate the
	// bound method for every goroutine it starts, one per small frame
	// sent to an idle connection (each request, at low concurrency).
	flushFn func()

	closeOnce sync.Once

	// rx and tx, when set, count the bytes read and written (yamux frames,
	// the carrier's framing excluded) into totals shared by every session.
	rx, tx *atomic.Int64
}

// maxPending bounds the small frames a muxConn holds for sending; a Write
// that would pass it waits until they are sent.
const maxPending = 64 << 10

// directMin is the size from which Write sends a body itself rather than
// through the flusher.
const directMin = 8 << 10

// maxSpare is the largest buffer a connection keeps for its next batch, so
// that an idle session holds little.
const maxSpare = 16 << 10

func newMuxConn(car carrier) *muxConn {
	c := &muxConn{car: car}
	c.idle.L = &c.wmu
	c.flushFn = c.flush
	return c
}

func (c *muxConn) Read(p []byte) (int, error) {
	n, err := c.car.Read(p)
	if c.rx != nil && n > 0 {
		c.rx.Add(int64(n))
	}
	return n, err
}

// Write sends p: a large body at once, with what is pending in front of
// it; anything else by appending it to the pending bytes and waking the
// flusher. It returns the connection's error, if it has one.
func (c *muxConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	direct := len(p) >= directMin
	// A body joins its held header even past maxPending (by less than
	// directMin), so that the frame stays in one unit.
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
		err := c.car.send(head, p)
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
	if !c.held && !c.flushing { // a header waits for its body: the next Write
		c.flushing = true
		go c.flushFn()
	}
	return len(p), nil
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

// sent ends a send of buf: it keeps buf for reuse if small, records err
// and wakes the writers waiting; c.wmu is held.
func (c *muxConn) sent(buf []byte, err error) {
	c.sending = false
	if c.spare == nil && cap(buf) <= maxSpare {
		c.spare = buf[:0]
	}
	if err != nil && c.werr == nil {
		c.werr = err
	}
	c.idle.Broadcast()
}

// flush is the flusher: it sends the pending bytes, one unit at a time
// (what gathered during a send goes in the next), and exits when nothing
// is pending, a data frame's header waits for its body (the Write that
// brings it starts a flusher again), or a send failed. Write starts it
// with c.flushing set; it clears it on exit, under c.wmu, so a Write that
// appends after the flusher's last look starts another.
func (c *muxConn) flush() {
	c.wmu.Lock()
	defer func() {
		c.flushing = false
		c.idle.Broadcast() // Close may be waiting for the flusher
		c.wmu.Unlock()
	}()
	for {
		for c.sending && c.werr == nil {
			c.idle.Wait()
		}
		buf := c.pending
		if len(buf) == 0 || c.held || c.werr != nil {
			return
		}
		c.pending = nil
		c.sending = true
		c.wmu.Unlock()
		err := c.car.send(nil, buf)
		c.wmu.Lock()
		c.sent(buf, err)
		if err != nil {
			return
		}
	}
}

// count adds n written bytes to tx, if set.
func (c *muxConn) count(n int) {
	if c.tx != nil {
		c.tx.Add(int64(n))
	}
}

// Close sends what is pending (within about a second), lets the carrier
// say goodbye, and closes the connection. It is safe to call more than
// once; Writes after it fail.
func (c *muxConn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		c.wmu.Lock()
		c.closed = true
		c.idle.Broadcast()
		// yamux's last frames (a go-away) go on the wire: wait for the
		// flusher to send what is pending, for at most a second.
		lingered := false // on c.wmu
		linger := time.AfterFunc(time.Second, func() {
			c.wmu.Lock()
			lingered = true
			c.idle.Broadcast()
			c.wmu.Unlock()
		})
		for c.flushing && !lingered {
			c.idle.Wait()
		}
		c.wmu.Unlock()
		linger.Stop()
		err = c.car.close()
		// A send blocked on a peer that stopped reading fails now.
		c.wmu.Lock()
		for c.flushing {
			c.idle.Wait()
		}
		c.wmu.Unlock()
	})
	return err
}

func (c *muxConn) LocalAddr() net.Addr  { return c.car.LocalAddr() }
func (c *muxConn) RemoteAddr() net.Addr { return c.car.RemoteAddr() }

func (c *muxConn) SetDeadline(t time.Time) error {
	return errors.Join(c.car.SetReadDeadline(t), c.car.SetWriteDeadline(t))
}
func (c *muxConn) SetReadDeadline(t time.Time) error  { return c.car.SetReadDeadline(t) }
func (c *muxConn) SetWriteDeadline(t time.Time) error { return c.car.SetWriteDeadline(t) }
