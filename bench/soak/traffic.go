//go:build linux

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// The kinds of traffic; each counts what it started and how it ended.
const (
	kindSmall   = "small"   // GET /small/N, "ok\n", over HTTP/1.1 and h2c in turn
	kindStream  = "stream"  // GET /stream, 1 MiB chunked, checked by SHA-256
	kindWS      = "ws"      // a WebSocket session of wsMessages echoes
	kindCold    = "cold"    // a GET held for a cold start, then answered
	kindRestart = "restart" // a SIGTERM and restart of the churn client
	kindRearm   = "rearm"   // stopping a cold-started instance, the host armed again
)

var kinds = []string{kindSmall, kindStream, kindWS, kindCold, kindRestart, kindRearm}

const wsMessages = 10

// maxFailures bounds the failure messages kept for the summary.
const maxFailures = 20

// tally counts, per kind, what started and what succeeded; every start
// ends in exactly one ok or fail. Safe for concurrent use.
type tally struct {
	started, ok, failed map[string]*atomic.Int64

	mu       sync.Mutex // guards the following field
	failures []string
}

func newTally() *tally {
	t := &tally{started: map[string]*atomic.Int64{}, ok: map[string]*atomic.Int64{}, failed: map[string]*atomic.Int64{}}
	for _, k := range kinds {
		t.started[k], t.ok[k], t.failed[k] = new(atomic.Int64), new(atomic.Int64), new(atomic.Int64)
	}
	return t
}

// do counts one attempt of kind, runs it and counts its outcome.
func (t *tally) do(kind string, f func() error) {
	t.started[kind].Add(1)
	if err := f(); err != nil {
		t.failed[kind].Add(1)
		t.mu.Lock()
		if len(t.failures) < maxFailures {
			t.failures = append(t.failures, fmt.Sprintf("%s %s: %v", time.Now().UTC().Format("15:04:05.000"), kind, err))
		}
		t.mu.Unlock()
		return
	}
	t.ok[kind].Add(1)
}

func (t *tally) totalFailed() int64 {
	var n int64
	for _, k := range kinds {
		n += t.failed[k].Load()
	}
	return n
}

// visitor sends requests for one hostname to the server.
type visitor struct {
	base     string // http://127.0.0.1:port of the server
	hostname string
	h1, h2   *http.Client
	seq      atomic.Int64
}

func newVisitor(base, hostname string) *visitor {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	// A bounded pool whose idle connections close after visitorIdle, so
	// that the server's fds follow the traffic, not its busiest moment.
	return &visitor{base: base, hostname: hostname,
		h1: &http.Client{Timeout: time.Minute, Transport: &http.Transport{Proxy: nil,
			MaxConnsPerHost: 16, MaxIdleConnsPerHost: 16, IdleConnTimeout: visitorIdle}},
		h2: &http.Client{Timeout: time.Minute, Transport: &http.Transport{Proxy: nil, Protocols: p, IdleConnTimeout: visitorIdle}}}
}

// visitorIdle is how long a visitor keeps an idle connection.
const visitorIdle = 5 * time.Second

func (v *visitor) close() {
	v.h1.CloseIdleConnections()
	v.h2.CloseIdleConnections()
}

// get GETs path and returns the body, failing on any status but 200 or a
// body over limit.
func (v *visitor) get(ctx context.Context, c *http.Client, path string, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, v.base+path, nil)
	if err != nil {
		return nil, err
	}
	req.Host = v.hostname
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: reading the body: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: status %d: %.120q", path, resp.StatusCode, body)
	}
	if int64(len(body)) > limit {
		return nil, fmt.Errorf("%s: body over %d bytes", path, limit)
	}
	return body, nil
}

// small is one small GET, every other one over h2c.
func (v *visitor) small(ctx context.Context) error {
	n := v.seq.Add(1)
	c := v.h1
	if n%2 == 0 {
		c = v.h2
	}
	body, err := v.get(ctx, c, "/small/"+strconv.FormatInt(n, 10), 64)
	if err == nil && string(body) != "ok\n" {
		err = fmt.Errorf("/small: body %q, want \"ok\\n\"", body)
	}
	return err
}

// stream reads one whole streamed body and checks it byte for byte.
func (v *visitor) stream(ctx context.Context) error {
	body, err := v.get(ctx, v.h1, "/stream", streamSize)
	if err != nil {
		return err
	}
	if len(body) != streamSize || sha256.Sum256(body) != streamSum {
		return fmt.Errorf("/stream: %d bytes not the %d sent", len(body), streamSize)
	}
	return nil
}

// ws runs one WebSocket session: wsMessages echoes, then a normal close.
func (v *visitor) ws(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, resp, err := websocket.DefaultDialer.DialContext(ctx, "ws"+v.base[len("http"):]+"/ws", http.Header{"Host": {v.hostname}})
	if err != nil {
		if resp != nil {
			return fmt.Errorf("/ws: dial: status %d: %w", resp.StatusCode, err)
		}
		return fmt.Errorf("/ws: dial: %w", err)
	}
	defer c.Close()
	deadline, _ := ctx.Deadline()
	c.SetReadDeadline(deadline)
	c.SetWriteDeadline(deadline)
	for i := range wsMessages {
		msg := fmt.Appendf(nil, "soak %d message %d", v.seq.Add(1), i)
		if err := c.WriteMessage(websocket.TextMessage, msg); err != nil {
			return fmt.Errorf("/ws: write %d: %w", i, err)
		}
		_, got, err := c.ReadMessage()
		if err != nil {
			return fmt.Errorf("/ws: read %d: %w", i, err)
		}
		if !bytes.Equal(got, msg) {
			return fmt.Errorf("/ws: echo %q of %q", got, msg)
		}
	}
	// A clean close: send ours, then read until the backend's answer.
	if err := c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "done"), deadline); err != nil {
		return fmt.Errorf("/ws: close: %w", err)
	}
	for {
		if _, _, err := c.ReadMessage(); err != nil {
			if websocket.IsCloseError(err, websocket.CloseNormalClosure) {
				return nil
			}
			return fmt.Errorf("/ws: close: %w", err)
		}
	}
}

// paced calls f every interval (a fresh goroutine each, at most inflight
// at once, waiting for a free one rather than skipping) until ctx ends,
// and returns once every call it started has returned.
func paced(ctx context.Context, interval time.Duration, inflight int, f func()) {
	sem := make(chan struct{}, inflight)
	var wg sync.WaitGroup
	defer wg.Wait()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Go(func() {
			defer func() { <-sem }()
			f()
		})
	}
}

// looped runs f in n goroutines, each again and again with pause between,
// until ctx ends, and returns once all have returned.
func looped(ctx context.Context, n int, pause time.Duration, f func()) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for ctx.Err() == nil {
				f()
				select {
				case <-ctx.Done():
				case <-time.After(pause):
				}
			}
		})
	}
	wg.Wait()
}
