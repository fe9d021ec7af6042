package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// Formats of a subscription's bodies (Subscription.Format).
const (
	// FormatGeneric is the JSON envelope of Payload and
	// MaintenancePayload; "" means it too.
	FormatGeneric = apitype.WebhookFormatGeneric
	// FormatSlack is {"text": summary}, for a Slack incoming webhook.
	FormatSlack = apitype.WebhookFormatSlack
	// FormatDiscord is {"content": summary, "allowed_mentions": …}, for
	// a Discord webhook.
	FormatDiscord = apitype.WebhookFormatDiscord
)

// EventPing is the event of a test delivery; see Dispatcher.Test.
const EventPing = apitype.EventPing

// maxSummary bounds a Slack or Discord summary, in bytes: under
// Discord's 2,000-character limit on content whatever the runes.
const maxSummary = 1900

// summaryFields is the generic envelope with the detail fields of every
// event, as summary reads them.
type summaryFields struct {
	Event    string    `json:"event"`
	At       time.Time `json:"at"`
	OrgID    string    `json:"org_id"`
	Hostname string    `json:"hostname"`
	Path     string    `json:"path"`
	Detail   struct {
		Reason              string     `json:"reason"`
		Current             int        `json:"current"`
		Desired             int        `json:"desired"`
		Status              int        `json:"status"`
		ConsecutiveFailures int        `json:"consecutive_failures"`
		Error               string     `json:"error"`
		By                  string     `json:"by"`
		ExpiresAt           *time.Time `json:"expires_at"`
		WebhookID           string     `json:"webhook_id"`
	} `json:"detail"`
}

// formatBody returns the body of a delivery in format, from its generic
// body: generic itself for FormatGeneric or "", else the chat message
// with summary's line. An unknown format is an error, which admin
// validation makes impossible for stored subscriptions.
func formatBody(format string, generic []byte) ([]byte, error) {
	switch format {
	case "", FormatGeneric:
		return generic, nil
	case FormatSlack, FormatDiscord:
	default:
		return nil, fmt.Errorf("webhook: unknown format %q", format)
	}
	var f summaryFields
	if err := json.Unmarshal(generic, &f); err != nil {
		return nil, fmt.Errorf("webhook: read payload for %s: %w", format, err)
	}
	line := summary(f)
	if format == FormatSlack {
		return marshalText(struct {
			Text string `json:"text"`
		}{slackEscape(line)})
	}
	// allowed_mentions with no parse types: a hostname or reason that
	// reads "@everyone" pings nobody.
	return marshalText(struct {
		Content         string `json:"content"`
		AllowedMentions struct {
			Parse []string `json:"parse"`
		} `json:"allowed_mentions"`
	}{Content: line, AllowedMentions: struct {
		Parse []string `json:"parse"`
	}{Parse: []string{}}})
}

// marshalText is json.Marshal without escaping <, > and &, which chat
// messages show as written; the body is never embedded in HTML.
func marshalText(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// summary is a one-line reading of an event for people.
func summary(f summaryFields) string {
	where := f.Hostname + f.Path
	d := f.Detail
	var b strings.Builder
	b.WriteString("Aperio: ")
	switch f.Event {
	case apitype.EventScalingRequested:
		fmt.Fprintf(&b, "scaling requested for %s: %d → %d instances", where, d.Current, d.Desired)
		if d.Reason != "" {
			fmt.Fprintf(&b, " (%s)", d.Reason)
		}
		if d.Status != 0 {
			fmt.Fprintf(&b, ", provider answered %d", d.Status)
		}
	case apitype.EventScalingFailed:
		fmt.Fprintf(&b, "scaling call failed for %s: %d → %d instances", where, d.Current, d.Desired)
		if d.Reason != "" {
			fmt.Fprintf(&b, " (%s)", d.Reason)
		}
		switch {
		case d.Error != "":
			fmt.Fprintf(&b, ": %s", d.Error)
		case d.Status != 0:
			fmt.Fprintf(&b, ", provider answered %d", d.Status)
		}
	case apitype.EventScalingDisarmed:
		fmt.Fprintf(&b, "autoscaling disarmed for %s after %d failed calls in a row", where, d.ConsecutiveFailures)
	case apitype.EventMaintenanceOn:
		fmt.Fprintf(&b, "maintenance on for %s by %s", where, d.By)
		if d.Reason != "" {
			fmt.Fprintf(&b, ": %s", d.Reason)
		}
		if d.ExpiresAt != nil {
			fmt.Fprintf(&b, " (until %s)", d.ExpiresAt.UTC().Format(time.RFC3339))
		}
	case apitype.EventMaintenanceOff:
		fmt.Fprintf(&b, "maintenance off for %s by %s", where, d.By)
	case EventPing:
		fmt.Fprintf(&b, "test delivery to webhook %s", d.WebhookID)
	default:
		fmt.Fprintf(&b, "%s", f.Event)
		if where != "" {
			fmt.Fprintf(&b, " for %s", where)
		}
	}
	// One line: a reason or error carrying newlines stays on it.
	line := strings.Join(strings.Fields(b.String()), " ")
	return truncateRunes(line, maxSummary)
}

// slackEscape escapes the three characters Slack's mrkdwn gives a
// meaning, so that a hostname or reason cannot forge a link or mention.
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// truncateRunes cuts s to at most n bytes at a rune boundary, marking the
// cut with an ellipsis.
func truncateRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const ell = "…"
	n -= len(ell)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + ell
}
