package agent

import (
	"errors"
	"fmt"
	"html"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/urlpath"
)

// maxListing bounds the entries a directory listing shows.
const maxListing = 10000

// staticFiles serves a serve: directory. Every request opens the
// directory afresh as an os.Root, so that a deploy that swaps the folder
// is served at once, and no path, however spelled, and no symbolic link
// leads outside it: os.Root refuses both. Files are answered with
// http.ServeContent: Last-Modified, a weak ETag of size and modification
// time, conditional requests and Range.
type staticFiles struct {
	dir     string
	index   string
	spa     bool
	listing bool
}

func newStaticFiles(sc config.Service) *staticFiles {
	return &staticFiles{dir: sc.Serve, index: sc.ServeIndex(), spa: sc.SPA, listing: sc.DirectoryListing}
}

func (s *staticFiles) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	root, err := os.OpenRoot(s.dir)
	if err != nil {
		http.Error(w, "folder unavailable", http.StatusServiceUnavailable)
		return
	}
	defer root.Close()
	p, ok := staticPath(r.URL.EscapedPath())
	if !ok {
		http.Error(w, "bad request path", http.StatusBadRequest)
		return
	}
	name, ok := staticName(p)
	if !ok {
		http.NotFound(w, r)
		return
	}
	f, fi, err := openIn(root, name)
	if err == nil && fi.IsDir() {
		if !strings.HasSuffix(p, "/") {
			f.Close()
			redirectSlash(w, r, p)
			return
		}
		idx, ifi, ierr := openIn(root, path.Join(name, s.index))
		if ierr == nil && ifi.Mode().IsRegular() {
			f.Close()
			serveFile(w, r, idx, ifi)
			idx.Close()
			return
		}
		if idx != nil {
			idx.Close()
		}
		if s.listing {
			s.list(w, r, f)
		} else {
			http.NotFound(w, r)
		}
		f.Close()
		return
	}
	if err == nil && fi.Mode().IsRegular() {
		serveFile(w, r, f, fi)
		f.Close()
		return
	}
	if f != nil {
		f.Close()
	}
	if s.spa && errors.Is(err, fs.ErrNotExist) && path.Ext(name) == "" {
		idx, ifi, ierr := openIn(root, s.index)
		if ierr == nil && ifi.Mode().IsRegular() {
			h.Set("Cache-Control", "no-cache")
			serveFile(w, r, idx, ifi)
			idx.Close()
			return
		}
		if idx != nil {
			idx.Close()
		}
	}
	http.NotFound(w, r)
}

// staticPath reads a request path (escaped) by the path rule, as the
// server matched it: its normal form (urlpath.Normal), the ";" parameters
// of its segments dropped ("/docs/guide.html;jsessionid=1" is the guide),
// decoded, an encoded slash read as a separator (as the decoded path
// always was here). false, a 400, for a path with no normal form (a dot
// segment hidden by a parameter, "..;") or with a backslash, which names
// no file here.
func staticPath(escaped string) (string, bool) {
	norm, err := urlpath.Normal(escaped)
	if err != nil || strings.Contains(norm, "%5C") {
		return "", false
	}
	p, err := urlpath.Decode(urlpath.StripParams(norm), true)
	if err != nil {
		return "", false
	}
	return p, true
}

// staticName turns a request path into a name within the root: "." for
// the root itself. A dot segment, a backslash, a NUL or a hidden name
// (a segment starting with a dot, but .well-known) is no name: 404.
func staticName(p string) (string, bool) {
	p = strings.TrimPrefix(p, "/")
	if p == "" {
		return ".", true
	}
	if strings.ContainsAny(p, "\\\x00") {
		return "", false
	}
	segs := strings.Split(strings.TrimSuffix(p, "/"), "/")
	for _, seg := range segs {
		if seg == "" || (strings.HasPrefix(seg, ".") && seg != ".well-known") {
			return "", false
		}
	}
	return strings.Join(segs, "/"), true
}

// openIn opens name in root and stats it. f is nil when err is not.
func openIn(root *os.Root, name string) (*os.File, fs.FileInfo, error) {
	f, err := root.Open(name)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

func serveFile(w http.ResponseWriter, r *http.Request, f *os.File, fi fs.FileInfo) {
	w.Header().Set("Etag", `W/"`+strconv.FormatInt(fi.Size(), 36)+"-"+strconv.FormatInt(fi.ModTime().UnixNano(), 36)+`"`)
	http.ServeContent(w, r, fi.Name(), fi.ModTime(), f)
}

// redirectSlash sends a directory asked for without its slash (p, as
// staticPath read it) to the path with one, relative, so a bind's prefix
// stays in front of it.
func redirectSlash(w http.ResponseWriter, r *http.Request, p string) {
	w.Header().Set("Location", "./"+url.PathEscape(path.Base(p))+"/"+queryOf(r))
	w.WriteHeader(http.StatusMovedPermanently)
}

func queryOf(r *http.Request) string {
	if r.URL.RawQuery == "" {
		return ""
	}
	return "?" + r.URL.RawQuery
}

// list writes an HTML listing of dir: names escaped, hidden ones left
// out, at most maxListing entries.
func (s *staticFiles) list(w http.ResponseWriter, r *http.Request, dir *os.File) {
	entries, err := dir.ReadDir(maxListing + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		http.Error(w, "cannot list the folder", http.StatusInternalServerError)
		return
	}
	more := len(entries) > maxListing
	if more {
		entries = entries[:maxListing]
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	if r.Method == http.MethodHead {
		return
	}
	var b strings.Builder
	title := html.EscapeString(r.URL.Path)
	fmt.Fprintf(&b, "<!doctype html>\n<meta charset=utf-8>\n<title>%s</title>\n<h1>%s</h1>\n<ul>\n", title, title)
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, ".") {
			continue
		}
		if e.IsDir() {
			n += "/"
		}
		fmt.Fprintf(&b, "<li><a href=\"./%s\">%s</a></li>\n", html.EscapeString((&url.URL{Path: n}).EscapedPath()), html.EscapeString(n))
	}
	b.WriteString("</ul>\n")
	if more {
		fmt.Fprintf(&b, "<p>only the first %d entries are shown</p>\n", maxListing)
	}
	io.WriteString(w, b.String())
}

// staticTransport answers a service's requests from its staticFiles, as
// a RoundTripper so that the forward path (limits, breaker, inflight
// counts) stays the one of every service. The handler runs on its own
// goroutine and streams the body through a pipe: a large file is never
// held in memory, and a visitor who leaves closes the pipe, which ends
// the handler's writes.
type staticTransport struct{ h http.Handler }

func (t staticTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	pr, pw := io.Pipe()
	w := &pipeResponse{header: make(http.Header), pw: pw, head: make(chan *http.Response, 1), req: req}
	go func() {
		defer func() {
			if r := recover(); r != nil {
				pw.CloseWithError(fmt.Errorf("agent: static file handler panicked: %v", r))
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusOK) // no-op once written
			pw.Close()
		}()
		t.h.ServeHTTP(w, req)
	}()
	select {
	case resp := <-w.head:
		resp.Body = pr
		return resp, nil
	case <-req.Context().Done():
		pr.CloseWithError(req.Context().Err())
		return nil, req.Context().Err()
	}
}

// pipeResponse is the ResponseWriter of staticTransport.
type pipeResponse struct {
	header http.Header
	pw     *io.PipeWriter
	head   chan *http.Response
	req    *http.Request
	once   sync.Once
}

func (w *pipeResponse) Header() http.Header { return w.header }

func (w *pipeResponse) WriteHeader(code int) {
	w.once.Do(func() {
		h := w.header.Clone()
		cl := int64(-1)
		if v := h.Get("Content-Length"); v != "" {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
				cl = n
			}
		}
		if code == http.StatusNotModified || code == http.StatusNoContent {
			cl = 0 // a HEAD keeps the length of the body it would get
		}
		w.head <- &http.Response{
			Status:        strconv.Itoa(code) + " " + http.StatusText(code),
			StatusCode:    code,
			Proto:         "HTTP/1.1",
			ProtoMajor:    1,
			ProtoMinor:    1,
			Header:        h,
			ContentLength: cl,
			Request:       w.req,
		}
	})
}

func (w *pipeResponse) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	if w.req.Method == http.MethodHead {
		return len(p), nil
	}
	return w.pw.Write(p)
}
