package admin_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/control/admin"
	"github.com/aperio-dev/aperio/internal/control/webhook"
	"github.com/aperio-dev/aperio/internal/outbound"
	"github.com/aperio-dev/aperio/store"
)

// verifier is a webhook receiver that does what docs/webhooks.md asks
// of one: it checks each delivery with webhook.Verify, refuses an id it
// already accepted (webhook.Replays) with 409, and keeps what it got.
type verifier struct {
	*httptest.Server
	secret string
	seen   webhook.Replays
	mu     sync.Mutex // guards got
	got    []verified
}

// verified is one request a verifier got, with its verdict.
type verified struct {
	header http.Header
	body   []byte
	err    error
}

func newVerifier(t testing.TB, secret string) *verifier {
	t.Helper()
	v := &verifier{secret: secret}
	v.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			t.Errorf("receiver: read body: %v", err)
		}
		now := time.Now()
		verr := webhook.Verify(v.secret, r.Header, body, now)
		if verr == nil {
			verr = v.seen.Check(r.Header.Get(webhook.HeaderID), now)
		}
		v.mu.Lock()
		v.got = append(v.got, verified{header: r.Header.Clone(), body: body, err: verr})
		v.mu.Unlock()
		switch {
		case errors.Is(verr, webhook.ErrReplay):
			http.Error(w, "seen", http.StatusConflict)
		case verr != nil:
			http.Error(w, "bad signature", http.StatusUnauthorized)
		}
	}))
	t.Cleanup(v.Close)
	return v
}

func (v *verifier) requests() []verified {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]verified(nil), v.got...)
}

// deliveriesFixture is an API with a real dispatcher that reaches
// loopback receivers and logs into the fixture's store.
func deliveriesFixture(t *testing.T) *fixture {
	t.Helper()
	f := newFixture(t)
	permissive, err := outbound.New(outbound.Policy{AllowHTTP: true, AllowPrivate: true})
	if err != nil {
		t.Fatal(err)
	}
	d, err := webhook.New(webhook.Config{Subscriptions: f.db, Client: permissive, Deliveries: f.db})
	if err != nil {
		t.Fatal(err)
	}
	return f.withConfig(t, admin.Config{Outbound: permissive, Webhooks: d})
}

// TestWebhookTestAndRedeliver drives POST /webhooks/{id}/test and
// …/redeliver end to end: the receiver verifies each signature, the
// redelivery keeps the webhook-id (the receiver recognises it as a
// repeat), a captured delivery replayed after the tolerance is refused,
// and the log shows each outcome.
func TestWebhookTestAndRedeliver(t *testing.T) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	f := deliveriesFixture(t)
	org := f.org(t, "acme")
	adm, viewer := f.key(t, org, admin.RoleAdmin), f.key(t, org, admin.RoleViewer)
	rcv := newVerifier(t, secret)
	var wh admin.Webhook
	f.expect(t, "POST", "/webhooks", adm.Secret, `{"url":"`+rcv.URL+`/T0K3N","events":["scaling_failed"],"secret":"`+secret+`","format":"slack"}`,
		http.StatusCreated, &wh)
	if wh.Format != "slack" {
		t.Errorf("created webhook format = %q, want slack", wh.Format)
	}

	f.expectError(t, "POST", "/webhooks/"+wh.ID+"/test", viewer.Secret, "", http.StatusForbidden, "")
	var tested admin.WebhookDelivery
	f.expect(t, "POST", "/webhooks/"+wh.ID+"/test", adm.Secret, "", http.StatusOK, &tested)
	if tested.Status != store.DeliveryDelivered || tested.LastStatusCode != http.StatusOK || tested.Event != "ping" ||
		tested.Attempts != 1 || tested.WebhookID != wh.ID || tested.OrgID != org || !tested.Redeliverable {
		t.Errorf("POST /test = %+v, want a delivered ping of %s", tested, wh.ID)
	}
	got := rcv.requests()
	if len(got) != 1 || got[0].err != nil || got[0].header.Get(webhook.HeaderID) != tested.ID ||
		!strings.HasPrefix(string(got[0].body), `{"text":"Aperio: test delivery to webhook `+wh.ID) {
		t.Fatalf("receiver got %+v, want one verified slack ping with webhook-id %s", got, tested.ID)
	}
	// The same request captured and sent again after the tolerance is
	// refused on its timestamp, signature or not.
	late := time.Now().Add(webhook.Tolerance + time.Minute)
	if err := webhook.Verify(secret, got[0].header, got[0].body, late); !errors.Is(err, webhook.ErrTimestamp) {
		t.Errorf("Verify(captured test delivery, %s later) = %v, want ErrTimestamp", webhook.Tolerance+time.Minute, err)
	}

	var again admin.WebhookDelivery
	f.expect(t, "POST", "/webhooks/"+wh.ID+"/deliveries/"+tested.ID+"/redeliver", adm.Secret, "", http.StatusOK, &again)
	got = rcv.requests()
	if len(got) != 2 {
		t.Fatalf("receiver got %d requests, want 2", len(got))
	}
	if got[1].header.Get(webhook.HeaderID) != tested.ID || string(got[1].body) != string(got[0].body) {
		t.Errorf("redelivery webhook-id %q body %q, want %s and the first body", got[1].header.Get(webhook.HeaderID), got[1].body, tested.ID)
	}
	// Signed afresh, so it verifies; the receiver already has the id.
	if err := webhook.Verify(secret, got[1].header, got[1].body, time.Now()); err != nil {
		t.Errorf("Verify(redelivery) = %v, want a valid fresh signature", err)
	}
	if !errors.Is(got[1].err, webhook.ErrReplay) {
		t.Errorf("receiver's verdict on the redelivery = %v, want ErrReplay (same webhook-id)", got[1].err)
	}
	if again.ID != tested.ID || again.Attempts != 2 || again.Status != store.DeliveryFailed || again.LastStatusCode != http.StatusConflict {
		t.Errorf("POST /redeliver = %+v, want attempt 2 of %s, failed with the receiver's 409", again, tested.ID)
	}

	var log []admin.WebhookDelivery
	f.expect(t, "GET", "/webhooks/"+wh.ID+"/deliveries", viewer.Secret, "", http.StatusOK, &log)
	if len(log) != 1 || log[0].ID != tested.ID || log[0].Attempts != 2 || log[0].LastStatusCode != http.StatusConflict {
		t.Errorf("GET /deliveries = %+v, want the one delivery after its redelivery", log)
	}
	if raw := f.logs.String(); strings.Contains(raw, secret) || strings.Contains(raw, "T0K3N") {
		t.Errorf("server log leaks the secret or the URL's path:\n%s", raw)
	}
	var events []string
	for _, e := range f.audit(t) {
		if strings.Contains(e.Detail, secret) || strings.Contains(e.Detail, "T0K3N") {
			t.Errorf("audit entry %+v leaks the secret or the URL's path", e)
		}
		if e.Event == admin.EventWebhookTested || e.Event == admin.EventWebhookRedelivered {
			events = append(events, e.Event)
		}
	}
	if len(events) != 2 {
		t.Errorf("audit events = %v, want webhook_tested and webhook_redelivered", events)
	}
}

// TestWebhookDeliveriesHostile: bad limits, unknown or foreign ids and a
// delivery without its body get clear refusals, and a server without a
// sender answers 404.
func TestWebhookDeliveriesHostile(t *testing.T) {
	f := deliveriesFixture(t)
	a, b := f.org(t, "a"), f.org(t, "b")
	admA := f.key(t, a, admin.RoleAdmin)
	var wa, wb admin.Webhook
	f.expect(t, "POST", "/webhooks", masterToken, `{"url":"http://127.0.0.1:9/","events":["scaling_failed"],"org_id":"`+a+`"}`, http.StatusCreated, &wa)
	f.expect(t, "POST", "/webhooks", masterToken, `{"url":"http://127.0.0.1:9/","events":["scaling_failed"],"org_id":"`+b+`"}`, http.StatusCreated, &wb)
	for _, id := range []struct{ webhook, delivery string }{{wa.ID, "bodiless"}, {wb.ID, "theirs"}} {
		org := map[string]string{wa.ID: a, wb.ID: b}[id.webhook]
		if _, err := f.db.RecordWebhookDelivery(t.Context(), store.WebhookDelivery{ID: id.delivery, WebhookID: id.webhook, OrgID: org,
			Event: "scaling_failed", Status: store.DeliveryFailed, Attempts: 5}, 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, limit := range []string{"0", "101", "-1", "x", strings.Repeat("9", 400)} {
		f.expectError(t, "GET", "/webhooks/"+wa.ID+"/deliveries?limit="+limit, admA.Secret, "", http.StatusBadRequest, "limit")
	}
	var log []admin.WebhookDelivery
	f.expect(t, "GET", "/webhooks/"+wa.ID+"/deliveries?limit=100", admA.Secret, "", http.StatusOK, &log)
	if len(log) != 1 || log[0].Redeliverable {
		t.Errorf("GET /deliveries = %+v, want the bodiless delivery, not redeliverable", log)
	}
	f.expectError(t, "POST", "/webhooks/"+wa.ID+"/deliveries/bodiless/redeliver", admA.Secret, "", http.StatusConflict, "not kept")
	long := strings.Repeat("x", 4000)
	for _, path := range []string{
		"/webhooks/" + wb.ID + "/deliveries",                        // b's webhook
		"/webhooks/" + wb.ID + "/deliveries/theirs/redeliver",       // b's delivery
		"/webhooks/" + wa.ID + "/deliveries/theirs/redeliver",       // b's delivery under a's webhook
		"/webhooks/" + wb.ID + "/test",                              // b's webhook
		"/webhooks/" + long + "/test",                               // nobody's
		"/webhooks/" + wa.ID + "/deliveries/" + long + "/redeliver", // nobody's
	} {
		method := "POST"
		if strings.HasSuffix(path, "/deliveries") {
			method = "GET"
		}
		status, raw := f.call(t, method, path, admA.Secret, "")
		if status != http.StatusNotFound || len(raw) > 400 || strings.Contains(string(raw), "theirs\" of webhook "+wb.ID) {
			t.Errorf("%s %.80s… = %d %.200s, want a short 404", method, path, status, raw)
		}
	}

	off := f.withConfig(t, admin.Config{})
	off.expectError(t, "POST", "/webhooks/"+wa.ID+"/test", admA.Secret, "", http.StatusNotFound, "no test deliveries")
}
