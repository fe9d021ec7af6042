package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/store/storetest"
)

func testOrgHostnames(t *testing.T, b backend) {
	ctx := t.Context()
	cfg := b.fresh(t)
	db := storetest.Open(t, cfg)
	a := mustOrg(t, db, "a")
	bo := mustOrg(t, db, "b")
	sub := db.Subscribe(ctx)

	got, err := db.SetOrgHostnames(ctx, a.ID, []string{"A.example", "*.a.example", "a.example"})
	if err != nil {
		t.Fatalf("SetOrgHostnames(a) = %v", err)
	}
	if diff := cmp.Diff([]string{"*.a.example", "a.example"}, got); diff != "" {
		t.Errorf("SetOrgHostnames(a) stored (-want +got):\n%s", diff)
	}
	wantChange(t, sub, store.Change{Kind: store.ChangeOrgHostnames, OrgID: a.ID})

	// Every way of overlapping a's space is refused, naming the owner.
	for _, p := range []string{"a.example", "x.a.example", "*.x.a.example", "*.example", "*.a.example"} {
		_, err := db.SetOrgHostnames(ctx, bo.ID, []string{"b.example", p})
		var oe *store.OverlapError
		if !errors.As(err, &oe) || !errors.Is(err, store.ErrConflict) || oe.OwnerOrgID != a.ID || oe.Pattern != p {
			t.Errorf("SetOrgHostnames(b, %q) = %v, want an OverlapError naming org %s", p, err, a.ID)
		}
	}
	// A refused replacement changes nothing.
	hs, err := db.ListOrgHostnames(ctx, bo.ID)
	if err != nil || len(hs) != 0 {
		t.Errorf("ListOrgHostnames(b) after refusals = %v, %v, want none", hs, err)
	}
	if _, err := db.SetOrgHostnames(ctx, bo.ID, []string{"b.example", "*.b.example"}); err != nil {
		t.Fatalf("SetOrgHostnames(b) = %v", err)
	}
	wantChange(t, sub, store.Change{Kind: store.ChangeOrgHostnames, OrgID: bo.ID})

	all, err := db.ListOrgHostnames(ctx, "")
	if err != nil {
		t.Fatalf("ListOrgHostnames(all) = %v", err)
	}
	want := []store.OrgHostname{
		{Pattern: "*.a.example", OrgID: a.ID},
		{Pattern: "*.b.example", OrgID: bo.ID},
		{Pattern: "a.example", OrgID: a.ID},
		{Pattern: "b.example", OrgID: bo.ID},
	}
	if diff := cmp.Diff(want, all); diff != "" {
		t.Errorf("ListOrgHostnames(all) (-want +got):\n%s", diff)
	}

	// Replacing a's own set with patterns overlapping its old ones is
	// fine; clearing it frees its space for b.
	if _, err := db.SetOrgHostnames(ctx, a.ID, []string{"*.example.a.example"}); err != nil {
		t.Errorf("SetOrgHostnames(a, narrower) = %v", err)
	}
	if _, err := db.SetOrgHostnames(ctx, a.ID, nil); err != nil {
		t.Errorf("SetOrgHostnames(a, none) = %v", err)
	}
	if _, err := db.SetOrgHostnames(ctx, bo.ID, []string{"*.example"}); err != nil {
		t.Errorf("SetOrgHostnames(b, *.example) after a cleared = %v", err)
	}

	_, err = db.SetOrgHostnames(ctx, "org_nope", []string{"z.example"})
	wantErr(t, "SetOrgHostnames(unknown org)", err, store.ErrNotFound)
	if _, err := db.SetOrgHostnames(ctx, a.ID, []string{"bad host"}); err == nil {
		t.Errorf("SetOrgHostnames(invalid) = nil, want an error")
	}
	many := make([]string, store.MaxOrgHostnames+1)
	for i := range many {
		many[i] = fmt.Sprintf("h%d.a.test", i)
	}
	if _, err := db.SetOrgHostnames(ctx, a.ID, many); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("SetOrgHostnames(%d patterns) = %v, want the cap", len(many), err)
	}

	// Other servers learn of a replacement through the change feed.
	if b.shared {
		db2 := storetest.Open(t, cfg)
		sub2 := db2.Subscribe(ctx)
		if _, err := db.SetOrgHostnames(ctx, a.ID, []string{"c.example.org"}); err != nil {
			t.Fatalf("SetOrgHostnames(a) = %v", err)
		}
		wantChange(t, sub2, store.Change{Kind: store.ChangeOrgHostnames, OrgID: a.ID})
	}
}

// testOrgHostnamesConcurrent: two organizations claiming overlapping
// patterns at once never both succeed.
func testOrgHostnamesConcurrent(t *testing.T, b backend) {
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
		suffix := fmt.Sprintf("r%d.example", i)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, errs[0] = db1.SetOrgHostnames(ctx, x.ID, []string{"*." + suffix})
		}()
		go func() {
			defer wg.Done()
			_, errs[1] = db2.SetOrgHostnames(ctx, y.ID, []string{"app." + suffix})
		}()
		wg.Wait()
		if (errs[0] == nil) == (errs[1] == nil) {
			t.Fatalf("round %d: SetOrgHostnames errors %v, %v, want exactly one conflict", i, errs[0], errs[1])
		}
		for _, err := range errs {
			if err != nil && !errors.Is(err, store.ErrConflict) {
				t.Errorf("round %d: SetOrgHostnames = %v, want ErrConflict", i, err)
			}
		}
	}
}
