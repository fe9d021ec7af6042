package tunnel

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/urlpath"
)

// fuzzHeadLimit is the head bound in the fuzz targets: small, so that the
// fuzzer reaches it.
const fuzzHeadLimit = 4 << 10

// fuzzBodyLimit bounds the body bytes a fuzz target reads.
const fuzzBodyLimit = 1 << 20

// Seeds shared by the head targets: the hostile table's heads and the
// framings the codec writes.
var responseHeadSeeds = []string{
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Aperio-Content-Length: 5\r\n\r\n5\r\nhello\r\n0\r\nGrpc-Status: 0\r\n\r\n",
	"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
	"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nX-Huge: " + strings.Repeat("a", 2*fuzzHeadLimit),
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Aperio-Content-Length: -1\r\n\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-Aperio-Content-Length: 9\r\n\r\nabc",
}

var requestHeadSeeds = []string{
	"GET / HTTP/1.1\r\nHost: app.test\r\nX-Aperio-Service: 0\r\n\r\n",
	"POST /upload HTTP/1.1\r\nHost: app.test\r\nContent-Length: 4\r\n\r\nbody",
	"POST /rpc HTTP/1.1\r\nHost: app.test\r\nTransfer-Encoding: chunked\r\nTe: trailers\r\n\r\n3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n",
	"OPTIONS * HTTP/1.1\r\nHost: app.test\r\n\r\n",
	"GET http://internal.test/secret HTTP/1.1\r\nHost: app.test\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: app.test\r\nHost: app.test\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: app.test\r\nX-Huge: " + strings.Repeat("a", 2*fuzzHeadLimit),
}

// FuzzResponseHead parses what the server reads from a client: a response
// head through the head bound, the length the client may restore, and the
// body. It must never panic, and a parsed head never took more than the
// bound plus the reader's buffer.
func FuzzResponseHead(f *testing.F) {
	for _, s := range responseHeadSeeds {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, head bool) {
		req, err := http.NewRequest(http.MethodGet, "http://app.test/", nil)
		if err != nil {
			t.Fatal(err)
		}
		if head {
			req.Method = http.MethodHead
		}
		src := &countingReader{r: bytes.NewReader(data)}
		lim := newHeadLimiter(src, fuzzHeadLimit)
		br := bufio.NewReaderSize(lim, 4096)
		lim.startHead()
		resp, err := http.ReadResponse(br, req)
		lim.endHead()
		if err != nil {
			return
		}
		if src.n > fuzzHeadLimit+4096 {
			t.Fatalf("parsed a head after reading %d bytes, bound %d", src.n, fuzzHeadLimit)
		}
		restoreContentLength(resp)
		if _, ok := resp.Header[lengthHeader]; ok {
			t.Fatalf("%s survived restoreContentLength", lengthHeader)
		}
		if resp.ContentLength < -1 {
			t.Fatalf("ContentLength = %d after restoreContentLength", resp.ContentLength)
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, fuzzBodyLimit))
		resp.Body.Close()
	})
}

// FuzzRequestHead parses what the client reads from the server, and checks
// that a request it accepts goes out again (writeRequestHead, as the
// server writes it) as a request with the same method, host and target.
func FuzzRequestHead(f *testing.F) {
	for _, s := range requestHeadSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		lim := newHeadLimiter(bytes.NewReader(data), fuzzHeadLimit)
		br := bufio.NewReaderSize(lim, 4096)
		lim.startHead()
		req, err := http.ReadRequest(br)
		lim.endHead()
		if err != nil {
			return
		}
		defer req.Body.Close()
		if req.Host == "" || strings.ContainsAny(req.Host, " \r\n") {
			return // the server never routes such a request
		}
		uri := originForm(req)
		var out bytes.Buffer
		bw := bufio.NewWriter(&out)
		if err := writeRequestHead(bw, req, uri, false); err != nil {
			t.Fatal(err)
		}
		if err := bw.Flush(); err != nil {
			t.Fatal(err)
		}
		again, err := http.ReadRequest(bufio.NewReader(&out))
		if err != nil {
			// The visitor-facing server refuses what ReadRequest refuses
			// after a rewrite only for targets net/http would not route.
			if errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("rewritten head %q is truncated: %v", out.String(), err)
			}
			return
		}
		if again.Method != req.Method || again.Host != req.Host || again.RequestURI != uri {
			t.Fatalf("rewritten head = %s %s (Host %s), want %s %s (Host %s)\n%q", again.Method, again.RequestURI, again.Host, req.Method, uri, req.Host, out.String())
		}
		if len(again.Header["Host"]) != 0 {
			t.Fatalf("rewritten head keeps a Host header: %v", again.Header["Host"])
		}
	})
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// FuzzForwardedPath checks Service.ForwardedPath on any path and bind: it
// never panics; what it forwards starts with "/" (or is "*"), holds no dot
// segment, and is the path's normal form (urlpath.Normal), or the tail
// of it after the bind's segments.
func FuzzForwardedPath(f *testing.F) {
	for _, tc := range forwardedPathCases {
		f.Add(tc.bind, tc.in, tc.trim)
	}
	f.Fuzz(func(t *testing.T, bind, in string, trim bool) {
		s := &Service{Path: bind, TrimBind: trim}
		got, pref, err := s.ForwardedPath(in)
		if err != nil {
			if !errors.Is(err, ErrDotSegment) {
				t.Fatalf("ForwardedPath(%q) error = %v, want ErrDotSegment", in, err)
			}
			return
		}
		if got == "*" {
			return
		}
		if !strings.HasPrefix(got, "/") {
			t.Fatalf("ForwardedPath(%q) = %q, does not start with /", in, got)
		}
		if _, _, err := (&Service{}).ForwardedPath(got); err != nil {
			t.Fatalf("ForwardedPath(%q) = %q, which holds a dot segment", in, got)
		}
		norm, err := urlpath.Normal(in)
		if err != nil {
			t.Fatalf("ForwardedPath(%q) = %q, but the path has no normal form: %v", in, got, err)
		}
		switch {
		case pref == "":
			if got != norm {
				t.Fatalf("ForwardedPath(%q) = %q with no prefix, want its normal form %q", in, got, norm)
			}
		case !trim:
			t.Fatalf("ForwardedPath(%q) trimmed %q with trim_bind off", in, pref)
		case got != "/" && !strings.HasSuffix(norm, got):
			t.Fatalf("ForwardedPath(%q) = %q, not a tail of its normal form %q", in, got, norm)
		}
	})
}
