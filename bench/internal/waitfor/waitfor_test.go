package waitfor

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	n := 0
	err := Until(t.Context(), time.Second, time.Millisecond, "the third call", func(context.Context) (bool, error) {
		n++
		return n == 3, nil
	})
	if err != nil || n != 3 {
		t.Fatalf("Until = %v after %d calls, want nil after 3", err, n)
	}
}

func TestUntilTimeout(t *testing.T) {
	err := Until(t.Context(), 20*time.Millisecond, time.Millisecond, "nothing", func(context.Context) (bool, error) {
		return false, errors.New("not yet")
	})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "nothing") || !strings.Contains(err.Error(), "not yet") {
		t.Fatalf("Until = %v, want a deadline naming what was awaited and the last error", err)
	}
}
