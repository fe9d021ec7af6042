package tunnel

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestAnnounceNowSessionEnding: a session's control loop has stopped
// taking nudges but has not yet marked the client disconnected (it may
// wait a second for a goaway's reason). AnnounceNow answers
// ErrSessionClosed at once instead of waiting out its ctx: an agent
// draining after its server went away must not wait 5 s for an ack
// nobody will send.
func TestAnnounceNowSessionEnding(t *testing.T) {
	c := &Client{nudge: make(chan chan error)}
	live := make(chan struct{})
	c.live.Store(&live)
	c.connected.Store(true)
	close(live)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if err := c.AnnounceNow(ctx); !errors.Is(err, ErrSessionClosed) {
		t.Fatalf("AnnounceNow on an ending session = %v, want ErrSessionClosed", err)
	}
	// Not connected at all: the same answer, whatever live says.
	c.connected.Store(false)
	if err := c.AnnounceNow(ctx); !errors.Is(err, ErrSessionClosed) {
		t.Fatalf("AnnounceNow while disconnected = %v, want ErrSessionClosed", err)
	}
}
