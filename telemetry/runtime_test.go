package telemetry

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// TestGoroutinesMetric: the exposition has go_goroutines, a gauge whose
// value is a plausible goroutine count of this process.
func TestGoroutinesMetric(t *testing.T) {
	m, err := NewMetrics()
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	m.Exposition().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	var typ string
	value := -1
	sc := bufio.NewScanner(w.Body)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "# TYPE go_goroutines "); ok {
			typ = v
		}
		if v, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			if value, err = strconv.Atoi(v); err != nil {
				t.Fatalf("go_goroutines %q: %v", v, err)
			}
		}
	}
	if typ != "gauge" {
		t.Errorf("# TYPE go_goroutines = %q, want gauge", typ)
	}
	// The test runner's goroutines and this one: at least 2, and far
	// fewer than a million.
	if value < 2 || value > 1e6 {
		t.Errorf("go_goroutines = %d, want a goroutine count", value)
	}
}
