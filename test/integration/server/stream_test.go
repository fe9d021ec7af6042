package server_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/aperio-dev/aperio/internal/server/servertest"
	"io"
	"math/rand/v2"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/server"
)

// streamSize is the size of each streamed body. 1 GiB is the target; the
// race detector slows every copy on the way (visitor, gateway, tunnel,
// agent, backend, all in this process) by about an order of magnitude, so
// under -race a smaller body keeps the package well inside its time
// budget. The memory bound is the same either way.
func streamSize() int64 {
	if raceEnabled {
		return 64 << 20
	}
	return 1 << 30
}

// maxHeapGrowth bounds HeapInuse+StackInuse above the baseline while a body
// streams. Gateway, agent and backend share this process, so this is
// stricter than the per-process target.
const maxHeapGrowth = 64 << 20

// pattern is the content of every streamed body, repeated. Its length is a
// prime, so a lost, duplicated or reordered buffer shows up as a mismatch.
var pattern = func() []byte {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, 4093)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}()

// patternReader produces n bytes of pattern without holding them.
type patternReader struct {
	off, n int64
}

func (r *patternReader) Read(p []byte) (int, error) {
	if r.off >= r.n {
		return 0, io.EOF
	}
	if rem := r.n - r.off; int64(len(p)) > rem {
		p = p[:rem]
	}
	total := 0
	for total < len(p) {
		c := copy(p[total:], pattern[r.off%int64(len(pattern)):])
		total += c
		r.off += int64(c)
	}
	return total, nil
}

// errMismatch reports bytes that differ from pattern.
var errMismatch = errors.New("body differs from the pattern")

// patternChecker counts what is written to it and checks it against
// pattern.
type patternChecker struct {
	n int64
}

func (c *patternChecker) Write(p []byte) (int, error) {
	for done := 0; done < len(p); {
		off := c.n % int64(len(pattern))
		want := pattern[off:]
		if len(want) > len(p)-done {
			want = want[:len(p)-done]
		}
		if !bytes.Equal(p[done:done+len(want)], want) {
			return done, fmt.Errorf("%w at byte %d", errMismatch, c.n)
		}
		done += len(want)
		c.n += int64(len(want))
	}
	return len(p), nil
}

// inUse returns the memory the data path can grow: heap spans in use and
// goroutine stacks.
func inUse() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse + ms.StackInuse
}

// sampleMemory samples inUse every 20 ms in the background. The returned
// function stops the sampling and returns the peak; cleanup stops it if the
// test ends first.
func sampleMemory(t testing.TB) (peak func() uint64) {
	t.Helper()
	stop := make(chan struct{})
	result := make(chan uint64, 1)
	go func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		var peak uint64
		for {
			peak = max(peak, inUse())
			select {
			case <-stop:
				result <- peak
				return
			case <-tick.C:
			}
		}
	}()
	peak = sync.OnceValue(func() uint64 {
		close(stop)
		return <-result
	})
	t.Cleanup(func() { peak() })
	return peak
}

func TestStreamingBoundedMemory(t *testing.T) {
	t.Parallel()
	size := streamSize()
	backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/download":
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
			io.Copy(w, &patternReader{n: size})
		case "/upload":
			// The backend counts and checks every byte it receives.
			var c patternChecker
			if _, err := io.Copy(&c, r.Body); err != nil {
				http.Error(w, fmt.Sprintf("after %d bytes: %v", c.n, err), http.StatusBadRequest)
				return
			}
			fmt.Fprintf(w, "%d", c.n)
		default:
			http.NotFound(w, r)
		}
	})
	st := servertest.StartStack(t, backend, func(c *server.Config) { c.Router.MaxBodyBytes = 2 * size })

	tests := []struct {
		name   string
		method string
		path   string
	}{
		{name: "download", method: "GET", path: "/download"},
		{name: "upload", method: "POST", path: "/upload"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
			defer cancel()
			var body io.Reader
			if tc.method == "POST" {
				body = &patternReader{n: size}
			}
			req := servertest.NewRequest(t, ctx, st.Server, tc.method, servertest.AppHost, tc.path, body)
			req.ContentLength = 0
			if body != nil {
				req.ContentLength = size
			}

			runtime.GC()
			base := inUse()
			peak := sampleMemory(t)
			start := time.Now()
			resp, err := st.Visitor.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", tc.method, tc.path, err)
			}
			defer resp.Body.Close()
			switch tc.method {
			case "GET":
				var got patternChecker
				if _, err := io.Copy(&got, resp.Body); err != nil {
					t.Fatalf("GET %s: after %d bytes: %v", tc.path, got.n, err)
				}
				if resp.StatusCode != http.StatusOK || got.n != size {
					t.Errorf("GET %s = %d, %d bytes, want 200, %d bytes", tc.path, resp.StatusCode, got.n, size)
				}
			case "POST":
				// The backend answers with the count of what it read.
				got, err := io.ReadAll(resp.Body)
				if err != nil || resp.StatusCode != http.StatusOK || string(got) != strconv.FormatInt(size, 10) {
					t.Errorf("POST %s of %d bytes = %d %q, %v, want 200 %q", tc.path, size, resp.StatusCode, got, err, strconv.FormatInt(size, 10))
				}
			}
			elapsed := time.Since(start)
			growth := int64(peak()) - int64(base)
			t.Logf("%s: %d MiB in %v (%.0f MiB/s); heap+stack growth %.1f MiB", tc.name, size>>20, elapsed.Round(time.Millisecond), float64(size>>20)/elapsed.Seconds(), float64(growth)/(1<<20))
			if growth > maxHeapGrowth {
				t.Errorf("%s of %d MiB: heap+stack grew by %.1f MiB, want under %d MiB", tc.name, size>>20, float64(growth)/(1<<20), maxHeapGrowth>>20)
			}
		})
	}
}
