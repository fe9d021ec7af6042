package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// The backend subcommand is the service behind the tunnel: it answers
// every request after a fixed time of work and records, per key (the
// first segment of the path), when the first request arrived, how many
// arrived and how many it served at once. The harness reads the figures
// from statsPath on the backend's own address, never through the tunnel.
// All processes run on one machine, so the backend's clock is the
// server's.

// statsPath answers GET ?key=K with K's keyStats as JSON.
const statsPath = "/_bench/stats"

// maxKeys bounds the keys one backend records; requests for more get 503.
const maxKeys = 4096

// maxKeyLen bounds a key's length.
const maxKeyLen = 64

// keyStats is what the backend recorded of one key.
type keyStats struct {
	First    time.Time `json:"first"` // arrival of the first request
	Count    int       `json:"count"` // requests that arrived
	Inflight int       `json:"inflight"`
	Peak     int       `json:"peak"` // most served at once
}

// arrivals is the backend's handler. It is safe for concurrent use.
type arrivals struct {
	work time.Duration

	mu   sync.Mutex // guards the following field
	keys map[string]*keyStats
}

func newArrivals(work time.Duration) *arrivals {
	return &arrivals{work: work, keys: map[string]*keyStats{}}
}

// requestKey returns the first segment of path when it is a key: 1 to
// maxKeyLen of a-z, 0-9 and '-'.
func requestKey(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, "/")
	if !ok {
		return "", false
	}
	key, _, _ := strings.Cut(rest, "/")
	if key == "" || len(key) > maxKeyLen {
		return "", false
	}
	for _, r := range key {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return "", false
		}
	}
	return key, true
}

func (a *arrivals) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	if r.URL.Path == statsPath {
		a.serveStats(w, r)
		return
	}
	key, ok := requestKey(r.URL.Path)
	if !ok {
		http.Error(w, "no key in the path", http.StatusNotFound)
		return
	}
	if !a.enter(key, now) {
		http.Error(w, "too many keys", http.StatusServiceUnavailable)
		return
	}
	defer a.leave(key)
	if a.work > 0 {
		t := time.NewTimer(a.work)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	io.WriteString(w, "ok\n")
}

// enter records an arrival for key at now; false when key would be one
// key too many.
func (a *arrivals) enter(key string, now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.keys[key]
	if s == nil {
		if len(a.keys) >= maxKeys {
			return false
		}
		s = &keyStats{First: now}
		a.keys[key] = s
	}
	if now.Before(s.First) {
		s.First = now
	}
	s.Count++
	s.Inflight++
	s.Peak = max(s.Peak, s.Inflight)
	return true
}

func (a *arrivals) leave(key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.keys[key].Inflight--
}

func (a *arrivals) serveStats(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("key")
	if _, ok := requestKey("/" + key); !ok {
		http.Error(w, "bad key", http.StatusBadRequest)
		return
	}
	a.mu.Lock()
	s, ok := a.keys[key]
	var cp keyStats
	if ok {
		cp = *s
	}
	a.mu.Unlock()
	if !ok {
		http.Error(w, "no arrivals for this key", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(cp)
}

// backendReady is the line the backend logs once it listens; its last
// field is the address.
const backendReady = "backend listening addr="

// runBackend serves the backend until ctx ends, then shuts down within
// 5 s.
func runBackend(ctx context.Context, o backendOpts, stderr io.Writer) error {
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: newArrivals(o.work), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stderr, "%s%s\n", backendReady, ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}
