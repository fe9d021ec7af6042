package autoscale

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s (run go test -update to create it): %v", path, err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s mismatch:\n got %s\nwant %s", path, got, want)
	}
}

// TestHookBodyGolden pins the exact bytes of the hook's body: the keys of
// docs/autoscaling.md in its order, compact, null for an empty path and
// org.
func TestHookBodyGolden(t *testing.T) {
	tests := []struct {
		name string
		body HookBody
	}{
		{"hook_body_cold_start.json", HookBody{Reason: ReasonColdStart, Hostname: "app.example.com", Current: 0, Desired: 1, Min: 0, Max: 8}},
		{"hook_body_scale_out.json", HookBody{Reason: ReasonScaleOut, Hostname: "app.example.com", Path: "/api", OrgID: "org_7", Current: 3, Desired: 4, Min: 1, Max: 8}},
		{"hook_body_scale_in.json", HookBody{Reason: ReasonScaleIn, Hostname: "app.example.com", OrgID: "org_7", Current: 3, Desired: 2, Min: 1, Max: 8}},
		{"hook_body_leased.json", HookBody{Reason: ReasonColdStart, Hostname: "app.example.com", Current: 0, Desired: 1, Min: 0, Max: 8, LeaseGeneration: 17}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := MarshalBody(tt.body)
			if err != nil {
				t.Fatalf("MarshalBody(%+v) error %v", tt.body, err)
			}
			golden(t, tt.name, got)
		})
	}
}

// TestHookBodyMatchesSpecExample decodes the example body of
// docs/autoscaling.md and ours for the same cold start: same keys, same
// values, nulls included, and one key more, lease_generation (contract.md
// §5, "Autoscaling, round 3"), null for a call made without a lease.
func TestHookBodyMatchesSpecExample(t *testing.T) {
	const spec = `{
  "reason": "cold_start",
  "hostname": "app.example.com",
  "path": null,
  "org_id": null,
  "current": 0,
  "desired": 1,
  "min": 0,
  "max": 8
}`
	got, err := MarshalBody(HookBody{Reason: ReasonColdStart, Hostname: "app.example.com", Desired: 1, Max: 8})
	if err != nil {
		t.Fatal(err)
	}
	var want, have map[string]any
	if err := json.Unmarshal([]byte(spec), &want); err != nil {
		t.Fatal(err)
	}
	want["lease_generation"] = nil
	if err := json.Unmarshal(got, &have); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, have); diff != "" {
		t.Errorf("body differs from the documented example (-docs +ours):\n%s", diff)
	}
}

// TestParseRetryAfter covers both forms of Retry-After and the
// ten-minute trust cap.
func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		header string
		want   time.Duration
		ok     bool
	}{
		{"delta seconds", "120", 120 * time.Second, true},
		{"delta zero", "0", 0, true},
		{"delta with spaces", "  7 ", 7 * time.Second, true},
		{"delta at the cap", "600", MaxRetryAfter, true},
		{"delta above the cap", "3600", MaxRetryAfter, true},
		{"delta overflowing int64", "99999999999999999999999", MaxRetryAfter, true},
		{"IMF-fixdate", "Sun, 01 Mar 2026 12:01:30 GMT", 90 * time.Second, true},
		{"RFC 850 date", "Sunday, 01-Mar-26 12:00:45 GMT", 45 * time.Second, true},
		{"asctime date", "Sun Mar  1 12:02:00 2026", 2 * time.Minute, true},
		{"date above the cap", "Sun, 01 Mar 2026 14:00:00 GMT", MaxRetryAfter, true},
		{"date in the past", "Sun, 01 Mar 2026 11:00:00 GMT", 0, true},
		{"empty", "", 0, false},
		{"negative", "-5", 0, false},
		{"fraction", "1.5", 0, false},
		{"garbage", "soon", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseRetryAfter(tt.header, now)
			if got != tt.want || ok != tt.ok {
				t.Errorf("ParseRetryAfter(%q) = %v, %v, want %v, %v", tt.header, got, ok, tt.want, tt.ok)
			}
		})
	}
}

// TestHookBodyOrgID: a call for a record of the default organization (the
// master token's, a single-tenant server's) says "org_id": null, as the
// specification's body does; a record of any other organization sends its
// ID.
func TestHookBodyOrgID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		other := rec("other.example.com")
		other.OrgID = "org_other"
		h := newHarness(t, []Record{rec("app.example.com"), other}, withConfig(func(c *Config) { c.DefaultOrgID = testOrg }))
		for _, r := range []Record{rec("app.example.com"), other} {
			if _, err := h.c.ColdStart(context.Background(), r.OrgID, r.Hostname, ""); err != nil {
				t.Fatalf("ColdStart(%s): %v", r.Hostname, err)
			}
		}
		advance(time.Minute) // calls to one provider host are spaced
		got := map[string]string{}
		for _, c := range h.caller.made() {
			b, err := json.Marshal(c.Body)
			if err != nil {
				t.Fatal(err)
			}
			var body struct {
				OrgID *string `json:"org_id"`
			}
			if err := json.Unmarshal(b, &body); err != nil {
				t.Fatal(err)
			}
			got[c.Body.Hostname] = "null"
			if body.OrgID != nil {
				got[c.Body.Hostname] = *body.OrgID
			}
		}
		want := map[string]string{"app.example.com": "null", "other.example.com": "org_other"}
		if !maps.Equal(got, want) {
			t.Errorf("org_id by hostname = %v, want %v", got, want)
		}
	})
}
