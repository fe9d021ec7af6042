package main

import (
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/admin"
)

func TestAPIWebhooks(t *testing.T) {
	s := newAPIServer(t)
	t.Setenv("APERIO_SERVER_URL", s.url)
	t.Setenv("APERIO_API_KEY", testMaster)
	const secret = "cli-webhook-secret"

	var signed admin.Webhook
	okJSON(t, &signed, "api", "webhooks", "create", "--url", "https://hooks.example.com/a",
		"--events", "scaling_failed,scaling_disarmed", "--secret", secret, "--json")
	if !strings.HasPrefix(signed.ID, "whk_") || !signed.Authenticated ||
		strings.Join(signed.Events, ",") != "scaling_failed,scaling_disarmed" || signed.URL != "https://hooks.example.com/a" {
		t.Fatalf("webhooks create --json = %+v", signed)
	}
	header := []string{"ID", "URL", "EVENTS", "SIGNED", "ORG", "CREATED"}
	out := ok(t, "api", "webhooks", "create", "--url", "https://hooks.example.com/b", "--events", "scaling_requested")
	rows := table(t, out, header...)
	if len(rows) != 1 || rows[0]["SIGNED"] != "no" || rows[0]["EVENTS"] != "scaling_requested" {
		t.Errorf("webhooks create printed %v, want one unsigned row", rows)
	}
	unsigned := rows[0]["ID"]

	out = ok(t, "api", "webhooks", "list")
	if strings.Contains(out, secret) {
		t.Errorf("webhooks list shows the secret: %q", out)
	}
	rows = table(t, out, header...)
	if len(rows) != 2 || rows[0]["ID"] != unsigned || rows[1]["ID"] != signed.ID || rows[1]["SIGNED"] != "yes" ||
		rows[1]["EVENTS"] != "scaling_failed,scaling_disarmed" || rows[1]["URL"] != "https://hooks.example.com/a" {
		t.Errorf("webhooks list = %v, want the unsigned then the signed webhook", rows)
	}
	var listed []admin.Webhook
	okJSON(t, &listed, "api", "webhooks", "list", "--json")
	if len(listed) != 2 || listed[1].ID != signed.ID {
		t.Errorf("webhooks list --json = %+v", listed)
	}

	if out := ok(t, "api", "webhooks", "delete", signed.ID); out != "webhook "+signed.ID+" deleted\n" {
		t.Errorf("webhooks delete printed %q", out)
	}
	if out := ok(t, "api", "webhooks", "delete", unsigned, "--json"); out != "" {
		t.Errorf("webhooks delete --json printed %q, want nothing", out)
	}
	if rows := table(t, ok(t, "api", "webhooks", "list"), header...); len(rows) != 0 {
		t.Errorf("webhooks list after deletes = %v, want none", rows)
	}
}
