package telemetry

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// exposition returns the gauges of a fresh Metrics' exposition by name,
// with their # TYPE.
func exposition(t *testing.T) (values map[string]float64, types map[string]string) {
	t.Helper()
	m, err := NewMetrics()
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	m.Exposition().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	values, types = map[string]float64{}, map[string]string{}
	sc := bufio.NewScanner(w.Body)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "# TYPE "); ok {
			if name, typ, ok := strings.Cut(v, " "); ok {
				types[name] = typ
			}
			continue
		}
		name, v, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") || strings.Contains(name, "{") {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("%s %q: %v", name, v, err)
		}
		values[name] = f
	}
	return values, types
}

// TestGoroutinesMetric: the exposition has go_goroutines, a gauge whose
// value is a plausible goroutine count of this process.
func TestGoroutinesMetric(t *testing.T) {
	values, types := exposition(t)
	if types["go_goroutines"] != "gauge" {
		t.Errorf("# TYPE go_goroutines = %q, want gauge", types["go_goroutines"])
	}
	// The test runner's goroutines and this one: at least 2, and far
	// fewer than a million.
	if v, ok := values["go_goroutines"]; !ok || v < 2 || v > 1e6 {
		t.Errorf("go_goroutines = %v (present %v), want a goroutine count", v, ok)
	}
}

// TestMemoryMetrics: go_memstats_stack_inuse_bytes and
// go_memstats_heap_inuse_bytes are gauges that follow MemStats, and the
// stack figure grows with goroutines parked on deep stacks.
func TestMemoryMetrics(t *testing.T) {
	for _, name := range []string{"go_memstats_stack_inuse_bytes", "go_memstats_heap_inuse_bytes"} {
		if _, types := exposition(t); types[name] != "gauge" {
			t.Errorf("# TYPE %s = %q, want gauge", name, types[name])
		}
	}
	// The gauge is read inside the exposition, which allocates, and a GC
	// may run between it and ReadMemStats: bracket it by a reading before
	// and one after, with room for what the exposition itself allocates.
	// A gauge of another quantity (0, the stacks, the whole heap
	// reservation) still falls outside.
	var ms1, ms2 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	before, _ := exposition(t)
	runtime.ReadMemStats(&ms2)
	lo, hi := min(ms1.HeapInuse, ms2.HeapInuse), max(ms1.HeapInuse, ms2.HeapInuse)
	if h := before["go_memstats_heap_inuse_bytes"]; h < float64(lo)/2 || h > float64(hi)*2+16<<20 {
		t.Errorf("go_memstats_heap_inuse_bytes = %.0f, MemStats.HeapInuse between %d and %d", h, lo, hi)
	}
	// 200 goroutines each parked on a 64 KiB frame: at least 12 MiB more.
	const n = 200
	release := make(chan struct{})
	parked := make(chan struct{}, n)
	for range n {
		go deepPark(parked, release)
	}
	for range n {
		<-parked
	}
	after, _ := exposition(t)
	close(release)
	if d := after["go_memstats_stack_inuse_bytes"] - before["go_memstats_stack_inuse_bytes"]; d < n*64<<10 {
		t.Errorf("go_memstats_stack_inuse_bytes grew by %.0f with %d goroutines on 64 KiB stacks, want at least %d", d, n, n*64<<10)
	}
}

// deepPark parks on a stack of at least 64 KiB until release is closed.
func deepPark(parked chan<- struct{}, release <-chan struct{}) {
	var pad [64 << 10]byte
	pad[len(pad)-1] = 1
	parked <- struct{}{}
	<-release
	runtime.KeepAlive(&pad)
}
