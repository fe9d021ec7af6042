package recovery

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

func TestRecoverSwallowsAndCounts(t *testing.T) {
	AllowForTest(t)
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	before := Total()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer Recover(logger, "test stream")
		var m map[string]int
		m["boom"]++ // nil map write panics
	}()
	wg.Wait()
	if got := Total() - before; got != 1 {
		t.Fatalf("Total() grew by %d, want 1", got)
	}
	out := buf.String()
	for _, want := range []string{"panic recovered", "where=\"test stream\"", "assignment to entry in nil map", "recovery_test.go"} {
		if !strings.Contains(out, want) {
			t.Errorf("log = %q, want it to contain %q", out, want)
		}
	}
}

func TestRecoverReraisesInTests(t *testing.T) {
	var got any
	func() {
		defer func() { got = recover() }()
		func() {
			defer Recover(slog.New(slog.DiscardHandler), "loud")
			panic("unexpected")
		}()
	}()
	s, ok := got.(string)
	if !ok || !strings.Contains(s, "unexpected panic in loud") {
		t.Fatalf("re-raised value = %v, want the recovery message", got)
	}
}

func TestNoPanicNoCount(t *testing.T) {
	before := Total()
	func() { defer Recover(nil, "quiet") }()
	if Total() != before {
		t.Fatal("Total() grew without a panic")
	}
}
