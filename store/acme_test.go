package store_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/store"
)

// testACME: automatic TLS's storage round-trips values, lists and deletes
// by path prefix without matching a sibling that merely shares the
// prefix's characters, treats LIKE wildcards in keys literally, and its
// locks exclude a second owner (on another server when the backend is
// shared) until released or expired.
func testACME(t *testing.T, b backend) {
	ctx := t.Context()
	cfg := b.fresh(t)
	clk := newClock()
	db := openClock(t, cfg, clk)
	other := db
	if b.shared {
		other = openClock(t, cfg, clk)
	}
	if _, err := db.ACMEGet(ctx, "certificates/x"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ACMEGet(missing) = %v, want ErrNotFound", err)
	}
	put := func(k, v string) {
		t.Helper()
		if err := db.ACMEPut(ctx, k, []byte(v)); err != nil {
			t.Fatalf("ACMEPut(%s) = %v", k, err)
		}
	}
	put("certificates/ca/app.test/app.test.crt", "CERT1")
	put("certificates/ca/app.test/app.test.key", "KEY")
	put("certificates/ca/app.testing/app.testing.crt", "OTHER")
	put("certificates/ca/a_b/x", "UNDERSCORE")
	put("certificates/ca/a%b/x", "PERCENT")
	put("certificates/ca/app.test/app.test.crt", "CERT2") // replaces
	if v, err := other.ACMEGet(ctx, "certificates/ca/app.test/app.test.crt"); err != nil || string(v) != "CERT2" {
		t.Fatalf("ACMEGet = %q, %v; want the replaced CERT2", v, err)
	}
	keys := func(prefix string) []string {
		t.Helper()
		items, err := other.ACMEList(ctx, prefix)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, it := range items {
			out = append(out, it.Key)
			if it.Key == "certificates/ca/app.test/app.test.key" && (it.Size != 3 || it.Modified.IsZero()) {
				t.Errorf("item %+v: want size 3 and a time", it)
			}
		}
		return out
	}
	if got := strings.Join(keys("certificates/ca/app.test"), ","); got != "certificates/ca/app.test/app.test.crt,certificates/ca/app.test/app.test.key" {
		t.Errorf("ACMEList(app.test) = %s (app.testing must not match)", got)
	}
	if got := strings.Join(keys("certificates/ca/a_b"), ","); got != "certificates/ca/a_b/x" {
		t.Errorf("ACMEList(a_b) = %s (_ is not a wildcard)", got)
	}
	if got := len(keys("")); got != 5 {
		t.Errorf("ACMEList(\"\") = %d keys, want 5", got)
	}
	if n, err := db.ACMEDelete(ctx, "certificates/ca/app.test"); err != nil || n != 2 {
		t.Errorf("ACMEDelete(dir) = %d, %v; want 2", n, err)
	}
	if v, err := db.ACMEGet(ctx, "certificates/ca/app.testing/app.testing.crt"); err != nil || string(v) != "OTHER" {
		t.Errorf("the sibling went with the delete: %q, %v", v, err)
	}
	if n, err := db.ACMEDelete(ctx, "certificates/ca/a%b/x"); err != nil || n != 1 {
		t.Errorf("ACMEDelete(a%%b/x) = %d, %v; want exactly 1", n, err)
	}

	// Locks.
	held, err := db.ACMELock(ctx, "issue_cert_app.test", "server-a", time.Minute)
	if err != nil || !held {
		t.Fatalf("first ACMELock = %v, %v", held, err)
	}
	if held, err := other.ACMELock(ctx, "issue_cert_app.test", "server-b", time.Minute); err != nil || held {
		t.Errorf("a second owner took a held lock: %v, %v", held, err)
	}
	if held, err := db.ACMELock(ctx, "issue_cert_app.test", "server-a", time.Minute); err != nil || !held {
		t.Errorf("the owner could not extend its lock: %v, %v", held, err)
	}
	if err := other.ACMEUnlock(ctx, "issue_cert_app.test", "server-b"); err != nil {
		t.Fatal(err)
	}
	if held, _ := other.ACMELock(ctx, "issue_cert_app.test", "server-b", time.Minute); held {
		t.Error("an unlock by a non-owner released the lock")
	}
	clk.Advance(2 * time.Minute) // the holder died: its lock expires
	if held, err := other.ACMELock(ctx, "issue_cert_app.test", "server-b", time.Minute); err != nil || !held {
		t.Errorf("an expired lock was not taken over: %v, %v", held, err)
	}
	if err := other.ACMEUnlock(ctx, "issue_cert_app.test", "server-b"); err != nil {
		t.Fatal(err)
	}
	if held, err := db.ACMELock(ctx, "issue_cert_app.test", "server-a", time.Minute); err != nil || !held {
		t.Errorf("a released lock could not be taken: %v, %v", held, err)
	}

	// Hostile input.
	for _, k := range []string{"", strings.Repeat("k", store.MaxACMEKeyBytes+1), "a\x00b"} {
		if err := db.ACMEPut(ctx, k, []byte("v")); err == nil {
			t.Errorf("ACMEPut(key of %d bytes) accepted", len(k))
		}
	}
	if err := db.ACMEPut(ctx, "big", bytes.Repeat([]byte{1}, store.MaxACMEValueBytes+1)); err == nil {
		t.Error("ACMEPut accepted a value over the bound")
	}
	if _, err := db.ACMELock(ctx, "", "o", time.Minute); err == nil {
		t.Error("ACMELock accepted an empty name")
	}
	if _, err := db.ACMELock(ctx, "n", "o", 0); err == nil {
		t.Error("ACMELock accepted a zero ttl")
	}
}
