package store

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"
)

// TestHubOverflow publishes more changes than a stalled subscriber can
// queue: publish never blocks, the overflow is counted, and the subscriber
// gets one ChangeResync in place of what it lost, then the newest changes
// in order.
func TestHubOverflow(t *testing.T) {
	h := newHub(slog.New(slog.DiscardHandler))
	defer h.close()
	sub := h.subscribe(t.Context())
	const n = subscriberQueue + 50
	for i := range n {
		h.publish(Change{Kind: ChangeMaintenanceSet, Hostname: fmt.Sprint(i)})
	}
	if h.dropped.Load() == 0 {
		t.Errorf("dropped = 0 after %d changes to a stalled subscriber, want > 0", n)
	}

	var got []Change
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	for len(got) == 0 || got[len(got)-1].Hostname != fmt.Sprint(n-1) {
		select {
		case c := <-sub:
			got = append(got, c)
		case <-timer.C:
			t.Fatalf("after %d changes: no more, want up to %d", len(got), n-1)
		}
	}
	// The forwarder may have taken the first change before the queue
	// filled; after it comes the resync.
	i := 0
	if got[0].Kind != ChangeResync {
		i = 1
	}
	if got[i].Kind != ChangeResync {
		t.Fatalf("changes %+v…: want a resync first", got[:i+1])
	}
	rest := got[i+1:]
	if len(rest) == 0 || uint64(len(rest)+i) != n-h.dropped.Load() {
		t.Errorf("after the resync: %d changes, dropped %d, want %d in all", len(rest), h.dropped.Load(), n)
	}
	for j := 1; j < len(rest); j++ {
		if prev, cur := rest[j-1].Hostname, rest[j].Hostname; fmt.Sprint(mustAtoi(t, prev)+1) != cur {
			t.Errorf("changes after the resync out of order: %s then %s", prev, cur)
		}
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatalf("Sscan(%q) = %v", s, err)
	}
	return n
}

// TestHubResyncSupersedesQueue: a resync replaces whatever was still
// queued, since the subscriber will reload everything anyway.
func TestHubResyncSupersedesQueue(t *testing.T) {
	h := newHub(slog.New(slog.DiscardHandler))
	defer h.close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	s := &subscriber{h: h, out: make(chan Change), wake: make(chan struct{}, 1)}
	s.push(Change{Kind: ChangeTokenRevoked, ID: "tok_1"})
	s.push(Change{Kind: ChangeResync})
	s.push(Change{Kind: ChangeTokenRevoked, ID: "tok_2"})
	h.wg.Add(1)
	go s.forwardLoop(ctx)
	for _, want := range []Change{{Kind: ChangeResync}, {Kind: ChangeTokenRevoked, ID: "tok_2"}} {
		timer := time.NewTimer(10 * time.Second)
		select {
		case got := <-s.out:
			if got != want {
				t.Errorf("next change = %+v, want %+v", got, want)
			}
		case <-timer.C:
			t.Fatalf("no change, want %+v", want)
		}
		timer.Stop()
	}
	if h.dropped.Load() != 0 {
		t.Errorf("dropped = %d after a resync, want 0 (a resync is no overflow)", h.dropped.Load())
	}
}
