package events_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/control/events"
	"github.com/aperio-dev/aperio/internal/control/webhook"
	"github.com/aperio-dev/aperio/internal/outbound"
	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/store/storetest"
)

// signedReceiver verifies every delivery with webhook.Verify and keeps
// the verified ones by event.
type signedReceiver struct {
	secret string
	mu     sync.Mutex // guards the following fields
	got    map[string][][]byte
	bad    []string
	wake   chan struct{}
}

func (r *signedReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	err = webhook.Verify(r.secret, req.Header, body, time.Now())
	r.mu.Lock()
	if err != nil {
		r.bad = append(r.bad, req.Header.Get(webhook.HeaderEvent)+": "+err.Error())
	} else {
		r.got[req.Header.Get(webhook.HeaderEvent)] = append(r.got[req.Header.Get(webhook.HeaderEvent)], body)
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// TestEveryKindDeliveredSigned emits every event kind through the one
// emit path, into a real store and a real dispatcher: each is audited once
// and delivered once, in its payload, with a Standard Webhooks signature
// that webhook.Verify accepts. The kinds are emitted through Emit here so
// that one table covers them all, the ones without a caller yet
// (quota_exceeded) included; their real callers are covered by
// TestEventsThroughServer (gateway), TestWebhooksThroughServer (gateway:
// the scaling kinds) and TestMaintenanceReasonAndTTL (admin).
func TestEveryKindDeliveredSigned(t *testing.T) {
	ctx := t.Context()
	db := storetest.Open(t, storetest.SQLite(t))
	org, err := db.CreateOrg(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	secret := webhook.SecretPrefix + base64.StdEncoding.EncodeToString([]byte("a key of thirty-two bytes, or so"))
	rcv := &signedReceiver{secret: secret, got: map[string][][]byte{}, wake: make(chan struct{}, 1)}
	srv := httptest.NewServer(rcv)
	t.Cleanup(srv.Close)
	if _, err := db.CreateWebhook(ctx, store.Webhook{OrgID: org.ID, URL: srv.URL, Secret: secret, Events: apitype.WebhookEvents()}); err != nil {
		t.Fatal(err)
	}
	fc, err := outbound.New(outbound.Policy{AllowHTTP: true, AllowPrivate: true})
	if err != nil {
		t.Fatal(err)
	}
	d, err := webhook.New(webhook.Config{Subscriptions: db, Client: fc})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
	em := events.New(events.Config{Audit: db, Sink: d})

	at := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	host := "app.example.com"
	scaling := func(kind string) any {
		return events.Scaling{Type: kind, At: at, RecordID: "sr_1", OrgID: org.ID, Hostname: host, Path: "/", Current: 1, Desired: 2, Max: 3}
	}
	tests := []struct {
		kind string
		data any
		// field is one detail field the payload must carry.
		field string
	}{
		{apitype.EventClientConnected, nil, "client_id"},
		{apitype.EventClientDisconnected, nil, "client_id"},
		{apitype.EventClientRefused, nil, "reason"},
		{apitype.EventInstanceRetired, nil, "instance_id"},
		{apitype.EventTokenCreated, nil, "token_id"},
		{apitype.EventTokenRevoked, nil, "token_id"},
		{apitype.EventTokenRotated, nil, "token_id"},
		{apitype.EventTokenExpiring, nil, "expires_at"},
		{apitype.EventQuotaExceeded, nil, "max_bytes"},
		{apitype.EventMaintenanceOn, webhook.MaintenanceEvent{Type: apitype.EventMaintenanceOn, At: at, OrgID: org.ID, Hostname: host, By: "master", Reason: "upgrade"}, "by"},
		{apitype.EventMaintenanceOff, webhook.MaintenanceEvent{Type: apitype.EventMaintenanceOff, At: at, OrgID: org.ID, Hostname: host, By: "master"}, "by"},
		{apitype.EventScalingRequested, scaling(apitype.EventScalingRequested), "record_id"},
		{apitype.EventScalingFailed, scaling(apitype.EventScalingFailed), "record_id"},
		{apitype.EventScalingDisarmed, scaling(apitype.EventScalingDisarmed), "record_id"},
		{apitype.EventAuthDenied, nil, "status"},
		{apitype.EventConfigReloaded, nil, "applied"},
	}
	if len(tests) != len(apitype.WebhookEvents()) {
		t.Fatalf("the table has %d kinds, wire.WebhookEvents() %d: add the new kind here", len(tests), len(apitype.WebhookEvents()))
	}
	for _, tt := range tests {
		ev := events.Event{Kind: tt.kind, At: at, OrgID: org.ID, Actor: "master", Hostname: host, Detail: tt.kind + " happened",
			Fields: map[string]any{tt.field: "x"}, Data: tt.data}
		if tt.kind == apitype.EventQuotaExceeded {
			ev = events.QuotaExceeded(events.Quota{OrgID: org.ID, TokenID: "tok_1", Hostname: host, Limit: "daily_max_bytes", UsedBytes: 10, MaxBytes: 5, At: at})
		}
		em.Emit(ctx, ev)
	}

	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for {
		rcv.mu.Lock()
		n := len(rcv.got)
		rcv.mu.Unlock()
		if n == len(tests) {
			break
		}
		select {
		case <-rcv.wake:
		case <-deadline.C:
			t.Fatalf("%d of %d kinds delivered", n, len(tests))
		}
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if len(rcv.bad) > 0 {
		t.Errorf("deliveries Verify refused: %q", rcv.bad)
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			bodies := rcv.got[tt.kind]
			if len(bodies) != 1 {
				t.Fatalf("%d verified deliveries, want 1", len(bodies))
			}
			var p struct {
				Event    string         `json:"event"`
				OrgID    string         `json:"org_id"`
				Hostname string         `json:"hostname"`
				Detail   map[string]any `json:"detail"`
			}
			if err := json.Unmarshal(bodies[0], &p); err != nil {
				t.Fatal(err)
			}
			if p.Event != tt.kind || p.OrgID != org.ID || p.Hostname != host {
				t.Errorf("payload = %s, want event %s of org %s for %s", bodies[0], tt.kind, org.ID, host)
			}
			if _, ok := p.Detail[tt.field]; !ok {
				t.Errorf("payload detail = %v, want a %q field", p.Detail, tt.field)
			}
			es, err := db.QueryAudit(ctx, store.AuditQuery{OrgID: org.ID, Event: tt.kind})
			if err != nil {
				t.Fatal(err)
			}
			if len(es) != 1 || es[0].Actor == "" || !es[0].At.Equal(at) {
				t.Errorf("audit entries of %s = %+v, want one, stamped %s", tt.kind, es, at)
			}
		})
	}
}
