package tunnel

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Transports: how a session's yamux frames travel once the client's
// HTTP/1.1 upgrade is accepted.
const (
	// TransportWebSocket carries them in binary WebSocket messages: the
	// default, as every proxy and load balancer that passes WebSockets
	// passes it.
	TransportWebSocket = "websocket"
	// TransportTCP runs yamux straight on the upgraded connection (under
	// TLS for an https URL), without WebSocket framing or masking: faster,
	// but an intermediary must pass an upgrade to Subprotocol, not only
	// to websocket.
	TransportTCP = "tcp"
)

// rawResponseLimit bounds the head of the server's answer to an
// upgrade to Subprotocol (and the refusal body read after it, separately bounded by
// refusal): a hostile server cannot make the client buffer more.
const rawResponseLimit = 64 << 10

// newConnMux returns the byte stream yamux runs on over conn, an upgraded
// connection; r reads it (conn, or bytes buffered past the upgrade's head
// and then conn).
func newConnMux(conn net.Conn, r io.Reader) *muxConn {
	return newMuxConn(&connCarrier{conn: conn, r: r})
}

// connCarrier carries a session's frames on the connection itself.
type connCarrier struct {
	conn net.Conn
	r    io.Reader
	vec  net.Buffers // reused by send, the only writer at a time
}

func (c *connCarrier) Read(p []byte) (int, error) { return c.r.Read(p) }

// send writes head and body in one vectored write where conn supports it
// (TCP); over TLS, in two records.
func (c *connCarrier) send(head, body []byte) error {
	if len(head) == 0 {
		_, err := c.conn.Write(body)
		return err
	}
	c.vec = append(c.vec[:0], head, body)
	v := c.vec
	_, err := v.WriteTo(c.conn)
	clear(c.vec[:2]) // yamux owns body once this returns
	return err
}

func (c *connCarrier) close() error                       { return c.conn.Close() }
func (c *connCarrier) LocalAddr() net.Addr                { return c.conn.LocalAddr() }
func (c *connCarrier) RemoteAddr() net.Addr               { return c.conn.RemoteAddr() }
func (c *connCarrier) SetReadDeadline(t time.Time) error  { return c.conn.SetReadDeadline(t) }
func (c *connCarrier) SetWriteDeadline(t time.Time) error { return c.conn.SetWriteDeadline(t) }

// withBuffered returns a reader of the bytes br holds and then of conn, so
// that nothing read past a head is lost and later reads skip br's buffer.
func withBuffered(br *bufio.Reader, conn net.Conn) io.Reader {
	n := br.Buffered()
	if n == 0 {
		return conn
	}
	return io.MultiReader(io.LimitReader(br, int64(n)), conn)
}

// acceptTCPUpgrade takes over the connection of r, an authenticated upgrade to
// Subprotocol (the tcp transport),
// and answers 101. The connection's deadlines are cleared: the session's
// own heartbeats and yamux's timeouts bound it from here.
func acceptTCPUpgrade(w http.ResponseWriter, r *http.Request) (net.Conn, io.Reader, error) {
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil, nil, err
	}
	conn.SetDeadline(time.Now().Add(HandshakeTimeout))
	const head = "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + Subprotocol + "\r\n\r\n"
	if _, err := io.WriteString(conn, head); err != nil {
		conn.Close()
		return nil, nil, err
	}
	conn.SetDeadline(time.Time{})
	return conn, withBuffered(brw.Reader, conn), nil
}

// dialTCPTransport opens a tcp-transport session's connection: TCP, TLS for wss,
// then the upgrade, bounded by ctx.
func (c *Client) dialTCPTransport(ctx context.Context) (net.Conn, io.Reader, error) {
	u, err := url.Parse(c.wsURL)
	if err != nil {
		return nil, nil, fmt.Errorf("tunnel: server url: %w", err)
	}
	secure := u.Scheme == "wss"
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), map[bool]string{true: "443", false: "80"}[secure])
	}
	dial := c.cfg.DialContext
	if dial == nil {
		dial = (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext
	}
	conn, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("tunnel: dial %s: %w", c.wsURL, err)
	}
	ok := false
	defer func() {
		if !ok {
			conn.Close()
		}
	}()
	if d, has := ctx.Deadline(); has {
		conn.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if secure {
		cfg := &tls.Config{}
		if c.cfg.TLSConfig != nil {
			cfg = c.cfg.TLSConfig.Clone()
		}
		if cfg.ServerName == "" {
			cfg.ServerName = u.Hostname()
		}
		cfg.NextProtos = []string{"http/1.1"} // an upgrade is HTTP/1.1's
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, nil, fmt.Errorf("tunnel: dial %s: %w", c.wsURL, err)
		}
		conn = tc
	}
	req := &http.Request{
		Method:     http.MethodGet,
		URL:        &url.URL{Path: u.Path},
		Host:       u.Host,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header: http.Header{
			"Connection":    {"Upgrade"},
			"Upgrade":       {Subprotocol},
			"Authorization": {"Bearer " + c.cfg.Token},
		},
	}
	if err := req.Write(conn); err != nil {
		return nil, nil, fmt.Errorf("tunnel: dial %s: %w", c.wsURL, err)
	}
	lr := &io.LimitedReader{R: conn, N: rawResponseLimit}
	br := bufio.NewReaderSize(lr, 4<<10)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		if ctx.Err() != nil {
			err = errors.Join(ctx.Err(), err)
		}
		return nil, nil, fmt.Errorf("tunnel: dial %s: %w", c.wsURL, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return nil, nil, refusal(resp)
	}
	if !strings.EqualFold(resp.Header.Get("Upgrade"), Subprotocol) {
		return nil, nil, &RefusedError{Status: resp.StatusCode, Reason: "server did not accept upgrade " + Subprotocol}
	}
	stop()
	conn.SetDeadline(time.Time{})
	ok = true
	return conn, withBuffered(br, conn), nil
}
