package webhook

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/buildinfo"
	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/control/events"
	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/internal/outbound"
	"github.com/aperio-dev/aperio/store"
	"github.com/google/go-cmp/cmp"
)

// fakeLister returns its subscriptions of the org that list the event,
// like the store does.
type fakeLister struct{ subs []Subscription }

func (f fakeLister) WebhooksFor(_ context.Context, orgID, event string) ([]Subscription, error) {
	var out []Subscription
	for _, s := range f.subs {
		if s.OrgID != orgID {
			continue
		}
		for _, e := range s.Events {
			if e == event {
				out = append(out, s)
				break
			}
		}
	}
	return out, nil
}

// allLister returns every subscription whatever is asked, so that tests
// prove the dispatcher's own filter.
type allLister struct{ subs []Subscription }

func (f allLister) WebhooksFor(context.Context, string, string) ([]Subscription, error) {
	return f.subs, nil
}

// received is one request a receiver got.
type received struct {
	header http.Header
	body   []byte
}

// receiver is a webhook endpoint answering the scripted statuses in turn
// (the last one repeats) and recording every request.
type receiver struct {
	*httptest.Server
	mu       sync.Mutex // guards the following fields
	statuses []int
	got      []received
}

func newReceiver(t testing.TB, statuses ...int) *receiver {
	t.Helper()
	r := &receiver{statuses: statuses}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, err := io.ReadAll(req.Body)
		if err != nil {
			t.Errorf("read body: %v", err)
		}
		r.mu.Lock()
		r.got = append(r.got, received{header: req.Header.Clone(), body: b})
		st := r.statuses[min(len(r.got), len(r.statuses))-1]
		r.mu.Unlock()
		w.WriteHeader(st)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) requests() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

// logSink is a slog.Handler that sends every record to a channel.
type logSink struct{ ch chan slog.Record }

func (s logSink) Enabled(context.Context, slog.Level) bool { return true }
func (s logSink) Handle(_ context.Context, r slog.Record) error {
	s.ch <- r.Clone()
	return nil
}
func (s logSink) WithAttrs(as []slog.Attr) slog.Handler {
	return attrSink{s, as}
}
func (s logSink) WithGroup(string) slog.Handler { return s }

// attrSink keeps the attributes of Logger.With on the records it sends.
type attrSink struct {
	logSink
	attrs []slog.Attr
}

func (s attrSink) Handle(ctx context.Context, r slog.Record) error {
	r = r.Clone()
	r.AddAttrs(s.attrs...)
	return s.logSink.Handle(ctx, r)
}
func (s attrSink) WithAttrs(as []slog.Attr) slog.Handler {
	return attrSink{s.logSink, append(append([]slog.Attr(nil), s.attrs...), as...)}
}

// waitLog returns the next record with message msg, failing the test
// after a generous deadline.
func waitLog(t testing.TB, ch <-chan slog.Record, msg string) slog.Record {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		select {
		case r := <-ch:
			if r.Message == msg {
				return r
			}
		case <-deadline.C:
			t.Fatalf("no log record %q", msg)
		}
	}
}

func attr(r slog.Record, key string) slog.Value {
	var v slog.Value
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value
			return false
		}
		return true
	})
	return v
}

// harness is a running Dispatcher with its logs.
type harness struct {
	d    *Dispatcher
	logs chan slog.Record
	// backoffs records the attempts Backoff was asked about.
	mu       sync.Mutex // guards backoffs
	backoffs []int
}

func start(t testing.TB, l Lister, cfg Config) *harness {
	t.Helper()
	fc, err := outbound.New(outbound.Policy{AllowHTTP: true, AllowPrivate: true})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{logs: make(chan slog.Record, 1000)}
	cfg.Subscriptions, cfg.Client = l, fc
	cfg.Logger = slog.New(logSink{h.logs})
	cfg.Backoff = func(attempt int) time.Duration {
		h.mu.Lock()
		h.backoffs = append(h.backoffs, attempt)
		h.mu.Unlock()
		return time.Millisecond
	}
	h.d, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	})
	return h
}

func scalingEvent(typ string) events.Scaling {
	return events.Scaling{
		Type: typ, At: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC),
		RecordID: "rec-1", OrgID: "org-1", Hostname: "app.example.com", Path: "/api",
		Reason: "scale_out", Current: 2, Desired: 3, Min: 1, Max: 8,
		Status: 202, Utilization: []float64{0.9, 0.95}, IdempotencyKey: "key-1",
	}
}

func TestDeliveryCarriesSignedPayload(t *testing.T) {
	tests := []struct {
		name   string
		secret string
	}{
		{"with secret", "s3cret"},
		{"without secret", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rcv := newReceiver(t, http.StatusNoContent)
			h := start(t, fakeLister{[]Subscription{{ID: "wh-1", OrgID: "org-1", URL: rcv.URL + "/hook",
				Secret: tt.secret, Events: []string{apitype.EventScalingRequested}}}}, Config{})
			before := time.Now().Unix()
			h.d.Emit(t.Context(), scalingEvent(apitype.EventScalingRequested))
			rec := waitLog(t, h.logs, "webhook delivered")
			if got := attr(rec, logkey.Attempts).Int64(); got != 1 {
				t.Errorf("attempts = %d, want 1", got)
			}
			reqs := rcv.requests()
			if len(reqs) != 1 {
				t.Fatalf("receiver got %d requests, want 1", len(reqs))
			}
			r := reqs[0]
			for k, want := range map[string]string{
				"Content-Type": "application/json",
				"User-Agent":   "aperio/" + buildinfo.Version(),
				HeaderEvent:    apitype.EventScalingRequested,
			} {
				if got := r.header.Get(k); got != want {
					t.Errorf("header %s = %q, want %q", k, got, want)
				}
			}
			if len(r.header.Get(HeaderDelivery)) != 32 {
				t.Errorf("header %s = %q, want 32 hex digits", HeaderDelivery, r.header.Get(HeaderDelivery))
			}
			ts, err := strconv.ParseInt(r.header.Get(HeaderTimestamp), 10, 64)
			if err != nil || ts < before || ts > time.Now().Unix() {
				t.Errorf("header %s = %q, want the send time", HeaderTimestamp, r.header.Get(HeaderTimestamp))
			}
			sig := r.header.Get(HeaderSignature)
			if tt.secret == "" {
				if sig != "" {
					t.Errorf("header %s = %q without a secret, want none", HeaderSignature, sig)
				}
			} else {
				m := hmac.New(sha256.New, []byte(tt.secret))
				m.Write(r.body)
				if want := "sha256=" + hex.EncodeToString(m.Sum(nil)); !hmac.Equal([]byte(sig), []byte(want)) {
					t.Errorf("header %s = %q, want %q", HeaderSignature, sig, want)
				}
			}
			var got map[string]any
			if err := json.Unmarshal(r.body, &got); err != nil {
				t.Fatalf("body %q: %v", r.body, err)
			}
			want := map[string]any{
				"event": "scaling_requested", "at": "2025-03-01T12:00:00Z", "org_id": "org-1",
				"hostname": "app.example.com", "path": "/api",
				"detail": map[string]any{
					"record_id": "rec-1", "reason": "scale_out", "current": 2.0, "desired": 3.0,
					"min": 1.0, "max": 8.0, "status": 202.0, "consecutive_failures": 0.0,
					"utilization": []any{0.9, 0.95}, "idempotency_key": "key-1",
				},
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRetriesStopAfterSuccess(t *testing.T) {
	rcv := newReceiver(t, 500, 503, http.StatusOK)
	h := start(t, fakeLister{[]Subscription{{ID: "wh-1", OrgID: "org-1", URL: rcv.URL,
		Secret: "k", Events: []string{apitype.EventScalingFailed}}}}, Config{})
	h.d.Emit(t.Context(), scalingEvent(apitype.EventScalingFailed))
	rec := waitLog(t, h.logs, "webhook delivered")
	if got := attr(rec, logkey.Attempts).Int64(); got != 3 {
		t.Errorf("attempts = %d, want 3", got)
	}
	reqs := rcv.requests()
	if len(reqs) != 3 {
		t.Fatalf("receiver got %d requests, want 3", len(reqs))
	}
	id := reqs[0].header.Get(HeaderDelivery)
	for i, r := range reqs {
		if got := r.header.Get(HeaderDelivery); got != id {
			t.Errorf("attempt %d %s = %q, want %q as the first attempt", i+1, HeaderDelivery, got, id)
		}
		if string(r.body) != string(reqs[0].body) {
			t.Errorf("attempt %d body = %q, want %q", i+1, r.body, reqs[0].body)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if diff := cmp.Diff([]int{1, 2}, h.backoffs); diff != "" {
		t.Errorf("Backoff attempts (-want +got):\n%s", diff)
	}
}

func TestGivesUpAfterMaxAttempts(t *testing.T) {
	rcv := newReceiver(t, http.StatusInternalServerError)
	h := start(t, fakeLister{[]Subscription{{ID: "wh-1", OrgID: "org-1", URL: rcv.URL,
		Events: []string{apitype.EventScalingDisarmed}}}}, Config{})
	h.d.Emit(t.Context(), scalingEvent(apitype.EventScalingDisarmed))
	rec := waitLog(t, h.logs, "webhook delivery given up")
	if got := attr(rec, logkey.Attempts).Int64(); got != MaxAttempts {
		t.Errorf("attempts = %d, want %d", got, MaxAttempts)
	}
	if got := attr(rec, logkey.Status).Int64(); got != 500 {
		t.Errorf("status = %d, want 500", got)
	}
	if got := attr(rec, logkey.WebhookID).String(); got != "wh-1" {
		t.Errorf("webhook_id = %q, want wh-1", got)
	}
	if got := len(rcv.requests()); got != MaxAttempts {
		t.Errorf("receiver got %d requests, want %d", got, MaxAttempts)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if diff := cmp.Diff([]int{1, 2, 3, 4}, h.backoffs); diff != "" {
		t.Errorf("Backoff attempts (-want +got):\n%s", diff)
	}
}

func TestFenceRefusalIsNotRetried(t *testing.T) {
	h := start(t, fakeLister{[]Subscription{{ID: "wh-1", OrgID: "org-1", URL: "gopher://hooks.example.com/x",
		Events: []string{apitype.EventScalingFailed}}}}, Config{})
	h.d.Emit(t.Context(), scalingEvent(apitype.EventScalingFailed))
	rec := waitLog(t, h.logs, "webhook delivery given up")
	if got := attr(rec, logkey.Attempts).Int64(); got != 1 {
		t.Errorf("attempts = %d, want 1", got)
	}
}

func TestEmitNeverBlocksWhenQueueFull(t *testing.T) {
	fc, err := outbound.New(outbound.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	logs := make(chan slog.Record, 100)
	// Not running: nothing drains the queue.
	d, err := New(Config{Subscriptions: fakeLister{}, Client: fc, Logger: slog.New(logSink{logs}), MaxQueue: 2})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		d.Emit(t.Context(), scalingEvent(apitype.EventScalingFailed))
	}
	if got := d.Dropped(); got != 3 {
		t.Errorf("Dropped() = %d, want 3", got)
	}
	close(logs)
	var full int
	for r := range logs {
		if r.Message == "webhook queue full, dropping events" {
			full++
		}
	}
	if full != 1 {
		t.Errorf("logged %d queue-full records, want 1", full)
	}
}

func TestEventsFilteredBySubscription(t *testing.T) {
	failed := newReceiver(t, http.StatusOK)
	requested := newReceiver(t, http.StatusOK)
	other := newReceiver(t, http.StatusOK)
	h := start(t, allLister{[]Subscription{
		{ID: "wh-failed", OrgID: "org-1", URL: failed.URL, Events: []string{apitype.EventScalingFailed}},
		{ID: "wh-requested", OrgID: "org-1", URL: requested.URL, Events: []string{apitype.EventScalingRequested}},
		{ID: "wh-none", OrgID: "org-1", URL: other.URL},
		{ID: "wh-other-org", OrgID: "org-2", URL: other.URL, Events: []string{apitype.EventScalingFailed, apitype.EventScalingRequested}},
	}}, Config{Workers: 1})
	h.d.Emit(t.Context(), scalingEvent(apitype.EventScalingRequested))
	h.d.Emit(t.Context(), scalingEvent(apitype.EventScalingFailed))
	got := map[string]bool{}
	for range 2 {
		got[attr(waitLog(t, h.logs, "webhook delivered"), logkey.WebhookID).String()] = true
	}
	if diff := cmp.Diff(map[string]bool{"wh-failed": true, "wh-requested": true}, got); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
	for _, c := range []struct {
		name string
		r    *receiver
		want []string
	}{
		{"failed", failed, []string{apitype.EventScalingFailed}},
		{"requested", requested, []string{apitype.EventScalingRequested}},
		{"other", other, nil},
	} {
		var events []string
		for _, r := range c.r.requests() {
			events = append(events, r.header.Get(HeaderEvent))
		}
		if diff := cmp.Diff(c.want, events); diff != "" {
			t.Errorf("receiver %s events (-want +got):\n%s", c.name, diff)
		}
	}
}

func TestDefaultBackoff(t *testing.T) {
	tests := []struct {
		attempt int
		want    time.Duration
	}{
		{1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {4, 8 * time.Second},
		{6, 32 * time.Second}, {7, time.Minute}, {8, time.Minute}, {100, time.Minute},
	}
	for _, tt := range tests {
		t.Run(strconv.Itoa(tt.attempt), func(t *testing.T) {
			if got := DefaultBackoff(tt.attempt); got != tt.want {
				t.Errorf("DefaultBackoff(%d) = %v, want %v", tt.attempt, got, tt.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	fc, err := outbound.New(outbound.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		cfg     Config
		wantErr bool
	}{
		{"ok", Config{Subscriptions: fakeLister{}, Client: fc}, false},
		{"no lister", Config{Client: fc}, true},
		{"no client", Config{Subscriptions: fakeLister{}}, true},
		{"negative queue", Config{Subscriptions: fakeLister{}, Client: fc, MaxQueue: -1}, true},
		{"negative workers", Config{Subscriptions: fakeLister{}, Client: fc, Workers: -1}, true},
		{"negative keep", Config{Subscriptions: fakeLister{}, Client: fc, KeepDeliveries: -1}, true},
		{"keep over the store's bound", Config{Subscriptions: fakeLister{}, Client: fc, KeepDeliveries: store.MaxDeliveryKeep + 1}, true},
		{"keep at the bound", Config{Subscriptions: fakeLister{}, Client: fc, KeepDeliveries: store.MaxDeliveryKeep}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.cfg); (err != nil) != tt.wantErr {
				t.Errorf("New(%s) = %v, want error %v", tt.name, err, tt.wantErr)
			}
		})
	}
}

func TestRunTwice(t *testing.T) {
	fc, err := outbound.New(outbound.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(Config{Subscriptions: fakeLister{}, Client: fc})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := d.Run(ctx); err != nil {
		t.Fatalf("Run = %v, want nil after ctx ends", err)
	}
	if err := d.Run(ctx); err == nil {
		t.Errorf("second Run = nil, want an error")
	}
}
