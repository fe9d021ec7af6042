package admin_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aperio-dev/aperio/autoscale"
	"github.com/aperio-dev/aperio/internal/control/admin"
	"github.com/aperio-dev/aperio/internal/control/admin/apiclient"
	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/control/webhook"
	"github.com/aperio-dev/aperio/internal/outbound"
	"github.com/aperio-dev/aperio/store"
)

// fakeSender is a WebhookSender that reaches no network: every delivery
// is answered 200 at once, and logged in db as the dispatcher would.
type fakeSender struct {
	db   *store.DB
	next atomic.Int64
}

func (s *fakeSender) Test(ctx context.Context, sub store.Webhook) (store.WebhookDelivery, error) {
	return s.db.RecordWebhookDelivery(ctx, store.WebhookDelivery{ID: fmt.Sprintf("ping_%d", s.next.Add(1)), WebhookID: sub.ID,
		OrgID: sub.OrgID, Event: apitype.EventPing, Status: store.DeliveryDelivered, Attempts: 1, LastStatusCode: 200, Body: []byte(`{}`)}, 0)
}

func (s *fakeSender) Redeliver(ctx context.Context, _ store.Webhook, prev store.WebhookDelivery) (store.WebhookDelivery, error) {
	prev.Attempts++
	prev.Status, prev.LastStatusCode, prev.LastError = store.DeliveryDelivered, 200, ""
	return s.db.RecordWebhookDelivery(ctx, prev, 0)
}

// webhookSecret is the secret of the fixtures' signed webhooks; it must
// never appear in an answer, the audit log or the server's log.
const webhookSecret = "whsec-do-not-leak"

func TestWebhookCreateListDelete(t *testing.T) {
	f := newFixture(t)
	org := f.org(t, "acme")
	adm := f.key(t, org, admin.RoleAdmin)

	var w1, w2 admin.Webhook
	f.expect(t, "POST", "/webhooks", adm.Secret,
		`{"url":"https://hooks.example.com/aperio/T0K3N","events":["scaling_failed","scaling_disarmed","scaling_failed"],"secret":"`+webhookSecret+`"}`,
		http.StatusCreated, &w1)
	status, raw := f.call(t, "POST", "/webhooks", adm.Secret, `{"url":"https://other.example.com/","events":["scaling_requested"]}`)
	if status != http.StatusCreated {
		t.Fatalf("POST /webhooks (unsigned) = %d %s, want 201", status, raw)
	}
	for _, key := range []string{`"id"`, `"org_id"`, `"url"`, `"events"`, `"authenticated":false`, `"created_at"`} {
		if !strings.Contains(string(raw), key) {
			t.Errorf("POST /webhooks answer %s lacks %s", raw, key)
		}
	}
	if strings.Contains(string(raw), "secret") {
		t.Errorf("POST /webhooks answer %s has a secret field", raw)
	}
	var list []admin.Webhook
	f.expect(t, "GET", "/webhooks", adm.Secret, "", http.StatusOK, &list)
	if len(list) != 2 {
		t.Fatalf("GET /webhooks = %+v, want 2", list)
	}
	w2 = list[0]
	if list[1].ID != w1.ID {
		t.Errorf("GET /webhooks order = %s, %s, want newest first (…, %s)", list[0].ID, list[1].ID, w1.ID)
	}
	if !strings.HasPrefix(w1.ID, "whk_") || w1.OrgID != org || !w1.Authenticated || w2.Authenticated ||
		w1.URL != "https://hooks.example.com/aperio/T0K3N" || !slices.Equal(w1.Events, []string{"scaling_failed", "scaling_disarmed"}) {
		t.Errorf("created webhook = %+v, want whk_ in %s, signed, events deduplicated", w1, org)
	}

	f.expect(t, "DELETE", "/webhooks/"+w1.ID, adm.Secret, "", http.StatusNoContent, nil)
	f.expectError(t, "DELETE", "/webhooks/"+w1.ID, adm.Secret, "", http.StatusNotFound, "not found")
	f.expect(t, "GET", "/webhooks", adm.Secret, "", http.StatusOK, &list)
	if len(list) != 1 || list[0].ID != w2.ID {
		t.Errorf("GET /webhooks after delete = %+v, want %s alone", list, w2.ID)
	}

	var created, deleted []admin.AuditEntry
	for _, e := range f.audit(t) {
		if strings.Contains(e.Detail, webhookSecret) || strings.Contains(e.Detail, "T0K3N") {
			t.Errorf("audit entry %+v leaks the secret or the URL's path", e)
		}
		switch e.Event {
		case admin.EventWebhookCreated:
			created = append(created, e)
		case admin.EventWebhookDeleted:
			deleted = append(deleted, e)
		}
	}
	if len(created) != 2 || len(deleted) != 1 || deleted[0].OrgID != org || deleted[0].Actor != "key:"+adm.ID ||
		!strings.Contains(deleted[0].Detail, w1.ID) || !strings.Contains(deleted[0].Detail, "https://hooks.example.com") {
		t.Errorf("audit: created %+v, deleted %+v; want 2 and 1 by key:%s naming %s and its origin", created, deleted, adm.ID, w1.ID)
	}
	if strings.Contains(f.logs.String(), webhookSecret) {
		t.Errorf("server log leaks the webhook secret:\n%s", f.logs.String())
	}
}

func TestWebhookValidation(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		name, body, msg string
	}{
		{"no url", `{"events":["scaling_failed"]}`, "url is required"},
		{"http refused", `{"url":"http://hooks.example.com/","events":["scaling_failed"]}`, "http is not permitted"},
		{"private address", `{"url":"https://10.0.0.1/","events":["scaling_failed"]}`, "10.0.0.1 is private"},
		{"loopback name", `{"url":"https://localhost/","events":["scaling_failed"]}`, "localhost is"},
		{"userinfo", `{"url":"https://u:p@hooks.example.com/","events":["scaling_failed"]}`, "userinfo"},
		{"scheme", `{"url":"ftp://hooks.example.com/","events":["scaling_failed"]}`, "scheme"},
		{"relative", `{"url":"/hook","events":["scaling_failed"]}`, "not an absolute URL"},
		{"no events", `{"url":"https://hooks.example.com/"}`, "events: at least one is required (" + strings.Join(apitype.WebhookEvents(), ", ") + ")"},
		{"empty events", `{"url":"https://hooks.example.com/","events":[]}`, "events: at least one"},
		{"unknown event", `{"url":"https://hooks.example.com/","events":["scaling_failed","token_minted"]}`, `events[1]: "token_minted" is not one of`},
		{"long secret", `{"url":"https://hooks.example.com/","events":["scaling_failed"],"secret":"` + strings.Repeat("s", 1025) + `"}`, "secret is longer than 1024 bytes"},
		{"control in secret", `{"url":"https://hooks.example.com/","events":["scaling_failed"],"secret":"a\nb"}`, "control characters"},
		{"unknown field", `{"url":"https://hooks.example.com/","events":["scaling_failed"],"sekret":"x"}`, `unknown field "sekret"`},
		{"every problem", `{"url":"http://hooks.example.com/","events":["nope"]}`, `http is not permitted, only https; events[0]: "nope"`},
		{"unknown format", `{"url":"https://hooks.example.com/","events":["scaling_failed"],"format":"teams"}`, `format: "teams" is not one of generic, slack, discord`},
		{"long format", `{"url":"https://hooks.example.com/","events":["scaling_failed"],"format":"` + strings.Repeat("f", 5000) + `"}`, `format: "ffff`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.expectError(t, "POST", "/webhooks", masterToken, tt.body, http.StatusBadRequest, tt.msg)
		})
	}
	var list []admin.Webhook
	f.expect(t, "GET", "/webhooks", masterToken, "", http.StatusOK, &list)
	if len(list) != 0 {
		t.Errorf("GET /webhooks after refused creates = %+v, want none", list)
	}
}

// TestWebhookOutboundPolicy: the API judges URLs with the policy it is
// given, the one the deliveries use.
func TestWebhookOutboundPolicy(t *testing.T) {
	f := newFixture(t)
	permissive, err := outbound.New(outbound.Policy{AllowHTTP: true, AllowPrivate: true})
	if err != nil {
		t.Fatal(err)
	}
	allowlisted, err := outbound.New(outbound.Policy{Allowlist: []string{"hooks.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	loopback := `{"url":"http://127.0.0.1:9/hook","events":["scaling_failed"]}`
	g := f.withConfig(t, admin.Config{Outbound: permissive})
	g.expect(t, "POST", "/webhooks", masterToken, loopback, http.StatusCreated, nil)
	f.expectError(t, "POST", "/webhooks", masterToken, loopback, http.StatusBadRequest, "http is not permitted")

	h := f.withConfig(t, admin.Config{Outbound: allowlisted})
	h.expect(t, "POST", "/webhooks", masterToken, `{"url":"https://hooks.example.com/","events":["scaling_failed"]}`, http.StatusCreated, nil)
	h.expectError(t, "POST", "/webhooks", masterToken, `{"url":"https://other.example.com/","events":["scaling_failed"]}`,
		http.StatusBadRequest, "other.example.com is not in the outbound allowlist")
}

func TestWebhookRolesAndOrgs(t *testing.T) {
	f := newFixture(t)
	a, b := f.org(t, "a"), f.org(t, "b")
	adminA, viewerA, operatorA := f.key(t, a, admin.RoleAdmin), f.key(t, a, admin.RoleViewer), f.key(t, a, admin.RoleOperator)
	adminB := f.key(t, b, admin.RoleAdmin)
	body := `{"url":"https://hooks.example.com/","events":["scaling_failed"]}`

	f.expectError(t, "POST", "/webhooks", "", body, http.StatusUnauthorized, "")
	f.expectError(t, "POST", "/webhooks", viewerA.Secret, body, http.StatusForbidden, "")
	f.expectError(t, "POST", "/webhooks", operatorA.Secret, body, http.StatusForbidden, "")
	f.expectError(t, "POST", "/webhooks", adminA.Secret, `{"url":"https://hooks.example.com/","events":["scaling_failed"],"org_id":"`+b+`"}`,
		http.StatusBadRequest, "org_id may only be set with the master token")
	var wa, wb, wm admin.Webhook
	f.expect(t, "POST", "/webhooks", adminA.Secret, body, http.StatusCreated, &wa)
	f.expect(t, "POST", "/webhooks", masterToken, `{"url":"https://hooks.example.com/b","events":["scaling_failed"],"org_id":"`+b+`"}`, http.StatusCreated, &wb)
	f.expect(t, "POST", "/webhooks", masterToken, body, http.StatusCreated, &wm)
	if wa.OrgID != a || wb.OrgID != b || wm.OrgID == a || wm.OrgID == b || wm.OrgID == "" {
		t.Errorf("orgs of created webhooks = %s, %s, %s; want %s, %s and the default org", wa.OrgID, wb.OrgID, wm.OrgID, a, b)
	}
	f.expectError(t, "POST", "/webhooks", masterToken, `{"url":"https://hooks.example.com/","events":["scaling_failed"],"org_id":"org_missing"}`,
		http.StatusNotFound, "organization")

	ids := func(cred string) []string {
		var l []admin.Webhook
		f.expect(t, "GET", "/webhooks", cred, "", http.StatusOK, &l)
		var out []string
		for _, w := range l {
			out = append(out, w.ID)
		}
		return out
	}
	if got := ids(viewerA.Secret); !slices.Equal(got, []string{wa.ID}) {
		t.Errorf("GET /webhooks as a viewer of a = %v, want [%s]", got, wa.ID)
	}
	if got := ids(adminB.Secret); !slices.Equal(got, []string{wb.ID}) {
		t.Errorf("GET /webhooks as an admin of b = %v, want [%s]", got, wb.ID)
	}
	if got := ids(masterToken); !slices.Equal(got, []string{wm.ID, wb.ID, wa.ID}) {
		t.Errorf("GET /webhooks as master = %v, want all three newest first", got)
	}

	f.expectError(t, "DELETE", "/webhooks/"+wa.ID, adminB.Secret, "", http.StatusNotFound, "not found")
	f.expectError(t, "DELETE", "/webhooks/"+wa.ID, operatorA.Secret, "", http.StatusForbidden, "")
	f.expect(t, "DELETE", "/webhooks/"+wb.ID, masterToken, "", http.StatusNoContent, nil)
	f.expect(t, "DELETE", "/webhooks/"+wa.ID, adminA.Secret, "", http.StatusNoContent, nil)
	if got := ids(masterToken); !slices.Equal(got, []string{wm.ID}) {
		t.Errorf("GET /webhooks after deletes = %v, want [%s]", got, wm.ID)
	}
}

func TestClientWebhooks(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	c := &apiclient.Client{URL: f.url, Key: masterToken}
	w, err := c.CreateWebhook(ctx, admin.CreateWebhookRequest{URL: "https://hooks.example.com/", Events: []string{"scaling_disarmed"}, Secret: "k"})
	if err != nil || !w.Authenticated || !slices.Equal(w.Events, []string{"scaling_disarmed"}) {
		t.Fatalf("CreateWebhook = %+v, %v", w, err)
	}
	ws, err := c.Webhooks(ctx)
	if err != nil || len(ws) != 1 || ws[0].ID != w.ID {
		t.Errorf("Webhooks = %+v, %v, want %s", ws, err, w.ID)
	}
	if err := c.DeleteWebhook(ctx, w.ID); err != nil {
		t.Errorf("DeleteWebhook: %v", err)
	}
	err = c.DeleteWebhook(ctx, w.ID)
	if re, ok := errors.AsType[*apiclient.ResponseError](err); !ok || re.StatusCode != http.StatusNotFound {
		t.Errorf("DeleteWebhook(again) = %v, want a 404 ResponseError", err)
	}
	_, err = c.CreateWebhook(ctx, admin.CreateWebhookRequest{URL: "https://hooks.example.com/"})
	if re, ok := errors.AsType[*apiclient.ResponseError](err); !ok || re.StatusCode != http.StatusBadRequest {
		t.Errorf("CreateWebhook(no events) = %v, want a 400 ResponseError", err)
	}
}

// TestWebhookEventsMatchAutoscale keeps the client's list of webhook events
// (aperio-client api webhooks create --events, which must not link
// autoscale) holding the events the autoscaler and the maintenance routes
// emit, and exactly issue #20's list plus instance_retired (issue #42).
func TestWebhookEventsMatchAutoscale(t *testing.T) {
	got := apitype.WebhookEvents()
	for _, e := range append(autoscale.EventTypes(), webhook.EventMaintenanceOn, webhook.EventMaintenanceOff) {
		if !slices.Contains(got, e) {
			t.Errorf("wire.WebhookEvents() = %q, want it to hold %q", got, e)
		}
	}
	want := []string{"client_connected", "client_disconnected", "client_refused", "instance_retired", "token_created", "token_revoked",
		"token_rotated", "token_expiring", "quota_exceeded", "maintenance_on", "maintenance_off", "scaling_requested",
		"scaling_failed", "scaling_disarmed", "auth_denied", "config_reloaded"}
	if !slices.Equal(got, want) {
		t.Errorf("wire.WebhookEvents() = %q, want %q", got, want)
	}
}
