package tunnel

import (
	"encoding/binary"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
)

// streamWindow is the yamux receive window of every stream. yamux's default
// of 256 KiB caps one stream at window ÷ RTT (about 20 Mbit/s at 100 ms);
// 2 MiB gives 160 Mbit/s there. Memory stays bounded because a stream only
// buffers up to its window and the number of streams is bounded by the
// concurrency limits.
const streamWindow = 2 << 20

// yamuxConfig returns the session settings both ends use. Liveness is the
// heartbeat on the control stream, so yamux's own keepalive is off.
func yamuxConfig() *yamux.Config {
	c := yamux.DefaultConfig()
	c.EnableKeepAlive = false
	c.MaxStreamWindowSize = streamWindow
	c.StreamOpenTimeout = 10 * time.Second
	c.StreamCloseTimeout = 30 * time.Second
	c.ConnectionWriteTimeout = 30 * time.Second
	c.AcceptBacklog = 1024
	c.LogOutput = io.Discard
	return c
}

// yamux frame layout (see yamux's spec.md): version, type, flags(2),
// stream id(4), length(4). A data frame's body follows its header.
const (
	yamuxHeaderSize = 12
	yamuxTypeData   = 0
)

// coalescingConn joins each yamux data-frame header with the body that
// follows it. yamux's send loop writes the 12-byte header and the body in
// two calls; on a WebSocket connection every Write is a message and a
// flush, so without this each proxied chunk costs two frames and two
// syscalls. Only yamux's single send goroutine writes, so the held header
// needs no ordering beyond the mutex.
type coalescingConn struct {
	net.Conn
	mu   sync.Mutex // guards the following fields
	held []byte     // a data header waiting for its body
	buf  []byte     // scratch space for header+body
}

func (c *coalescingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held == nil {
		if len(p) == yamuxHeaderSize && p[1] == yamuxTypeData && binary.BigEndian.Uint32(p[8:12]) > 0 {
			c.held = append(c.buf[:0], p...)
			return len(p), nil
		}
		return c.Conn.Write(p)
	}
	// p is the body of the held header: send both as one message.
	buf := append(c.held, p...)
	c.held = nil
	if cap(buf) <= 64<<10 {
		c.buf = buf[:0]
	} else {
		c.buf = nil // don't keep a large one-off buffer on an idle session
	}
	if _, err := c.Conn.Write(buf); err != nil {
		return 0, err
	}
	return len(p), nil
}
