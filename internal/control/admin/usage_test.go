package admin_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/store"
)

// TestUsage: GET /usage returns the stored rows of the caller's
// organization, newest day first, filtered by token, hostname and days;
// the master token sees every organization and filters by org.
func TestUsage(t *testing.T) {
	f := newFixture(t)
	a, b := f.org(t, "ua"), f.org(t, "ub")
	key := f.key(t, a, "viewer").Secret
	today := f.clock.Now() // the API's "today"
	yesterday := today.AddDate(0, 0, -1)
	old := today.AddDate(0, 0, -40)
	if err := f.db.AddUsage(t.Context(), []store.UsageDelta{
		{Day: today, TokenID: "tok_a1", OrgID: a, Hostname: "x.a.test", Bytes: 100, Requests: 2},
		{Day: today, TokenID: "tok_a1", OrgID: a, Hostname: "x.a.test", Bytes: 5, Requests: 1}, // adds up
		{Day: yesterday, TokenID: "tok_a2", OrgID: a, Hostname: "y.a.test", Bytes: 7, Requests: 1},
		{Day: old, TokenID: "tok_a1", OrgID: a, Hostname: "x.a.test", Bytes: 9, Requests: 1},
		{Day: today, TokenID: "tok_b1", OrgID: b, Hostname: "x.b.test", Bytes: 50, Requests: 1},
	}); err != nil {
		t.Fatal(err)
	}
	d := func(t time.Time) string { return t.Format(time.DateOnly) }
	tests := []struct {
		name, cred, query string
		want              []apitype.UsageRow
	}{
		{"key, last 31 days", key, "", []apitype.UsageRow{
			{Day: d(today), TokenID: "tok_a1", OrgID: a, Hostname: "x.a.test", Requests: 3, Bytes: 105},
			{Day: d(yesterday), TokenID: "tok_a2", OrgID: a, Hostname: "y.a.test", Requests: 1, Bytes: 7},
		}},
		{"key, its own org named", key, "org=" + a + "&token=tok_a2", []apitype.UsageRow{
			{Day: d(yesterday), TokenID: "tok_a2", OrgID: a, Hostname: "y.a.test", Requests: 1, Bytes: 7},
		}},
		{"key, from an old day", key, "hostname=x.a.test&from=" + d(old), []apitype.UsageRow{
			{Day: d(today), TokenID: "tok_a1", OrgID: a, Hostname: "x.a.test", Requests: 3, Bytes: 105},
			{Day: d(old), TokenID: "tok_a1", OrgID: a, Hostname: "x.a.test", Requests: 1, Bytes: 9},
		}},
		{"key, one day", key, "from=" + d(old) + "&to=" + d(old), []apitype.UsageRow{
			{Day: d(old), TokenID: "tok_a1", OrgID: a, Hostname: "x.a.test", Requests: 1, Bytes: 9},
		}},
		{"key, another org's token", key, "token=tok_b1", []apitype.UsageRow{}},
		{"master, org filter", masterToken, "org=" + b, []apitype.UsageRow{
			{Day: d(today), TokenID: "tok_b1", OrgID: b, Hostname: "x.b.test", Requests: 1, Bytes: 50},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []apitype.UsageRow
			f.expect(t, "GET", "/usage?"+tc.query, tc.cred, "", http.StatusOK, &got)
			if len(got) != len(tc.want) {
				t.Fatalf("GET /usage?%s = %+v, want %+v", tc.query, got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("GET /usage?%s [%d] = %+v, want %+v", tc.query, i, got[i], tc.want[i])
				}
			}
		})
	}
	// The master token without org sees both organizations' rows today.
	var all []apitype.UsageRow
	f.expect(t, "GET", "/usage?from="+d(today), masterToken, "", http.StatusOK, &all)
	orgs := map[string]bool{}
	for _, r := range all {
		orgs[r.OrgID] = true
	}
	if !orgs[a] || !orgs[b] {
		t.Errorf("GET /usage as master = %+v, want rows of %s and %s", all, a, b)
	}
}

// TestUsageHostileInput: every malformed or unbounded query is a 400
// naming its field, before the store sees it.
func TestUsageHostileInput(t *testing.T) {
	f := newFixture(t)
	a, b := f.org(t, "ha"), f.org(t, "hb")
	key := f.key(t, a, "viewer").Secret
	long := strings.Repeat("x", store.MaxUsageField+1)
	tests := []struct {
		name  string
		query url.Values
		cred  string
		msg   string
	}{
		{"from not a date", url.Values{"from": {"yesterday"}}, key, "from"},
		{"to not a date", url.Values{"to": {"2026-13-01"}}, key, "to"},
		{"date with a time", url.Values{"from": {"2026-01-01T00:00:00Z"}}, key, "from"},
		{"short date", url.Values{"to": {"2026-1-1"}}, key, "to"},
		{"to before from", url.Values{"from": {"2026-02-02"}, "to": {"2026-02-01"}}, key, "to"},
		{"range too long", url.Values{"from": {"2024-01-01"}, "to": {"2026-01-01"}}, key, "at most 366"},
		{"range just too long", url.Values{"from": {"2025-01-01"}, "to": {"2026-01-02"}}, key, "367 days"},
		{"overlong token", url.Values{"token": {long}}, key, "token"},
		{"overlong hostname", url.Values{"hostname": {long}}, masterToken, "hostname"},
		{"overlong org", url.Values{"org": {long}}, masterToken, "org"},
		{"key naming another org", url.Values{"org": {b}}, key, "org"},
		{"huge quoted garbage", url.Values{"from": {strings.Repeat("\x00", 10000)}}, key, "from"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, body := f.call(t, "GET", "/usage?"+tc.query.Encode(), tc.cred, "")
			if status != http.StatusBadRequest || !strings.Contains(string(body), tc.msg) {
				t.Errorf("GET /usage?%.80s = %d %.200s, want 400 naming %q", tc.query.Encode(), status, body, tc.msg)
			}
			if len(body) > 1024 {
				t.Errorf("GET /usage error is %d bytes: it echoes the input unbounded", len(body))
			}
		})
	}
	// A range of exactly 366 days is allowed.
	if status, body := f.call(t, "GET", "/usage?from=2025-01-01&to=2026-01-01", key, ""); status != http.StatusOK {
		t.Errorf("GET /usage over 366 days = %d %s, want 200", status, body)
	}
}
