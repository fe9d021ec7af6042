package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/aperio-dev/aperio/internal/portspec"
	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/store/storetest"
)

// testOrgPorts (#38): port ranges are owned like hostnames: merged and
// sorted, never overlapping another organization's (a refusal names the
// owner and changes nothing), replaced whole, freed by clearing, and
// announced through the change feed to every server.
func testOrgPorts(t *testing.T, b backend) {
	ctx := t.Context()
	cfg := b.fresh(t)
	db := storetest.Open(t, cfg)
	a := mustOrg(t, db, "a")
	bo := mustOrg(t, db, "b")
	sub := db.Subscribe(ctx)

	got, err := db.SetOrgPorts(ctx, a.ID, []string{"20050-20099", "2222", "20000-20049", "20010", "2223"})
	if err != nil {
		t.Fatalf("SetOrgPorts(a) = %v", err)
	}
	if diff := cmp.Diff([]portspec.Range{{Lo: 2222, Hi: 2223}, {Lo: 20000, Hi: 20099}}, got); diff != "" {
		t.Errorf("SetOrgPorts(a) stored (-want +got):\n%s", diff)
	}
	wantChange(t, sub, store.Change{Kind: store.ChangeOrgPorts, OrgID: a.ID})

	// Every way of overlapping a's ports is refused, naming the owner.
	for _, spec := range []string{"2222", "2223", "2200-2222", "20099-20200", "1-65535", "20050"} {
		_, err := db.SetOrgPorts(ctx, bo.ID, []string{"30000", spec})
		var oe *store.PortOverlapError
		if !errors.As(err, &oe) || !errors.Is(err, store.ErrConflict) || oe.OwnerOrgID != a.ID {
			t.Errorf("SetOrgPorts(b, %q) = %v, want a PortOverlapError naming org %s", spec, err, a.ID)
		}
	}
	if ps, err := db.ListOrgPorts(ctx, bo.ID); err != nil || len(ps) != 0 {
		t.Errorf("ListOrgPorts(b) after refusals = %v, %v, want none", ps, err)
	}
	// Right next to a's ranges is not an overlap.
	if _, err := db.SetOrgPorts(ctx, bo.ID, []string{"2221", "2224-2230", "30000"}); err != nil {
		t.Fatalf("SetOrgPorts(b) = %v", err)
	}
	wantChange(t, sub, store.Change{Kind: store.ChangeOrgPorts, OrgID: bo.ID})
	all, err := db.ListOrgPorts(ctx, "")
	if err != nil {
		t.Fatalf("ListOrgPorts(all) = %v", err)
	}
	want := []store.OrgPorts{
		{Range: portspec.Range{Lo: 2221, Hi: 2221}, OrgID: bo.ID},
		{Range: portspec.Range{Lo: 2222, Hi: 2223}, OrgID: a.ID},
		{Range: portspec.Range{Lo: 2224, Hi: 2230}, OrgID: bo.ID},
		{Range: portspec.Range{Lo: 20000, Hi: 20099}, OrgID: a.ID},
		{Range: portspec.Range{Lo: 30000, Hi: 30000}, OrgID: bo.ID},
	}
	if diff := cmp.Diff(want, all); diff != "" {
		t.Errorf("ListOrgPorts(all) (-want +got):\n%s", diff)
	}

	// Replacing a's own set with ranges overlapping its old ones is
	// fine; clearing it frees its ports for b.
	if _, err := db.SetOrgPorts(ctx, a.ID, []string{"20000-20010"}); err != nil {
		t.Errorf("SetOrgPorts(a, narrower) = %v", err)
	}
	if _, err := db.SetOrgPorts(ctx, a.ID, nil); err != nil {
		t.Errorf("SetOrgPorts(a, none) = %v", err)
	}
	if _, err := db.SetOrgPorts(ctx, bo.ID, []string{"20000-20099", "2222"}); err != nil {
		t.Errorf("SetOrgPorts(b, a's old ports) after a cleared = %v", err)
	}

	_, err = db.SetOrgPorts(ctx, "org_nope", []string{"40000"})
	wantErr(t, "SetOrgPorts(unknown org)", err, store.ErrNotFound)
	for _, bad := range [][]string{{"0"}, {"65536"}, {"20-10"}, {"x"}, {"1-2-3"}, {strings.Repeat("9", 40)}} {
		if _, err := db.SetOrgPorts(ctx, a.ID, bad); err == nil {
			t.Errorf("SetOrgPorts(%q) = nil, want an error", bad)
		}
	}
	many := make([]string, store.MaxOrgPorts+1)
	for i := range many {
		many[i] = fmt.Sprint(40000 + 2*i)
	}
	if _, err := db.SetOrgPorts(ctx, a.ID, many); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("SetOrgPorts(%d ranges) = %v, want the cap", len(many), err)
	}
	if ps, err := db.ListOrgPorts(ctx, a.ID); err != nil || len(ps) != 0 {
		t.Errorf("ListOrgPorts(a) after refused replacements = %v, %v, want none", ps, err)
	}

	// Other servers learn of a replacement through the change feed.
	if b.shared {
		db2 := storetest.Open(t, cfg)
		sub2 := db2.Subscribe(ctx)
		if _, err := db.SetOrgPorts(ctx, a.ID, []string{"50000-50009"}); err != nil {
			t.Fatalf("SetOrgPorts(a) = %v", err)
		}
		wantChange(t, sub2, store.Change{Kind: store.ChangeOrgPorts, OrgID: a.ID})
	}
}

// testOrgPortsConcurrent: two organizations claiming overlapping ranges
// at once never both succeed.
func testOrgPortsConcurrent(t *testing.T, b backend) {
	ctx := context.Background()
	cfg := b.fresh(t)
	db1 := storetest.Open(t, cfg)
	db2 := db1
	if b.shared {
		db2 = storetest.Open(t, cfg)
	}
	for i := range 10 {
		x := mustOrg(t, db1, fmt.Sprintf("x%d", i))
		y := mustOrg(t, db1, fmt.Sprintf("y%d", i))
		base := 20000 + 100*i
		var wg sync.WaitGroup
		errs := make([]error, 2)
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, errs[0] = db1.SetOrgPorts(ctx, x.ID, []string{fmt.Sprintf("%d-%d", base, base+50)})
		}()
		go func() {
			defer wg.Done()
			_, errs[1] = db2.SetOrgPorts(ctx, y.ID, []string{fmt.Sprint(base + 50)})
		}()
		wg.Wait()
		if (errs[0] == nil) == (errs[1] == nil) {
			t.Fatalf("round %d: SetOrgPorts errors %v, %v, want exactly one conflict", i, errs[0], errs[1])
		}
		for _, err := range errs {
			if err != nil && !errors.Is(err, store.ErrConflict) {
				t.Errorf("round %d: SetOrgPorts = %v, want ErrConflict", i, err)
			}
		}
	}
}
