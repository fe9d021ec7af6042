package store_test

import (
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/aperio-dev/aperio/store"
)

// testUsage: increments add up, across two DBs on one database too when
// the backend is shared, and totals and queries read them back.
func testUsage(t *testing.T, b backend) {
	ctx := t.Context()
	cfg := b.fresh(t)
	db := openClock(t, cfg, newClock())
	other := db
	if b.shared {
		other = openClock(t, cfg, newClock()) // a second server on the same database
	}
	day := time.Date(2031, 3, 4, 15, 0, 0, 0, time.UTC)
	next := day.AddDate(0, 0, 1)
	var wg sync.WaitGroup
	for i, d := range []*store.DB{db, other, db, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := d.AddUsage(ctx, []store.UsageDelta{
				{Day: day, TokenID: "tok_a", OrgID: "org_a", Hostname: "a.test", Bytes: 100, Requests: 1},
				{Day: day, TokenID: "tok_a", OrgID: "org_a", Hostname: "b.test", Bytes: 10, Requests: 1},
				{Day: next, TokenID: "", OrgID: "org_b", Hostname: "m.test", Bytes: int64(i), Requests: 1},
			}); err != nil {
				t.Errorf("AddUsage() = %v", err)
			}
		}()
	}
	wg.Wait()
	tt, ot, err := other.UsageTotals(ctx, day, day, []string{"tok_a", "", "tok_none"}, []string{"org_a", "org_b"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int64{"tok_a": 440}, tt); diff != "" {
		t.Errorf("UsageTotals() tokens mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int64{"org_a": 440, "org_b": 6}, ot); diff != "" {
		t.Errorf("UsageTotals() orgs mismatch (-want +got):\n%s", diff)
	}
	rows, err := db.QueryUsage(ctx, store.UsageQuery{OrgID: "org_a", From: day, To: day})
	if err != nil {
		t.Fatal(err)
	}
	midnight := time.Date(2031, 3, 4, 0, 0, 0, 0, time.UTC)
	want := []store.UsageRow{
		{Day: midnight, TokenID: "tok_a", OrgID: "org_a", Hostname: "a.test", Bytes: 400, Requests: 4},
		{Day: midnight, TokenID: "tok_a", OrgID: "org_a", Hostname: "b.test", Bytes: 40, Requests: 4},
	}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("QueryUsage(org_a) mismatch (-want +got):\n%s", diff)
	}
	all, err := db.QueryUsage(ctx, store.UsageQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 3 || !all[0].Day.Equal(midnight.AddDate(0, 0, 1)) {
		t.Errorf("QueryUsage() = %+v, want 3 rows, the newest day first", all)
	}
	bad := [][]store.UsageDelta{
		{{Day: day, OrgID: "o", Bytes: -1}},
		{{Day: day, OrgID: string(make([]byte, store.MaxUsageField+1)), Bytes: 1}},
		make([]store.UsageDelta, store.MaxUsageDeltas+1),
	}
	for _, ds := range bad {
		if err := db.AddUsage(ctx, ds); err == nil {
			t.Errorf("AddUsage(hostile, %d deltas) = nil, want an error", len(ds))
		}
	}
	if _, err := db.QueryUsage(ctx, store.UsageQuery{From: next, To: day}); err == nil {
		t.Error("QueryUsage(to before from) = nil error, want one")
	}
}
