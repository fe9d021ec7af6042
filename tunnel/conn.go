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

// clientAcceptBacklog is a client session's yamux AcceptBacklog: how many
// streams the server may have opened that the client has not yet accepted.
const clientAcceptBacklog = 1024

// yamuxConfig returns the session settings both ends use. Liveness is the
// heartbeat on the control stream, so yamux's own keepalive is off.
//
// acceptBacklog sizes two things in yamux: the queue of streams the peer
// opened that this end has not accepted (a channel of that many pointers,
// held for the session's life), and how many streams this end may have
// opened that the peer has not acknowledged yet (OpenStream blocks beyond
// it, with no timeout). A client accepts the server's streams, so it keeps
// a deep queue. A server accepts only the control stream and opens at most
// tunnel_max_streams (Session.getFreshStream admits exactly that many), so
// its backlog is tunnel_max_streams: its opens never wait on it, and a
// session holds 2 KiB of queue at the default instead of 8.
func yamuxConfig(acceptBacklog int) *yamux.Config {
	c := yamux.DefaultConfig()
	c.EnableKeepAlive = false
	c.MaxStreamWindowSize = streamWindow
	c.StreamOpenTimeout = 10 * time.Second
	c.StreamCloseTimeout = 30 * time.Second
	c.ConnectionWriteTimeout = 30 * time.Second
	c.AcceptBacklog = acceptBacklog
	c.LogOutput = io.Discard
	return c
}
