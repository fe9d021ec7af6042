package router

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// bodyReaderConn is a client whose backend reads the whole request body,
// ignoring a failure, and answers 200: what a backend does with a request
// the tunnel ended early.
type bodyReaderConn struct{ fakeConn }

func (c *bodyReaderConn) RoundTrip(req *http.Request, service string) (*http.Response, error) {
	io.Copy(io.Discard, req.Body) // its failure is the point: ignored, as such a backend does
	return c.fakeConn.RoundTrip(req, service)
}

// TestBodyFailureBeatsTheAnswer: when the visitor's body fails before the
// answer arrives, the visitor gets the body's status, never the answer to
// the truncated request.
func TestBodyFailureBeatsTheAnswer(t *testing.T) {
	rt := newRouter(t, Config{})
	conn := &bodyReaderConn{fakeConn: *newConn("c", 1)}
	rt.reg.update(conn, ann(svc("", "app.test")))
	srv := httptest.NewServer(rt)
	t.Cleanup(srv.Close)

	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	// A chunk size that is not hex: the chunked reader fails.
	if _, err := io.WriteString(c, "POST /up HTTP/1.1\r\nHost: app.test\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	if resp.StatusCode != http.StatusBadRequest || strings.Contains(string(b), "c/") {
		t.Fatalf("malformed body = %d %q, want 400 and not the backend's answer", resp.StatusCode, b)
	}
	conn.mu.Lock()
	n := len(conn.got)
	conn.mu.Unlock()
	if n != 1 {
		t.Fatalf("backend saw %d requests, want 1 (the test must reach the exchange)", n)
	}
}
