package tunnel

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// pipeWrite runs write on one end of a net.Pipe with a pooled exchange
// writer, closing that end afterwards, and returns a reader of the other
// end and the channel that receives write's error. net.Pipe has no
// buffer, so the writer runs in its own goroutine.
func pipeWrite(t testing.TB, write func(bw *bufio.Writer) error) (*bufio.Reader, <-chan error) {
	t.Helper()
	w, r := net.Pipe()
	t.Cleanup(func() {
		w.Close()
		r.Close()
	})
	done := make(chan error, 1)
	go func() {
		bw := getWriter(w)
		err := write(bw)
		putWriter(bw)
		w.Close()
		done <- err
	}()
	return bufio.NewReader(r), done
}

// readAll reads body to its end and closes it.
func readAll(t testing.TB, body io.ReadCloser) string {
	t.Helper()
	defer body.Close()
	b, err := io.ReadAll(body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return string(b)
}

// writeRequest writes req as the server does: its head, then its body
// framed by length or chunked, with trailers after a chunked body.
func writeRequest(bw *bufio.Writer, req *http.Request) error {
	hasBody := req.Body != nil && req.Body != http.NoBody && req.ContentLength != 0
	chunked := hasBody && req.ContentLength < 0
	if err := writeRequestHead(bw, req, originForm(req), chunked); err != nil {
		return err
	}
	if !hasBody {
		return bw.Flush()
	}
	bc := &bodyCopier{bw: bw, src: req.Body, length: req.ContentLength, flushEach: chunked}
	if chunked {
		bc.trailer = func() http.Header { return req.Trailer }
	}
	return bc.copy()
}

// checkHeaders fails unless got holds every field of want with the same
// values; what names the header block in the failure.
func checkHeaders(t testing.TB, what string, want, got http.Header) {
	t.Helper()
	for k, v := range want {
		if diff := cmp.Diff(v, got[k]); diff != "" {
			t.Errorf("%s %s (-want +got):\n%s", what, k, diff)
		}
	}
}

// onlyReader hides every method but Read, so that a body has no known
// length.
type onlyReader struct{ io.Reader }

func TestCodecRequest(t *testing.T) {
	tests := []struct {
		name     string
		req      func() *http.Request
		wantURI  string
		wantHost string
		wantLen  int64
		wantTE   []string
		wantBody string
		wantHdr  http.Header // a subset of the headers read
		wantTrl  http.Header
	}{
		{
			name:     "get without body",
			req:      func() *http.Request { return httptest.NewRequest("GET", "http://app.test/a/b?q=1", nil) },
			wantURI:  "/a/b?q=1",
			wantHost: "app.test",
		},
		{
			name: "fixed-length body",
			req: func() *http.Request {
				r := httptest.NewRequest("POST", "http://app.test/upload", strings.NewReader("hello"))
				r.Header.Set("Content-Type", "text/plain")
				return r
			},
			wantURI:  "/upload",
			wantHost: "app.test",
			wantLen:  5,
			wantBody: "hello",
			wantHdr:  http.Header{"Content-Type": {"text/plain"}},
		},
		{
			name: "chunked body with trailers",
			req: func() *http.Request {
				r := httptest.NewRequest("POST", "http://app.test/stream", onlyReader{strings.NewReader("part one, part two")})
				r.ContentLength = -1
				r.Trailer = http.Header{"Grpc-Status": {"0"}}
				return r
			},
			wantURI:  "/stream",
			wantHost: "app.test",
			wantLen:  -1,
			wantTE:   []string{"chunked"},
			wantBody: "part one, part two",
			wantTrl:  http.Header{"Grpc-Status": {"0"}},
		},
		{
			name: "absolute-form target goes out in origin form",
			req: func() *http.Request {
				r := httptest.NewRequest("GET", "http://app.test/x", nil)
				r.URL.Host = "other.test"
				r.URL.User = nil
				return r
			},
			wantURI:  "/x",
			wantHost: "app.test",
		},
		{
			name: "options asterisk",
			req: func() *http.Request {
				r := httptest.NewRequest("OPTIONS", "http://app.test/", nil)
				r.RequestURI, r.URL.Path = "*", "*"
				return r
			},
			wantURI:  "*",
			wantHost: "app.test",
		},
		{
			name: "framing and host headers are computed, not copied",
			req: func() *http.Request {
				r := httptest.NewRequest("POST", "http://app.test/", strings.NewReader("abc"))
				r.Header.Set("Host", "forged.test")
				r.Header.Set("Content-Length", "999")
				r.Header.Set("Transfer-Encoding", "chunked")
				r.Header.Set("Trailer", "X-Forged")
				r.Header.Set("X-Kept", "yes")
				return r
			},
			wantURI:  "/",
			wantHost: "app.test",
			wantLen:  3,
			wantBody: "abc",
			wantHdr:  http.Header{"X-Kept": {"yes"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := tt.req()
			br, done := pipeWrite(t, func(bw *bufio.Writer) error { return writeRequest(bw, req) })
			got, err := http.ReadRequest(br)
			if err != nil {
				t.Fatalf("ReadRequest() error = %v", err)
			}
			body := readAll(t, got.Body)
			if err := <-done; err != nil {
				t.Fatalf("writing the request: %v", err)
			}
			if got.Method != req.Method || got.RequestURI != tt.wantURI || got.Host != tt.wantHost {
				t.Errorf("request line = %s %s (Host %s), want %s %s (Host %s)", got.Method, got.RequestURI, got.Host, req.Method, tt.wantURI, tt.wantHost)
			}
			if got.ContentLength != tt.wantLen || !slices.Equal(got.TransferEncoding, tt.wantTE) {
				t.Errorf("framing = length %d, transfer-encoding %q; want %d, %q", got.ContentLength, got.TransferEncoding, tt.wantLen, tt.wantTE)
			}
			if body != tt.wantBody {
				t.Errorf("body = %q, want %q", body, tt.wantBody)
			}
			if _, ok := got.Header["Host"]; ok {
				t.Errorf("Host read as a header field %q, want only the request's Host", got.Header["Host"])
			}
			checkHeaders(t, "header", tt.wantHdr, got.Header)
			if len(tt.wantTrl) == 0 && len(got.Trailer) != 0 {
				t.Errorf("trailer = %v, want none", got.Trailer)
			}
			checkHeaders(t, "trailer", tt.wantTrl, got.Trailer)
		})
	}
}

func TestCodecResponse(t *testing.T) {
	tests := []struct {
		name     string
		method   string
		resp     func() *http.Response
		wantLine string // status line as read
		wantLen  int64
		wantTE   []string
		wantBody string
		wantTrl  http.Header
		wantHdr  http.Header // a subset of the headers read
		noHdr    []string    // headers that must not arrive
	}{
		{
			name:   "fixed length",
			method: "GET",
			resp: func() *http.Response {
				return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/plain"}}, ContentLength: 5, Body: io.NopCloser(strings.NewReader("hello"))}
			},
			wantLine: "200 OK",
			wantLen:  5,
			wantBody: "hello",
			wantHdr:  http.Header{"Content-Type": {"text/plain"}},
		},
		{
			name:   "unknown length travels chunked",
			method: "GET",
			resp: func() *http.Response {
				return &http.Response{StatusCode: 200, Header: http.Header{}, ContentLength: -1, Body: io.NopCloser(onlyReader{strings.NewReader("event: a\n\n")})}
			},
			wantLine: "200 OK",
			wantLen:  -1,
			wantTE:   []string{"chunked"},
			wantBody: "event: a\n\n",
		},
		{
			name:   "http2 length with undeclared trailers",
			method: "POST",
			resp: func() *http.Response {
				return &http.Response{ProtoMajor: 2, StatusCode: 200, Header: http.Header{"Content-Type": {"application/grpc"}}, ContentLength: 4, Body: io.NopCloser(strings.NewReader("grpc")), Trailer: http.Header{"Grpc-Status": {"0"}, "Grpc-Message": {"ok"}}}
			},
			wantLine: "200 OK",
			wantLen:  4, // restored from the length header
			wantTE:   []string{"chunked"},
			wantBody: "grpc",
			wantTrl:  http.Header{"Grpc-Status": {"0"}, "Grpc-Message": {"ok"}},
			noHdr:    []string{lengthHeader},
		},
		{
			name:   "no content has no body and no length",
			method: "GET",
			resp: func() *http.Response {
				return &http.Response{StatusCode: 204, Header: http.Header{}, Body: http.NoBody}
			},
			wantLine: "204 No Content",
			noHdr:    []string{"Content-Length"},
		},
		{
			name:   "head keeps the length and sends no body",
			method: "HEAD",
			resp: func() *http.Response {
				return &http.Response{StatusCode: 200, Header: http.Header{}, ContentLength: 42, Body: http.NoBody}
			},
			wantLine: "200 OK",
			wantLen:  42,
		},
		{
			name:   "status without text",
			method: "GET",
			resp: func() *http.Response {
				return &http.Response{StatusCode: 599, Header: http.Header{}, ContentLength: 0, Body: http.NoBody}
			},
			wantLine: "599 Status",
		},
		{
			name:   "hop-by-hop and a backend's length header are dropped",
			method: "GET",
			resp: func() *http.Response {
				h := http.Header{
					"Connection":   {"close, X-Hop"},
					"X-Hop":        {"1"},
					"Keep-Alive":   {"timeout=5"},
					lengthHeader:   {"1000"},
					"X-End-To-End": {"kept"},
				}
				return &http.Response{StatusCode: 200, Header: h, ContentLength: 2, Body: io.NopCloser(strings.NewReader("ok"))}
			},
			wantLine: "200 OK",
			wantLen:  2,
			wantBody: "ok",
			wantHdr:  http.Header{"X-End-To-End": {"kept"}},
			noHdr:    []string{"Connection", "X-Hop", "Keep-Alive", lengthHeader},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, "http://app.test/", nil)
			resp := tt.resp()
			br, done := pipeWrite(t, func(bw *bufio.Writer) error { return writeResponse(bw, req, resp) })
			got, err := http.ReadResponse(br, req)
			if err != nil {
				t.Fatalf("ReadResponse() error = %v", err)
			}
			restoreContentLength(got)
			body := readAll(t, got.Body)
			if err := <-done; err != nil {
				t.Fatalf("writing the response: %v", err)
			}
			if got.Status != tt.wantLine {
				t.Errorf("status = %q, want %q", got.Status, tt.wantLine)
			}
			if got.ContentLength != tt.wantLen || !slices.Equal(got.TransferEncoding, tt.wantTE) {
				t.Errorf("framing = length %d, transfer-encoding %q; want %d, %q", got.ContentLength, got.TransferEncoding, tt.wantLen, tt.wantTE)
			}
			if body != tt.wantBody {
				t.Errorf("body = %q, want %q", body, tt.wantBody)
			}
			checkHeaders(t, "header", tt.wantHdr, got.Header)
			for _, k := range tt.noHdr {
				if v, ok := got.Header[k]; ok {
					t.Errorf("header %s = %q arrived, want it dropped", k, v)
				}
			}
			checkHeaders(t, "trailer", tt.wantTrl, got.Trailer)
		})
	}
}

// TestCodecUpgrade: after a 101 head the stream carries raw bytes in both
// directions, with nothing of the head left in between.
func TestCodecUpgrade(t *testing.T) {
	server, client := net.Pipe()
	t.Cleanup(func() {
		server.Close()
		client.Close()
	})
	req := httptest.NewRequest("GET", "http://app.test/ws", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	if !IsUpgrade(req.Header) {
		t.Fatalf("IsUpgrade(%v) = false, want true", req.Header)
	}

	wrote := make(chan error, 1)
	go func() {
		bw := getWriter(server)
		defer putWriter(bw)
		err := writeRequestHead(bw, req, originForm(req), false)
		if err == nil {
			err = bw.Flush()
		}
		wrote <- err
	}()
	cbr := bufio.NewReader(client)
	got, err := http.ReadRequest(cbr)
	if err != nil {
		t.Fatalf("ReadRequest() error = %v", err)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("writing the upgrade request: %v", err)
	}
	if !IsUpgrade(got.Header) {
		t.Fatalf("upgrade request read with headers %v, want Connection: Upgrade and Upgrade", got.Header)
	}

	resp := &http.Response{StatusCode: 101, Header: http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}}}
	go func() {
		bw := getWriter(client)
		defer putWriter(bw)
		err := writeResponseHead(bw, resp, false, false)
		if err == nil {
			bw.WriteString("from backend")
			err = bw.Flush()
		}
		wrote <- err
	}()
	sbr := bufio.NewReader(server)
	gotResp, err := http.ReadResponse(sbr, req)
	if err != nil {
		t.Fatalf("ReadResponse() error = %v", err)
	}
	if gotResp.StatusCode != 101 || gotResp.ContentLength != 0 || !IsUpgrade(gotResp.Header) {
		t.Fatalf("upgrade response = %d (length %d, headers %v), want 101 with Upgrade and no body", gotResp.StatusCode, gotResp.ContentLength, gotResp.Header)
	}
	// A 101 has no body: what follows its head on the stream is the
	// switched protocol, read from the same reader.
	if body := readAll(t, gotResp.Body); body != "" {
		t.Fatalf("101 body = %q, want none", body)
	}
	raw := make([]byte, len("from backend"))
	if _, err := io.ReadFull(sbr, raw); err != nil {
		t.Fatalf("reading the switched stream: %v", err)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("writing the upgrade response: %v", err)
	}
	if string(raw) != "from backend" {
		t.Errorf("bytes after the 101 head = %q, want %q", raw, "from backend")
	}
	go func() {
		_, err := server.Write([]byte("from visitor"))
		wrote <- err
	}()
	raw = make([]byte, len("from visitor"))
	if _, err := io.ReadFull(cbr, raw); err != nil {
		t.Fatalf("reading the visitor's bytes: %v", err)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("writing the visitor's bytes: %v", err)
	}
	if string(raw) != "from visitor" {
		t.Errorf("visitor bytes after the upgrade = %q, want %q", raw, "from visitor")
	}
}

// failingReader returns its data, then err.
type failingReader struct {
	data string
	err  error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.data == "" {
		return 0, f.err
	}
	n := copy(p, f.data)
	f.data = f.data[n:]
	return n, nil
}

func TestCodecBodyErrors(t *testing.T) {
	errBackend := errors.New("backend went away (test)")
	tests := []struct {
		name   string
		src    io.Reader
		length int64
		want   error
	}{
		{"body longer than its length", strings.NewReader("too long"), 3, errBodyLength},
		{"body shorter than its length", strings.NewReader("ab"), 3, errBodyLength},
		{"source fails mid fixed-length body", &failingReader{"ab", errBackend}, 5, errBackend},
		{"source fails mid chunked body", &failingReader{"ab", errBackend}, -1, errBackend},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			br, done := pipeWrite(t, func(bw *bufio.Writer) error {
				bc := &bodyCopier{bw: bw, src: tt.src, length: tt.length}
				return bc.copy()
			})
			// The reader sees at most what was flushed; the writer's error
			// is what the exchange reports.
			if _, err := io.Copy(io.Discard, br); err != nil {
				t.Fatalf("draining the pipe: %v", err)
			}
			if err := <-done; !errors.Is(err, tt.want) {
				t.Errorf("bodyCopier.copy() = %v, want %v", err, tt.want)
			}
		})
	}

	t.Run("peer gone", func(t *testing.T) {
		w, r := net.Pipe()
		r.Close()
		t.Cleanup(func() { w.Close() })
		bw := getWriter(w)
		defer putWriter(bw)
		bc := &bodyCopier{bw: bw, src: strings.NewReader("data"), length: 4}
		if err := bc.copy(); !errors.Is(err, io.ErrClosedPipe) {
			t.Errorf("bodyCopier.copy() to a closed peer = %v, want io.ErrClosedPipe", err)
		}
	})

	t.Run("chunked body cut short", func(t *testing.T) {
		br, done := pipeWrite(t, func(bw *bufio.Writer) error {
			bw.WriteString("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab")
			return bw.Flush()
		})
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("ReadResponse() error = %v", err)
		}
		defer resp.Body.Close()
		if _, err := io.ReadAll(resp.Body); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("reading a chunked body cut short = %v, want io.ErrUnexpectedEOF", err)
		}
		if err := <-done; err != nil {
			t.Fatalf("writing the response: %v", err)
		}
	})
}

func TestRestoreContentLength(t *testing.T) {
	tests := []struct {
		name   string
		length int64
		values []string // nil: no length header
		want   int64
	}{
		{"absent", -1, nil, -1},
		{"restored", -1, []string{"12"}, 12},
		{"zero", -1, []string{"0"}, 0},
		{"known length wins", 7, []string{"12"}, 7},
		{"not a number", -1, []string{"twelve"}, -1},
		{"negative", -1, []string{"-3"}, -1},
		{"repeated", -1, []string{"12", "12"}, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := &http.Response{Header: http.Header{}, ContentLength: tt.length}
			if tt.values != nil {
				resp.Header[lengthHeader] = tt.values
			}
			restoreContentLength(resp)
			if resp.ContentLength != tt.want {
				t.Errorf("restoreContentLength(%d, %q) length = %d, want %d", tt.length, tt.values, resp.ContentLength, tt.want)
			}
			if _, ok := resp.Header[lengthHeader]; ok {
				t.Errorf("restoreContentLength(%d, %q) left %s in the header", tt.length, tt.values, lengthHeader)
			}
		})
	}
}

func TestRemoveHopHeaders(t *testing.T) {
	tests := []struct {
		name    string
		in      http.Header
		upgrade bool
		want    http.Header
	}{
		{
			name: "hop headers and those Connection names",
			in:   http.Header{"Connection": {"keep-alive, X-Private"}, "X-Private": {"1"}, "Keep-Alive": {"5"}, "Proxy-Authorization": {"x"}, "X-Kept": {"2"}},
			want: http.Header{"X-Kept": {"2"}},
		},
		{
			name: "te trailers survives for grpc",
			in:   http.Header{"Te": {"gzip, trailers"}},
			want: http.Header{"Te": {"trailers"}},
		},
		{
			name: "te without trailers goes",
			in:   http.Header{"Te": {"gzip"}},
			want: http.Header{},
		},
		{
			name:    "upgrade keeps connection and upgrade",
			in:      http.Header{"Connection": {"keep-alive, Upgrade"}, "Upgrade": {"websocket"}, "Keep-Alive": {"5"}},
			upgrade: true,
			want:    http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}},
		},
		{
			name: "upgrade headers go on a plain exchange",
			in:   http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}},
			want: http.Header{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.in.Clone()
			RemoveHopHeaders(h, tt.upgrade)
			if diff := cmp.Diff(tt.want, h); diff != "" {
				t.Errorf("RemoveHopHeaders(%v, %v) (-want +got):\n%s", tt.in, tt.upgrade, diff)
			}
		})
	}
}

func TestIsUpgrade(t *testing.T) {
	tests := []struct {
		name string
		h    http.Header
		want bool
	}{
		{"websocket", http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}}, true},
		{"listed among others", http.Header{"Connection": {"keep-alive , upgrade"}, "Upgrade": {"h2c"}}, true},
		{"second connection line", http.Header{"Connection": {"keep-alive", "Upgrade"}, "Upgrade": {"websocket"}}, true},
		{"upgrade not named by connection", http.Header{"Connection": {"keep-alive"}, "Upgrade": {"websocket"}}, false},
		{"connection without upgrade header", http.Header{"Connection": {"Upgrade"}}, false},
		{"none", http.Header{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := IsUpgrade(tt.h); got != tt.want {
				t.Errorf("IsUpgrade(%v) = %v, want %v", tt.h, got, tt.want)
			}
		})
	}
}

func TestBodyAllowed(t *testing.T) {
	tests := []struct {
		status int
		want   bool
	}{
		{100, false}, {101, false}, {199, false}, {200, true}, {204, false},
		{205, true}, {304, false}, {404, true}, {500, true},
	}
	for _, tt := range tests {
		t.Run(http.StatusText(tt.status), func(t *testing.T) {
			if got := bodyAllowed(tt.status); got != tt.want {
				t.Errorf("bodyAllowed(%d) = %v, want %v", tt.status, got, tt.want)
			}
		})
	}
}

// writeLog records each Write it is given, as one syscall would send it.
type writeLog struct{ writes []string }

func (l *writeLog) Write(p []byte) (int, error) {
	l.writes = append(l.writes, string(p))
	return len(p), nil
}

// scriptedReader returns its reads in turn; before each one after the
// first it calls before, so a test can see what was written by then.
type scriptedReader struct {
	reads  []scriptedRead
	before func(i int)
	i      int
}

type scriptedRead struct {
	data string
	err  error
}

func (r *scriptedReader) Read(p []byte) (int, error) {
	if r.i > 0 && r.before != nil {
		r.before(r.i)
	}
	rd := r.reads[r.i]
	r.i++
	return copy(p, rd.data), rd.err
}

// TestBodyCopierChunkWrites: a streamed body leaves chunk by chunk, each
// written out before the next read; a last chunk read together with the
// body's end leaves in one write with the terminating chunk (#43), where
// it took two.
func TestBodyCopierChunkWrites(t *testing.T) {
	tests := []struct {
		name  string
		reads []scriptedRead
		want  []string
	}{
		{"end with the last chunk", []scriptedRead{{"abc", io.EOF}}, []string{"3\r\nabc\r\n0\r\n\r\n"}},
		{"end alone", []scriptedRead{{"abc", nil}, {"", io.EOF}}, []string{"3\r\nabc\r\n", "0\r\n\r\n"}},
		{"stream", []scriptedRead{{"a", nil}, {"bc", nil}, {"d", io.EOF}}, []string{"1\r\na\r\n", "2\r\nbc\r\n", "1\r\nd\r\n0\r\n\r\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var log writeLog
			src := &scriptedReader{reads: tt.reads}
			src.before = func(i int) {
				// Every chunk read so far is on the wire: nothing waits in
				// the buffer for more.
				if len(log.writes) != i {
					t.Errorf("before read %d: %d writes, want %d", i, len(log.writes), i)
				}
			}
			bc := &bodyCopier{bw: bufio.NewWriter(&log), src: src, length: -1, flushEach: true}
			if err := bc.copy(); err != nil {
				t.Fatalf("copy() = %v", err)
			}
			if diff := cmp.Diff(tt.want, log.writes); diff != "" {
				t.Errorf("writes (-want +got):\n%s", diff)
			}
		})
	}
}
