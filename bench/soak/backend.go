//go:build linux

package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/gorilla/websocket"
)

// The backend behind every tunnel runs inside the harness (it is not
// sampled): /small answers "ok\n", /stream a chunked body of streamSize
// bytes of streamChunk, flushed chunk by chunk, /ws echoes WebSocket
// messages until the visitor closes.

const (
	streamSize = 1 << 20
	maxWSMsg   = 64 << 10
)

// streamChunk is the 16 KiB the stream repeats: bytes that a truncated or
// reordered body would not reproduce.
var streamChunk = func() []byte {
	b := make([]byte, 16<<10)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	return b
}()

// streamSum is the SHA-256 of a whole, correct stream body.
var streamSum = func() [32]byte {
	h := sha256.New()
	for range streamSize / len(streamChunk) {
		h.Write(streamChunk)
	}
	var s [32]byte
	h.Sum(s[:0])
	return s
}()

func backendHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /small/", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /stream", func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		for range streamSize / len(streamChunk) {
			if _, err := w.Write(streamChunk); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
		}
	})
	mux.HandleFunc("GET /ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := wsUpgrader.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		c.SetReadLimit(maxWSMsg)
		deadline := time.Now().Add(time.Minute)
		c.SetReadDeadline(deadline)
		c.SetWriteDeadline(deadline)
		for {
			typ, msg, err := c.ReadMessage()
			if err != nil {
				return // the visitor closed, or went away
			}
			if err := c.WriteMessage(typ, msg); err != nil {
				return
			}
		}
	})
	return mux
}

// wsUpgrader accepts the soak's visitors from any origin.
var wsUpgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

// hookCall is the part of a scaling hook call the provider reads.
type hookCall struct {
	Reason   string `json:"reason"`
	Hostname string `json:"hostname"`
}

// providerHandler answers the server's scaling hook: 202 to every well
// formed call, and on a cold_start it runs coldStart in a goroutine of
// its own (coldStart must bound itself). Scale out and scale in are
// acknowledged and ignored: the cold pool has max 1, and the harness
// empties it itself.
func providerHandler(coldStart func()) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var c hookCall
		if r.Method != http.MethodPost || json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&c) != nil {
			http.Error(w, "want a POST of a hook call", http.StatusBadRequest)
			return
		}
		if c.Reason == "cold_start" {
			go coldStart()
		}
		w.WriteHeader(http.StatusAccepted)
	})
}

// serve serves h on a fresh 127.0.0.1 port until the returned stop is
// called.
func serve(h http.Handler) (addr string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	// Idle connections close after 5 s, so that a client's fds to its
	// backend follow the traffic, not its busiest moment.
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 5 * time.Second}
	go srv.Serve(ln)
	return ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		srv.Close()
	}, nil
}
