package tunnel

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"time"
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
// post is set.
func tunnelExchange(tb testing.TB, ctx context.Context, p *pair, post bool) {
	var req *http.Request
	if post {
		req = httptest.NewRequestWithContext(ctx, http.MethodPost, "/", strings.NewReader("hello"))
	} else {
		req = httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
	}
	resp, err := p.session.RoundTrip(req, "0")
	if err != nil {
		tb.Fatalf("RoundTrip: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || string(b) != "ok" {
		tb.Fatalf("RoundTrip = %d %q, %v; want 200 ok", resp.StatusCode, b, err)
	}
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
