package main

import (
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/store"
)

// TestAPIUsage: `api usage` prints the server's rows as a table (the
// master token's as master) or as JSON, passes its filters, and refuses a
// malformed date before calling the server.
func TestAPIUsage(t *testing.T) {
	s := newAPIServer(t)
	t.Setenv("APERIO_SERVER_URL", s.url)
	t.Setenv("APERIO_API_KEY", testMaster)
	today := time.Now().UTC()
	yesterday := today.AddDate(0, 0, -1)
	if err := s.db.AddUsage(t.Context(), []store.UsageDelta{
		{Day: today, TokenID: "tok_1", OrgID: "org_1", Hostname: "app.example.com", Bytes: 1234, Requests: 3},
		{Day: yesterday, TokenID: "", OrgID: "org_1", Hostname: "m.example.com", Bytes: 10, Requests: 1},
		{Day: today, TokenID: "tok_2", OrgID: "org_2", Hostname: "b.example.com", Bytes: 5, Requests: 1},
	}); err != nil {
		t.Fatal(err)
	}
	rows := table(t, ok(t, "api", "usage", "--org", "org_1"), "DAY", "TOKEN", "ORG", "HOSTNAME", "REQUESTS", "BYTES")
	if len(rows) != 2 || rows[0]["TOKEN"] != "tok_1" || rows[0]["BYTES"] != "1234" || rows[0]["REQUESTS"] != "3" ||
		rows[0]["DAY"] != today.Format(time.DateOnly) || rows[1]["TOKEN"] != apitype.Master || rows[1]["HOSTNAME"] != "m.example.com" {
		t.Errorf("api usage --org org_1 = %v, want tok_1's row today, then the master token's yesterday", rows)
	}
	var got []apitype.UsageRow
	okJSON(t, &got, "api", "usage", "--token", "tok_1", "--from", yesterday.Format(time.DateOnly), "--to", today.Format(time.DateOnly), "--json")
	if len(got) != 1 || got[0] != (apitype.UsageRow{Day: today.Format(time.DateOnly), TokenID: "tok_1", OrgID: "org_1", Hostname: "app.example.com", Requests: 3, Bytes: 1234}) {
		t.Errorf("api usage --token tok_1 --json = %+v", got)
	}
	rows = table(t, ok(t, "api", "usage", "--hostname", "b.example.com"), "DAY", "TOKEN", "ORG", "HOSTNAME", "REQUESTS", "BYTES")
	if len(rows) != 1 || rows[0]["ORG"] != "org_2" {
		t.Errorf("api usage --hostname b.example.com = %v, want org_2's row", rows)
	}
	code, _, errOut := cli(t, "api", "usage", "--from", "last-week")
	if code != 2 || !strings.Contains(errOut, "--from") {
		t.Errorf("api usage --from last-week = %d %q, want 2 naming --from", code, errOut)
	}
	code, _, errOut = cli(t, "api", "usage", "--from", "2020-01-01", "--to", "2026-01-01")
	if code != 1 || !strings.Contains(errOut, "at most 366") {
		t.Errorf("api usage over six years = %d %q, want 1 with the server's 400", code, errOut)
	}
}
