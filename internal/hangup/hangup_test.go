package hangup

import (
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"
)

// lineWriter hands every log line to the test.
type lineWriter chan string

func (w lineWriter) Write(p []byte) (int, error) {
	w <- string(p)
	return len(p), nil
}

// TestIgnoreLogsAndSurvives sends this test process a real SIGHUP: the
// process survives (the default action would end it) and the line is
// logged at info.
func TestIgnoreLogsAndSurvives(t *testing.T) {
	lines := make(lineWriter, 4)
	stop := Ignore(slog.New(slog.NewTextHandler(lines, nil)))
	defer stop()
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	select {
	case line := <-lines:
		if !strings.Contains(line, Message) || !strings.Contains(line, "level=INFO") {
			t.Errorf("log after SIGHUP = %q, want %q at info", line, Message)
		}
	case <-timeout.C:
		t.Fatalf("nothing logged within 10s of SIGHUP, want %q", Message)
	}
	stop()
	stop() // idempotent
}
