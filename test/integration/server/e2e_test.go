package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/buildinfo"
	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/server"
	"github.com/aperio-dev/aperio/internal/server/servertest"
	"github.com/gorilla/websocket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// decodeInspection checks that resp came from the inspect backend and
// returns what it saw.
func decodeInspection(t testing.TB, resp *http.Response, body string) servertest.Inspection {
	t.Helper()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Backend") != "inspect" {
		t.Fatalf("%s %s = %d (X-Backend %q) %q, want 200 from the backend", resp.Request.Method, resp.Request.URL, resp.StatusCode, resp.Header.Get("X-Backend"), body)
	}
	var got servertest.Inspection
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("%s %s body %q: %v", resp.Request.Method, resp.Request.URL, body, err)
	}
	return got
}

func TestHTTP1(t *testing.T) {
	t.Parallel()
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) {
			st := servertest.StartStackFor(t, servertest.Service(servertest.Backend(t, servertest.InspectHandler()).URL), nil, scheme == "https")
			tests := []struct {
				name   string
				method string
				host   string
				path   string
				body   string
				header http.Header
				want   servertest.Inspection
			}{{
				name: "GET", method: "GET", host: servertest.AppHost, path: "/items?id=7",
				want: servertest.Inspection{Method: "GET", Host: servertest.AppHost, RequestURI: "/items?id=7", ForwardedFor: "127.0.0.1", ForwardedProto: scheme, ForwardedHost: servertest.AppHost},
			}, {
				name: "GET keeps Host port and case", method: "GET", host: "App.Test:8443", path: "/",
				want: servertest.Inspection{Method: "GET", Host: "App.Test:8443", RequestURI: "/", ForwardedFor: "127.0.0.1", ForwardedProto: scheme, ForwardedHost: "App.Test:8443"},
			}, {
				name: "POST", method: "POST", host: servertest.AppHost, path: "/submit", body: "name=aperio&n=1",
				want: servertest.Inspection{Method: "POST", Host: servertest.AppHost, RequestURI: "/submit", ForwardedFor: "127.0.0.1", ForwardedProto: scheme, ForwardedHost: servertest.AppHost, Body: "name=aperio&n=1"},
			}, {
				// 127.0.0.1 is no trusted proxy: what it claims is dropped.
				name: "POST drops an untrusted X-Forwarded-For", method: "POST", host: servertest.AppHost, path: "/submit", body: "x",
				header: http.Header{"X-Forwarded-For": {"203.0.113.7"}},
				want:   servertest.Inspection{Method: "POST", Host: servertest.AppHost, RequestURI: "/submit", ForwardedFor: "127.0.0.1", ForwardedProto: scheme, ForwardedHost: servertest.AppHost, Body: "x"},
			}}
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					var body io.Reader
					if tc.body != "" {
						body = strings.NewReader(tc.body)
					}
					req := servertest.NewRequest(t, t.Context(), st.Server, tc.method, tc.host, tc.path, body)
					for k, vv := range tc.header {
						req.Header[k] = vv
					}
					resp, rb := servertest.Do(t, st.Visitor, req)
					if resp.ProtoMajor != 1 {
						t.Errorf("%s %s proto = %s, want HTTP/1.1", tc.method, tc.path, resp.Proto)
					}
					if got := decodeInspection(t, resp, rb); got != tc.want {
						t.Errorf("%s %s: backend saw %+v, want %+v", tc.method, tc.path, got, tc.want)
					}
				})
			}
		})
	}
}

func TestHTTP2(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		tls   bool
		proto string // X-Forwarded-Proto the backend sees
	}{
		{name: "h2c prior knowledge", tls: false, proto: "http"},
		{name: "h2 over TLS", tls: true, proto: "https"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := servertest.StartStackFor(t, servertest.Service(servertest.Backend(t, servertest.InspectHandler()).URL), nil, tc.tls)
			p := new(http.Protocols)
			if tc.tls {
				p.SetHTTP2(true)
			} else {
				p.SetUnencryptedHTTP2(true)
			}
			tr := &http.Transport{Protocols: p, TLSClientConfig: st.Server.TLSClientConfig()}
			t.Cleanup(tr.CloseIdleConnections)
			visitor := &http.Client{Transport: tr}
			for _, method := range []string{"GET", "POST"} {
				var body io.Reader
				wantBody := ""
				if method == "POST" {
					wantBody = "over h2"
					body = strings.NewReader(wantBody)
				}
				resp, rb := servertest.Do(t, visitor, servertest.NewRequest(t, t.Context(), st.Server, method, servertest.AppHost, "/h2", body))
				if resp.ProtoMajor != 2 {
					t.Errorf("%s /h2 proto = %s, want HTTP/2", method, resp.Proto)
				}
				want := servertest.Inspection{Method: method, Host: servertest.AppHost, RequestURI: "/h2", ForwardedFor: "127.0.0.1", ForwardedProto: tc.proto, ForwardedHost: servertest.AppHost, Body: wantBody}
				if got := decodeInspection(t, resp, rb); got != want {
					t.Errorf("%s /h2: backend saw %+v, want %+v", method, got, want)
				}
			}
		})
	}
}

func TestWebSocket(t *testing.T) {
	t.Parallel()
	backendDone := make(chan error, 1)
	echo := servertest.WSEcho("echo: ", backendDone)
	st := servertest.StartStack(t, echo, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	c, resp := servertest.WSDial(t, ctx, st, "/socket")
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("websocket.Dial status = %d, want 101", resp.StatusCode)
	}

	msgs := []struct {
		typ  int
		data []byte
	}{
		{websocket.TextMessage, []byte("hello")},
		{websocket.BinaryMessage, []byte{0, 1, 2, 0xfe, 0xff}},
		{websocket.TextMessage, []byte(strings.Repeat("x", 16<<10))},
		{websocket.TextMessage, []byte("last")},
	}
	// One at a time, then all in flight at once.
	for _, m := range msgs {
		if err := c.WriteMessage(m.typ, m.data); err != nil {
			t.Fatalf("Write(%d bytes) = %v", len(m.data), err)
		}
		typ, got, err := c.ReadMessage()
		if err != nil || typ != m.typ || string(got) != "echo: "+string(m.data) {
			t.Fatalf("Read() = %v, %d bytes, %v, want %v, the echo of %d bytes", typ, len(got), err, m.typ, len(m.data))
		}
	}
	for _, m := range msgs {
		if err := c.WriteMessage(m.typ, m.data); err != nil {
			t.Fatalf("Write(%d bytes) = %v", len(m.data), err)
		}
	}
	for _, m := range msgs {
		typ, got, err := c.ReadMessage()
		if err != nil || typ != m.typ || string(got) != "echo: "+string(m.data) {
			t.Fatalf("pipelined Read() = %v, %d bytes, %v, want %v, the echo of %d bytes", typ, len(got), err, m.typ, len(m.data))
		}
	}
	if err := servertest.WSClose(c, websocket.CloseNormalClosure, "bye"); !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
		t.Fatalf("visitor's close = %v, want the backend's answer with a normal closure", err)
	}
	err := servertest.Wait(t, backendDone, 10*time.Second, "backend end of the WebSocket")
	if !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
		t.Fatalf("backend read after the visitor's close = %v, want a normal closure", err)
	}
}

// startGRPCBackend serves a grpc-go health service over h2c and returns its
// address and the health server to drive.
func startGRPCBackend(t testing.TB) (addr string, hs *grpchealth.Server) {
	t.Helper()
	gs := grpc.NewServer()
	hs = grpchealth.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("net.Listen() = %v", err)
	}
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: gs, Protocols: p}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("gRPC backend Close() = %v", err)
		}
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("gRPC backend Serve() = %v, want %v", err, http.ErrServerClosed)
		}
		gs.Stop()
	})
	return ln.Addr().String(), hs
}

func TestGRPC(t *testing.T) {
	t.Parallel()
	addr, hs := startGRPCBackend(t)
	hs.SetServingStatus("watched", healthpb.HealthCheckResponse_NOT_SERVING)
	st := servertest.StartStackFor(t, servertest.Service("h2c://"+addr), nil, false)

	cc, err := grpc.NewClient("passthrough:///"+st.Server.Addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority(servertest.AppHost))
	if err != nil {
		t.Fatalf("grpc.NewClient(%s) = %v", st.Server.Addr, err)
	}
	t.Cleanup(func() {
		if err := cc.Close(); err != nil {
			t.Errorf("ClientConn.Close() = %v", err)
		}
	})
	client := healthpb.NewHealthClient(cc)

	checks := []struct {
		name       string
		service    string
		wantCode   codes.Code
		wantStatus healthpb.HealthCheckResponse_ServingStatus
	}{
		{name: "server", service: "", wantCode: codes.OK, wantStatus: healthpb.HealthCheckResponse_SERVING},
		{name: "not serving", service: "watched", wantCode: codes.OK, wantStatus: healthpb.HealthCheckResponse_NOT_SERVING},
		// NotFound travels in the grpc-status trailer only.
		{name: "unknown service", service: "no.such.Service", wantCode: codes.NotFound},
	}
	for _, tc := range checks {
		t.Run("Check/"+tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: tc.service})
			if got := status.Code(err); got != tc.wantCode {
				t.Fatalf("Check(%q) = %v, want code %v", tc.service, err, tc.wantCode)
			}
			if got := resp.GetStatus(); err == nil && got != tc.wantStatus {
				t.Fatalf("Check(%q) = %v, want %v", tc.service, got, tc.wantStatus)
			}
		})
	}

	t.Run("Watch", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		stream, err := client.Watch(ctx, &healthpb.HealthCheckRequest{Service: "watched"})
		if err != nil {
			t.Fatalf("Watch(watched) = %v", err)
		}
		first, err := stream.Recv()
		if err != nil || first.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("first Watch update = %v, %v, want NOT_SERVING", first.GetStatus(), err)
		}
		// Sent after the stream started: it must cross while the response
		// is still open.
		hs.SetServingStatus("watched", healthpb.HealthCheckResponse_SERVING)
		second, err := stream.Recv()
		if err != nil || second.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("second Watch update = %v, %v, want SERVING", second.GetStatus(), err)
		}
		cancel()
		if _, err := stream.Recv(); status.Code(err) != codes.Canceled {
			t.Fatalf("Recv after cancel = %v, want code %v", err, codes.Canceled)
		}
	})
}

func TestServerSentEvents(t *testing.T) {
	t.Parallel()
	firstRead := make(chan struct{})
	sse := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		io.WriteString(w, "event: tick\ndata: one\n\n")
		w.(http.Flusher).Flush()
		// The second event is written only once the visitor has the first:
		// if anything on the way buffered it, the test would time out.
		select {
		case <-firstRead:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "event: tick\ndata: two\n\n")
	})
	st := servertest.StartStack(t, sse, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	resp, err := st.Visitor.Do(servertest.NewRequest(t, ctx, st.Server, "GET", servertest.AppHost, "/events", nil))
	if err != nil {
		t.Fatalf("GET /events: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET /events = %d %q, want 200 text/event-stream", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	br := bufio.NewReader(resp.Body)
	readEvent := func() string {
		var lines []string
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("read event: %v after %q", err, lines)
			}
			if line == "\n" {
				return strings.Join(lines, "")
			}
			lines = append(lines, line)
		}
	}
	if got, want := readEvent(), "event: tick\ndata: one\n"; got != want {
		t.Fatalf("first event = %q, want %q", got, want)
	}
	close(firstRead)
	if got, want := readEvent(), "event: tick\ndata: two\n"; got != want {
		t.Fatalf("second event = %q, want %q", got, want)
	}
	if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
		t.Fatalf("after the last event: %q, %v, want EOF", rest, err)
	}
}

// bodyHooks lets a test follow one request through the body backend.
type bodyHooks struct {
	started chan struct{} // closed when the request reaches the backend
	done    chan error    // the backend's io.ReadAll result
}

func TestMaxBodySize(t *testing.T) {
	t.Parallel()
	const limit = 1024
	var hooks atomic.Pointer[bodyHooks]
	backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := hooks.Load()
		close(h.started)
		b, err := io.ReadAll(r.Body)
		if err == nil {
			fmt.Fprintf(w, "%d", len(b))
		}
		h.done <- err
	})
	st := servertest.StartStack(t, backend, func(c *server.Config) { c.Router.MaxBodyBytes = limit })

	tests := []struct {
		name    string
		size    int
		chunked bool // no Content-Length; the body grows as it is sent
		want    int
	}{
		{name: "declared at limit", size: limit, want: http.StatusOK},
		{name: "declared above limit", size: limit + 1, want: http.StatusRequestEntityTooLarge},
		{name: "chunked under limit", size: limit, chunked: true, want: http.StatusOK},
		{name: "chunked past limit", size: 4 * limit, chunked: true, want: http.StatusRequestEntityTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := &bodyHooks{started: make(chan struct{}), done: make(chan error, 1)}
			hooks.Store(h)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			payload := strings.Repeat("b", tc.size)
			var body io.Reader = strings.NewReader(payload)
			if tc.chunked {
				// Half the limit first; the rest only once the backend has
				// the request, so it is seen starting and never completing.
				body = &gatedReader{first: payload[:limit/2], gate: h.started, rest: strings.NewReader(payload[limit/2:]), ctx: ctx}
			}
			req := servertest.NewRequest(t, ctx, st.Server, "POST", servertest.AppHost, "/upload", body)
			if tc.chunked {
				req.ContentLength = -1
			}
			resp, rb := servertest.Do(t, st.Visitor, req)
			if resp.StatusCode != tc.want {
				t.Fatalf("POST %d bytes (chunked %v) = %d %q, want %d", tc.size, tc.chunked, resp.StatusCode, rb, tc.want)
			}
			switch {
			case tc.want == http.StatusOK:
				if err := servertest.Wait(t, h.done, 10*time.Second, "backend read"); err != nil || rb != fmt.Sprint(tc.size) {
					t.Fatalf("backend read %q bytes, %v, want %d, nil", rb, err, tc.size)
				}
			case !tc.chunked:
				// A declared length is refused before dispatch.
				select {
				case <-h.started:
					t.Fatalf("backend saw a request declaring %d bytes, want it refused at the gateway", tc.size)
				default:
				}
				// The visitor is told the bound, never the setting's name.
				if !strings.Contains(rb, "request body too large") || strings.Contains(rb, "max_body_size") {
					t.Errorf("413 body = %q, want the bound without the setting's name", rb)
				}
			default:
				if err := servertest.Wait(t, h.done, 10*time.Second, "backend read"); err == nil {
					t.Fatalf("backend read the whole oversized body, want its read to fail")
				}
			}
		})
	}
}

// gatedReader returns first, then waits for gate to close before returning
// rest.
type gatedReader struct {
	first string
	gate  <-chan struct{}
	rest  io.Reader
	ctx   context.Context
}

func (r *gatedReader) Read(p []byte) (int, error) {
	if r.first != "" {
		n := copy(p, r.first)
		r.first = r.first[n:]
		return n, nil
	}
	select {
	case <-r.gate:
	case <-r.ctx.Done():
		return 0, r.ctx.Err()
	}
	return r.rest.Read(p)
}

func TestResponseTimeout(t *testing.T) {
	t.Parallel()
	cancelled := make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
		close(cancelled)
	})
	st := servertest.StartStack(t, slow, func(c *server.Config) { c.Tunnel.ResponseHeaderTimeout = 200 * time.Millisecond })
	status, body := servertest.Get(t, st.Visitor, st.Server, servertest.AppHost, "/slow")
	if status != http.StatusGatewayTimeout || body != "aperio: "+servertest.AppHost+" did not answer in time\n" {
		t.Fatalf("GET /slow = %d %q, want 504 saying the app did not answer in time (no setting named)", status, body)
	}
	// The abandoned request does not linger at the backend.
	servertest.Wait(t, cancelled, 10*time.Second, "backend request cancelled after the timeout")
}

func TestVisitorCancellation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		method string
		body   string
		h2c    bool
	}{
		{name: "GET HTTP/1.1", method: "GET"},
		{name: "POST HTTP/1.1", method: "POST", body: "payload"},
		{name: "GET h2c", method: "GET", h2c: true},
		{name: "POST h2c", method: "POST", body: "payload", h2c: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			started := make(chan string, 1)
			cancelled := make(chan struct{})
			slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, err := io.ReadAll(r.Body)
				if err != nil {
					b = []byte(err.Error())
				}
				started <- string(b)
				<-r.Context().Done()
				close(cancelled)
			})
			st := servertest.StartStack(t, slow, nil)
			visitor := st.Visitor
			if tc.h2c {
				p := new(http.Protocols)
				p.SetUnencryptedHTTP2(true)
				tr := &http.Transport{Protocols: p}
				t.Cleanup(tr.CloseIdleConnections)
				visitor = &http.Client{Transport: tr}
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
			}
			req := servertest.NewRequest(t, ctx, st.Server, tc.method, servertest.AppHost, "/slow", body)
			errc := make(chan error, 1)
			go func() {
				_, _, err := servertest.Fetch(visitor, req)
				errc <- err
			}()
			if got := servertest.Wait(t, started, 10*time.Second, "request reaching the backend"); got != tc.body {
				t.Fatalf("backend read body %q, want %q", got, tc.body)
			}
			cancel()
			if err := servertest.Wait(t, errc, 10*time.Second, "visitor request"); !errors.Is(err, context.Canceled) {
				t.Fatalf("%s /slow after cancel = %v, want context.Canceled", tc.method, err)
			}
			servertest.Wait(t, cancelled, 10*time.Second, "backend r.Context() ending after the visitor left")
		})
	}
}

func TestUnknownHostname(t *testing.T) {
	t.Parallel()
	st := servertest.StartStack(t, servertest.InspectHandler(), func(c *server.Config) {
		// Long enough that answering after it would fail the bound below:
		// an unknown name must not wait for a client to show up.
		c.Router.GatewayTimeout = time.Minute
	})
	tests := []struct {
		host string
		name string // as the answer names it
	}{
		{host: "other.test", name: "other.test"},
		{host: "Other.Test:8080", name: "other.test"},
		{host: "sub." + servertest.AppHost, name: "sub." + servertest.AppHost},
	}
	for _, tc := range tests {
		t.Run(tc.host, func(t *testing.T) {
			start := time.Now()
			status, body := servertest.Get(t, st.Visitor, st.Server, tc.host, "/")
			if status != http.StatusBadGateway || !strings.Contains(body, tc.name) {
				t.Fatalf("GET / (Host %s) = %d %q, want 502 naming %s", tc.host, status, body, tc.name)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Fatalf("GET / (Host %s) took %v, want an immediate answer", tc.host, d)
			}
		})
	}
}

func TestReconnectAfterServerRestart(t *testing.T) {
	t.Parallel()
	backend := servertest.Backend(t, servertest.InspectHandler())
	cfg := servertest.Config(t)
	first := servertest.Start(t, cfg, nil, nil)
	ag := servertest.StartAgent(t, first, servertest.AgentConfig(first, servertest.Service(backend.URL)))
	visitor := servertest.NewVisitor(t, first)
	servertest.WaitClients(t, visitor, first, 1)
	if status, body := servertest.Get(t, visitor, first, servertest.AppHost, "/before"); status != http.StatusOK {
		t.Fatalf("GET /before = %d %q, want 200", status, body)
	}

	if err := first.Stop(); err != nil {
		t.Fatalf("first Serve() = %v, want nil", err)
	}
	ln, err := net.Listen("tcp", first.Addr)
	if err != nil {
		t.Fatalf("listen again on %s: %v", first.Addr, err)
	}
	second := servertest.Start(t, cfg, ln, nil)
	// Stop the agent while the second server is still up, so its drain
	// reaches a server.
	t.Cleanup(func() {
		if err := ag.Stop(); err != nil {
			t.Errorf("agent Run() = %v, want nil", err)
		}
	})
	visitor2 := servertest.NewVisitor(t, second)
	servertest.WaitClients(t, visitor2, second, 1)
	resp, body := servertest.Do(t, visitor2, servertest.NewRequest(t, t.Context(), second, "GET", servertest.AppHost, "/after", nil))
	if got := decodeInspection(t, resp, body); got.RequestURI != "/after" {
		t.Fatalf("GET /after reached the backend as %q, want /after", got.RequestURI)
	}
}

func TestStopWhileDisconnected(t *testing.T) {
	t.Parallel()
	st := servertest.StartStack(t, servertest.InspectHandler(), nil)
	if err := st.Server.Stop(); err != nil {
		t.Fatalf("Serve() = %v, want nil", err)
	}
	// No server is left to acknowledge the draining flag, so there is
	// nothing to wait for: not drain_timeout (30 s), not the 5 s allowed
	// for a server's ack.
	start := time.Now()
	if err := st.Agent.Stop(); err != nil {
		t.Fatalf("Run() = %v, want nil", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Run took %v to return after its ctx ended with no server, want well under the 5 s ack timeout", d)
	}
}

func TestDrainOnShutdown(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	release := make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(started)
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		io.WriteString(w, "done "+r.URL.Path)
	})
	// A short gateway_timeout: while its only client drains, a new request
	// waits that long for another client, then gets 504.
	st := servertest.StartStack(t, slow, func(c *server.Config) { c.Router.GatewayTimeout = 200 * time.Millisecond })
	// One request first, so the drain also has to cope with a pooled,
	// idle stream.
	if status, body := servertest.Get(t, st.Visitor, st.Server, servertest.AppHost, "/warm"); status != http.StatusOK || body != "done /warm" {
		t.Fatalf("GET /warm = %d %q, want 200 %q", status, body, "done /warm")
	}

	type result struct {
		status int
		body   string
		err    error
	}
	slowDone := make(chan result, 1)
	slowReq := servertest.NewRequest(t, t.Context(), st.Server, "GET", servertest.AppHost, "/slow", nil)
	go func() {
		status, body, err := servertest.Fetch(st.Visitor, slowReq)
		slowDone <- result{status, body, err}
	}()
	servertest.Wait(t, started, 10*time.Second, "slow request reaching the backend")

	runErr := make(chan error, 1)
	go func() { runErr <- st.Agent.Stop() }()
	// Draining is in force once new requests no longer reach the client:
	// they wait for another one and time out.
	servertest.Poll(t, servertest.WaitFor, func() (bool, string) {
		status, body := servertest.Get(t, st.Visitor, st.Server, servertest.AppHost, "/new")
		return status == http.StatusGatewayTimeout, fmt.Sprintf("GET /new while draining = %d %q, want 504", status, body)
	})
	select {
	case err := <-runErr:
		t.Fatalf("Run() = %v with a request still in flight, want it to wait", err)
	default:
	}
	close(release)
	if got := servertest.Wait(t, slowDone, 10*time.Second, "slow request"); got.err != nil || got.status != http.StatusOK || got.body != "done /slow" {
		t.Fatalf("in-flight GET /slow = %d %q, %v, want 200 %q", got.status, got.body, got.err, "done /slow")
	}
	// drain_timeout is 30 s: returning well before it means the drain
	// ended because nothing was in flight any more.
	if err := servertest.Wait(t, runErr, 10*time.Second, "Run returning after the drain"); err != nil {
		t.Fatalf("Run() = %v, want nil", err)
	}
	servertest.WaitClients(t, st.Visitor, st.Server, 0)
	// Within client_down_threshold of its client leaving, the hostname
	// waits for it to come back (here: gateway_timeout, then 504).
	if status, body := servertest.Get(t, st.Visitor, st.Server, servertest.AppHost, "/after"); status != http.StatusGatewayTimeout || !strings.Contains(body, servertest.AppHost) {
		t.Fatalf("GET /after the client left = %d %q, want 504 naming %s", status, body, servertest.AppHost)
	}
}

func TestHealthProbes(t *testing.T) {
	t.Parallel()
	var healthy atomic.Bool
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			if !healthy.Load() {
				http.Error(w, "not yet", http.StatusServiceUnavailable)
			}
			return
		}
		io.WriteString(w, "app")
	})
	svc := servertest.Service(servertest.Backend(t, h).URL)
	svc.Health = config.Health{Endpoint: "/healthz", Interval: 50 * time.Millisecond, Timeout: time.Second, Threshold: 1}
	// With no healthy client, a request waits gateway_timeout for one.
	st := servertest.StartStackFor(t, svc, func(c *server.Config) { c.Router.GatewayTimeout = 200 * time.Millisecond }, false)

	steps := []struct {
		name    string
		healthy bool
		want    int
	}{
		{name: "probe failing from the start", healthy: false, want: http.StatusGatewayTimeout},
		{name: "probe passing", healthy: true, want: http.StatusOK},
		{name: "probe failing again", healthy: false, want: http.StatusGatewayTimeout},
	}
	for _, step := range steps {
		healthy.Store(step.healthy)
		servertest.Poll(t, servertest.WaitFor, func() (bool, string) {
			status, body := servertest.Get(t, st.Visitor, st.Server, servertest.AppHost, "/")
			return status == step.want, fmt.Sprintf("%s: GET / = %d %q, want %d", step.name, status, body, step.want)
		})
		// The tunnel stays up whatever the backend's health.
		if got := servertest.Health(t, st.Visitor, st.Server).ConnectedClients; got != 1 {
			t.Fatalf("%s: connected_clients = %d, want 1", step.name, got)
		}
	}
}

func TestHealthEndpoints(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	release := make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "finished")
	})
	st := servertest.StartStack(t, slow, nil)

	status, body := servertest.Get(t, st.Visitor, st.Server, "any.host", "/aperio/health")
	if status != http.StatusOK {
		t.Fatalf("GET /aperio/health = %d %q, want 200", status, body)
	}
	var fields map[string]any
	if err := json.Unmarshal([]byte(body), &fields); err != nil {
		t.Fatalf("GET /aperio/health body %q: %v", body, err)
	}
	wantFields := []struct {
		name string
		want any
	}{
		{name: "status", want: "healthy"},
		{name: "version", want: buildinfo.Version()},
		{name: "connected_clients", want: float64(1)},
	}
	for _, f := range wantFields {
		if got := fields[f.name]; got != f.want {
			t.Errorf("GET /aperio/health %s = %#v, want %#v", f.name, got, f.want)
		}
	}
	if up, ok := fields["uptime_seconds"].(float64); !ok || up < 0 || up != float64(int64(up)) {
		t.Errorf("GET /aperio/health uptime_seconds = %#v, want a whole number >= 0", fields["uptime_seconds"])
	}

	probes := []struct {
		path       string
		wantStatus int
		wantBody   string
	}{
		{path: "/aperio/healthz", wantStatus: http.StatusOK, wantBody: ""},
		{path: "/aperio/readyz", wantStatus: http.StatusOK, wantBody: ""},
	}
	for _, p := range probes {
		if status, body := servertest.Get(t, st.Visitor, st.Server, "any.host", p.path); status != p.wantStatus || body != p.wantBody {
			t.Errorf("GET %s = %d %q, want %d %q", p.path, status, body, p.wantStatus, p.wantBody)
		}
	}

	// Hold a visitor request open so that shutdown stays in progress.
	slowDone := make(chan error, 1)
	slowReq := servertest.NewRequest(t, t.Context(), st.Server, "GET", servertest.AppHost, "/slow", nil)
	go func() {
		status, body, err := servertest.Fetch(st.Visitor, slowReq)
		if err == nil && (status != http.StatusOK || body != "finished") {
			err = fmt.Errorf("status %d, body %q, want 200 %q", status, body, "finished")
		}
		slowDone <- err
	}()
	servertest.Wait(t, started, 10*time.Second, "slow request reaching the backend")
	serveErr := make(chan error, 1)
	go func() { serveErr <- st.Server.Stop() }()

	// The listener closes as shutdown begins, so readyz is asked through
	// the gateway's handler: the same code a connection still open (or a
	// second listener) would reach.
	readyz := func() (int, string) {
		rec := httptest.NewRecorder()
		st.Server.Gateway.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/aperio/readyz", nil))
		return rec.Code, rec.Body.String()
	}
	servertest.Poll(t, servertest.WaitFor, func() (bool, string) {
		status, body := readyz()
		return status == http.StatusServiceUnavailable, fmt.Sprintf("readyz during shutdown = %d %q, want 503", status, body)
	})
	select {
	case err := <-serveErr:
		t.Fatalf("Serve() = %v with a request in flight, want it to wait", err)
	default:
	}
	close(release)
	if err := servertest.Wait(t, slowDone, 10*time.Second, "in-flight request"); err != nil {
		t.Fatalf("in-flight GET /slow during shutdown: %v", err)
	}
	if err := servertest.Wait(t, serveErr, 20*time.Second, "Serve returning"); err != nil {
		t.Fatalf("Serve() = %v, want nil", err)
	}
	if status, _ := readyz(); status != http.StatusServiceUnavailable {
		t.Fatalf("readyz after shutdown = %d, want 503", status)
	}
}
