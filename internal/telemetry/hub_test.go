package telemetry

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

func newTestHub(t testing.TB, cfg HubConfig) *Hub {
	t.Helper()
	h, err := NewHub(cfg)
	if err != nil {
		t.Fatalf("NewHub() = %v", err)
	}
	t.Cleanup(h.Close)
	return h
}

func TestHubFilters(t *testing.T) {
	h := newTestHub(t, HubConfig{})
	all, err := h.Subscribe(StreamFilter{})
	if err != nil {
		t.Fatalf("Subscribe() = %v", err)
	}
	clients, _ := h.Subscribe(StreamFilter{Types: []string{apitype.StreamClient}})
	onB, _ := h.Subscribe(StreamFilter{Hostname: "b.example.com"})
	orgA, _ := h.Subscribe(StreamFilter{Allow: func(e *StreamEvent) bool { return e.Hostname == "a.example.com" || e.OrgID == "org_a" }})
	h.Emit(apitype.StreamAccess, "a.example.com", nil, "", apitype.StreamAccessEvent{Hostname: "a.example.com"})
	h.Emit(apitype.StreamScaling, "b.example.com", nil, "", apitype.StreamScalingEvent{Hostname: "b.example.com"})
	h.Emit(apitype.StreamClient, "", []string{"b.example.com"}, "org_b", apitype.StreamClientEvent{ID: "c1"})
	for _, tt := range []struct {
		name string
		s    *Subscription
		want string
	}{
		{"all", all, "access scaling client"},
		{"type client", clients, "client"},
		{"hostname b", onB, "scaling client"},
		{"allow org a", orgA, "access"},
	} {
		var got []string
		for len(tt.s.C()) > 0 {
			got = append(got, (<-tt.s.C()).Type)
		}
		if strings.Join(got, " ") != tt.want {
			t.Errorf("subscriber %s got %v, want %s", tt.name, got, tt.want)
		}
	}
}

func TestHubDropsWhenFull(t *testing.T) {
	h := newTestHub(t, HubConfig{Buffer: 2})
	s, err := h.Subscribe(StreamFilter{})
	if err != nil {
		t.Fatalf("Subscribe() = %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 5 {
			h.Emit(apitype.StreamAccess, "x", nil, "", apitype.StreamAccessEvent{})
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Emit blocked on a subscriber that does not read")
	}
	if got := len(s.C()); got != 2 {
		t.Errorf("buffered %d events, want 2", got)
	}
	if got := s.TakeDropped(); got != 3 {
		t.Errorf("TakeDropped() = %d, want 3", got)
	}
	if got := s.TakeDropped(); got != 0 {
		t.Errorf("TakeDropped() again = %d, want 0", got)
	}
	if got := h.Dropped(); got != 3 {
		t.Errorf("Hub.Dropped() = %d, want 3", got)
	}
}

func TestHubLimitAndClose(t *testing.T) {
	h := newTestHub(t, HubConfig{MaxSubscribers: 2})
	a, _ := h.Subscribe(StreamFilter{})
	if _, err := h.Subscribe(StreamFilter{}); err != nil {
		t.Fatalf("Subscribe() #2 = %v", err)
	}
	if _, err := h.Subscribe(StreamFilter{}); !errors.Is(err, ErrTooManySubscribers) {
		t.Errorf("Subscribe() #3 = %v, want ErrTooManySubscribers", err)
	}
	a.Close()
	a.Close()
	if h.Subscribers() != 1 {
		t.Errorf("Subscribers() after Close = %d, want 1", h.Subscribers())
	}
	if _, err := h.Subscribe(StreamFilter{}); err != nil {
		t.Errorf("Subscribe() after a Close = %v, want a place", err)
	}
	h.Close()
	h.Close()
	select {
	case <-a.Done():
	default:
		t.Error("Done() open after the hub closed")
	}
	if _, err := h.Subscribe(StreamFilter{}); !errors.Is(err, ErrHubClosed) {
		t.Errorf("Subscribe() after Close = %v, want ErrHubClosed", err)
	}
}

func TestObserverPublishesAccess(t *testing.T) {
	h := newTestHub(t, HubConfig{})
	st := NewStats(StatsConfig{}) // the observer stamps requests with the wall clock
	o, err := NewObserver(ObserverConfig{Hub: h, Stats: st})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := h.Subscribe(StreamFilter{})
	p := &scriptedProxy{facts: Request{Hostname: "app.example.com", Routed: true, ClientID: "cl_1", Limit: "ip"}, status: 429}
	req := httptest.NewRequest("GET", "http://app.example.com/a/b?secret=1", nil)
	req.Header.Set("X-Request-Id", "rid-1")
	o.Wrap(p).ServeHTTP(httptest.NewRecorder(), req)
	var events [][]byte
	collect := func(data []byte) error { events = append(events, data); return nil }
	if _, err := s.ReadAccess(64, collect); err != nil || len(events) != 1 {
		t.Fatalf("ReadAccess() = %d events, %v after one request, want 1", len(events), err)
	}
	e := &StreamEvent{Type: apitype.StreamAccess, Data: events[0]}
	var got apitype.StreamAccessEvent
	if err := json.Unmarshal(e.Data, &got); err != nil {
		t.Fatal(err)
	}
	if e.Type != apitype.StreamAccess || got.Path != "/a/b" || got.Status != 429 || got.Limit != "ip" || got.Client != "cl_1" || got.RequestID != "rid-1" || got.Method != "GET" || got.Hostname != "app.example.com" {
		t.Errorf("access event %s %+v, want GET app.example.com /a/b (no query) 429 ip cl_1 rid-1", e.Type, got)
	}
	if strings.Contains(string(e.Data), "secret") {
		t.Errorf("access event %s carries the query string", e.Data)
	}
	if n := st.Read(nil).Hosts[0].Windows[apitype.Window1m].Status4xx; n != 1 {
		t.Errorf("stats 4xx after the request = %d, want 1", n)
	}
}

func TestObserverNoSubscriberAllocs(t *testing.T) {
	h := newTestHub(t, HubConfig{})
	with, _ := NewObserver(ObserverConfig{Hub: h})
	without, _ := NewObserver(ObserverConfig{})
	if a, b := allocsPerRequest(with), allocsPerRequest(without); a != b {
		t.Errorf("a hub without subscribers costs %v allocations per request, without a hub %v: want the same", a, b)
	}
}

// allocsPerRequest returns the allocations of one request through o.
func allocsPerRequest(o *Observer) float64 {
	p := &scriptedProxy{facts: Request{Hostname: "app.example.com", Routed: true}, status: 200}
	req := httptest.NewRequest("GET", "http://app.example.com/", nil)
	hd := o.Wrap(p)
	w := httptest.NewRecorder()
	return testing.AllocsPerRun(200, func() { hd.ServeHTTP(w, req) })
}

// TestHubHolderBounds: the defaults (8 per credential, a quarter of the
// total per organization, one slot kept for the master token), and a
// closed subscription giving its slot back to its credential and
// organization.
func TestHubHolderBounds(t *testing.T) {
	h := newTestHub(t, HubConfig{MaxSubscribers: 40})
	key := func(cred, org string) StreamFilter {
		return StreamFilter{Holder: StreamHolder{Credential: cred, OrgID: org}}
	}
	var first *Subscription
	for i := range DefaultMaxStreamsPerCredential {
		s, err := h.Subscribe(key("key:k1", "org_a"))
		if err != nil {
			t.Fatalf("Subscribe() #%d of one credential = %v", i+1, err)
		}
		if first == nil {
			first = s
		}
	}
	if _, err := h.Subscribe(key("key:k1", "org_a")); !errors.Is(err, ErrCredentialSubscribers) {
		t.Fatalf("Subscribe() #9 of one credential = %v, want ErrCredentialSubscribers", err)
	}
	for i := range 2 {
		if _, err := h.Subscribe(key("key:k2", "org_a")); err != nil {
			t.Fatalf("Subscribe() #%d of one organization = %v", 9+i, err)
		}
	}
	if _, err := h.Subscribe(key("key:k2", "org_a")); !errors.Is(err, ErrOrgSubscribers) {
		t.Fatalf("Subscribe() #11 of one organization (40/4 = 10) = %v, want ErrOrgSubscribers", err)
	}
	first.Close()
	if _, err := h.Subscribe(key("key:k1", "org_a")); err != nil {
		t.Fatalf("Subscribe() after one of the credential's closed = %v", err)
	}
	// Other organizations fill all but the master's slot.
	for i := 0; h.Subscribers() < 39; i++ {
		if _, err := h.Subscribe(key("key:"+strconv.Itoa(i), "org_"+strconv.Itoa(i/8))); err != nil {
			t.Fatalf("Subscribe() filling, with %d held = %v", h.Subscribers(), err)
		}
	}
	if _, err := h.Subscribe(key("key:late", "org_late")); !errors.Is(err, ErrTooManySubscribers) {
		t.Fatalf("Subscribe() at 39 of 40 = %v, want ErrTooManySubscribers (the last slot is the master's)", err)
	}
	if _, err := h.Subscribe(StreamFilter{Holder: StreamHolder{Master: true}}); err != nil {
		t.Fatalf("the master's Subscribe() at 39 of 40 = %v, want its reserved slot", err)
	}
	if _, err := h.Subscribe(StreamFilter{Holder: StreamHolder{Master: true}}); !errors.Is(err, ErrTooManySubscribers) {
		t.Fatalf("the master's Subscribe() at 40 of 40 = %v, want ErrTooManySubscribers", err)
	}
}
