package server_test

import (
	"context"
	"crypto/hmac"
	"encoding/json"
	"fmt"
	"github.com/aperio-dev/aperio/internal/server/servertest"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/control/webhook"
)

// delivery is one webhook POST as the test receiver saw it.
type delivery struct {
	event, signature, deliveryID string
	body                         []byte
	payload                      webhook.Payload
}

// webhookReceiver records every delivery and answers 200.
type webhookReceiver struct {
	srv *httptest.Server
	mu  sync.Mutex // guards got
	got []delivery
	// arrived has room for every delivery the tests expect; it is only
	// a wake-up, got holds the deliveries.
	arrived chan struct{}
}

func startWebhookReceiver(t testing.TB) *webhookReceiver {
	t.Helper()
	rcv := &webhookReceiver{arrived: make(chan struct{}, 64)}
	rcv.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		d := delivery{event: r.Header.Get(webhook.HeaderEvent), signature: r.Header.Get(webhook.HeaderSignature),
			deliveryID: r.Header.Get(webhook.HeaderDelivery), body: body}
		if err := json.Unmarshal(body, &d.payload); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rcv.mu.Lock()
		rcv.got = append(rcv.got, d)
		rcv.mu.Unlock()
		select {
		case rcv.arrived <- struct{}{}:
		default:
		}
	}))
	t.Cleanup(rcv.srv.Close)
	return rcv
}

// counts returns how many deliveries of each event arrived.
func (rcv *webhookReceiver) counts() map[string]int {
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	n := map[string]int{}
	for _, d := range rcv.got {
		n[d.event]++
	}
	return n
}

func (rcv *webhookReceiver) deliveries() []delivery {
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	return append([]delivery(nil), rcv.got...)
}

// skipClock is the real clock plus an offset that only grows: a test
// moves it past a wait (a cooldown, a backoff) instead of spending the
// wait, while everything else it times still passes at the real pace.
// It is safe for concurrent use.
type skipClock struct{ skip atomic.Int64 } // nanoseconds

func (c *skipClock) Now() time.Time { return time.Now().Add(time.Duration(c.skip.Load())) }

// Advance moves the clock d forward.
func (c *skipClock) Advance(d time.Duration) { c.skip.Add(int64(d)) }

// TestWebhooksThroughServer subscribes a receiver through the admin API of
// a running server, then makes the scaling hook accept one cold start and
// fail five: the receiver gets one scaling_requested, five scaling_failed
// and one scaling_disarmed, each signed with the subscription's secret.
//
// The waits between the calls (the cooldown after the accepted one, then
// the breaker's backoff) are timed by the scaling clock: the controller's
// (Scaling.Now) and the store's (Store.Now), which decides every cooldown
// and backoff. The test moves that clock past each wait once the call
// before it is delivered, instead of spending some 30 s on them (#41).
func TestWebhooksThroughServer(t *testing.T) {
	t.Parallel()
	const secret = "webhook-e2e-secret"
	rcv := startWebhookReceiver(t)
	var hookCalls atomic.Int64
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hookCalls.Add(1) == 1 {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		w.WriteHeader(http.StatusInternalServerError)
	}))
	t.Cleanup(hook.Close)

	clock := &skipClock{}
	cfg := servertest.Config(t)
	cfg.ScalingEnabled, cfg.Outbound.AllowHTTP, cfg.Outbound.AllowPrivate = true, true, true // loopback http receivers
	cfg.Scaling.Now, cfg.Store.Now = clock.Now, clock.Now
	srv := servertest.Start(t, cfg, nil, nil)
	visitor := servertest.NewVisitor(t, srv)

	status, body := servertest.AdminCall(t, visitor, srv, "POST", "/webhooks", map[string]any{
		"url": rcv.srv.URL + "/aperio-events", "secret": secret,
		"events": []string{"scaling_requested", "scaling_failed", "scaling_disarmed"},
	})
	if status != http.StatusCreated || strings.Contains(body, secret) || !strings.Contains(body, `"authenticated":true`) {
		t.Fatalf("POST /aperio/api/webhooks = %d %s, want 201, authenticated, without the secret", status, body)
	}

	// A client declares the bind and leaves: every request is a cold start.
	ac := servertest.AgentConfig(srv, servertest.Service(servertest.Backend(t, http.NotFoundHandler()).URL))
	ac.Scaling = &config.Scaling{URL: hook.URL, Max: 1, ColdStart: time.Second,
		TargetUtilization: 0.8, Window: time.Second, Cooldown: time.Second}
	ag := servertest.StartAgent(t, srv, ac)
	servertest.WaitClients(t, visitor, srv, 1)
	if err := ag.Stop(); err != nil {
		t.Fatal(err)
	}
	servertest.WaitClients(t, visitor, srv, 0)

	// Visitors keep asking until the breaker trips: one accepted call,
	// then five failures. waits[i] is the wait after the (i+1)th call: the
	// 1 s cooldown (and cold_start, the join window) after the accepted
	// one, then the backoff cooldown × 2^n after the nth failure. Each is
	// skipped on the clock once its call is delivered; the real time that
	// passes meanwhile only adds to it, so the next visitor finds the wait
	// over, however slow the machine.
	want := map[string]int{"scaling_requested": 1, "scaling_failed": 5, "scaling_disarmed": 1}
	waits := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second}
	skipped := 0
	done := func() bool {
		got := rcv.counts()
		return got["scaling_requested"] >= 1 && got["scaling_failed"] >= 5 && got["scaling_disarmed"] >= 1
	}
	deadline := time.NewTimer(90 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for !done() {
		got := rcv.counts()
		for n := min(got["scaling_requested"]+got["scaling_failed"], len(waits)); skipped < n; skipped++ {
			clock.Advance(waits[skipped])
		}
		// The fifth failure disarms the record without another request;
		// one now would only wait out its timeout, nothing being armed.
		if got["scaling_failed"] < 5 {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			if _, _, err := servertest.Fetch(visitor, servertest.NewRequest(t, ctx, srv, "GET", servertest.AppHost, "/", nil)); err != nil && ctx.Err() == nil {
				t.Logf("visitor request: %v", err)
			}
			cancel()
		}
		select {
		case <-deadline.C:
			t.Fatalf("deliveries after 90 s = %v (hook calls %d), want %v", rcv.counts(), hookCalls.Load(), want)
		case <-tick.C:
		case <-rcv.arrived:
		}
	}
	if err := srv.Stop(); err != nil {
		t.Fatalf("Serve() = %v, want nil", err)
	}
	if got := rcv.counts(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("deliveries by event = %v, want %v", got, want)
	}

	ids := map[string]bool{}
	for _, d := range rcv.deliveries() {
		mac := webhook.Sign(secret, d.body)
		if !hmac.Equal([]byte(d.signature), []byte(mac)) {
			t.Errorf("%s delivery signature %q does not verify with the secret (want %q)", d.event, d.signature, mac)
		}
		if d.payload.Event != d.event || d.payload.Hostname != servertest.AppHost || d.payload.OrgID == "" || d.payload.Detail.RecordID == "" {
			t.Errorf("%s delivery payload = %+v, want the event, %s, its org and record", d.event, d.payload, servertest.AppHost)
		}
		if d.payload.Detail.Reason != "cold_start" {
			t.Errorf("%s delivery reason = %q, want cold_start", d.event, d.payload.Detail.Reason)
		}
		if d.event == "scaling_disarmed" && d.payload.Detail.ConsecutiveFailures != 5 {
			t.Errorf("scaling_disarmed consecutive_failures = %d, want 5", d.payload.Detail.ConsecutiveFailures)
		}
		if ids[d.deliveryID] {
			t.Errorf("delivery id %s seen twice", d.deliveryID)
		}
		ids[d.deliveryID] = true
	}
	if n := hookCalls.Load(); n != 6 {
		t.Errorf("hook calls = %d, want 6 (one accepted, five failed, none once disarmed)", n)
	}
}

// TestWebhookTestThroughServer: the server's admin API sends a test
// delivery through its dispatcher, and the delivery lands in the store's
// log, which GET …/deliveries reads.
func TestWebhookTestThroughServer(t *testing.T) {
	t.Parallel()
	rcv := startWebhookReceiver(t)
	cfg := servertest.Config(t)
	cfg.Outbound.AllowHTTP, cfg.Outbound.AllowPrivate = true, true // a loopback http receiver
	srv := servertest.Start(t, cfg, nil, nil)
	visitor := servertest.NewVisitor(t, srv)
	status, body := servertest.AdminCall(t, visitor, srv, "POST", "/webhooks", map[string]any{
		"url": rcv.srv.URL + "/hook", "events": []string{"scaling_failed"},
	})
	var wh struct{ ID string }
	if status != http.StatusCreated || json.Unmarshal([]byte(body), &wh) != nil {
		t.Fatalf("POST /aperio/api/webhooks = %d %s, want 201", status, body)
	}
	status, body = servertest.AdminCall(t, visitor, srv, "POST", "/webhooks/"+wh.ID+"/test", nil)
	var sent struct {
		ID, Status string
	}
	if status != http.StatusOK || json.Unmarshal([]byte(body), &sent) != nil || sent.Status != "delivered" {
		t.Fatalf("POST /webhooks/%s/test = %d %s, want 200 delivered", wh.ID, status, body)
	}
	if got := rcv.counts(); got["ping"] != 1 {
		t.Errorf("receiver got %v, want one ping", got)
	}
	status, body = servertest.AdminCall(t, visitor, srv, "GET", "/webhooks/"+wh.ID+"/deliveries", nil)
	if status != http.StatusOK || !strings.Contains(body, `"id":"`+sent.ID+`"`) || !strings.Contains(body, `"status":"delivered"`) {
		t.Errorf("GET /webhooks/%s/deliveries = %d %s, want the test delivery", wh.ID, status, body)
	}
}
