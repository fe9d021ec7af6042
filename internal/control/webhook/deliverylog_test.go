package webhook

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/store"
)

// fakeLog is a DeliveryLog that sends every record to a channel and keeps
// the latest of each delivery, like the store.
type fakeLog struct {
	ch chan Delivery
	mu sync.Mutex // guards byID
	// byID is the latest record of each delivery.
	byID map[string]Delivery
}

func newFakeLog() *fakeLog {
	return &fakeLog{ch: make(chan Delivery, 100), byID: map[string]Delivery{}}
}

func (f *fakeLog) RecordWebhookDelivery(_ context.Context, d Delivery, keep int) (Delivery, error) {
	if keep < 0 {
		return Delivery{}, errors.New("negative keep")
	}
	f.mu.Lock()
	if prev, ok := f.byID[d.ID]; ok {
		d.Body = prev.Body // the store never changes a body
	}
	f.byID[d.ID] = d
	f.mu.Unlock()
	f.ch <- d
	return d, nil
}

func (f *fakeLog) next(t testing.TB) Delivery {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	select {
	case d := <-f.ch:
		return d
	case <-deadline.C:
		t.Fatal("no delivery log record")
		return Delivery{}
	}
}

// TestDeliveryLogRecordsAttempts: each attempt updates the delivery's
// record, pending until the 2xx, with the receiver's status and the body
// as sent, in the subscription's format.
func TestDeliveryLogRecordsAttempts(t *testing.T) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	rcv := newReceiver(t, 500, 502, http.StatusNoContent)
	log := newFakeLog()
	h := start(t, fakeLister{[]Subscription{{ID: "wh-1", OrgID: "org-1", URL: rcv.URL, Secret: secret,
		Format: FormatSlack, Events: []string{apitype.EventScalingFailed}}}}, Config{Deliveries: log})
	h.d.Emit(t.Context(), scalingEvent(apitype.EventScalingFailed))
	want := []struct {
		status string
		code   int
	}{{store.DeliveryPending, 500}, {store.DeliveryPending, 502}, {store.DeliveryDelivered, 204}}
	var recs []Delivery
	for i, w := range want {
		d := log.next(t)
		recs = append(recs, d)
		if d.Status != w.status || d.LastStatusCode != w.code || d.Attempts != i+1 ||
			d.WebhookID != "wh-1" || d.OrgID != "org-1" || d.Event != apitype.EventScalingFailed {
			t.Errorf("record %d = %+v, want %s after attempt %d with status %d", i+1, d, w.status, i+1, w.code)
		}
		if (d.LastError == "") != (w.status == store.DeliveryDelivered) {
			t.Errorf("record %d LastError = %q, want one only for a failure", i+1, d.LastError)
		}
	}
	reqs := rcv.requests()
	if len(reqs) != 3 {
		t.Fatalf("receiver got %d requests, want 3", len(reqs))
	}
	last := reqs[2]
	if got := last.header.Get(HeaderID); got != recs[0].ID || recs[2].ID != recs[0].ID {
		t.Errorf("webhook-id %q, records %q and %q, want one id", got, recs[0].ID, recs[2].ID)
	}
	if string(recs[0].Body) != string(last.body) || !strings.HasPrefix(string(last.body), `{"text":"Aperio: scaling call failed`) {
		t.Errorf("recorded body %q, sent %q, want the slack body both", recs[0].Body, last.body)
	}
	if err := Verify(secret, last.header, last.body, time.Now()); err != nil {
		t.Errorf("Verify(slack delivery) = %v, want signed like any delivery", err)
	}
}

// blockingLog is a DeliveryLog as slow as a store that does not answer:
// every write waits for its context.
type blockingLog struct{ calls chan struct{} }

func (b blockingLog) RecordWebhookDelivery(ctx context.Context, _ Delivery, _ int) (Delivery, error) {
	b.calls <- struct{}{}
	<-ctx.Done()
	return Delivery{}, ctx.Err()
}

// TestDeliveryLogNeverBlocksDeliveries: with the log stuck, deliveries
// go on and the records that do not fit its queue are dropped and
// counted.
func TestDeliveryLogNeverBlocksDeliveries(t *testing.T) {
	rcv := newReceiver(t, http.StatusOK)
	bl := blockingLog{calls: make(chan struct{}, 100)}
	h := start(t, fakeLister{[]Subscription{{ID: "wh-1", OrgID: "org-1", URL: rcv.URL,
		Events: []string{apitype.EventScalingRequested}}}}, Config{Deliveries: bl, MaxQueue: 1, Workers: 1})
	const n = 4
	for i := range n {
		h.d.Emit(t.Context(), scalingEvent(apitype.EventScalingRequested))
		waitLog(t, h.logs, "webhook delivered")
		if i == 0 {
			<-bl.calls // the log is now stuck on the first record
		}
	}
	if got := len(rcv.requests()); got != n {
		t.Errorf("receiver got %d deliveries, want %d whatever the log", got, n)
	}
	// One record is being written, one waits in the queue of 1: the
	// others were dropped.
	if got := h.d.RecordsDropped(); got != n-2 {
		t.Errorf("RecordsDropped() = %d, want %d", got, n-2)
	}
}

// verifyingReceiver is a receiver that accepts a delivery only when
// Verify and Replays do, answering 401 for a bad signature and 409 for a
// replay, as docs/webhooks.md tells receivers to.
type verifyingReceiver struct {
	*receiver
	secret string
	seen   Replays
}

func newVerifyingReceiver(t testing.TB, secret string) *verifyingReceiver {
	t.Helper()
	v := &verifyingReceiver{receiver: newReceiver(t, http.StatusOK), secret: secret}
	inner := v.Config.Handler
	v.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		inner.ServeHTTP(rec, r) // records the request; writes nothing yet
		got := v.requests()
		last := got[len(got)-1]
		if err := Verify(v.secret, last.header, last.body, time.Now()); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		if err := v.seen.Check(last.header.Get(HeaderID), time.Now()); err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	return v
}

// statusRecorder swallows the inner receiver's status, so that the
// verifying receiver answers alone.
type statusRecorder struct{ http.ResponseWriter }

func (statusRecorder) WriteHeader(int) {}

// TestTestAndRedeliver: a test delivery reaches one subscription signed
// and verifiable; its redelivery keeps the webhook-id with a fresh
// signature, so the verifying receiver recognises it as a replay; each
// lands in the log.
func TestTestAndRedeliver(t *testing.T) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	rcv := newVerifyingReceiver(t, secret)
	log := newFakeLog()
	h := start(t, fakeLister{}, Config{Deliveries: log})
	sub := Subscription{ID: "whk_1", OrgID: "org-1", URL: rcv.URL, Secret: secret, Format: FormatDiscord,
		Events: []string{apitype.EventScalingFailed}}

	got, err := h.d.Test(t.Context(), sub)
	if err != nil {
		t.Fatalf("Test() = %v", err)
	}
	if got.Status != store.DeliveryDelivered || got.LastStatusCode != 200 || got.Attempts != 1 || got.Event != EventPing {
		t.Errorf("Test() = %+v, want a delivered ping after 1 attempt", got)
	}
	if rec := log.next(t); rec.ID != got.ID || rec.Status != store.DeliveryDelivered {
		t.Errorf("log record = %+v, want the test delivery", rec)
	}
	reqs := rcv.requests()
	if len(reqs) != 1 || reqs[0].header.Get(HeaderEvent) != EventPing ||
		!strings.Contains(string(reqs[0].body), `"content":"Aperio: test delivery to webhook whk_1"`) {
		t.Fatalf("receiver got %+v, want one discord ping", reqs)
	}

	again, err := h.d.Redeliver(t.Context(), sub, log.byID[got.ID])
	if err != nil {
		t.Fatalf("Redeliver() = %v", err)
	}
	reqs = rcv.requests()
	if len(reqs) != 2 {
		t.Fatalf("receiver got %d requests, want 2", len(reqs))
	}
	first, second := reqs[0].header, reqs[1].header
	if second.Get(HeaderID) != first.Get(HeaderID) || string(reqs[1].body) != string(reqs[0].body) {
		t.Errorf("redelivery id %q body %q, want %q and the same body", second.Get(HeaderID), reqs[1].body, first.Get(HeaderID))
	}
	t1, _ := strconv.ParseInt(first.Get(HeaderStdTimestamp), 10, 64)
	t2, err := strconv.ParseInt(second.Get(HeaderStdTimestamp), 10, 64)
	if err != nil || t2 < t1 {
		t.Errorf("redelivery webhook-timestamp %q, want a fresh one, not before %d", second.Get(HeaderStdTimestamp), t1)
	}
	if err := Verify(secret, second, reqs[1].body, time.Now()); err != nil {
		t.Errorf("Verify(redelivery) = %v, want a valid fresh signature", err)
	}
	// The receiver already handled this id: it refuses it as a replay.
	if again.Status != store.DeliveryFailed || again.LastStatusCode != http.StatusConflict || again.Attempts != 2 || again.ID != got.ID {
		t.Errorf("Redeliver() = %+v, want the replay refused with 409 on attempt 2 of the same delivery", again)
	}
	if rec := log.next(t); rec.ID != got.ID || rec.Attempts != 2 {
		t.Errorf("log record after redelivery = %+v, want attempt 2 of %s", rec, got.ID)
	}

	if _, err := h.d.Redeliver(t.Context(), sub, Delivery{ID: "d-big", Event: EventPing}); !errors.Is(err, ErrNoBody) {
		t.Errorf("Redeliver(no body kept) = %v, want ErrNoBody", err)
	}
}

// TestTestOutcomes: a test delivery that fails, or that the outbound
// policy refuses, is reported in the Delivery; an error never quotes the
// URL, whose path can be a credential.
func TestTestOutcomes(t *testing.T) {
	failing := newReceiver(t, http.StatusInternalServerError)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now: the dial is refused
	h := start(t, fakeLister{}, Config{})
	tests := []struct {
		name, url  string
		status     string
		statusCode int
	}{
		{"receiver error", failing.URL + "/s3cr3t", store.DeliveryFailed, 500},
		{"refused by policy", "ftp://hooks.example.com/s3cr3t", store.DeliveryDropped, 0},
		{"nobody listening", closed + "/s3cr3t", store.DeliveryFailed, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := h.d.Test(t.Context(), Subscription{ID: "whk_1", OrgID: "org-1", URL: tt.url})
			if err != nil {
				t.Fatalf("Test() = %v", err)
			}
			if got.Status != tt.status || got.LastStatusCode != tt.statusCode || got.LastError == "" {
				t.Errorf("Test() = %+v, want %s with status %d and an error", got, tt.status, tt.statusCode)
			}
			if strings.Contains(got.LastError, "s3cr3t") {
				t.Errorf("LastError = %q quotes the URL", got.LastError)
			}
		})
	}
}
