package dashboard

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
)

//go:embed assets
var assetFS embed.FS

// AssetPrefix is where the dashboard's scripts and styles are served.
const AssetPrefix = "/aperio/ui/assets/"

// asset is one embedded file, ready to serve: its bytes plain and
// gzipped (compressed once at start, so a request costs a copy), its type
// and its ETag.
type asset struct {
	plain, gz []byte
	ctype     string
	etag      string
}

// loadAssets reads and compresses every embedded asset.
func loadAssets(fsys fs.FS) (map[string]*asset, error) {
	out := map[string]*asset{}
	err := fs.WalkDir(fsys, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		var gz bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
		zw.Write(b)
		if err := zw.Close(); err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		ctype := mime.TypeByExtension(path.Ext(p))
		switch path.Ext(p) {
		case ".js":
			ctype = "text/javascript; charset=utf-8"
		case ".css":
			ctype = "text/css; charset=utf-8"
		case ".svg":
			ctype = "image/svg+xml"
		}
		if ctype == "" {
			return fmt.Errorf("dashboard: asset %s has no known type", p)
		}
		out[strings.TrimPrefix(p, "assets/")] = &asset{plain: b, gz: gz.Bytes(), ctype: ctype, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		return nil
	})
	return out, err
}

// serveAsset answers GET and HEAD for an embedded asset: gzipped when the
// browser takes it, 304 for a matching If-None-Match. Browsers revalidate
// (no-cache), so a new release is picked up at once.
func (u *UI) serveAsset(w http.ResponseWriter, r *http.Request, name string) {
	a, ok := u.assets[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	h := w.Header()
	h.Set("ETag", a.etag)
	h.Set("Cache-Control", "no-cache")
	h.Set("Vary", "Accept-Encoding")
	h.Set("Content-Type", a.ctype)
	if matchETag(r.Header.Get("If-None-Match"), a.etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	body := a.plain
	if acceptsGzip(r) {
		h.Set("Content-Encoding", "gzip")
		body = a.gz
	}
	h.Set("Content-Length", fmt.Sprint(len(body)))
	if r.Method == http.MethodHead {
		return
	}
	w.Write(body)
}

// matchETag reports whether an If-None-Match header names etag (weakly
// compared, as RFC 9110 asks for If-None-Match).
func matchETag(h, etag string) bool {
	if h == "" {
		return false
	}
	for i, c := range strings.Split(h, ",") {
		if i >= 64 {
			break
		}
		c = strings.TrimPrefix(strings.TrimSpace(c), "W/")
		if c == "*" || c == etag {
			return true
		}
	}
	return false
}

// acceptsGzip reports whether r's Accept-Encoding takes gzip (q > 0).
func acceptsGzip(r *http.Request) bool {
	for i, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		if i >= 32 {
			break
		}
		coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if !strings.EqualFold(strings.TrimSpace(coding), "gzip") {
			continue
		}
		p := strings.ReplaceAll(params, " ", "")
		return p != "q=0" && p != "q=0.0" && p != "q=0.00" && p != "q=0.000"
	}
	return false
}
