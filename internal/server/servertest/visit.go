package servertest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// MetricsToken is the bearer token Queued sends for /aperio/metrics: a
// test reading the router's queue sets it as its server's MetricsToken.
const MetricsToken = "e2e-metrics-token"

// GetWith sends GET / to host at st's server, with header and bounded by
// 30 s, and returns the response and its body.
func GetWith(t testing.TB, st *Stack, host string, header http.Header) (*http.Response, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req := NewRequest(t, ctx, st.Server, http.MethodGet, host, "/", nil)
	for k, vv := range header {
		req.Header[k] = vv
	}
	return Do(t, st.Visitor, req)
}

// BasicAuth returns a header carrying user and password as HTTP basic
// credentials.
func BasicAuth(user, password string) http.Header {
	return http.Header{"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))}}
}

// EdgeVisit sends GET path with Host host and the headers h to s and
// returns the response and, when the HeaderEcho backend answered, the
// headers it saw (nil otherwise).
func EdgeVisit(t testing.TB, c *http.Client, s *Server, host, path string, h http.Header) (*http.Response, http.Header) {
	t.Helper()
	req := NewRequest(t, t.Context(), s, http.MethodGet, host, path, nil)
	for k, vv := range h {
		req.Header[k] = vv
	}
	resp, body := Do(t, c, req)
	if resp.Header.Get("X-Backend") != "echo" {
		return resp, nil
	}
	var seen http.Header
	if err := json.Unmarshal([]byte(body), &seen); err != nil {
		t.Fatalf("decode echoed headers %q: %v", body, err)
	}
	return resp, seen
}

// WSDial opens a WebSocket to path at st's server for hostname AppHost,
// with ctx's deadline on the handshake and on every read and write after
// it. The connection is closed at cleanup.
func WSDial(t testing.TB, ctx context.Context, st *Stack, path string) (*websocket.Conn, *http.Response) {
	t.Helper()
	h := http.Header{"Host": {AppHost}}
	c, resp, err := websocket.DefaultDialer.DialContext(ctx, "ws://"+st.Server.Addr+path, h)
	if err != nil {
		t.Fatalf("WebSocket dial %s (Host %s) = %v, want a connection", path, AppHost, err)
	}
	if d, ok := ctx.Deadline(); ok {
		c.SetReadDeadline(d)
		c.SetWriteDeadline(d)
	}
	t.Cleanup(func() { c.Close() })
	return c, resp
}

// WSClose sends a close frame with code and waits (up to 10 s) for the
// peer's answer, as a clean close does; it returns the error of the
// final read, a *websocket.CloseError naming the peer's code.
func WSClose(c *websocket.Conn, code int, reason string) error {
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

// AuditEvents lists the audit log's entries of kind event (newest first,
// from the latest 1000) through the admin API.
func AuditEvents(t testing.TB, s *Server, event string) []map[string]any {
	t.Helper()
	code, body := AdminCall(t, NewVisitor(t, s), s, "GET", "/audit?limit=1000", nil)
	if code != http.StatusOK {
		t.Fatalf("GET /aperio/api/audit = %d %s, want 200", code, body)
	}
	var all, out []map[string]any
	if err := json.Unmarshal([]byte(body), &all); err != nil {
		t.Fatalf("audit listing %q: %v", body, err)
	}
	for _, e := range all {
		if e["event"] == event {
			out = append(out, e)
		}
	}
	return out
}

// RotateShareKeys rotates the share links' signing key through the admin
// API; with revoke, links signed by the previous key stop verifying.
func RotateShareKeys(t testing.TB, s *Server, revoke bool) {
	t.Helper()
	code, body := AdminCall(t, NewVisitor(t, s), s, "POST", "/share/keys/rotate", map[string]bool{"revoke_previous": revoke})
	if code != http.StatusOK {
		t.Fatalf("POST /share/keys/rotate = %d %s, want 200", code, body)
	}
}

// Queued returns the requests waiting in the router's queues of s, as
// /aperio/metrics reports them (aperio_requests_queued); s's MetricsToken
// must be MetricsToken.
func Queued(t testing.TB, c *http.Client, s *Server) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req := NewRequest(t, ctx, s, http.MethodGet, "aperio.internal", "/aperio/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+MetricsToken)
	status, body, err := Fetch(c, req)
	if err != nil || status != http.StatusOK {
		t.Fatalf("GET /metrics = %d %q, %v, want 200", status, body, err)
	}
	for line := range strings.Lines(body) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "aperio_requests_queued "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("GET /metrics: aperio_requests_queued %q: %v", v, err)
			}
			return int(n)
		}
	}
	t.Fatalf("GET /metrics lacks aperio_requests_queued:\n%s", body)
	return 0
}

// H2CTransport returns a transport speaking HTTP/2 with prior knowledge
// over plain TCP (h2c), whose idle connections are closed at cleanup.
func H2CTransport(t testing.TB) *http.Transport {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: p}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// ScrapeMetrics fetches /aperio/metrics from s over c with token as the
// bearer token and returns the exposition; it fails the test unless the
// answer is 200.
func ScrapeMetrics(t testing.TB, c *http.Client, s *Server, token string) string {
	t.Helper()
	req := NewRequest(t, t.Context(), s, "GET", "anything.test", "/aperio/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, body := Do(t, c, req)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics = %d %q, want 200", resp.StatusCode, body)
	}
	return body
}
