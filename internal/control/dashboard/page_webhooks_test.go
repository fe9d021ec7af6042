package dashboard

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

func webhooksFixture(f *adminFake) {
	f.answer(http.MethodGet, "/webhooks", 200, []apitype.Webhook{
		{ID: "wh_1", OrgID: "org1", URL: "https://hooks.example.com/a", Events: []string{apitype.EventScalingFailed, apitype.EventMaintenanceOn}, Authenticated: true, CreatedAt: adminTestNow},
	})
}

func TestWebhooksPageRoles(t *testing.T) {
	u, f := newAdminUI(t)
	webhooksFixture(f)
	b := render(t, u, "webhooks", apitype.RoleOperator)
	contains(t, "operator's webhooks page", b, "https://hooks.example.com/a", "scaling_failed, maintenance_on")
	lacks(t, "operator's webhooks page", b, `action="/aperio/ui/webhooks/create"`, `action="/aperio/ui/webhooks/delete"`)
	b = render(t, u, "webhooks", apitype.RoleAdmin)
	contains(t, "admin's webhooks page", b, `action="/aperio/ui/webhooks/create"`, `name="id" value="wh_1"`, `type="password"`, "<legend>Events</legend>")
	for i, e := range apitype.WebhookEvents() {
		contains(t, "admin's webhooks page", b, `value="`+e+`"`)
		if l := u.msgs.text("en", "webhooks.event."+e); l == "webhooks.event."+e {
			t.Errorf("event %d %s has no label", i, e)
		}
	}
}

func TestWebhooksCreateAndDelete(t *testing.T) {
	u, f := newAdminUI(t)
	webhooksFixture(f)
	f.answer(http.MethodPost, "/webhooks", http.StatusCreated, apitype.Webhook{ID: "wh_2"})
	f.answer(http.MethodDelete, "/webhooks/wh_1", http.StatusNoContent, nil)
	w := post(t, u, UIPrefix+"webhooks/create", apitype.RoleAdmin, url.Values{"csrf": {"tok-admin"}, "url": {"https://hooks.example.com/b"},
		"events": {apitype.EventMaintenanceOff, apitype.EventScalingRequested, apitype.EventMaintenanceOff}, "secret": {" s3cret "}})
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != UIPrefix+"webhooks?done=create" {
		t.Fatalf("create = %d %q; %s", w.Code, w.Header().Get("Location"), w.Body)
	}
	if strings.Contains(w.Body.String(), "s3cret") {
		t.Errorf("the answer repeats the secret")
	}
	w = post(t, u, UIPrefix+"webhooks/delete", apitype.RoleAdmin, url.Values{"csrf": {"tok-admin"}, "id": {"wh_1"}})
	if w.Code != http.StatusSeeOther {
		t.Fatalf("delete = %d", w.Code)
	}
	wantCalls(t, f, apitype.RoleAdmin,
		`POST /webhooks {"url":"https://hooks.example.com/b","events":["maintenance_off","scaling_requested"],"secret":" s3cret "}`,
		"DELETE /webhooks/wh_1")
}

func TestWebhooksBadInput(t *testing.T) {
	u, f := newAdminUI(t)
	webhooksFixture(f)
	wantBadForms(t, u, "webhooks/create", apitype.RoleAdmin, map[string]badForm{
		"no-url":       {url.Values{"events": {"scaling_failed"}}, "URL is required."},
		"relative":     {url.Values{"url": {"/hook"}, "events": {"scaling_failed"}}, "absolute http or https"},
		"ftp":          {url.Values{"url": {"ftp://x.example"}, "events": {"scaling_failed"}}, "absolute http or https"},
		"long-url":     {url.Values{"url": {"https://x.example/" + strings.Repeat("a", maxFieldBytes)}, "events": {"scaling_failed"}}, "longer than"},
		"no-events":    {url.Values{"url": {"https://x.example/"}}, "at least one event"},
		"bad-event":    {url.Values{"url": {"https://x.example/"}, "events": {"everything"}}, "does not send"},
		"ctl-secret":   {url.Values{"url": {"https://x.example/"}, "events": {"scaling_failed"}, "secret": {"a\x01b"}}, "control characters"},
		"long-secret":  {url.Values{"url": {"https://x.example/"}, "events": {"scaling_failed"}, "secret": {strings.Repeat("s", maxFieldBytes+1)}}, "longer than"},
		"keeps-events": {url.Values{"url": {"nope"}, "events": {"maintenance_on"}}, `value="maintenance_on" checked`},
	})
	wantCalls(t, f, apitype.RoleAdmin)
	f.answer(http.MethodPost, "/webhooks", http.StatusBadRequest, map[string]string{"error": "url is not permitted by the outbound policy: private address"})
	if code, b := submit(t, u, "webhooks/create", apitype.RoleAdmin, url.Values{"url": {"https://10.0.0.1/"}, "events": {"scaling_failed"}, "secret": {"s"}}); code != http.StatusBadRequest || !strings.Contains(b, "outbound policy: private address") || strings.Contains(b, `value="s"`) {
		t.Errorf("refused create = %d; want the API's message and no secret in the page; %s", code, b)
	}
}

func TestWebhooksGerman(t *testing.T) {
	u, f := newAdminUI(t)
	webhooksFixture(f)
	contains(t, "German webhooks page", render(t, u, "webhooks", apitype.RoleAdmin, "Accept-Language", "de"), "Webhook abonnieren", "Ereignisse", "Wartung an")
}
