package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/store/storetest"
)

// TestStmtCacheUnderLoad: SQLite's writer pool has one connection, and a
// write transaction holds it, so a statement first seen inside one must
// not be prepared on the pool then (it would wait for itself). Many
// writers and readers at once, on a store whose caches start empty, all
// finish; the statements they ran are cached afterwards, and a repeat
// prepares nothing new.
func TestStmtCacheUnderLoad(t *testing.T) {
	t.Parallel()
	db := storetest.Open(t, storetest.MigratedSQLite(t))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	org, err := db.CreateOrg(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	work := func(i int) error {
		if _, err := db.AppendAudit(ctx, store.AuditEntry{OrgID: org.ID, Event: "test", Actor: "master", Detail: fmt.Sprint(i)}); err != nil {
			return fmt.Errorf("AppendAudit: %w", err)
		}
		if _, err := db.Org(ctx, org.ID); err != nil {
			return fmt.Errorf("Org: %w", err)
		}
		if _, err := db.ListAudit(ctx, org.ID, 10); err != nil {
			return fmt.Errorf("ListAudit: %w", err)
		}
		return nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() { errs <- work(i) })
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		// A stuck transaction keeps the store's Close, run at cleanup,
		// waiting too: end the test binary now, with this reason and the
		// goroutines' stacks, instead of at go test's timeout.
		panic("store calls still running after a minute: a transaction waits for a connection it holds")
	}
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if ctx.Err() != nil {
		t.Fatal("the store's calls did not finish within 30 s: a transaction waited for its own connection")
	}
	w, r := db.CachedStmtsForTest()
	if w == 0 || r == 0 {
		t.Fatalf("cached statements after the load = %d writer, %d reader; want some in each", w, r)
	}
	if err := work(99); err != nil {
		t.Fatal(err)
	}
	if w2, r2 := db.CachedStmtsForTest(); w2 != w || r2 != r {
		t.Errorf("cached statements after a repeat = %d, %d; want %d, %d: the same queries again prepare nothing", w2, r2, w, r)
	}
}
