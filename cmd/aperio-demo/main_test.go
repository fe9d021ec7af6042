package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// patternBytes returns the first n bytes of every /bytes body.
func patternBytes(n int) []byte {
	return bytes.Repeat([]byte(bytesPattern), n/len(bytesPattern)+1)[:n]
}

func newTestServer(t testing.TB) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(newDemo().routes())
	t.Cleanup(ts.Close)
	return ts
}

func TestEndpoints(t *testing.T) {
	ts := newTestServer(t)

	tests := []struct {
		name        string
		method      string
		target      string
		body        []byte
		wantStatus  int
		wantType    string // Content-Type prefix; empty means not checked
		wantBody    []byte // nil means not checked
		wantBodyLen int64  // checked when wantBody is nil and this is not -1
	}{
		{name: "hello", method: "GET", target: "/", wantStatus: 200, wantType: "text/plain", wantBody: []byte("Hello from Aperio!\n")},
		{name: "hello/head", method: "HEAD", target: "/", wantStatus: 200, wantType: "text/plain", wantBody: []byte{}},
		{name: "hello/post", method: "POST", target: "/", wantStatus: 405, wantBodyLen: -1},
		{name: "healthz", method: "GET", target: "/healthz", wantStatus: 200, wantBody: []byte("ok")},
		{name: "bytes/default", method: "GET", target: "/bytes", wantStatus: 200, wantType: "application/octet-stream", wantBody: patternBytes(1 << 20)},
		{name: "bytes/zero", method: "GET", target: "/bytes?n=0", wantStatus: 200, wantBody: []byte{}},
		{name: "bytes/ten", method: "GET", target: "/bytes?n=10", wantStatus: 200, wantBody: []byte("0123456789")},
		{name: "bytes/odd", method: "GET", target: "/bytes?n=100003", wantStatus: 200, wantBody: patternBytes(100003)},
		{name: "bytes/large", method: "GET", target: "/bytes?n=67108864", wantStatus: 200, wantBodyLen: 64 << 20},
		{name: "bytes/head", method: "HEAD", target: "/bytes?n=5", wantStatus: 200, wantBody: []byte{}},
		{name: "bytes/negative", method: "GET", target: "/bytes?n=-1", wantStatus: 400, wantBodyLen: -1},
		{name: "bytes/garbage", method: "GET", target: "/bytes?n=lots", wantStatus: 400, wantBodyLen: -1},
		{name: "upload/post", method: "POST", target: "/upload", body: patternBytes(100003), wantStatus: 200, wantType: "application/json", wantBody: []byte(`{"bytes":100003}` + "\n")},
		{name: "upload/put", method: "PUT", target: "/upload", body: patternBytes(5 << 20), wantStatus: 200, wantBody: []byte(`{"bytes":5242880}` + "\n")},
		{name: "upload/empty", method: "POST", target: "/upload", wantStatus: 200, wantBody: []byte(`{"bytes":0}` + "\n")},
		{name: "upload/get", method: "GET", target: "/upload", wantStatus: 405, wantBodyLen: -1},
		{name: "sse", method: "GET", target: "/sse?n=3&interval=1ms", wantStatus: 200, wantType: "text/event-stream", wantBody: []byte(
			"id: 1\nevent: tick\ndata: tick 1 of 3\n\n" +
				"id: 2\nevent: tick\ndata: tick 2 of 3\n\n" +
				"id: 3\nevent: tick\ndata: tick 3 of 3\n\n")},
		{name: "sse/none", method: "GET", target: "/sse?n=0", wantStatus: 200, wantBody: []byte{}},
		{name: "sse/bad-interval", method: "GET", target: "/sse?interval=0s", wantStatus: 400, wantBodyLen: -1},
		{name: "sse/bad-n", method: "GET", target: "/sse?n=x", wantStatus: 400, wantBodyLen: -1},
		{name: "not-found", method: "GET", target: "/nope", wantStatus: 404, wantBodyLen: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), tt.method, ts.URL+tt.target, bytes.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := ts.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			got, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("%s %s: reading body: %v", tt.method, tt.target, err)
			}
			if resp.StatusCode != tt.wantStatus {
				t.Errorf("%s %s status = %d, want %d (body %q)", tt.method, tt.target, resp.StatusCode, tt.wantStatus, got)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, tt.wantType) {
				t.Errorf("%s %s Content-Type = %q, want prefix %q", tt.method, tt.target, ct, tt.wantType)
			}
			switch {
			case tt.wantBody != nil:
				if !bytes.Equal(got, tt.wantBody) {
					t.Errorf("%s %s body = %q (%d bytes), want %q (%d bytes)", tt.method, tt.target, truncate(got), len(got), truncate(tt.wantBody), len(tt.wantBody))
				}
			case tt.wantBodyLen >= 0:
				if int64(len(got)) != tt.wantBodyLen {
					t.Errorf("%s %s body length = %d, want %d", tt.method, tt.target, len(got), tt.wantBodyLen)
				}
			}
			if tt.method == "GET" && tt.wantStatus == 200 && resp.ContentLength < 0 && !strings.HasPrefix(tt.target, "/sse") {
				t.Errorf("%s %s Content-Length unset, want %d", tt.method, tt.target, len(got))
			}
		})
	}
}

func truncate(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

func TestEcho(t *testing.T) {
	ts := newTestServer(t)
	req, err := http.NewRequestWithContext(t.Context(), "GET", ts.URL+"/echo?x=1", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "app.example.test"
	req.Header.Set("X-Forwarded-For", "203.0.113.7")
	req.Header.Set("X-Forwarded-Proto", "https")
	req.Header.Add("X-Multi", "a")
	req.Header.Add("X-Multi", "b")
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /echo status = %d, want 200", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("GET /echo Content-Type = %q, want application/json", ct)
	}
	var got echoResponse
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatalf("decoding /echo: %v", err)
	}
	for _, c := range []struct{ field, got, want string }{
		{"method", got.Method, "GET"},
		{"proto", got.Proto, "HTTP/1.1"},
		{"host", got.Host, "app.example.test"},
		{"path", got.Path, "/echo"},
		{"query", got.Query, "x=1"},
		{"X-Forwarded-For", got.Headers.Get("X-Forwarded-For"), "203.0.113.7"},
		{"X-Forwarded-Proto", got.Headers.Get("X-Forwarded-Proto"), "https"},
		{"X-Multi", strings.Join(got.Headers.Values("X-Multi"), ","), "a,b"},
	} {
		if c.got != c.want {
			t.Errorf("GET /echo %s = %q, want %q", c.field, c.got, c.want)
		}
	}
	if got.RemoteAddr == "" {
		t.Errorf("GET /echo remote_addr is empty")
	}
}

// discardWriter is a ResponseWriter that keeps nothing, so that
// TestBytesAllocs counts only the handler's allocations.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(int)             {}

func TestBytesAllocs(t *testing.T) {
	d := newDemo()
	allocs := func(n int) float64 {
		req := httptest.NewRequest("GET", "/bytes?n="+strconv.Itoa(n), nil)
		w := &discardWriter{h: make(http.Header)}
		return testing.AllocsPerRun(20, func() {
			clear(w.h)
			d.serveBytes(w, req)
		})
	}
	small, large := allocs(100000), allocs(256<<20)
	if large > small {
		t.Errorf("serveBytes allocs: n=256MiB = %v, want no more than n=100000 (%v)", large, small)
	}
}

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		port     string
		want     config
		wantErr  bool
		wantHelp bool
	}{
		{name: "default", want: config{Listen: "127.0.0.1:3000"}},
		{name: "port-env", port: "8081", want: config{Listen: "127.0.0.1:8081"}},
		{name: "flag", args: []string{"--listen", "127.0.0.1:9000"}, want: config{Listen: "127.0.0.1:9000"}},
		{name: "flag-wins", args: []string{"--listen=:9000"}, port: "8081", want: config{Listen: ":9000"}},
		{name: "log-level", args: []string{"--log-level", "debug"}, want: config{Listen: "127.0.0.1:3000", LogLevel: slog.LevelDebug}},
		{name: "bad-port", port: "http", wantErr: true},
		{name: "zero-port", port: "0", wantErr: true},
		{name: "bad-level", args: []string{"--log-level", "loud"}, wantErr: true},
		{name: "extra-arg", args: []string{"serve"}, wantErr: true},
		{name: "help", args: []string{"-h"}, wantErr: true, wantHelp: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getenv := func(k string) string {
				if k == "PORT" {
					return tt.port
				}
				return ""
			}
			got, err := parseConfig(tt.args, getenv, io.Discard)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseConfig(%q, PORT=%q) error = %v, want error %v", tt.args, tt.port, err, tt.wantErr)
			}
			if errors.Is(err, flag.ErrHelp) != tt.wantHelp {
				t.Errorf("parseConfig(%q) error = %v, want flag.ErrHelp %v", tt.args, err, tt.wantHelp)
			}
			if err == nil && got != tt.want {
				t.Errorf("parseConfig(%q, PORT=%q) = %+v, want %+v", tt.args, tt.port, got, tt.want)
			}
		})
	}
}

// startServe runs serve on a fresh 127.0.0.1 port and returns its base URL
// and a stop function that cancels it and returns serve's result.
func startServe(t testing.TB) (baseURL string, stop func() error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- serve(ctx, ln, slog.New(slog.DiscardHandler), nil) }()
	var result error
	done := false
	stop = func() error {
		if !done {
			cancel()
			result = <-errc
			done = true
		}
		return result
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("serve() = %v, want nil", err)
		}
	})
	return "http://" + ln.Addr().String(), stop
}

func TestServeProtocols(t *testing.T) {
	baseURL, _ := startServe(t)

	tests := []struct {
		name      string
		protocols func(*http.Protocols)
		wantProto string
	}{
		{name: "http1", protocols: func(p *http.Protocols) { p.SetHTTP1(true) }, wantProto: "HTTP/1.1"},
		{name: "h2c", protocols: func(p *http.Protocols) { p.SetUnencryptedHTTP2(true) }, wantProto: "HTTP/2.0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p http.Protocols
			tt.protocols(&p)
			tr := &http.Transport{Protocols: &p}
			t.Cleanup(tr.CloseIdleConnections)
			client := &http.Client{Transport: tr}

			req, err := http.NewRequestWithContext(t.Context(), "GET", baseURL+"/", nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Proto != tt.wantProto {
				t.Errorf("GET / proto = %s, want %s", resp.Proto, tt.wantProto)
			}
			if resp.StatusCode != http.StatusOK || string(body) != helloBody {
				t.Errorf("GET / = %d %q, want 200 %q", resp.StatusCode, body, helloBody)
			}
		})
	}
}

// TestShutdownEndsSSE checks that cancelling serve's context ends a stream
// that would otherwise run for hours, and that serve then returns nil.
func TestShutdownEndsSSE(t *testing.T) {
	baseURL, stop := startServe(t)

	req, err := http.NewRequestWithContext(t.Context(), "GET", baseURL+"/sse?n=1000&interval=1m", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	first, err := br.ReadString('\n')
	if err != nil {
		t.Fatalf("reading first event: %v", err)
	}
	if first != "id: 1\n" {
		t.Errorf("first SSE line = %q, want %q", first, "id: 1\n")
	}

	if err := stop(); err != nil {
		t.Errorf("serve() after cancel = %v, want nil", err)
	}
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatalf("reading rest of stream: %v", err)
	}
	if want := "event: tick\ndata: tick 1 of 1000\n\n"; string(rest) != want {
		t.Errorf("rest of stream = %q, want %q", rest, want)
	}
}
