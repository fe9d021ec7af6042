package router

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/testkit/poll"
	"github.com/aperio-dev/aperio/internal/visitor/usage"
)

// streamConn answers every request with a body of unknown length that
// sends total bytes in chunks of chunk, as a streamed download (SSE, a
// video) does; an Upgrade request gets 101 and a stream that sends the
// same.
type streamConn struct {
	*fakeConn
	total, chunk int
}

// chunkReader yields left bytes, at most chunk a read.
type chunkReader struct{ left, chunk int }

func (c *chunkReader) Read(p []byte) (int, error) {
	if c.left == 0 {
		return 0, io.EOF
	}
	n := min(len(p), c.chunk, c.left)
	for i := range p[:n] {
		p[i] = 'q'
	}
	c.left -= n
	return n, nil
}

func (c *streamConn) RoundTrip(req *http.Request, service string) (*http.Response, error) {
	if req.Header.Get("Upgrade") != "" {
		visitorSide, backendSide := net.Pipe()
		go func() {
			defer backendSide.Close()
			io.Copy(backendSide, &chunkReader{left: c.total, chunk: c.chunk})
		}()
		go io.Copy(io.Discard, backendSide) // what the visitor sends
		return &http.Response{StatusCode: http.StatusSwitchingProtocols, Header: http.Header{"Upgrade": {"websocket"}, "Connection": {"Upgrade"}}, Body: visitorSide}, nil
	}
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"text/event-stream"}}, ContentLength: -1,
		Body: io.NopCloser(&chunkReader{left: c.total, chunk: c.chunk})}, nil
}

// quotaServer serves a router whose token tok_a has a daily quota of
// limit bytes and whose client streams total bytes per request.
func quotaServer(t *testing.T, limit int64, total int, h2 bool) (*httptest.Server, *usage.Meter) {
	t.Helper()
	m, _ := newUsageMeter(t, limit)
	rt := newRouter(t, Config{Usage: m})
	c := &streamConn{fakeConn: newConn("a", 1), total: total, chunk: 16 << 10}
	rt.reg.updateAs(c, ann(svc("", "app.test")), rights{allowed: []string{"app.test"}, org: "org_a", tokenID: "tok_a"})
	if err := m.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(rt)
	srv.Config.ErrorLog = nil
	if h2 {
		srv.EnableHTTP2 = true
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv, m
}

// TestQuotaCutsStreamedResponse: a streamed response that starts under
// the token's daily_max_bytes is cut once it reaches the quota, within
// one copy chunk of it, and is seen truncated (never complete) over
// HTTP/1.1 and HTTP/2; the cut is counted, and the next request is
// refused (#38 item 13, P4-4: one stream delivered 5.7x the quota).
func TestQuotaCutsStreamedResponse(t *testing.T) {
	const limit, total, chunk = 256 << 10, 4 << 20, 32 << 10
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			srv, m := quotaServer(t, limit, total, h2)
			c := srv.Client()
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/stream", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = "app.test"
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			n, err := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err == nil || resp.StatusCode != http.StatusOK {
				t.Errorf("streamed response = %d, read %d bytes and %v; want 200 and a read error (cut short)", resp.StatusCode, n, err)
			}
			if n < limit-chunk || n > limit+chunk {
				t.Errorf("streamed response delivered %d bytes, want the quota %d within a chunk", n, limit)
			}
			if tok, _ := m.QuotaCuts(); tok != 1 {
				t.Errorf("QuotaCuts() token = %d, want 1", tok)
			}
			resp, err = c.Do(req.Clone(t.Context()))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("X-Aperio-Limit") != "token-quota; setting=token.daily_max_bytes" {
				t.Errorf("next request = %d %q, want 429 token-quota", resp.StatusCode, resp.Header.Get("X-Aperio-Limit"))
			}
		})
	}
}

// TestQuotaLetsReachingResponseEnd: a response that ends with the chunk
// that reaches the quota is delivered whole.
func TestQuotaLetsReachingResponseEnd(t *testing.T) {
	const limit = 64 << 10
	srv, m := quotaServer(t, limit, limit, false)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/exact", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "app.test"
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || n != limit {
		t.Errorf("response of exactly the quota: read %d bytes, %v; want %d, nil", n, err, limit)
	}
	if tok, _ := m.QuotaCuts(); tok != 0 {
		t.Errorf("QuotaCuts() token = %d, want 0", tok)
	}
}

// TestQuotaCutsUpgradedStream: a WebSocket (any upgraded stream) that
// starts under the quota is closed once it reaches it, within a chunk.
func TestQuotaCutsUpgradedStream(t *testing.T) {
	const limit, total, chunk = 256 << 10, 4 << 20, 32 << 10
	srv, m := quotaServer(t, limit, total, false)
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: app.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade = %v, %v; want 101", resp, err)
	}
	n, err := io.Copy(io.Discard, br)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the stream was not closed at the quota: read %d bytes until the deadline", n)
	}
	if n < limit-chunk || n > limit+chunk {
		t.Errorf("upgraded stream delivered %d bytes, want the quota %d within a chunk", n, limit)
	}
	// The cut is recorded as the handler returns, after the close.
	poll.Until(t, 10*time.Second, "QuotaCuts() token = 1", func() bool {
		tok, _ := m.QuotaCuts()
		return tok == 1
	})
	if !strings.Contains(resp.Header.Get("Upgrade"), "websocket") {
		t.Errorf("101 Upgrade = %q", resp.Header.Get("Upgrade"))
	}
}
