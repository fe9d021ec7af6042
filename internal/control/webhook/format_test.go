package webhook

import (
	"bytes"
	"encoding/json"
	"flag"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/config/configtest"
	"github.com/aperio-dev/aperio/internal/control/apitype"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// formatEvents are the generic bodies of the golden tests.
func formatEvents(t *testing.T) map[string][]byte {
	t.Helper()
	at := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	ends := at.Add(2 * time.Hour)
	failed := scalingEvent(apitype.EventScalingFailed)
	failed.Status, failed.Err = 503, "provider answered 503 Service Unavailable"
	disarmed := scalingEvent(apitype.EventScalingDisarmed)
	disarmed.ConsecutiveFailures = 5
	out := map[string][]byte{}
	for name, enc := range map[string]func() ([]byte, error){
		"scaling_requested": func() ([]byte, error) { return marshalPayload(scalingEvent(apitype.EventScalingRequested)) },
		"scaling_failed":    func() ([]byte, error) { return marshalPayload(failed) },
		"scaling_disarmed":  func() ([]byte, error) { return marshalPayload(disarmed) },
		"ping":              func() ([]byte, error) { return pingPayload(Subscription{ID: "whk_1", OrgID: "org-1"}, at) },
		"maintenance_on": func() ([]byte, error) {
			return marshalMaintenance(MaintenanceEvent{Type: EventMaintenanceOn, At: at, OrgID: "org-1",
				Hostname: "*.shop.example.com", By: "key alice", Reason: "db <upgrade> & @everyone", ExpiresAt: &ends})
		},
	} {
		b, err := enc()
		if err != nil {
			t.Fatalf("encode %s: %v", name, err)
		}
		out[name] = b
	}
	return out
}

// TestFormatGolden pins the Slack and Discord bodies of a few events;
// regenerate with go test ./webhook -run TestFormatGolden -update.
func TestFormatGolden(t *testing.T) {
	for name, generic := range formatEvents(t) {
		for _, format := range []string{FormatSlack, FormatDiscord} {
			t.Run(format+"/"+name, func(t *testing.T) {
				got, err := formatBody(format, generic)
				if err != nil {
					t.Fatalf("formatBody(%s, %s) = %v", format, name, err)
				}
				var indented bytes.Buffer
				if err := json.Indent(&indented, got, "", "  "); err != nil {
					t.Fatalf("formatBody(%s, %s) = %q, not JSON: %v", format, name, got, err)
				}
				indented.WriteByte('\n')
				configtest.Golden(t, filepath.Join("testdata", format+"_"+name+".json"), indented.Bytes(), *update)
			})
		}
	}
}

func TestFormatGenericUnchanged(t *testing.T) {
	generic := formatEvents(t)["scaling_failed"]
	for _, format := range []string{"", FormatGeneric} {
		got, err := formatBody(format, generic)
		if err != nil || !bytes.Equal(got, generic) {
			t.Errorf("formatBody(%q) = %q, %v, want the generic body unchanged", format, got, err)
		}
	}
	if _, err := formatBody("teams", generic); err == nil {
		t.Error(`formatBody("teams") = nil error, want unknown format`)
	}
}

// TestFormatHostile: a summary stays one bounded line, Slack's control
// characters are escaped and Discord pings nobody, whatever the event
// carries; a body that is not JSON is an error, not a panic.
func TestFormatHostile(t *testing.T) {
	e := scalingEvent(apitype.EventScalingFailed)
	e.Hostname = "<!channel>.example.com"
	e.Err = strings.Repeat("é\n", 5000)
	generic, err := marshalPayload(e)
	if err != nil {
		t.Fatal(err)
	}
	slack, err := formatBody(FormatSlack, generic)
	if err != nil {
		t.Fatal(err)
	}
	var s struct{ Text string }
	if err := json.Unmarshal(slack, &s); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(s.Text, "<!channel>") || !strings.Contains(s.Text, "&lt;!channel&gt;") {
		t.Errorf("slack text = %.80q…, want <!channel> escaped", s.Text)
	}
	if strings.Contains(s.Text, "\n") || len(s.Text) > maxSummary+16 || !strings.HasSuffix(s.Text, "…") {
		t.Errorf("slack text is %d bytes (newline %t), want one line cut near %d with an ellipsis", len(s.Text), strings.Contains(s.Text, "\n"), maxSummary)
	}
	discord, err := formatBody(FormatDiscord, generic)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Content         string
		AllowedMentions struct{ Parse []string } `json:"allowed_mentions"`
	}
	if err := json.Unmarshal(discord, &d); err != nil {
		t.Fatal(err)
	}
	if len([]rune(d.Content)) > 2000 || d.AllowedMentions.Parse == nil || len(d.AllowedMentions.Parse) != 0 {
		t.Errorf("discord = %d runes, allowed_mentions.parse %v, want at most 2000 and an empty list", len([]rune(d.Content)), d.AllowedMentions.Parse)
	}
	for _, format := range []string{FormatSlack, FormatDiscord} {
		if _, err := formatBody(format, []byte("{not json")); err == nil {
			t.Errorf("formatBody(%s, not JSON) = nil error", format)
		}
	}
}
