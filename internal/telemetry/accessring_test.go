package telemetry

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// putAccess publishes n requests on host through h's access ring.
func putAccess(h *Hub, host string, n int) {
	r := httptest.NewRequest("GET", "http://"+host+"/p", nil)
	for range n {
		h.publishAccess(r, &Request{Hostname: host, Status: 200, Start: time.Now()})
	}
}

// readAll reads every access event s may be sent now.
func readAll(t *testing.T, s *Subscription) []apitype.StreamAccessEvent {
	t.Helper()
	var out []apitype.StreamAccessEvent
	for {
		n, err := s.ReadAccess(64, func(data []byte) error {
			var e apitype.StreamAccessEvent
			if err := json.Unmarshal(data, &e); err != nil {
				return err
			}
			out = append(out, e)
			return nil
		})
		if err != nil {
			t.Fatalf("ReadAccess() = %v", err)
		}
		if n < 64 {
			return out
		}
	}
}

func TestAccessRingNoSubscriberWritesNothing(t *testing.T) {
	h := newTestHub(t, HubConfig{})
	clients, _ := h.Subscribe(StreamFilter{Types: []string{apitype.StreamClient}})
	putAccess(h, "a.example.com", 3)
	if n := h.access.next.Load(); n != 0 {
		t.Errorf("%d records in the ring with no access subscriber, want 0", n)
	}
	if clients.AccessReady() != nil || clients.AccessPending() {
		t.Error("a subscriber of client events is offered access events")
	}
}

func TestAccessRingFiltersAndOrder(t *testing.T) {
	h := newTestHub(t, HubConfig{})
	all, _ := h.Subscribe(StreamFilter{Types: []string{apitype.StreamAccess}})
	onB, _ := h.Subscribe(StreamFilter{Hostname: "b.example.com"})
	scoped, _ := h.Subscribe(StreamFilter{Allow: func(e *StreamEvent) bool { return e.Hostname == "a.example.com" }})
	putAccess(h, "a.example.com", 2)
	putAccess(h, "b.example.com", 1)
	for _, tt := range []struct {
		name string
		s    *Subscription
		want []string
	}{
		{"all", all, []string{"a.example.com", "a.example.com", "b.example.com"}},
		{"hostname b", onB, []string{"b.example.com"}},
		{"scope a", scoped, []string{"a.example.com", "a.example.com"}},
	} {
		var got []string
		for _, e := range readAll(t, tt.s) {
			got = append(got, e.Hostname)
		}
		if len(got) != len(tt.want) {
			t.Errorf("%s got %v, want %v", tt.name, got, tt.want)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("%s got %v, want %v", tt.name, got, tt.want)
				break
			}
		}
		if tt.s.AccessPending() {
			t.Errorf("%s: records still pending after reading all", tt.name)
		}
	}
}

// A subscriber that falls more than the ring behind loses the oldest
// records and is told how many; the hub counts them too.
func TestAccessRingLapped(t *testing.T) {
	h := newTestHub(t, HubConfig{})
	s, _ := h.Subscribe(StreamFilter{Types: []string{apitype.StreamAccess}})
	const extra = 100
	putAccess(h, "a.example.com", accessRingSize+extra)
	got := readAll(t, s)
	if n := int64(len(got)) + s.TakeSampled(); n != accessRingSize {
		t.Errorf("read and sampled %d events, want the ring's %d", n, accessRingSize)
	}
	if d := s.TakeDropped(); d != extra {
		t.Errorf("TakeDropped() = %d, want %d", d, extra)
	}
	if d := h.Dropped(); d != extra {
		t.Errorf("Hub.Dropped() = %d, want %d", d, extra)
	}
}

// Past MaxAccessRate a subscriber gets a sample: a burst's worth now, the
// rest counted as sampled; the filter is applied first, so a quiet
// hostname among busy ones is sent whole.
func TestAccessRingSamples(t *testing.T) {
	h := newTestHub(t, HubConfig{})
	busy, _ := h.Subscribe(StreamFilter{Types: []string{apitype.StreamAccess}})
	quiet, _ := h.Subscribe(StreamFilter{Hostname: "quiet.example.com"})
	putAccess(h, "busy.example.com", 600)
	putAccess(h, "quiet.example.com", 5)
	got := readAll(t, busy)
	sampled := busy.TakeSampled()
	if len(got) > accessBurst+150 || len(got) < accessBurst { // the budget refills while the test runs
		t.Errorf("busy subscriber got %d events, want about the burst (%d)", len(got), accessBurst)
	}
	if int64(len(got))+sampled != 605 {
		t.Errorf("sent %d + sampled %d, want 605 in all", len(got), sampled)
	}
	if n := len(readAll(t, quiet)); n != 5 || quiet.TakeSampled() != 0 {
		t.Errorf("quiet-host subscriber got %d events, want all 5 unsampled", n)
	}
}

// AccessReady is closed by the next record, and at once when one waits.
func TestAccessRingWakes(t *testing.T) {
	h := newTestHub(t, HubConfig{})
	s, _ := h.Subscribe(StreamFilter{Types: []string{apitype.StreamAccess}})
	ready := s.AccessReady()
	select {
	case <-ready:
		t.Fatal("AccessReady closed with no record")
	default:
	}
	go putAccess(h, "a.example.com", 1)
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("AccessReady not closed after a record")
	}
	select {
	case <-s.AccessReady():
	default:
		t.Error("AccessReady not closed while a record waits")
	}
	if len(readAll(t, s)) != 1 {
		t.Error("want the one record")
	}
}

func TestAccessRingSendError(t *testing.T) {
	h := newTestHub(t, HubConfig{})
	s, _ := h.Subscribe(StreamFilter{Types: []string{apitype.StreamAccess}})
	putAccess(h, "a.example.com", 3)
	boom := errors.New("gone")
	n, err := s.ReadAccess(64, func([]byte) error { return boom })
	if !errors.Is(err, boom) || n != 1 {
		t.Errorf("ReadAccess() = %d, %v; want 1, the send error", n, err)
	}
	if got := len(readAll(t, s)); got != 2 {
		t.Errorf("after the error %d events left, want 2", got)
	}
}

// With a subscriber, a request costs no allocation on its own goroutine:
// the record is copied into the ring.
func TestObserverSubscriberAllocs(t *testing.T) {
	h := newTestHub(t, HubConfig{})
	if _, err := h.Subscribe(StreamFilter{Types: []string{apitype.StreamAccess}}); err != nil {
		t.Fatal(err)
	}
	with, _ := NewObserver(ObserverConfig{Hub: h})
	without, _ := NewObserver(ObserverConfig{})
	if a, b := allocsPerRequest(with), allocsPerRequest(without); a != b {
		t.Errorf("a request with an access subscriber costs %v allocations, without a hub %v: want the same", a, b)
	}
}

func BenchmarkPublishAccess(b *testing.B) {
	h, _ := NewHub(HubConfig{})
	defer h.Close()
	if _, err := h.Subscribe(StreamFilter{Types: []string{apitype.StreamAccess}}); err != nil {
		b.Fatal(err)
	}
	r := httptest.NewRequest("GET", "http://app.example.com/p", nil)
	rec := &Request{Hostname: "app.example.com", Status: 200, Start: time.Now()}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			h.publishAccess(r, rec)
		}
	})
}
