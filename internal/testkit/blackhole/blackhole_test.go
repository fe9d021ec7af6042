package blackhole

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"
)

// TestAddrHangs: a dial to the address ends at the dialer's own timeout,
// as a timeout, not earlier.
func TestAddrHangs(t *testing.T) {
	addr := Addr(t)
	for _, timeout := range []time.Duration{50 * time.Millisecond, 300 * time.Millisecond} {
		start := time.Now()
		c, err := (&net.Dialer{Timeout: timeout}).DialContext(t.Context(), "tcp", addr)
		took := time.Since(start)
		if err == nil {
			c.Close()
			t.Fatalf("Dial(%s, timeout %v) connected, want a timeout", addr, timeout)
		}
		if ne, ok := err.(net.Error); !ok || !ne.Timeout() || errors.Is(err, context.Canceled) {
			t.Errorf("Dial(%s, timeout %v) = %v, want a timeout", addr, timeout, err)
		}
		if took < timeout || took > timeout+2*time.Second {
			t.Errorf("Dial(%s, timeout %v) took %v, want about the timeout", addr, timeout, took)
		}
	}
}
