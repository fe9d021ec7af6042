package acme

import (
	"context"
	"errors"
	"io/fs"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aperio-dev/aperio/store/storetest"
)

// TestStorageSemantics: the adapter behaves as certmagic expects of a
// Storage: missing keys are fs.ErrNotExist, List lists direct children
// (directories included) or every key, Stat tells values from
// directories, Delete takes a directory whole.
func TestStorageSemantics(t *testing.T) {
	ctx := context.Background()
	s := NewStorage(openStore(t, storetest.MigratedDataDir(t)))
	if _, err := s.Load(ctx, "nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want fs.ErrNotExist", err)
	}
	for _, k := range []string{"certificates/ca/a.test/a.test.crt", "certificates/ca/a.test/a.test.key", "certificates/ca/b.test/b.test.crt", "internal/edge/acme/ca/users/me.json"} {
		if err := s.Store(ctx, k, []byte("v:"+k)); err != nil {
			t.Fatal(err)
		}
	}
	if v, err := s.Load(ctx, "certificates/ca/a.test/a.test.key"); err != nil || string(v) != "v:certificates/ca/a.test/a.test.key" {
		t.Errorf("Load = %q, %v", v, err)
	}
	got, err := s.List(ctx, "certificates/ca", false)
	if want := []string{"certificates/ca/a.test", "certificates/ca/b.test"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("List(non-recursive) = %v, %v; want %v", got, err, want)
	}
	got, err = s.List(ctx, "certificates", true)
	if err != nil || len(got) != 3 {
		t.Errorf("List(recursive) = %v, %v; want the 3 certificate files", got, err)
	}
	if _, err := s.List(ctx, "nothing/here", true); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("List(missing) = %v, want fs.ErrNotExist", err)
	}
	if ki, err := s.Stat(ctx, "certificates/ca/a.test"); err != nil || ki.IsTerminal {
		t.Errorf("Stat(dir) = %+v, %v; want a directory", ki, err)
	}
	if ki, err := s.Stat(ctx, "certificates/ca/a.test/a.test.crt"); err != nil || !ki.IsTerminal || ki.Size == 0 || ki.Modified.IsZero() {
		t.Errorf("Stat(file) = %+v, %v", ki, err)
	}
	if !s.Exists(ctx, "certificates/ca/b.test") || s.Exists(ctx, "certificates/ca/c.test") {
		t.Error("Exists is wrong about a directory")
	}
	if err := s.Delete(ctx, "certificates/ca/a.test"); err != nil {
		t.Fatal(err)
	}
	if s.Exists(ctx, "certificates/ca/a.test/a.test.key") || !s.Exists(ctx, "certificates/ca/b.test/b.test.crt") {
		t.Error("Delete(dir) removed the wrong keys")
	}
}

// TestStorageLockWaits: a second storage (another server) waits for the
// lock until the first unlocks, and gives up when its context ends. It
// runs in a synctest bubble: the waits (the lock's one-second poll, the
// deadline of 1.5 s) pass in fake time, and the stores' goroutines, opened
// inside, end with it.
func TestStorageLockWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		dir := storetest.MigratedDataDir(t)
		a, b := NewStorage(openStore(t, dir)), NewStorage(openStore(t, dir))
		if err := a.Lock(ctx, "issue_cert_app.test"); err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
		defer cancel()
		if err := b.Lock(short, "issue_cert_app.test"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock while held = %v, want the context's deadline", err)
		}
		got := make(chan error, 1)
		go func() { got <- b.Lock(ctx, "issue_cert_app.test") }()
		select {
		case err := <-got:
			t.Fatalf("b took the lock while a held it: %v", err)
		case <-time.After(200 * time.Millisecond): // b is polling: it must still be waiting
		}
		if err := a.Unlock(ctx, "issue_cert_app.test"); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("b did not take the released lock")
		}
		if err := b.Unlock(ctx, "issue_cert_app.test"); err != nil {
			t.Fatal(err)
		}
	})
}
