package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aperio-dev/aperio/internal/control/admin"
	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/exitcode"
	"github.com/aperio-dev/aperio/store"
)

// cliSender is the API's webhook sender in these tests: it reaches no
// network, answers every delivery 200 and logs it in db, as the
// dispatcher would.
type cliSender struct {
	db   *store.DB
	next atomic.Int64
}

func (s *cliSender) Test(ctx context.Context, sub store.Webhook) (store.WebhookDelivery, error) {
	return s.db.RecordWebhookDelivery(ctx, store.WebhookDelivery{ID: fmt.Sprintf("msg_%d", s.next.Add(1)), WebhookID: sub.ID,
		OrgID: sub.OrgID, Event: apitype.EventPing, Status: store.DeliveryDelivered, Attempts: 1, LastStatusCode: 204, Body: []byte(`{}`)}, 0)
}

func (s *cliSender) Redeliver(ctx context.Context, _ store.Webhook, prev store.WebhookDelivery) (store.WebhookDelivery, error) {
	prev.Attempts++
	prev.LastStatusCode = 200
	return s.db.RecordWebhookDelivery(ctx, prev, 0)
}

// cliIn runs aperio-client with args and stdin as its standard input,
// and returns its exit code and output.
func cliIn(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	root := newRootCommand(&stdout, &stderr)
	root.SetArgs(args)
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	root.SetIn(strings.NewReader(stdin))
	return exitcode.Execute(root, &stderr, "aperio-client"), stdout.String(), stderr.String()
}

// storedSecret returns the secret the server's store holds for webhook id.
func storedSecret(t *testing.T, s *apiServer, id string) string {
	t.Helper()
	ws, err := s.db.ListWebhooks(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if w.ID == id {
			return w.Secret
		}
	}
	t.Fatalf("webhook %s not in the store", id)
	return ""
}

// TestAPIWebhookSecretInput: --secret-stdin and --secret-file send the
// first line as the secret, keeping it out of the arguments; an empty,
// overlong or unreadable secret, or two sources at once, is a usage error
// that sends nothing.
func TestAPIWebhookSecretInput(t *testing.T) {
	s := newAPIServer(t)
	t.Setenv("APERIO_SERVER_URL", s.url)
	t.Setenv("APERIO_API_KEY", testMaster)
	base := []string{"api", "webhooks", "create", "--url", "https://hooks.example.com/s", "--events", "scaling_failed", "--json"}

	code, out, errOut := cliIn(t, "from-stdin\r\nsecond line ignored\n", append(base, "--secret-stdin")...)
	var wh admin.Webhook
	if code != 0 || jsonInto(out, &wh) != nil || !wh.Authenticated {
		t.Fatalf("create --secret-stdin = exit %d, %q, stderr %q; want a signed webhook", code, out, errOut)
	}
	if got := storedSecret(t, s, wh.ID); got != "from-stdin" {
		t.Errorf("secret from stdin stored as %q, want %q", got, "from-stdin")
	}

	path := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(path, []byte("whsec_from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = cliIn(t, "", append(base, "--secret-file", path)...)
	if code != 0 || jsonInto(out, &wh) != nil {
		t.Fatalf("create --secret-file = exit %d, %q, stderr %q", code, out, errOut)
	}
	if got := storedSecret(t, s, wh.ID); got != "whsec_from-file" {
		t.Errorf("secret from file stored as %q, want %q", got, "whsec_from-file")
	}

	long := filepath.Join(t.TempDir(), "long")
	if err := os.WriteFile(long, bytes.Repeat([]byte("s"), 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := []struct {
		name, stdin string
		args        []string
		want        string
	}{
		{"empty stdin", "", []string{"--secret-stdin"}, "no secret in standard input"},
		{"blank line", "\nlater\n", []string{"--secret-stdin"}, "no secret in standard input"},
		{"overlong stdin", strings.Repeat("s", 1025), []string{"--secret-stdin"}, "longer than 1024 bytes"},
		{"overlong file", "", []string{"--secret-file", long}, "longer than 1024 bytes"},
		{"missing file", "", []string{"--secret-file", filepath.Join(t.TempDir(), "none")}, "--secret-file"},
		{"directory", "", []string{"--secret-file", t.TempDir()}, "not a regular file"},
		{"two sources", "x\n", []string{"--secret-stdin", "--secret", "y"}, "none of the others can be"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := cliIn(t, tt.stdin, append(base, tt.args...)...)
			if code != 2 || out != "" || !strings.Contains(errOut, tt.want) {
				t.Errorf("create %v = exit %d, stdout %q, stderr %q; want exit 2 naming %q", tt.args, code, out, errOut, tt.want)
			}
		})
	}
	if ws, err := s.db.ListWebhooks(t.Context(), ""); err != nil || len(ws) != 2 {
		t.Errorf("webhooks stored = %d, %v; want only the 2 good creates", len(ws), err)
	}
}

// TestAPIWebhookDeliveries: test, deliveries and redeliver print the
// delivery and its log, and --format reaches the server.
func TestAPIWebhookDeliveries(t *testing.T) {
	s := newAPIServer(t)
	t.Setenv("APERIO_SERVER_URL", s.url)
	t.Setenv("APERIO_API_KEY", testMaster)
	var wh admin.Webhook
	okJSON(t, &wh, "api", "webhooks", "create", "--url", "https://hooks.example.com/d", "--events", "scaling_failed", "--format", "discord", "--json")
	if wh.Format != "discord" {
		t.Errorf("create --format discord = %+v", wh)
	}
	header := []string{"ID", "EVENT", "STATUS", "ATTEMPTS", "CODE", "TIME", "UPDATED", "ERROR"}
	rows := table(t, ok(t, "api", "webhooks", "test", wh.ID), header...)
	if len(rows) != 1 || rows[0]["EVENT"] != "ping" || rows[0]["STATUS"] != "delivered" || rows[0]["CODE"] != "204" || rows[0]["ATTEMPTS"] != "1" {
		t.Fatalf("webhooks test printed %v, want one delivered ping", rows)
	}
	id := rows[0]["ID"]
	rows = table(t, ok(t, "api", "webhooks", "redeliver", wh.ID, id), header...)
	if len(rows) != 1 || rows[0]["ID"] != id || rows[0]["ATTEMPTS"] != "2" || rows[0]["CODE"] != "200" {
		t.Errorf("webhooks redeliver printed %v, want attempt 2 of %s", rows, id)
	}
	ok(t, "api", "webhooks", "test", wh.ID)
	var log []admin.WebhookDelivery
	okJSON(t, &log, "api", "webhooks", "deliveries", wh.ID, "--json")
	if len(log) != 2 || log[1].ID != id || log[1].Attempts != 2 {
		t.Errorf("webhooks deliveries --json = %+v, want 2, newest first, %s redelivered", log, id)
	}
	if rows := table(t, ok(t, "api", "webhooks", "deliveries", wh.ID, "--limit", "1"), header...); len(rows) != 1 || rows[0]["ID"] == id {
		t.Errorf("webhooks deliveries --limit 1 = %v, want the newest alone", rows)
	}
	for _, args := range [][]string{
		{"api", "webhooks", "deliveries", "whk_missing"},
		{"api", "webhooks", "redeliver", wh.ID, "msg_missing"},
		{"api", "webhooks", "deliveries", wh.ID, "--limit", "500"},
		{"api", "webhooks", "create", "--url", "https://hooks.example.com/x", "--events", "scaling_failed", "--format", "teams"},
	} {
		if code, _, errOut := cli(t, args...); code != 1 || errOut == "" {
			t.Errorf("aperio-client %v = exit %d, stderr %q; want 1 with the API's refusal", args, code, errOut)
		}
	}
}

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
	header := []string{"ID", "URL", "EVENTS", "SIGNED", "FORMAT", "ORG", "CREATED"}
	out := ok(t, "api", "webhooks", "create", "--url", "https://hooks.example.com/b", "--events", "scaling_requested")
	rows := table(t, out, header...)
	if len(rows) != 1 || rows[0]["SIGNED"] != "no" || rows[0]["EVENTS"] != "scaling_requested" || rows[0]["FORMAT"] != "generic" {
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

// jsonInto decodes out, the --json output of a command, into v.
func jsonInto(out string, v any) error { return json.Unmarshal([]byte(out), v) }
