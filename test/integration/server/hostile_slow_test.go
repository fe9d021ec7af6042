package server_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"github.com/aperio-dev/aperio/internal/server/servertest"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/server"
)

// TestHostileSlow is the hostile-input table of the visitor side: slow
// readers and uploaders, connection floods, slowloris heads, smuggling and
// oversize guards, path confinement of prefix binds and CONNECT. Each case
// runs its own gateway on 127.0.0.1:0 with short limits, so that it
// finishes in about a second.
func TestHostileSlow(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		cfg  func(*server.Config)
		// stack starts the case's stack; nil means one agent publishing
		// hostileBackend as servertest.AppHost.
		stack func(t *testing.T, cfg func(*server.Config)) *servertest.Stack
		run   func(t *testing.T, s *servertest.Stack)
	}{
		{
			name: "guard/slowloris/slow-reader-frees-slot",
			cfg:  pacing,
			run: func(t *testing.T, s *servertest.Stack) {
				c := dialRaw(t, s.Server)
				c.SetReadBuffer(4096)
				writeRaw(t, c, "GET /big HTTP/1.1\r\nHost: "+servertest.AppHost+"\r\n\r\n")
				// c never reads: its response pins the only slot until the
				// write deadline frees it.
				probeUntilOK(t, s)
			},
		},
		{
			name: "guard/slowloris/h2c-slow-reader-frees-slot",
			cfg:  pacing,
			run: func(t *testing.T, s *servertest.Stack) {
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				resp, err := servertest.H2CTransport(t).RoundTrip(servertest.NewRequest(t, ctx, s.Server, http.MethodGet, servertest.AppHost, "/big", nil))
				if err != nil {
					t.Fatalf("h2c GET /big: %v", err)
				}
				defer resp.Body.Close()
				// The body is never read: once the stream's flow-control
				// window is full the server's writes block.
				probeUntilOK(t, s)
			},
		},
		{
			name: "guard/slowloris/stalled-uploader-frees-slot",
			cfg:  pacing,
			run: func(t *testing.T, s *servertest.Stack) {
				c := dialRaw(t, s.Server)
				writeRaw(t, c, "POST /upload HTTP/1.1\r\nHost: "+servertest.AppHost+"\r\nContent-Length: 1000000\r\n\r\n0123456789")
				if got := readStatus(t, c); got != http.StatusRequestTimeout {
					t.Errorf("stalled upload: status %d, want 408", got)
				}
				probeUntilOK(t, s)
			},
		},
		{
			name: "guard/slowloris/trickle-uploader-frees-slot",
			cfg:  pacing,
			run: func(t *testing.T, s *servertest.Stack) {
				c := dialRaw(t, s.Server)
				writeRaw(t, c, "POST /upload HTTP/1.1\r\nHost: "+servertest.AppHost+"\r\nContent-Length: 1000000\r\n\r\n")
				// One byte every 50 ms: never idle for visitor_idle_timeout,
				// far below visitor_min_bytes_per_second.
				trickle(t, c, 50*time.Millisecond)
				if got := readStatus(t, c); got != http.StatusRequestTimeout {
					t.Errorf("trickled upload: status %d, want 408", got)
				}
				probeUntilOK(t, s)
			},
		},
		{
			name: "guard/slowloris/quiet-sse-backend-outlives-idle-timeout",
			cfg:  pacing,
			run: func(t *testing.T, s *servertest.Stack) {
				ctx, cancel := context.WithTimeout(t.Context(), servertest.WaitFor)
				defer cancel()
				resp, body := servertest.Do(t, s.Visitor, servertest.NewRequest(t, ctx, s.Server, http.MethodGet, servertest.AppHost, "/sse", nil))
				if resp.StatusCode != http.StatusOK || body != "data: 1\n\ndata: 2\n\n" {
					t.Errorf("GET /sse = %d %q, want 200 with both events", resp.StatusCode, body)
				}
			},
		},
		{
			name: "guard/slowloris/tunnel-silent-after-upgrade-dropped",
			cfg:  func(c *server.Config) { c.Tunnel.HandshakeTimeout = 200 * time.Millisecond },
			run: func(t *testing.T, s *servertest.Stack) {
				c := dialRaw(t, s.Server)
				writeRaw(t, c, "GET /aperio/tunnel HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
					"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"+
					"Sec-WebSocket-Protocol: aperio-tunnel.v1\r\nAuthorization: Bearer "+servertest.Token+"\r\n\r\n")
				if got := readStatus(t, c); got != http.StatusSwitchingProtocols {
					t.Fatalf("tunnel upgrade: status %d, want 101", got)
				}
				// The client says nothing; the server must hang up well
				// before the protocol's default of 10s.
				expectClosedWithin(t, c, 3*time.Second)
			},
		},
		{
			name:  "guard/flood",
			cfg:   func(c *server.Config) { c.MaxConnectionsPerIP = 4 },
			stack: startBareServer,
			run: func(t *testing.T, s *servertest.Stack) {
				// No agent and no client of the harness: every connection
				// from 127.0.0.1 is one of these.
				const probe = "GET /aperio/healthz HTTP/1.1\r\nHost: " + servertest.AppHost + "\r\n\r\n"
				var held []net.Conn
				for range 4 {
					c := dialRaw(t, s.Server)
					writeRaw(t, c, probe)
					if got := readStatus(t, c); got != http.StatusOK {
						t.Fatalf("connection within the cap: status %d, want 200", got)
					}
					held = append(held, c)
				}
				over := dialRaw(t, s.Server)
				writeRaw(t, over, probe)
				expectClosed(t, over)
				held[0].Close()
				// Its slot comes back: a new connection is served again.
				servertest.Poll(t, servertest.WaitFor, func() (bool, string) {
					status, err := rawStatus(s.Server, probe)
					return status == http.StatusOK, fmt.Sprintf("after closing one: status %d, err %v", status, err)
				})
			},
		},
		{
			name: "guard/flood/trusted-proxy-exempt",
			cfg: func(c *server.Config) {
				c.MaxConnectionsPerIP = 2
				c.TrustedProxies = []string{"127.0.0.1/32"}
			},
			stack: startBareServer,
			run: func(t *testing.T, s *servertest.Stack) {
				// A trusted proxy carries many visitors on its connections:
				// the per-address cap does not apply to it.
				const probe = "GET /aperio/healthz HTTP/1.1\r\nHost: " + servertest.AppHost + "\r\n\r\n"
				for i := range 5 {
					c := dialRaw(t, s.Server)
					writeRaw(t, c, probe)
					if got := readStatus(t, c); got != http.StatusOK {
						t.Fatalf("connection %d from a trusted proxy: status %d, want 200", i+1, got)
					}
				}
			},
		},
		{
			name: "guard/slowloris",
			cfg:  func(c *server.Config) { c.ReadHeaderTimeout = 200 * time.Millisecond },
			run: func(t *testing.T, s *servertest.Stack) {
				c := dialRaw(t, s.Server)
				writeRaw(t, c, "GET / HTTP/1.1\r\nHost: "+servertest.AppHost+"\r\nX-Slow: ")
				trickle(t, c, 50*time.Millisecond)
				// Well before net/http's 10s default.
				expectClosedWithin(t, c, 3*time.Second)
			},
		},
		{
			name: "guard/oversize/head",
			cfg:  func(c *server.Config) { c.MaxHeaderBytes = 4 << 10 },
			run: func(t *testing.T, s *servertest.Stack) {
				expectRaw(t, s, "GET / HTTP/1.1\r\nHost: "+servertest.AppHost+"\r\nX-Big: "+strings.Repeat("a", 16<<10)+"\r\n\r\n",
					http.StatusRequestHeaderFieldsTooLarge)
			},
		},
		{
			name: "guard/oversize/body",
			cfg:  func(c *server.Config) { c.Router.MaxBodyBytes = 1000 },
			run: func(t *testing.T, s *servertest.Stack) {
				expectRaw(t, s, "POST /upload HTTP/1.1\r\nHost: "+servertest.AppHost+"\r\nContent-Length: 5000\r\n\r\n"+strings.Repeat("a", 5000),
					http.StatusRequestEntityTooLarge)
			},
		},
		{
			name: "guard/oversize/chunked-body",
			cfg:  func(c *server.Config) { c.Router.MaxBodyBytes = 1000 },
			run: func(t *testing.T, s *servertest.Stack) {
				expectRaw(t, s, "POST /upload HTTP/1.1\r\nHost: "+servertest.AppHost+"\r\nTransfer-Encoding: chunked\r\n\r\n1388\r\n"+strings.Repeat("a", 5000)+"\r\n0\r\n\r\n",
					http.StatusRequestEntityTooLarge)
			},
		},
		{
			name: "guard/smuggling/cl-te",
			run: func(t *testing.T, s *servertest.Stack) {
				c := dialRaw(t, s.Server)
				writeRaw(t, c, "POST /upload HTTP/1.1\r\nHost: "+servertest.AppHost+"\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
				if got := readStatus(t, c); got != http.StatusBadRequest {
					t.Errorf("CL+TE: status %d, want 400", got)
				}
				expectClosed(t, c)
			},
		},
		{
			// Framing is followed across bodies of both kinds: the third
			// request, after a chunked and a Content-Length body, is the one
			// refused.
			name: "guard/smuggling/cl-te-pipelined",
			run: func(t *testing.T, s *servertest.Stack) {
				c := dialRaw(t, s.Server)
				// A body that looks like headers must not be read as one.
				decoy := "Transfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n"
				writeRaw(t, c, "POST /upload HTTP/1.1\r\nHost: "+servertest.AppHost+"\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n0\r\nX-T: 1\r\n\r\n"+
					"POST /upload HTTP/1.1\r\nHost: "+servertest.AppHost+"\r\nContent-Length: "+strconv.Itoa(len(decoy))+"\r\n\r\n"+decoy+
					"POST /upload HTTP/1.1\r\nHost: "+servertest.AppHost+"\r\nTransfer-Encoding: chunked\r\ncontent-length: 4\r\n\r\n0\r\n\r\n")
				if err := c.SetReadDeadline(time.Now().Add(servertest.WaitFor)); err != nil {
					t.Fatal(err)
				}
				br := bufio.NewReader(c)
				for i, want := range []struct {
					status int
					body   string
				}{{http.StatusOK, "5"}, {http.StatusOK, strconv.Itoa(len(decoy))}, {http.StatusBadRequest, ""}} {
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						t.Fatalf("answer %d: %v", i, err)
					}
					body, err := io.ReadAll(resp.Body)
					if err != nil {
						t.Fatalf("answer %d body: %v", i, err)
					}
					if resp.StatusCode != want.status || (want.body != "" && string(body) != want.body) {
						t.Errorf("answer %d: %d %q, want %d %q", i, resp.StatusCode, body, want.status, want.body)
					}
				}
				expectClosed(t, c)
			},
		},
		{
			name: "guard/smuggling/duplicate-cl",
			run: func(t *testing.T, s *servertest.Stack) {
				expectRaw(t, s, "POST /upload HTTP/1.1\r\nHost: "+servertest.AppHost+"\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", http.StatusBadRequest)
			},
		},
		{
			// net/http folds the line into one value (RFC 9112 §5.2 allows
			// replacing obs-fold with SP); the backend must see one clean
			// header and the connection must stay in step.
			name: "guard/smuggling/obs-fold",
			run: func(t *testing.T, s *servertest.Stack) {
				expectEcho(t, s, "GET / HTTP/1.1\r\nHost: "+servertest.AppHost+"\r\nX-A: a\r\n b\r\n\r\n", "a b", "")
			},
		},
		{
			// A bare LF ends a header line (RFC 9112 §2.2 permits it); the
			// backend sees two separate headers, re-serialized with CRLF.
			name: "guard/smuggling/bare-lf-header",
			run: func(t *testing.T, s *servertest.Stack) {
				expectEcho(t, s, "GET / HTTP/1.1\r\nHost: "+servertest.AppHost+"\r\nX-A: a\nX-B: b\r\n\r\n", "a", "b")
			},
		},
		{
			name: "guard/smuggling/chunk-bare-lf",
			run: func(t *testing.T, s *servertest.Stack) {
				expectRaw(t, s, "POST /upload HTTP/1.1\r\nHost: "+servertest.AppHost+"\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n", http.StatusBadRequest)
			},
		},
		{
			name: "guard/smuggling/chunk-length-overflow",
			run: func(t *testing.T, s *servertest.Stack) {
				expectRaw(t, s, "POST /upload HTTP/1.1\r\nHost: "+servertest.AppHost+"\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffffff\r\nhello\r\n0\r\n\r\n", http.StatusBadRequest)
			},
		},
		{
			name:  "guard/path/dot-segments-land-where-normalized",
			stack: startSplitStack,
			run: func(t *testing.T, s *servertest.Stack) {
				for _, c := range []struct{ path, backend, uri string }{
					{"/api/../admin", "root", "/admin"},
					{"/api/%2e%2e/admin", "root", "/admin"},
					{"/api/%2E%2E/admin", "root", "/admin"},
					{"/x/../api/secret", "api", "/api/secret"},
					{"/api/./x/.", "api", "/api/x/"},
					{"/%61pi/x", "api", "/api/x"},
					{"/api/a%2Fb?q=/../%2e", "api", "/api/a%2Fb?q=/../%2e"},
					{"/api/%20x", "api", "/api/%20x"},
				} {
					resp := rawResponse(t, s.Server, "GET "+c.path+" HTTP/1.1\r\nHost: "+servertest.AppHost+"\r\n\r\n")
					if got, uri := resp.Header.Get("X-Backend"), resp.Header.Get("X-Got-URI"); resp.StatusCode != http.StatusOK || got != c.backend || uri != c.uri {
						t.Errorf("GET %s: status %d, backend %q got %q; want 200, %q got %q", c.path, resp.StatusCode, got, uri, c.backend, c.uri)
					}
				}
			},
		},
		{
			name:  "guard/path/paths-that-escape-are-refused",
			stack: startSplitStack,
			run: func(t *testing.T, s *servertest.Stack) {
				for _, path := range []string{
					"/..",
					"/../admin",
					"/api/../../admin",
					"/api/%2e%2e/%2E%2E/etc",
					"/api%2F..%2Fadmin",
					"/api/..%2fadmin",
					"/api/..%5Cadmin",
					"/x/../aperio/api/orgs",
				} {
					resp := rawResponse(t, s.Server, "GET "+path+" HTTP/1.1\r\nHost: "+servertest.AppHost+"\r\n\r\n")
					if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("X-Backend") != "" {
						t.Errorf("GET %s: status %d from backend %q, want 400 from the server", path, resp.StatusCode, resp.Header.Get("X-Backend"))
					}
				}
			},
		},
		{
			name:  "guard/connect/h2c-connect-refused",
			stack: connectStack(false),
			run: func(t *testing.T, s *servertest.Stack) {
				if status := h2cConnect(t, s.Server); status != http.StatusMethodNotAllowed {
					t.Errorf("h2c CONNECT = %d, want 405", status)
				}
			},
		},
		{
			name:  "guard/connect/h2c-connect-opt-in",
			stack: connectStack(true),
			run: func(t *testing.T, s *servertest.Stack) {
				if status := h2cConnect(t, s.Server); status != http.StatusOK {
					t.Errorf("h2c CONNECT to allow_connect service = %d, want the backend's 200", status)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each case has its own gateway, agent and backend
			start := tc.stack
			if start == nil {
				start = func(t *testing.T, cfg func(*server.Config)) *servertest.Stack {
					return servertest.StartStack(t, hostileBackend(t), cfg)
				}
			}
			s := start(t, func(c *server.Config) {
				// A response-head timer armed by an aborted upload must not
				// fire while this process runs.
				c.Tunnel.ResponseHeaderTimeout = time.Hour
				if tc.cfg != nil {
					tc.cfg(c)
				}
			})
			tc.run(t, s)
		})
	}
}

// startBareServer starts a gateway alone: no agent, no harness client.
func startBareServer(t *testing.T, cfg func(*server.Config)) *servertest.Stack {
	t.Helper()
	scfg := servertest.Config(t)
	cfg(&scfg)
	return &servertest.Stack{Server: servertest.Start(t, scfg, nil, nil)}
}

// startSplitStack starts one agent publishing two services on servertest.AppHost:
// "api" on the prefix /api and "root" on the rest. Each backend names
// itself in X-Backend and echoes the request target in X-Got-URI.
func startSplitStack(t *testing.T, cfg func(*server.Config)) *servertest.Stack {
	t.Helper()
	echo := func(name string) string {
		return servertest.Backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Backend", name)
			w.Header().Set("X-Got-URI", r.RequestURI)
		})).URL
	}
	api := config.Service{Target: echo("api"), Hostnames: []string{servertest.AppHost}, Path: "/api"}
	root := config.Service{Target: echo("root"), Hostnames: []string{servertest.AppHost}}
	scfg := servertest.Config(t)
	cfg(&scfg)
	srv := servertest.Start(t, scfg, nil, nil)
	ag := servertest.StartAgent(t, srv, servertest.AgentConfig(srv, api, root))
	visitor := servertest.NewVisitor(t, srv)
	servertest.WaitClients(t, visitor, srv, 1)
	return &servertest.Stack{Server: srv, Agent: ag, Visitor: visitor}
}

// connectStack returns a stack starter publishing a backend that answers
// CONNECT with 200, with allow_connect as given.
func connectStack(allow bool) func(t *testing.T, cfg func(*server.Config)) *servertest.Stack {
	return func(t *testing.T, cfg func(*server.Config)) *servertest.Stack {
		t.Helper()
		b := servertest.Backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodConnect {
				http.Error(w, "want CONNECT", http.StatusBadRequest)
			}
		}))
		svc := servertest.Service(b.URL)
		svc.AllowConnect = allow
		return servertest.StartStackFor(t, svc, cfg, false)
	}
}

// h2cConnect sends an HTTP/2 (prior knowledge) CONNECT for servertest.AppHost:80 to s
// and returns the status.
func h2cConnect(t *testing.T, s *servertest.Server) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), servertest.WaitFor)
	defer cancel()
	req := servertest.NewRequest(t, ctx, s, http.MethodConnect, servertest.AppHost+":80", "", nil)
	resp, err := servertest.H2CTransport(t).RoundTrip(req)
	if err != nil {
		t.Fatalf("h2c CONNECT: %v", err)
	}
	defer resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Fatalf("h2c CONNECT answered over %s, want HTTP/2", resp.Proto)
	}
	return resp.StatusCode
}

// rawResponse sends raw on a new connection and returns the answer.
func rawResponse(t testing.TB, s *servertest.Server, raw string) *http.Response {
	t.Helper()
	c := dialRaw(t, s)
	writeRaw(t, c, raw)
	if err := c.SetReadDeadline(time.Now().Add(servertest.WaitFor)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("raw request %.60q: %v", raw, err)
	}
	return resp
}

// pacing gives the stack one global slot and short visitor limits.
func pacing(c *server.Config) {
	c.Router.MaxConcurrentRequests = 1
	c.Router.VisitorIdleTimeout = 300 * time.Millisecond
	c.Router.VisitorMinRate = 512
}

// hostileBackend serves what the cases ask for: /big an endless body,
// /upload reads the body, /sse two events with a quiet spell of a second
// between them, anything else "ok".
func hostileBackend(t testing.TB) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			buf := make([]byte, 32<<10)
			for r.Context().Err() == nil {
				if _, err := w.Write(buf); err != nil {
					return
				}
			}
		case "/upload":
			n, err := io.Copy(io.Discard, r.Body)
			if err != nil {
				return
			}
			fmt.Fprintf(w, "%d", n)
		case "/sse":
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: 1\n\n")
			http.NewResponseController(w).Flush()
			quiet := time.NewTimer(time.Second) // > 3 × visitor_idle_timeout
			defer quiet.Stop()
			select {
			case <-quiet.C:
			case <-r.Context().Done():
				return
			}
			io.WriteString(w, "data: 2\n\n")
		default:
			w.Header().Set("X-Got-A", strings.Join(r.Header.Values("X-A"), "|"))
			w.Header().Set("X-Got-B", strings.Join(r.Header.Values("X-B"), "|"))
			io.WriteString(w, "ok")
		}
	})
}

// probeUntilOK polls GET / until it answers 200: the slot is free again.
func probeUntilOK(t *testing.T, s *servertest.Stack) {
	t.Helper()
	servertest.Poll(t, servertest.WaitFor, func() (bool, string) {
		ctx, cancel := context.WithTimeout(t.Context(), servertest.WaitFor)
		defer cancel()
		status, body, err := servertest.Fetch(s.Visitor, servertest.NewRequest(t, ctx, s.Server, http.MethodGet, servertest.AppHost, "/", nil))
		return status == http.StatusOK, fmt.Sprintf("probe GET / = %d %q %v, want 200", status, body, err)
	})
}

// expectEcho sends raw twice on one connection (the second copy checks
// that the connection stayed in step) and checks that each answer is 200
// and that the backend saw the X-A and X-B values given.
func expectEcho(t testing.TB, s *servertest.Stack, raw, wantA, wantB string) {
	t.Helper()
	c := dialRaw(t, s.Server)
	writeRaw(t, c, raw+raw)
	if err := c.SetReadDeadline(time.Now().Add(servertest.WaitFor)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for i := range 2 {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			t.Fatalf("answer %d body: %v", i, err)
		}
		if a, b := resp.Header.Get("X-Got-A"), resp.Header.Get("X-Got-B"); resp.StatusCode != http.StatusOK || a != wantA || b != wantB {
			t.Errorf("answer %d: status %d, backend saw X-A %q X-B %q; want 200, %q, %q", i, resp.StatusCode, a, b, wantA, wantB)
		}
	}
}

// dialRaw opens a TCP connection to s, closed at cleanup.
func dialRaw(t testing.TB, s *servertest.Server) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatalf("dial %s: %v", s.Addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

func writeRaw(t testing.TB, c net.Conn, raw string) {
	t.Helper()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// readStatus reads one response head from c and returns its status.
func readStatus(t testing.TB, c net.Conn) int {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(servertest.WaitFor)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	return resp.StatusCode
}

// expectClosed fails unless the server closes c (after any answer) within
// servertest.WaitFor.
func expectClosed(t testing.TB, c net.Conn) {
	t.Helper()
	expectClosedWithin(t, c, servertest.WaitFor)
}

// expectClosedWithin fails unless the server closes c within d.
func expectClosedWithin(t testing.TB, c net.Conn, d time.Duration) {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(d)); err != nil {
		t.Fatal(err)
	}
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection still open after %v", d)
	}
}

// trickle writes one byte to c every interval until the test ends or the
// server stops taking them.
func trickle(t testing.TB, c net.Conn, interval time.Duration) {
	var wg sync.WaitGroup
	stop := make(chan struct{})
	t.Cleanup(func() {
		close(stop)
		wg.Wait()
	})
	wg.Go(func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := c.Write([]byte("a")); err != nil {
					return
				}
			}
		}
	})
}

// rawStatus sends raw on a new connection and returns the answer's status.
func rawStatus(s *servertest.Server, raw string) (int, error) {
	c, err := net.Dial("tcp", s.Addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(servertest.WaitFor)); err != nil {
		return 0, err
	}
	if _, err := io.WriteString(c, raw); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err
	}
	return resp.StatusCode, nil
}

// expectRaw sends raw on a new connection and checks the status.
func expectRaw(t testing.TB, s *servertest.Stack, raw string, want int) {
	t.Helper()
	status, err := rawStatus(s.Server, raw)
	if err != nil || status != want {
		t.Errorf("raw request %.60q: status %d, err %v; want %d", raw, status, err, want)
	}
}
