package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
)

const (
	helloBody = "Hello from Aperio!\n"

	// chunkSize is the size of the write buffer behind /bytes and of the
	// read buffers behind /upload.
	chunkSize = 32 << 10

	// bytesPattern fills the /bytes buffer. Its length divides chunkSize, so
	// byte i of any /bytes body is bytesPattern[i%len(bytesPattern)], which
	// keeps the body readable in a terminal and checkable in tests.
	bytesPattern = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-\n"

	defaultBytesN = 1 << 20
	maxBytesN     = 1 << 40 // 1 TiB: large enough for any bench, small enough to catch typos

	defaultSSEN        = 5
	maxSSEN            = 10000
	defaultSSEInterval = 100 * time.Millisecond
	minSSEInterval     = time.Millisecond
	maxSSEInterval     = time.Minute
)

// demo holds the state shared by all requests. It is safe for concurrent use
// once built by newDemo.
type demo struct {
	// chunk is written, never modified, by every /bytes response, so a
	// download of any size costs no allocation per chunk.
	chunk []byte

	// bufs holds *[]byte of chunkSize for draining /upload bodies.
	bufs sync.Pool

	// stopping is closed when the server starts shutting down, so that SSE
	// streams end instead of holding Shutdown for n*interval.
	stopping  chan struct{}
	closeOnce sync.Once

	// provider serves POST /scale when set (--provider-run).
	provider *provider
}

func newDemo() *demo {
	d := &demo{
		chunk:    make([]byte, chunkSize),
		stopping: make(chan struct{}),
	}
	for i := 0; i < len(d.chunk); i += len(bytesPattern) {
		copy(d.chunk[i:], bytesPattern)
	}
	d.bufs.New = func() any {
		b := make([]byte, chunkSize)
		return &b
	}
	return d
}

// shutdown ends running SSE streams. It is idempotent and does not block.
func (d *demo) shutdown() {
	d.closeOnce.Do(func() { close(d.stopping) })
}

// routes returns the handler for all endpoints. Unknown paths get 404 and
// known paths with another method get 405 from http.ServeMux.
func (d *demo) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", d.serveHello)
	mux.HandleFunc("GET /echo", d.serveEcho)
	mux.HandleFunc("GET /bytes", d.serveBytes)
	mux.HandleFunc("POST /upload", d.serveUpload)
	mux.HandleFunc("PUT /upload", d.serveUpload)
	mux.HandleFunc("GET /sse", d.serveSSE)
	mux.HandleFunc("GET /healthz", d.serveHealthz)
	if d.provider != nil {
		mux.HandleFunc("POST /scale", d.provider.serveScale)
	}
	return mux
}

func (d *demo) serveHello(w http.ResponseWriter, r *http.Request) {
	// net/http sets Content-Length itself for a body this small.
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, helloBody)
}

func (d *demo) serveHealthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, "ok")
}

// echoResponse is the JSON body of /echo.
type echoResponse struct {
	Method     string      `json:"method"`
	Proto      string      `json:"proto"`
	Host       string      `json:"host"`
	Path       string      `json:"path"`
	Query      string      `json:"query,omitempty"`
	RemoteAddr string      `json:"remote_addr"`
	Headers    http.Header `json:"headers"`
}

func (d *demo) serveEcho(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, echoResponse{
		Method:     r.Method,
		Proto:      r.Proto,
		Host:       r.Host,
		Path:       r.URL.Path,
		Query:      r.URL.RawQuery,
		RemoteAddr: r.RemoteAddr,
		Headers:    r.Header,
	}, true)
}

func (d *demo) serveBytes(w http.ResponseWriter, r *http.Request) {
	n, err := queryInt(r, "n", defaultBytesN, 0, maxBytesN)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.FormatInt(n, 10))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	for n > 0 {
		p := d.chunk
		if n < int64(len(p)) {
			p = p[:n]
		}
		if _, err := w.Write(p); err != nil {
			return // the client went away; nothing left to tell it
		}
		n -= int64(len(p))
	}
}

// uploadResponse is the JSON body of /upload.
type uploadResponse struct {
	Bytes int64 `json:"bytes"`
}

func (d *demo) serveUpload(w http.ResponseWriter, r *http.Request) {
	bp := d.bufs.Get().(*[]byte)
	n, err := drain(r.Body, *bp)
	d.bufs.Put(bp)
	if err != nil {
		http.Error(w, "reading body: "+err.Error(), http.StatusBadRequest)
		return
	}
	writeJSON(w, http.StatusOK, uploadResponse{Bytes: n}, false)
}

// drain reads r to EOF into buf and reports how many bytes it read. Unlike
// io.Copy(io.Discard, r) it reads chunkSize at a time instead of io.Discard's
// 8 KiB, which quarters the read calls on a large upload.
func drain(r io.Reader, buf []byte) (int64, error) {
	var total int64
	for {
		n, err := r.Read(buf)
		total += int64(n)
		if errors.Is(err, io.EOF) {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

func (d *demo) serveSSE(w http.ResponseWriter, r *http.Request) {
	n, err := queryInt(r, "n", defaultSSEN, 0, maxSSEN)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	interval, err := queryDuration(r, "interval", defaultSSEInterval, minSSEInterval, maxSSEInterval)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // tells nginx-style proxies not to buffer the stream
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if err := rc.Flush(); err != nil {
		return
	}

	// The first event goes out at once and the others one interval apart, so
	// a stream of n events lasts (n-1)*interval.
	t := time.NewTicker(interval)
	defer t.Stop()
	for i := int64(1); i <= n; i++ {
		if i > 1 {
			select {
			case <-t.C:
			case <-r.Context().Done():
				return
			case <-d.stopping:
				return
			}
		}
		if _, err := fmt.Fprintf(w, "id: %d\nevent: tick\ndata: tick %d of %d\n\n", i, i, n); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

// queryInt parses the query parameter name as a decimal integer in
// [lo, hi], or returns def when the parameter is absent or empty.
func queryInt(r *http.Request, name string, def, lo, hi int64) (int64, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < lo || v > hi {
		return 0, fmt.Errorf("%s must be an integer in [%d, %d]", name, lo, hi)
	}
	return v, nil
}

// queryDuration parses the query parameter name as a time.Duration in
// [lo, hi], or returns def when the parameter is absent or empty.
func queryDuration(r *http.Request, name string, def, lo, hi time.Duration) (time.Duration, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, nil
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < lo || v > hi {
		return 0, fmt.Errorf("%s must be a duration in [%s, %s]", name, lo, hi)
	}
	return v, nil
}

// writeJSON answers with v as JSON, indented for a person to read when
// indent is set.
func writeJSON(w http.ResponseWriter, status int, v any, indent bool) {
	var b []byte
	var err error
	if indent {
		b, err = json.MarshalIndent(v, "", "  ")
	} else {
		b, err = json.Marshal(v)
	}
	if err != nil {
		http.Error(w, "encoding response", http.StatusInternalServerError)
		return
	}
	b = append(b, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}
