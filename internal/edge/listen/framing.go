package listen

import (
	"context"
	"net"
	"net/http"
	"sync"
)

// RFC 9112 §6.1: a request with both Content-Length and Transfer-Encoding
// may be an attempt at request smuggling, and a server that accepts it must
// close the connection afterwards. net/http reads such a request as
// chunked and deletes Content-Length before the handler runs, so the
// handler cannot see it. framedConn follows the HTTP/1 framing of a plain
// connection as net/http reads it and records, per request head, whether it
// carried both fields; the handler takes the verdicts in order and answers
// 400 with Connection: close.
//
// It only reads: it never changes a byte. The cost is a scan of each head
// and each chunk-size line; body bytes are skipped, not looked at. It
// stops following (for good) at an upgrade, CONNECT or the HTTP/2 preface,
// since what follows is not HTTP/1. Over TLS, net/http needs the *tls.Conn
// itself (for ALPN), so the check covers plain listeners only.

// maxPendingHeads bounds the verdicts waiting for their handlers
// (pipelined requests read ahead). A connection beyond it is refused from
// then on.
const maxPendingHeads = 32

// linePrefix is how much of each line the parser keeps: enough for a
// request line's method and a short target, and a Content-Length value.
const linePrefix = 48

type frameState uint8

const (
	frameRequestLine frameState = iota // skipping empty lines, then the request line
	frameHeaders
	frameBody      // remain bytes of a Content-Length body
	frameChunkSize // a chunk-size line
	frameChunkData // remain bytes of chunk data
	frameChunkEnd  // the line ending after chunk data
	frameTrailers  // trailer lines up to the empty one
	frameOff       // not HTTP/1 any more: stop following
)

// framedConn is a connection whose HTTP/1 request heads are judged as they
// are read. Read is called by one goroutine at a time (net/http's
// connReader guarantees it); the verdicts are taken by handlers.
type framedConn struct {
	net.Conn

	// Parser state, owned by the reading goroutine.
	state  frameState
	line   [linePrefix]byte
	lineN  int // bytes of the current line so far (may exceed linePrefix)
	remain uint64
	// Facts of the head being read.
	hasCL, hasTE, upgrade, skip bool
	cl                          uint64

	mu       sync.Mutex // guards the following fields
	verdicts []bool     // per head not yet handled: true when it had both
	overflow bool
}

func (c *framedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.state != frameOff {
		c.feed(p[:n])
	}
	return n, err
}

// feed advances the parser over b.
func (c *framedConn) feed(b []byte) {
	for len(b) > 0 && c.state != frameOff {
		switch c.state {
		case frameBody, frameChunkData:
			k := uint64(len(b))
			if k > c.remain {
				k = c.remain
			}
			b = b[k:]
			if c.remain -= k; c.remain == 0 {
				if c.state == frameBody {
					c.state = frameRequestLine
				} else {
					c.state = frameChunkEnd
				}
			}
		default:
			ch := b[0]
			b = b[1:]
			if ch != '\n' {
				if c.lineN < linePrefix {
					c.line[c.lineN] = ch
				}
				c.lineN++
				continue
			}
			n := min(c.lineN, linePrefix)
			if n > 0 && n == c.lineN && c.line[n-1] == '\r' {
				n--
			}
			empty := c.lineN == 0 || (c.lineN == 1 && c.line[0] == '\r')
			c.lineN = 0
			c.endLine(c.line[:n], empty)
		}
	}
}

// endLine handles one complete line (its kept prefix, CR removed).
func (c *framedConn) endLine(line []byte, empty bool) {
	switch c.state {
	case frameRequestLine:
		if empty {
			return
		}
		c.hasCL, c.hasTE, c.upgrade, c.skip, c.cl = false, false, false, false, 0
		switch {
		case hasPrefixFold(line, "PRI "):
			c.state = frameOff // the HTTP/2 preface
			return
		case hasPrefixFold(line, "CONNECT "):
			c.upgrade = true
		case string(line) == "OPTIONS * HTTP/1.1" || string(line) == "OPTIONS * HTTP/1.0":
			c.skip = true // net/http answers it without a handler
		}
		c.state = frameHeaders
	case frameHeaders:
		if !empty {
			c.header(line)
			return
		}
		c.judge()
		switch {
		case c.upgrade:
			c.state = frameOff
		case c.hasTE:
			c.state = frameChunkSize
		case c.cl > 0:
			c.state, c.remain = frameBody, c.cl
		default:
			c.state = frameRequestLine
		}
	case frameChunkSize:
		size, ok := chunkSize(line)
		switch {
		case !ok:
			c.state = frameOff // net/http fails the body and closes
		case size == 0:
			c.state = frameTrailers
		default:
			c.state, c.remain = frameChunkData, size
		}
	case frameChunkEnd:
		c.state = frameChunkSize
	case frameTrailers:
		if empty {
			c.state = frameRequestLine
		}
	}
}

// header records what a header line says about framing.
func (c *framedConn) header(line []byte) {
	switch {
	case hasPrefixFold(line, "content-length:"):
		c.hasCL = true
		var n uint64
		for _, ch := range line[len("content-length:"):] {
			if ch >= '0' && ch <= '9' && n < 1<<60 {
				n = n*10 + uint64(ch-'0')
			}
		}
		c.cl = n
	case hasPrefixFold(line, "transfer-encoding:"):
		c.hasTE = true
	case hasPrefixFold(line, "upgrade:"):
		c.upgrade = true
	}
}

// judge queues the verdict of the head just read.
func (c *framedConn) judge() {
	if c.skip {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.verdicts) >= maxPendingHeads {
		c.overflow = true
		return
	}
	c.verdicts = append(c.verdicts, c.hasCL && c.hasTE)
}

// smuggled takes the verdict of the oldest unhandled head: whether it
// carried both Content-Length and Transfer-Encoding, or the connection
// read too many heads ahead.
func (c *framedConn) smuggled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.overflow {
		return true
	}
	if len(c.verdicts) == 0 {
		return false
	}
	v := c.verdicts[0]
	c.verdicts = c.verdicts[1:]
	return v
}

// chunkSize parses the hex size at the start of a chunk-size line.
func chunkSize(line []byte) (uint64, bool) {
	var n uint64
	digits := 0
	for _, ch := range line {
		var d byte
		switch {
		case ch >= '0' && ch <= '9':
			d = ch - '0'
		case ch >= 'a' && ch <= 'f':
			d = ch - 'a' + 10
		case ch >= 'A' && ch <= 'F':
			d = ch - 'A' + 10
		default:
			return n, digits > 0
		}
		if digits++; digits > 15 {
			return 0, false
		}
		n = n<<4 | uint64(d)
	}
	return n, digits > 0
}

func hasPrefixFold(b []byte, prefix string) bool {
	if len(b) < len(prefix) {
		return false
	}
	for i := range len(prefix) {
		ch := b[i]
		if 'A' <= ch && ch <= 'Z' {
			ch += 'a' - 'A'
		}
		p := prefix[i]
		if 'A' <= p && p <= 'Z' {
			p += 'a' - 'A'
		}
		if ch != p {
			return false
		}
	}
	return true
}

// framingListener wraps every accepted connection in a framedConn.
type framingListener struct{ net.Listener }

func (l framingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &framedConn{Conn: c}, nil
}

type framedConnKey struct{}

// FramingContext is the http.Server's ConnContext for a listener of
// Chain with Framing: it lets handlers reach their connection's
// framedConn. Other connections' ctx is returned as it is.
func FramingContext(ctx context.Context, c net.Conn) context.Context {
	if fc, ok := c.(*framedConn); ok {
		return context.WithValue(ctx, framedConnKey{}, fc)
	}
	return ctx
}

// RefuseSmuggled answers 400 and closes the connection when r's head had
// both Content-Length and Transfer-Encoding; it reports whether it did.
// Every HTTP/1 request on a framed connection must pass through it once,
// in order; on any other connection it does nothing and returns false.
func RefuseSmuggled(w http.ResponseWriter, r *http.Request) bool {
	fc, ok := r.Context().Value(framedConnKey{}).(*framedConn)
	if !ok || r.ProtoMajor != 1 || !fc.smuggled() {
		return false
	}
	w.Header().Set("Connection", "close")
	http.Error(w, "aperio: request has both Content-Length and Transfer-Encoding", http.StatusBadRequest)
	return true
}
