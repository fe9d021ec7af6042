package webhook

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/control/events"
)

// TestHangingReceiverDoesNotDelayOthers: a receiver that never answers
// holds up only its own subscription's deliveries: another subscription of
// the same organization gets every event, Publish returns at once all the
// while, and what the hanging subscription's full queue cannot hold is
// dropped and counted.
func TestHangingReceiverDoesNotDelayOthers(t *testing.T) {
	release := make(chan struct{})
	var hung atomic.Int64
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hung.Add(1)
		select { // hangs until the test ends, or the dispatcher gives up
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(hang.Close)
	t.Cleanup(func() { close(release) }) // runs first: unblocks the handler before Close waits
	ok := newReceiver(t, http.StatusOK)
	const queue = 4
	h := start(t, fakeLister{[]Subscription{
		{ID: "wh-hang", OrgID: "org-1", URL: hang.URL, Events: []string{apitype.EventTokenCreated}},
		{ID: "wh-ok", OrgID: "org-1", URL: ok.URL, Events: []string{apitype.EventTokenCreated}},
	}}, Config{SubscriptionQueue: queue})

	// One event at a time, each waited for at the answering receiver,
	// while the hanging one's queue fills up and then overflows.
	const n = 3 * queue
	for i := range n {
		began := time.Now()
		h.d.Publish(events.Event{Kind: apitype.EventTokenCreated, OrgID: "org-1", Actor: "master", Detail: "token " + string(rune('a'+i))})
		// Publish only queues: it takes microseconds; a second means it
		// waited for a receiver.
		if took := time.Since(began); took > time.Second {
			t.Errorf("Publish took %v, want it not to wait for any receiver", took)
		}
		waitLogFor(t, h, "webhook delivered", "wh-ok")
	}
	if got := len(ok.requests()); got != n {
		t.Errorf("the answering receiver got %d deliveries, want %d", got, n)
	}
	// The hanging subscription holds one delivery in flight and queue
	// waiting; the rest were dropped, each counted.
	wantDropped := int64(n - queue - 1)
	deadline := time.Now().Add(10 * time.Second)
	for h.d.SubscriptionDropped() < wantDropped && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // polling a counter the fan-out goroutine bumps
	}
	if got := h.d.SubscriptionDropped(); got < wantDropped || got > int64(n-queue) {
		t.Errorf("SubscriptionDropped() = %d, want %d (%d events, queue %d, one in flight)", got, wantDropped, n, queue)
	}
	if h.d.Dropped() < h.d.SubscriptionDropped() {
		t.Errorf("Dropped() = %d, want it to include SubscriptionDropped() = %d", h.d.Dropped(), h.d.SubscriptionDropped())
	}
	if got := hung.Load(); got != 1 {
		t.Errorf("the hanging receiver got %d requests at once, want 1 (per-subscription concurrency)", got)
	}
}

// waitLogFor waits for the record msg about subscription id.
func waitLogFor(t testing.TB, h *harness, msg, id string) {
	t.Helper()
	for {
		r := waitLog(t, h.logs, msg)
		if attr(r, "webhook_id").String() == id {
			return
		}
	}
}

// countingLister counts its lookups.
type countingLister struct {
	fakeLister
	n atomic.Int64
}

func (c *countingLister) WebhooksFor(ctx context.Context, orgID, event string) ([]Subscription, error) {
	c.n.Add(1)
	return c.fakeLister.WebhooksFor(ctx, orgID, event)
}

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex // guards t
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestSubscriptionsCached: events of one organization read its
// subscriptions once per CacheTTL, and Invalidate (a webhook created or
// deleted) makes the next event read them again.
func TestSubscriptionsCached(t *testing.T) {
	rcv := newReceiver(t, http.StatusOK)
	l := &countingLister{fakeLister: fakeLister{[]Subscription{
		{ID: "wh-1", OrgID: "org-1", URL: rcv.URL, Events: []string{apitype.EventConfigReloaded, apitype.EventTokenRevoked}},
	}}}
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	h := start(t, l, Config{Now: clk.Now})
	emit := func() {
		t.Helper()
		h.d.Publish(events.Event{Kind: apitype.EventTokenRevoked, OrgID: "org-1", Actor: "master"})
		waitLog(t, h.logs, "webhook delivered")
	}
	steps := []struct {
		name string
		do   func()
		want int64
	}{
		{"first event reads", func() {}, 1},
		{"second within the TTL does not", func() {}, 1},
		{"invalidated reads again", func() { h.d.Invalidate("org-1") }, 2},
		{"another organization's invalidation costs one read at most", func() { h.d.Invalidate("org-2") }, 2},
		{"past the TTL reads again", func() { clk.Add(CacheTTL) }, 3},
		{"and caches again", func() {}, 3},
	}
	for _, s := range steps {
		s.do()
		emit()
		if got := l.n.Load(); got != s.want {
			t.Errorf("%s: %d lookups, want %d", s.name, got, s.want)
		}
	}
	if got := len(rcv.requests()); got != len(steps) {
		t.Errorf("receiver got %d deliveries, want %d", got, len(steps))
	}
}

// TestGenericPayload: an event without a payload of its own is delivered
// in the common envelope with actor, summary and its fields in detail,
// which cannot overwrite actor or summary.
func TestGenericPayload(t *testing.T) {
	rcv := newReceiver(t, http.StatusOK)
	h := start(t, fakeLister{[]Subscription{{ID: "wh-1", OrgID: "org-1", URL: rcv.URL, Events: []string{apitype.EventQuotaExceeded}}}}, Config{})
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.FixedZone("x", 3600))
	ev := events.QuotaExceeded(events.Quota{OrgID: "org-1", TokenID: "tok_1", Hostname: "app.example.com", Limit: "daily_max_bytes", UsedBytes: 2048, MaxBytes: 1024, At: at})
	ev.Fields["actor"] = "forged"
	h.d.Publish(ev)
	waitLog(t, h.logs, "webhook delivered")
	var got EventPayload
	if err := json.Unmarshal(rcv.requests()[0].body, &got); err != nil {
		t.Fatal(err)
	}
	if got.Event != apitype.EventQuotaExceeded || !got.At.Equal(at) || got.At.Location() != time.UTC || got.OrgID != "org-1" || got.Hostname != "app.example.com" {
		t.Errorf("envelope = %+v", got)
	}
	want := map[string]any{"actor": "token:tok_1", "summary": "token tok_1 used 2048 of daily_max_bytes 1024 bytes",
		"token_id": "tok_1", "limit": "daily_max_bytes", "used_bytes": 2048.0, "max_bytes": 1024.0}
	for k, v := range want {
		if got.Detail[k] != v {
			t.Errorf("detail[%q] = %v, want %v", k, got.Detail[k], v)
		}
	}
	if len(got.Detail) != len(want) {
		t.Errorf("detail = %v, want exactly %v", got.Detail, want)
	}
}
