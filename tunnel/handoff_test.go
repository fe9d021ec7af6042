package tunnel

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/testkit/poll"
)

// staticForwarder answers every request in process with a short body of
// known length, after reading and closing the request body as a
// transport does: a backend that costs no goroutine and no socket, so what
// a request through the tunnel creates is the tunnel's own.
type staticForwarder struct{}

func (staticForwarder) Forward(_ context.Context, _ string, req *http.Request) (*http.Response, error) {
	const body = "ok"
	if req.Body != nil {
		_, err := io.Copy(io.Discard, req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
	}
	return &http.Response{
		StatusCode:    http.StatusOK,
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Length": {strconv.Itoa(len(body))}},
		ContentLength: int64(len(body)),
		Body:          io.NopCloser(strings.NewReader(body)),
		Request:       req,
	}, nil
}

// goroutinesCreated returns how many goroutines the process has created
// since it started (runtime/metrics).
func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// tunnelExchange sends one request under ctx through p's session and
// reads its answer to the end: a GET, or a POST with a small body when
// post is set. It fails tb on any other outcome than 200 "ok".
func tunnelExchange(tb testing.TB, ctx context.Context, p *pair, post bool) {
	tb.Helper()
	if err := exchange(ctx, p, post); err != nil {
		tb.Fatal(err)
	}
}

// exchange is tunnelExchange returning what went wrong; it may be called
// from any goroutine.
func exchange(ctx context.Context, p *pair, post bool) error {
	var req *http.Request
	if post {
		req = httptest.NewRequestWithContext(ctx, http.MethodPost, "/", strings.NewReader("hello"))
	} else {
		req = httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
	}
	resp, err := p.session.RoundTrip(req, "0")
	if err != nil {
		return fmt.Errorf("RoundTrip: %w", err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || string(b) != "ok" {
		return fmt.Errorf("RoundTrip = %d %q, %v; want 200 ok", resp.StatusCode, b, err)
	}
	return nil
}

// BenchmarkTunnelRoundTrip measures one request through a session and
// its client on a pooled stream, the backend answering in process: the
// tunnel's own cost per request on both sides, with the goroutines it
// creates per request (goroutines/op) beside its allocations (#43). As
// on a real server, the request's context can be cancelled and the
// session has a response timeout.
//
//	go test -run XXX -bench TunnelRoundTrip -benchmem ./tunnel/
func BenchmarkTunnelRoundTrip(b *testing.B) {
	for _, kind := range []string{"tcp", "tcp-transport"} {
		for _, post := range []bool{false, true} {
			name := kind + "/GET"
			if post {
				name = kind + "/POST"
			}
			b.Run(name, func(b *testing.B) {
				p := startPair(b, kind, staticForwarder{}, func(s *ServerConfig, _ *ClientConfig) {
					s.ResponseHeaderTimeout = 30 * time.Second
				})
				ctx, cancel := context.WithCancel(context.Background())
				b.Cleanup(cancel)
				tunnelExchange(b, ctx, p, post) // opens the stream the loop reuses
				b.ReportAllocs()
				g0 := goroutinesCreated()
				for b.Loop() {
					tunnelExchange(b, ctx, p, post)
				}
				b.ReportMetric(float64(goroutinesCreated()-g0)/float64(b.N), "goroutines/op")
			})
		}
	}
}

// TestQuickRequestGoroutines pins the goroutines a request answered at
// once creates on a pooled stream: muxConn's flusher on each end of the
// idle tunnel connection (one small frame each way) and, for a POST, the
// server's request body copier; none for the client's abandon watch,
// which only a request still running after abandonWatchDelay starts
// (#43; before, every request started one). A few requests slower than
// the delay on a loaded machine stay within the bound.
func TestQuickRequestGoroutines(t *testing.T) {
	tests := []struct {
		name string
		post bool
		want int // goroutines per request
	}{
		{"GET", false, 2},
		{"POST", true, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// No heartbeat falls inside the measured requests.
			p := startPair(t, "pipe", staticForwarder{}, func(s *ServerConfig, _ *ClientConfig) { s.DownThreshold = time.Hour })
			ctx := t.Context()
			tunnelExchange(t, ctx, p, tt.post) // opens the stream the others reuse
			const n = 50
			g0 := goroutinesCreated()
			for range n {
				tunnelExchange(t, ctx, p, tt.post)
			}
			got := goroutinesCreated() - g0
			if limit := uint64(n*tt.want + n/2); got > limit {
				t.Errorf("%d %s requests created %d goroutines, want at most %d (%d each)", n, tt.name, got, limit, tt.want)
			}
		})
	}
}

// gateForwarder answers its first request once release is closed (or its
// context ends), after reading its body; later requests at once.
type gateForwarder struct {
	staticForwarder
	first   sync.Once
	release chan struct{}
}

func (f *gateForwarder) Forward(ctx context.Context, service string, req *http.Request) (*http.Response, error) {
	if _, err := io.Copy(io.Discard, req.Body); err != nil {
		return nil, err
	}
	f.first.Do(func() {
		select {
		case <-f.release:
		case <-ctx.Done():
		}
	})
	return f.staticForwarder.Forward(ctx, service, req)
}

// TestSlowRequestWatchedStreamReused: a request still running after
// abandonWatchDelay is watched for the server abandoning it; once it is
// answered, its stream goes back to the pool and carries the next request
// (the watch hands over the next request's first byte).
func TestSlowRequestWatchedStreamReused(t *testing.T) {
	for _, post := range []bool{false, true} {
		name := "GET"
		if post {
			name = "POST"
		}
		t.Run(name, func(t *testing.T) {
			f := &gateForwarder{release: make(chan struct{})}
			p := startPair(t, "pipe", f, nil)
			ctx := t.Context()
			done := make(chan error, 1)
			go func() { done <- exchange(ctx, p, post) }()
			poll.Until(t, 10*time.Second, "the client watching the slow request's stream", func() bool {
				return p.client.watched.Load() == 1
			})
			close(f.release)
			if err := waitFor(t, done, 10*time.Second, "the slow request's answer"); err != nil {
				t.Fatal(err)
			}
			first := pooledStreamID(t, p.session)
			tunnelExchange(t, ctx, p, post)
			if got := pooledStreamID(t, p.session); got != first {
				t.Errorf("the request after the slow one went on stream %d, want the pooled stream %d", got, first)
			}
		})
	}
}

// pooledStreamID returns the id of the only stream in s's pool.
func pooledStreamID(t testing.TB, s *Session) uint32 {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.idle) != 1 {
		t.Fatalf("%d streams in the pool, want 1", len(s.idle))
	}
	return s.idle[0].st.StreamID()
}
