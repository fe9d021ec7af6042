package store_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/store/storetest"
)

// sealAs returns a SealFunc whose secret names the key it was sealed for,
// so a test can tell which call's secret a row holds.
func sealAs(tag string) store.SealFunc {
	return func(k store.SigningKey) ([]byte, error) {
		return []byte(tag + "|" + k.Purpose + "|" + k.OrgID + "|" + k.ID), nil
	}
}

// testSigningKeys: a series grows one generation at a time, keeps its
// current and previous key, revokes the previous one on request, and
// announces each key on the change feed.
func testSigningKeys(t *testing.T, b backend) {
	ctx := t.Context()
	clk := newClock()
	db := openClock(t, b.fresh(t), clk)
	sub := db.Subscribe(ctx)

	k1, err := db.AddSigningKey(ctx, store.KeyPurposeShare, "org_a", 1, false, sealAs("one"))
	if err != nil {
		t.Fatalf("AddSigningKey(share, org_a, 1) = %v", err)
	}
	if !strings.HasPrefix(k1.ID, "sk_") || !k1.CreatedAt.Equal(stored(clk.Now())) || k1.RevokedAt != nil {
		t.Errorf("AddSigningKey() = %+v, want an sk_ ID, CreatedAt now, not revoked", k1)
	}
	if want := "one|share|org_a|" + k1.ID; string(k1.Sealed) != want {
		t.Errorf("Sealed = %q, want %q: the seal sees the row's ID, purpose and org", k1.Sealed, want)
	}
	wantChange(t, sub, store.Change{Kind: store.ChangeSigningKeys, ID: k1.ID, OrgID: "org_a"})

	// Generation 1 again, or a generation ahead, is a conflict.
	for _, gen := range []int64{1, 3} {
		if _, err := db.AddSigningKey(ctx, store.KeyPurposeShare, "org_a", gen, false, sealAs("x")); !errors.Is(err, store.ErrConflict) {
			t.Errorf("AddSigningKey(gen %d) after 1 = %v, want ErrConflict", gen, err)
		}
	}
	// Other series are apart: another org, another purpose, the server.
	id1, err := db.AddSigningKey(ctx, store.KeyPurposeIdentity, "", 1, false, sealAs("id"))
	if err != nil {
		t.Fatalf("AddSigningKey(identity, \"\", 1) = %v", err)
	}
	wantChange(t, sub, store.Change{Kind: store.ChangeSigningKeys, ID: id1.ID})
	if _, err := db.AddSigningKey(ctx, store.KeyPurposeShare, "org_b", 1, false, sealAs("b")); err != nil {
		t.Fatalf("AddSigningKey(share, org_b, 1) = %v", err)
	}

	clk.Advance(time.Hour)
	k2, err := db.AddSigningKey(ctx, store.KeyPurposeShare, "org_a", 2, false, sealAs("two"))
	if err != nil {
		t.Fatalf("AddSigningKey(share, org_a, 2) = %v", err)
	}
	clk.Advance(time.Hour)
	k3, err := db.AddSigningKey(ctx, store.KeyPurposeShare, "org_a", 3, true, sealAs("three"))
	if err != nil {
		t.Fatalf("AddSigningKey(share, org_a, 3, revoke) = %v", err)
	}
	keys, err := db.SigningKeys(ctx, store.KeyPurposeShare)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		Org     string
		Gen     int64
		ID      string
		Revoked bool
	}
	var got []row
	for _, k := range keys {
		got = append(got, row{k.OrgID, k.Generation, k.ID, k.RevokedAt != nil})
		if k.ID == k2.ID && (k.RevokedAt == nil || !k.RevokedAt.Equal(k3.CreatedAt)) {
			t.Errorf("generation 2 RevokedAt = %v, want %v", k.RevokedAt, k3.CreatedAt)
		}
	}
	want := []row{{"org_a", 3, k3.ID, false}, {"org_a", 2, k2.ID, true}, {"org_b", 1, keys[2].ID, false}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("SigningKeys(share) (-want +got), generation 1 of org_a removed, 2 revoked:\n%s", diff)
	}
	ids, err := db.SigningKeys(ctx, store.KeyPurposeIdentity)
	if err != nil || len(ids) != 1 || ids[0].ID != id1.ID || !bytes.Equal(ids[0].Sealed, id1.Sealed) {
		t.Errorf("SigningKeys(identity) = %+v, %v; want the one identity key", ids, err)
	}
}

// testSigningKeysHostile: what a caller may not store.
func testSigningKeysHostile(t *testing.T, b backend) {
	ctx := t.Context()
	db := storetest.Open(t, b.fresh(t))
	sized := func(n int) store.SealFunc {
		return func(store.SigningKey) ([]byte, error) { return bytes.Repeat([]byte{7}, n), nil }
	}
	sealErr := errors.New("seal failed")
	tests := []struct {
		name    string
		purpose string
		org     string
		gen     int64
		seal    store.SealFunc
		is      error
	}{
		{"oversized secret", store.KeyPurposeShare, "o", 1, sized(store.MaxSealedKeyBytes + 1), nil},
		{"empty secret", store.KeyPurposeShare, "o", 1, sized(0), nil},
		{"unknown purpose", "oidc", "o", 1, sized(60), nil},
		{"empty purpose", "", "o", 1, sized(60), nil},
		{"generation 0", store.KeyPurposeShare, "o", 0, sized(60), nil},
		{"negative generation", store.KeyPurposeShare, "o", -1, sized(60), nil},
		{"long org", store.KeyPurposeShare, strings.Repeat("o", 65), 1, sized(60), nil},
		{"seal error", store.KeyPurposeShare, "o", 1, func(store.SigningKey) ([]byte, error) { return nil, sealErr }, sealErr},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := db.AddSigningKey(ctx, tt.purpose, tt.org, tt.gen, false, tt.seal)
			if err == nil {
				t.Fatalf("AddSigningKey(%q, %q, %d) = nil, want an error", tt.purpose, tt.org, tt.gen)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("AddSigningKey() = %v, want %v", err, tt.is)
			}
		})
	}
	if _, err := db.AddSigningKey(ctx, store.KeyPurposeShare, "o", 1, false, sized(store.MaxSealedKeyBytes)); err != nil {
		t.Errorf("AddSigningKey() with a secret of exactly %d bytes = %v, want nil", store.MaxSealedKeyBytes, err)
	}
	if _, err := db.SigningKeys(ctx, "../share"); err == nil {
		t.Error("SigningKeys(unknown purpose) = nil error, want a refusal")
	}
	keys, err := db.SigningKeys(ctx, store.KeyPurposeShare)
	if err != nil || len(keys) != 1 {
		t.Errorf("SigningKeys(share) = %d keys, %v; want only the one good key", len(keys), err)
	}
}

// testSigningKeysConcurrent: 8 callers creating the first key of one
// series at once, on two DBs where the database is shared: exactly one
// wins, the others get ErrConflict, and one key is stored.
func testSigningKeysConcurrent(t *testing.T, b backend) {
	ctx := context.Background()
	cfg := b.fresh(t)
	dbs := []*store.DB{storetest.Open(t, cfg)}
	if b.shared {
		dbs = append(dbs, storetest.Open(t, cfg))
	}
	const callers = 8
	for _, gen := range []int64{1, 2} { // the first creation, then a rotation
		var wg sync.WaitGroup
		errs := make([]error, callers)
		for i := range callers {
			wg.Go(func() {
				_, errs[i] = dbs[i%len(dbs)].AddSigningKey(ctx, store.KeyPurposeIdentity, "", gen, false, sealAs("c"))
			})
		}
		wg.Wait()
		won := 0
		for i, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, store.ErrConflict):
				t.Errorf("generation %d caller %d: AddSigningKey() = %v, want nil or ErrConflict", gen, i, err)
			}
		}
		if won != 1 {
			t.Errorf("generation %d: %d callers won, want exactly 1", gen, won)
		}
	}
	keys, err := dbs[0].SigningKeys(ctx, store.KeyPurposeIdentity)
	if err != nil {
		t.Fatal(err)
	}
	gens := []int64{}
	for _, k := range keys {
		gens = append(gens, k.Generation)
	}
	if !slices.Equal(gens, []int64{2, 1}) {
		t.Errorf("generations stored = %v, want [2 1]", gens)
	}
}
