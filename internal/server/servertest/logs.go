package servertest

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"
)

// SyncBuffer collects the JSON lines of a logger (an access log, a
// slog.JSONHandler) for a test to read. It is safe for concurrent use,
// and its zero value is an empty buffer.
type SyncBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

// Write appends p; it never fails.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// Lines decodes the JSON lines written so far, oldest first; it fails the
// test on a line that is not a JSON object.
func (s *SyncBuffer) Lines(t testing.TB) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s.b.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("access log line %q is not JSON: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}
