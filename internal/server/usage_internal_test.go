package server

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/store/storetest"
)

// TestTokenLabels: the first 100 tokens keep their own label for good,
// every later one is other, and the master token is master.
func TestTokenLabels(t *testing.T) {
	t.Parallel()
	l := tokenLabels{}
	if got := l.label(""); got != apitype.Master {
		t.Errorf("label(master) = %q, want %q", got, apitype.Master)
	}
	for i := range 99 {
		id := fmt.Sprintf("tok_%d", i)
		if got := l.label(id); got != id {
			t.Fatalf("label(%s) = %q, want its ID (%d tokens seen)", id, got, i+1)
		}
	}
	for _, id := range []string{"tok_late", "tok_later"} {
		if got := l.label(id); got != tokenLabelOther {
			t.Errorf("label(%s) past %d tokens = %q, want %q", id, tokenBytesLabels, got, tokenLabelOther)
		}
	}
	if got := l.label("tok_0"); got != "tok_0" || l.label("tok_late") != tokenLabelOther || len(l) != tokenBytesLabels {
		t.Errorf("labels changed on a second look: tok_0 %q, %d kept", got, len(l))
	}
}

// TestUsageLimitsMissReadOffPath: a quota not cached reads as none at once
// (the meter may hold its lock), is queued once however often asked for,
// and the reader loads it from the store; a quota gone from the store is
// forgotten, and the cache is bounded.
func TestUsageLimitsMissReadOffPath(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, err := store.Open(ctx, store.Config{DataDir: storetest.MigratedDataDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("store Close() = %v", err)
		}
	})
	org, err := db.EnsureOrg(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	if org, err = db.SetOrgLimits(ctx, org.ID, store.OrgLimits{MonthlyMaxBytes: 777}); err != nil {
		t.Fatal(err)
	}
	tok, err := db.CreateToken(ctx, store.Token{OrgID: org.ID, Name: "q", Hash: make([]byte, 32), Prefix: "apr_x", Hostnames: []string{"q.test"},
		Limits: store.TokenLimits{DailyMaxBytes: 555}})
	if err != nil {
		t.Fatal(err)
	}
	l := newUsageLimits(db, slog.New(slog.DiscardHandler))
	for range 3 {
		if got := l.TokenDailyMax(tok.ID); got != 0 {
			t.Fatalf("TokenDailyMax on a miss = %d, want 0 until read", got)
		}
	}
	if got := l.OrgMonthlyMax(org.ID); got != 0 {
		t.Fatalf("OrgMonthlyMax on a miss = %d, want 0 until read", got)
	}
	l.TokenDailyMax("tok_gone")
	if n := len(l.misses); n != 3 {
		t.Fatalf("queued misses = %d, want 3 (each quota once)", n)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.run(rctx)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for l.TokenDailyMax(tok.ID) != 555 || l.OrgMonthlyMax(org.ID) != 777 {
		if time.Now().After(deadline) {
			t.Fatalf("quotas after the reader = %d, %d; want 555, 777", l.TokenDailyMax(tok.ID), l.OrgMonthlyMax(org.ID))
		}
		time.Sleep(10 * time.Millisecond) // polling the reader's goroutine
	}
	cancel()
	<-done
	if _, ok := l.token("tok_gone"); ok {
		t.Error("a token missing from the store was cached")
	}
	// A revised limit through refresh, and the bound of the cache.
	e := store.EditOf(tok)
	e.Limits.DailyMaxBytes = 999
	if _, err := db.UpdateToken(ctx, "", tok.ID, e); err != nil {
		t.Fatal(err)
	}
	l.refresh(ctx, usageMiss{id: tok.ID})
	if got := l.TokenDailyMax(tok.ID); got != 999 {
		t.Errorf("TokenDailyMax after refresh = %d, want 999", got)
	}
	for i := range maxUsageLimits + 10 {
		l.setToken(store.Token{ID: fmt.Sprintf("tok_%d", i)})
	}
	if n := len(l.tokens); n != maxUsageLimits {
		t.Errorf("cached tokens = %d, want the bound %d", n, maxUsageLimits)
	}
}
