package process_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/testkit/poll"
)

// TestProcessesTokenAndServerLimits runs real binaries against each limit
// kind: a token's max_rps (429 token-rate with Retry-After: 1),
// daily_max_bytes (429 token-quota, no Retry-After), max_connections and
// client_allowed_ips (the handshake refused with the reason), and the
// server caps max_tunnels (the next tunnel refused) and
// max_streams_per_ip (429 streams-per-ip), and max_ws_connections (503
// beyond it). The master token's client on the same server is never
// limited by the token limits.
func TestProcessesTokenAndServerLimits(t *testing.T) {
	t.Parallel()
	const master = "limits-master-token-0123456789abcdef"
	f := newFleet(t, master)
	release := make(chan struct{})
	slowArrived := make(chan struct{}, 1)
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ws" {
			// A WebSocket that stays open until the test ends.
			conn, buf, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n")
			buf.Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		if r.URL.Path == "/slow" {
			slowArrived <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		w.Write(bytes.Repeat([]byte("x"), 1000))
	}))
	t.Cleanup(backend.Close)

	srv := f.startServer(t, "APERIO_USAGE_FLUSH_INTERVAL=1s", "APERIO_MAX_WS_CONNECTIONS=1")
	mint := func(fields map[string]any) string {
		t.Helper()
		fields["name"] = "limits"
		body, _ := json.Marshal(fields)
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.url+apitype.Prefix+"/tokens", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+master)
		req.Header.Set("Content-Type", "application/json")
		resp, err := f.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var minted struct{ Token string }
		if err := json.NewDecoder(resp.Body).Decode(&minted); err != nil || resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST /tokens %s = %d, %v", body, resp.StatusCode, err)
		}
		return minted.Token
	}
	start := func(base, host, token string) *processLog {
		t.Helper()
		c := exec.Command(filepath.Join(f.bin, "aperio-client"), backend.URL, "--hostname", host, "--server-url", base, "--retry-forever")
		c.Dir = t.TempDir()
		c.Env = append(os.Environ(), "HOME="+c.Dir, "APERIO_SERVER_TOKEN="+token)
		return startLogged(t, c)
	}
	connected := regexp.MustCompile(`msg="tunnel connected"`)
	visit := func(base, host, path string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, base+path, nil)
		req.Host = host
		resp, err := f.http.Do(req)
		if err != nil {
			t.Fatalf("GET %s%s: %v", host, path, err)
		}
		resp.Body.Close()
		return resp
	}

	t.Run("max_rps", func(t *testing.T) {
		start(srv.url, "rps.test", mint(map[string]any{"hostnames": []string{"rps.test"}, "max_rps": 1})).wait(t, connected)
		var limited *http.Response
		for range 10 {
			if resp := visit(srv.url, "rps.test", "/"); resp.StatusCode == http.StatusTooManyRequests {
				limited = resp
				break
			}
		}
		if limited == nil || limited.Header.Get("X-Aperio-Limit") != "token-rate; setting=token.max_rps" || limited.Header.Get("Retry-After") != "1" {
			t.Fatalf("10 quick requests under max_rps 1: %v, want a 429 token-rate with Retry-After 1", limited)
		}
	})
	t.Run("daily_max_bytes", func(t *testing.T) {
		start(srv.url, "quota.test", mint(map[string]any{"hostnames": []string{"quota.test"}, "daily_max_bytes": 2500})).wait(t, connected)
		var codes []int
		for range 6 {
			resp := visit(srv.url, "quota.test", "/")
			codes = append(codes, resp.StatusCode)
			if resp.StatusCode == http.StatusTooManyRequests {
				if resp.Header.Get("X-Aperio-Limit") != "token-quota; setting=token.daily_max_bytes" || resp.Header.Get("Retry-After") != "" {
					t.Fatalf("quota 429 headers %v, want token-quota and no Retry-After", resp.Header)
				}
				break
			}
		}
		// Each answer is 1000 bytes of body (and a few of headers): the
		// third crosses 2500, so the fourth is refused, or the fifth when
		// the third's bytes were counted just after its answer reached us
		// (a request is counted when it ends: the documented overshoot of
		// the requests in flight).
		if len(codes) > 5 || codes[len(codes)-1] != http.StatusTooManyRequests {
			t.Fatalf("answers under daily_max_bytes 2500 = %v, want 200s then a 429 by the fifth", codes)
		}
	})
	t.Run("max_connections", func(t *testing.T) {
		tok := mint(map[string]any{"hostnames": []string{"conn.test"}, "max_connections": 1})
		start(srv.url, "conn.test", tok).wait(t, connected)
		start(srv.url, "conn.test", tok).wait(t, regexp.MustCompile(`msg="tunnel refused" .*reason=".*max_connections 1`))
	})
	t.Run("client_allowed_ips", func(t *testing.T) {
		tok := mint(map[string]any{"hostnames": []string{"fenced.test"}, "client_allowed_ips": []string{"10.0.0.0/8"}})
		start(srv.url, "fenced.test", tok).wait(t, regexp.MustCompile(`msg="tunnel refused" .*reason=".*client_allowed_ips`))
	})
	t.Run("master never limited", func(t *testing.T) {
		start(srv.url, "master.test", master).wait(t, connected)
		for i := range 20 {
			if resp := visit(srv.url, "master.test", "/"); resp.StatusCode != http.StatusOK {
				t.Fatalf("master token's request %d = %d, want 200", i, resp.StatusCode)
			}
		}
	})

	t.Run("max_ws_connections", func(t *testing.T) {
		// master.test's client is up (the subtest before): one WebSocket
		// relay may be open at once on this server.
		upgrade := func() (net.Conn, int) {
			t.Helper()
			c, err := net.Dial("tcp", strings.TrimPrefix(srv.url, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(c, "GET /ws HTTP/1.1\r\nHost: master.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				c.Close()
				t.Fatalf("upgrade: %v", err)
			}
			return c, resp.StatusCode
		}
		first, code := upgrade()
		defer first.Close()
		if code != http.StatusSwitchingProtocols {
			t.Fatalf("first WebSocket = %d, want 101", code)
		}
		second, code := upgrade()
		second.Close()
		if code != http.StatusServiceUnavailable {
			t.Fatalf("second WebSocket while one is open under max_ws_connections 1 = %d, want 503", code)
		}
	})

	t.Run("server caps", func(t *testing.T) {
		capped := f.startServer(t, "APERIO_MAX_TUNNELS=1", "APERIO_MAX_STREAMS_PER_IP=1")
		start(capped.url, "one.test", master).wait(t, connected)
		start(capped.url, "two.test", master).wait(t, regexp.MustCompile(`msg="tunnel refused" .*reason=".*max_tunnels 1`))

		held := make(chan int, 1)
		go func() {
			req, _ := http.NewRequest(http.MethodGet, capped.url+"/slow", nil)
			req.Host = "one.test"
			resp, err := f.http.Do(req)
			if err != nil {
				held <- 0
				return
			}
			resp.Body.Close()
			held <- resp.StatusCode
		}()
		// The slow request holds the visitor's one stream once it reached
		// the backend: the next is refused until it ends.
		select {
		case <-slowArrived:
		case code := <-held:
			t.Fatalf("the slow request ended with %d before reaching the backend", code)
		case <-time.After(20 * time.Second):
			t.Fatal("the slow request did not reach the backend")
		}
		second := visit(capped.url, "one.test", "/")
		if second.StatusCode != http.StatusTooManyRequests || !strings.HasPrefix(second.Header.Get("X-Aperio-Limit"), "streams-per-ip") {
			t.Errorf("a second request while one is held = %d %q, want 429 streams-per-ip", second.StatusCode, second.Header.Get("X-Aperio-Limit"))
		}
		releaseOnce.Do(func() { close(release) })
		if code := <-held; code != http.StatusOK {
			t.Errorf("the held request = %d, want 200", code)
		}
		// The visitor has its answer a moment before the server's handler
		// returns and frees the stream slot: the next request is served
		// once it has.
		poll.Until(t, 5*time.Second, "a request after the held one ended is served", func() bool {
			return visit(capped.url, "one.test", "/").StatusCode == http.StatusOK
		})
	})
}
