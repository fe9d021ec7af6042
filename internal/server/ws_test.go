package server_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// wsUpgrader accepts any origin: the tests' backends sit behind the
// tunnel, where the visitor's Origin is not theirs to judge.
var wsUpgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

// wsEcho is a backend that answers a WebSocket by echoing every message
// with prefix, and sends the error that ended the connection to done
// (nil: none is sent).
func wsEcho(prefix string, done chan<- error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, err := wsUpgrader.Upgrade(w, r, nil)
		if err != nil {
			if done != nil {
				done <- err
			}
			return
		}
		defer c.Close()
		for {
			typ, msg, err := c.ReadMessage()
			if err == nil {
				err = c.WriteMessage(typ, append([]byte(prefix), msg...))
			}
			if err != nil {
				if done != nil {
					done <- err
				}
				return
			}
		}
	}
}

// wsDial opens a WebSocket to path at st's server for hostname appHost,
// with ctx's deadline on the handshake and on every read and write after
// it.
func wsDial(t testing.TB, ctx context.Context, st *stack, path string) (*websocket.Conn, *http.Response) {
	t.Helper()
	h := http.Header{"Host": {appHost}}
	c, resp, err := websocket.DefaultDialer.DialContext(ctx, "ws://"+st.server.addr+path, h)
	if err != nil {
		t.Fatalf("WebSocket dial %s (Host %s) = %v, want a connection", path, appHost, err)
	}
	if d, ok := ctx.Deadline(); ok {
		c.SetReadDeadline(d)
		c.SetWriteDeadline(d)
	}
	t.Cleanup(func() { c.Close() })
	return c, resp
}

// wsClose sends a close frame with code and waits (up to 10 s) for the
// peer's answer, as a clean close does; it returns the error of the
// final read, a *websocket.CloseError naming the peer's code.
func wsClose(c *websocket.Conn, code int, reason string) error {
	deadline := time.Now().Add(10 * time.Second)
	if err := c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), deadline); err != nil {
		return err
	}
	c.SetReadDeadline(deadline)
	for {
		if _, _, err := c.ReadMessage(); err != nil {
			return err
		}
	}
}
