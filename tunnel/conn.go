package tunnel

import (
	"io"
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
