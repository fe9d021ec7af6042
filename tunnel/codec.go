package tunnel

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"net/http/httputil"
	"strconv"
	"sync"

	"github.com/aperio-dev/aperio/internal/bufpool"
)

// Data streams carry plain HTTP/1.1: the server writes a request, the client
// answers with a response, and the stream is reused for the next exchange
// once both bodies are complete. The standard library parses both
// directions; the writers below exist because Request.Write and
// Response.Write add headers of their own (User-Agent) and cannot stream
// trailers that were not declared up front, which gRPC needs.

// writerSize sizes the buffered writer of one exchange: a 32 KiB copy
// buffer plus chunk framing fits, so each chunk leaves as one yamux frame
// (one WebSocket message), and fixed-length bodies go out in 64 KiB frames.
const writerSize = 64<<10 + 512

// writerPool holds exchange writers. A writer is taken for one exchange
// and returned after it, so idle pooled streams hold no write buffer.
var writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, writerSize) }}

// getWriter returns a pooled writer writing to w.
func getWriter(w io.Writer) *bufio.Writer {
	bw := writerPool.Get().(*bufio.Writer)
	bw.Reset(w)
	return bw
}

// putWriter returns bw to the pool; bw must not be used afterwards.
func putWriter(bw *bufio.Writer) {
	bw.Reset(nil)
	writerPool.Put(bw)
}

// framingHeaders are computed by the writers, never copied. Host is
// written from Request.Host: net/http leaves an HTTP/2 request's host
// field in Header too, and a second Host line makes the client refuse the
// request.
var framingHeaders = map[string]bool{
	"Content-Length":    true,
	"Transfer-Encoding": true,
	"Trailer":           true,
	"Host":              true,
}

// lengthHeader carries a response's Content-Length across the tunnel when
// the response travels chunked so that trailers can follow its body (an
// HTTP/2 backend may send both). The client sets it, the server restores
// Content-Length from it and removes it; a backend's own is dropped.
const lengthHeader = "X-Aperio-Content-Length"

// originForm returns the request target to write on the tunnel: always
// origin-form (path and query), or "*" for OPTIONS *, whatever form the
// visitor used. An absolute-form target would let the client's backend
// take its Host from the target instead of from Request.Host, which is
// what the request was routed on.
func originForm(req *http.Request) string {
	if req.Method == http.MethodOptions && (req.RequestURI == "*" || req.URL.Path == "*") {
		return "*"
	}
	u := *req.URL
	u.Scheme, u.Host, u.User, u.Opaque = "", "", nil, ""
	return u.RequestURI()
}

// sendsTrailers reports whether resp may carry trailers, which then need
// chunked framing on the tunnel: it declared them, or it came over HTTP/2,
// where trailers need no declaration and may follow a Content-Length body.
func sendsTrailers(resp *http.Response) bool {
	return len(resp.Trailer) > 0 || resp.ProtoMajor == 2
}

// restoreContentLength undoes the client's lengthHeader on a response read
// from the tunnel.
func restoreContentLength(resp *http.Response) {
	v, ok := resp.Header[lengthHeader]
	if !ok {
		return
	}
	delete(resp.Header, lengthHeader)
	if resp.ContentLength >= 0 || len(v) != 1 {
		return
	}
	if n, err := strconv.ParseInt(v[0], 10, 64); err == nil && n >= 0 {
		resp.ContentLength = n
	}
}

// writeRequestHead writes the request line and headers. chunked selects
// chunked framing for a body of unknown length.
func writeRequestHead(bw *bufio.Writer, req *http.Request, uri string, chunked bool) error {
	bw.WriteString(req.Method)
	bw.WriteByte(' ')
	bw.WriteString(uri)
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(req.Host)
	bw.WriteString("\r\n")
	return writeHeaderFraming(bw, req.Header, req.ContentLength, chunked, true)
}

// writeResponseHead writes the status line and headers of resp.
func writeResponseHead(bw *bufio.Writer, resp *http.Response, chunked, bodyAllowed bool) error {
	bw.WriteString("HTTP/1.1 ")
	bw.WriteString(strconv.Itoa(resp.StatusCode))
	bw.WriteByte(' ')
	text := http.StatusText(resp.StatusCode)
	if text == "" {
		text = "Status"
	}
	bw.WriteString(text)
	bw.WriteString("\r\n")
	return writeHeaderFraming(bw, resp.Header, resp.ContentLength, chunked, bodyAllowed)
}

func writeHeaderFraming(bw *bufio.Writer, h http.Header, contentLength int64, chunked, bodyAllowed bool) error {
	if err := h.WriteSubset(bw, framingHeaders); err != nil {
		return err
	}
	switch {
	case chunked:
		bw.WriteString("Transfer-Encoding: chunked\r\n")
	case contentLength > 0 || (contentLength == 0 && bodyAllowed):
		bw.WriteString("Content-Length: ")
		bw.WriteString(strconv.FormatInt(contentLength, 10))
		bw.WriteString("\r\n")
	}
	_, err := bw.WriteString("\r\n")
	return err
}

// bodyCopier copies one message body onto a stream. It is a named type so
// that its goroutine reads well in stack dumps.
type bodyCopier struct {
	bw      *bufio.Writer
	src     io.Reader
	length  int64 // exact length, or -1 for chunked
	trailer func() http.Header
	// flushEach flushes after every read: streams (SSE, gRPC) must not
	// sit in a buffer waiting for more bytes.
	flushEach bool
}

// errBodyLength reports a body whose size differs from its Content-Length.
var errBodyLength = errors.New("tunnel: body length differs from content-length")

// copy writes the body and, for chunked framing, the terminating chunk and
// trailers. It flushes before returning.
func (c *bodyCopier) copy() error {
	buf := bufpool.NewBuf()
	defer buf.Release()
	var w io.Writer = c.bw
	var cw io.WriteCloser
	if c.length < 0 {
		cw = httputil.NewChunkedWriter(c.bw)
		w = cw
	}
	var written int64
	for {
		n, rerr := c.src.Read(buf.Bytes())
		if n > 0 {
			if c.length >= 0 && written+int64(n) > c.length {
				return errBodyLength
			}
			if _, err := w.Write(buf.Bytes()[:n]); err != nil {
				return err
			}
			written += int64(n)
			buf.Filled(n)
			// At the body's end the final flush below sends this chunk
			// with the terminating one, at once: one frame, not two.
			if c.flushEach && rerr != io.EOF {
				if err := c.bw.Flush(); err != nil {
					return err
				}
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return rerr
		}
	}
	if c.length >= 0 && written != c.length {
		return errBodyLength
	}
	if cw != nil {
		if err := cw.Close(); err != nil {
			return err
		}
		if c.trailer != nil {
			if t := c.trailer(); len(t) > 0 {
				if err := t.Write(c.bw); err != nil {
					return err
				}
			}
		}
		if _, err := c.bw.WriteString("\r\n"); err != nil {
			return err
		}
	}
	return c.bw.Flush()
}

// hopHeaders are meaningful for one connection only and are never
// forwarded (RFC 9110 §7.6.1), except as noted where they are removed.
var hopHeaders = []string{
	"Connection",
	"Proxy-Connection",
	"Keep-Alive",
	"Proxy-Authenticate",
	"Proxy-Authorization",
	"Te",
	"Trailer",
	"Transfer-Encoding",
	"Upgrade",
}

// RemoveHopHeaders deletes hop-by-hop headers from h, including those named
// by its Connection header. It keeps "TE: trailers" (gRPC needs it end to
// end) and, when upgrade is true, Connection and Upgrade themselves.
func RemoveHopHeaders(h http.Header, upgrade bool) {
	for _, v := range h["Connection"] {
		for _, f := range splitComma(v) {
			if upgrade && http.CanonicalHeaderKey(f) == "Upgrade" {
				continue
			}
			h.Del(f)
		}
	}
	trailers := false
	for _, v := range h["Te"] {
		for _, f := range splitComma(v) {
			if f == "trailers" {
				trailers = true
			}
		}
	}
	for _, k := range hopHeaders {
		if upgrade && (k == "Connection" || k == "Upgrade") {
			continue
		}
		delete(h, k)
	}
	if trailers {
		h["Te"] = []string{"trailers"}
	}
	if upgrade {
		h["Connection"] = []string{"Upgrade"}
	}
}

// splitComma splits a comma-separated header value, trimming spaces.
func splitComma(v string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(v); i++ {
		if i == len(v) || v[i] == ',' {
			f := v[start:i]
			for len(f) > 0 && (f[0] == ' ' || f[0] == '\t') {
				f = f[1:]
			}
			for len(f) > 0 && (f[len(f)-1] == ' ' || f[len(f)-1] == '\t') {
				f = f[:len(f)-1]
			}
			if f != "" {
				out = append(out, f)
			}
			start = i + 1
		}
	}
	return out
}

// IsUpgrade reports whether h asks for a protocol upgrade (WebSocket).
func IsUpgrade(h http.Header) bool {
	if h.Get("Upgrade") == "" {
		return false
	}
	for _, v := range h["Connection"] {
		for _, f := range splitComma(v) {
			if http.CanonicalHeaderKey(f) == "Upgrade" {
				return true
			}
		}
	}
	return false
}

// bodyAllowed reports whether a response with this status may have a body.
func bodyAllowed(status int) bool {
	return !(status >= 100 && status <= 199) && status != http.StatusNoContent && status != http.StatusNotModified
}
