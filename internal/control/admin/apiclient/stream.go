package apiclient

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// Stats calls GET /stats; hostname "" means every hostname the caller
// sees.
func (c *Client) Stats(ctx context.Context, hostname string) (apitype.Stats, error) {
	path := "/stats"
	if hostname != "" {
		path += "?" + url.Values{"hostname": {hostname}}.Encode()
	}
	var out apitype.Stats
	return out, c.Do(ctx, http.MethodGet, path, nil, &out)
}

// AuditQuery is what GET /audit filters by; the zero value lists the
// newest entries. Zero fields filter nothing.
type AuditQuery struct {
	Event, Actor, Hostname string
	Since, Until           time.Time
	// Limit is 1 to 1000; 0 means the server's default.
	Limit int
}

// QueryAudit calls GET /audit with q's filters.
func (c *Client) QueryAudit(ctx context.Context, q AuditQuery) ([]apitype.AuditEntry, error) {
	v := url.Values{}
	for k, s := range map[string]string{"event": q.Event, "actor": q.Actor, "hostname": q.Hostname} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.Format(time.RFC3339Nano))
	}
	if !q.Until.IsZero() {
		v.Set("until", q.Until.Format(time.RFC3339Nano))
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	path := "/audit"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var out []apitype.AuditEntry
	return out, c.Do(ctx, http.MethodGet, path, nil, &out)
}

// VerifyAudit calls GET /audit/verify.
func (c *Client) VerifyAudit(ctx context.Context) (apitype.AuditVerify, error) {
	var out apitype.AuditVerify
	return out, c.Do(ctx, http.MethodGet, "/audit/verify", nil, &out)
}

// StreamEvent is one event of GET /stream: its type (apitype.StreamAccess,
// StreamScaling, StreamClient, StreamDropped) and its JSON data.
type StreamEvent struct {
	Type string
	Data []byte
}

// maxStreamLine bounds one line of the stream, and so one event's data.
const maxStreamLine = 1 << 20

// ErrStreamEnded is Stream's error when the server closed the stream (it
// shuts down, for one).
var ErrStreamEnded = errors.New("admin: the server ended the stream")

// Stream follows GET /stream with types (nil means all) and hostname (""
// means all) and calls fn with each event, in order, until ctx ends (it
// returns ctx's error), the server closes the stream (ErrStreamEnded), the
// connection fails, or fn returns an error (which it returns). A refusal
// is a *ResponseError. Bound it with ctx, not with HTTPClient's Timeout,
// which would cut the stream.
func (c *Client) Stream(ctx context.Context, types []string, hostname string, fn func(StreamEvent) error) error {
	base, err := c.base()
	if err != nil {
		return err
	}
	v := url.Values{}
	if len(types) > 0 {
		v.Set("type", strings.Join(types, ","))
	}
	if hostname != "" {
		v.Set("hostname", hostname)
	}
	u := base + "/stream"
	if len(v) > 0 {
		u += "?" + v.Encode()
	}
	resp, err := c.send(ctx, http.MethodGet, u, "text/event-stream", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
		return responseError(resp.StatusCode, data)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 4096), maxStreamLine)
	var ev StreamEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if ev.Type != "" {
				if err := fn(ev); err != nil {
					return err
				}
			}
			ev = StreamEvent{}
		case strings.HasPrefix(line, ":"): // a comment: the heartbeat
		case strings.HasPrefix(line, "event:"):
			ev.Type = strings.TrimSpace(line[len("event:"):])
		case strings.HasPrefix(line, "data:"):
			ev.Data = append(ev.Data, strings.TrimPrefix(line[len("data:"):], " ")...)
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("admin: read stream: %w", err)
	}
	return ErrStreamEnded
}

// UsageQuery is what GET /usage filters by; a zero field filters nothing
// (From and To: the server's default of the 31 days up to today).
type UsageQuery struct {
	TokenID, OrgID, Hostname string
	// From and To are UTC dates, YYYY-MM-DD, both inclusive.
	From, To string
}

// Usage calls GET /usage with q's filters.
func (c *Client) Usage(ctx context.Context, q UsageQuery) ([]apitype.UsageRow, error) {
	v := url.Values{}
	for k, s := range map[string]string{"token": q.TokenID, "org": q.OrgID, "hostname": q.Hostname, "from": q.From, "to": q.To} {
		if s != "" {
			v.Set(k, s)
		}
	}
	path := "/usage"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var out []apitype.UsageRow
	return out, c.Do(ctx, http.MethodGet, path, nil, &out)
}
