package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/aperio-dev/aperio/store"
)

func testAdminSessions(t *testing.T, b backend) {
	ctx := t.Context()
	clk := newClock()
	db := openClock(t, b.fresh(t), clk)
	a := mustOrg(t, db, "a")
	k := mustKey(t, db, store.AdminKey{OrgID: a.ID, Role: "viewer", Hash: hash("key")})

	in := store.AdminSession{Hash: hash("s1"), KeyID: k.ID, OrgID: a.ID, CSRF: "csrf1",
		ExpiresAt: clk.Now().Add(8 * time.Hour), RemoteAddr: "192.0.2.1:4000"}
	s1, err := db.CreateAdminSession(ctx, in, 32)
	if err != nil {
		t.Fatalf("CreateAdminSession(s1) = %v", err)
	}
	want := in
	want.CreatedAt = stored(clk.Now())
	want.ExpiresAt = stored(in.ExpiresAt)
	if diff := cmp.Diff(want, s1); diff != "" {
		t.Errorf("CreateAdminSession() mismatch (-want +got):\n%s", diff)
	}
	got, err := db.AdminSessionByHash(ctx, hash("s1"))
	if err != nil {
		t.Fatalf("AdminSessionByHash(s1) = %v", err)
	}
	if diff := cmp.Diff(s1, got); diff != "" {
		t.Errorf("AdminSessionByHash(s1) mismatch (-want +got):\n%s", diff)
	}
	_, err = db.AdminSessionByHash(ctx, hash("absent"))
	wantErr(t, "AdminSessionByHash(absent)", err, store.ErrNotFound)
	_, err = db.AdminSessionByHash(ctx, nil)
	wantErr(t, "AdminSessionByHash(nil)", err, store.ErrNotFound)

	m, err := db.CreateAdminSession(ctx, store.AdminSession{Hash: hash("m1"), Master: true, OrgID: "ignored", CSRF: "c",
		ExpiresAt: clk.Now().Add(time.Hour)}, 32)
	if err != nil {
		t.Fatalf("CreateAdminSession(master) = %v", err)
	}
	if m.OrgID != "" || m.KeyID != "" || !m.Master {
		t.Errorf("CreateAdminSession(master) = key %q org %q master %v, want no key, no org, master", m.KeyID, m.OrgID, m.Master)
	}

	_, err = db.CreateAdminSession(ctx, in, 32)
	wantErr(t, "CreateAdminSession(duplicate hash)", err, store.ErrConflict)
	bad := []struct {
		name string
		s    store.AdminSession
		keep int
	}{
		{"short hash", store.AdminSession{Hash: []byte("x"), KeyID: k.ID, CSRF: "c", ExpiresAt: clk.Now().Add(time.Hour)}, 1},
		{"no key, not master", store.AdminSession{Hash: hash("b1"), CSRF: "c", ExpiresAt: clk.Now().Add(time.Hour)}, 1},
		{"key and master", store.AdminSession{Hash: hash("b2"), KeyID: k.ID, Master: true, CSRF: "c", ExpiresAt: clk.Now().Add(time.Hour)}, 1},
		{"no csrf", store.AdminSession{Hash: hash("b3"), KeyID: k.ID, ExpiresAt: clk.Now().Add(time.Hour)}, 1},
		{"expired", store.AdminSession{Hash: hash("b4"), KeyID: k.ID, CSRF: "c", ExpiresAt: clk.Now()}, 1},
		{"keep 0", store.AdminSession{Hash: hash("b5"), KeyID: k.ID, CSRF: "c", ExpiresAt: clk.Now().Add(time.Hour)}, 0},
	}
	for _, tt := range bad {
		if _, err := db.CreateAdminSession(ctx, tt.s, tt.keep); err == nil {
			t.Errorf("CreateAdminSession(%s) = nil, want an error", tt.name)
		}
	}

	wantErr(t, "DeleteAdminSession(s1)", db.DeleteAdminSession(ctx, hash("s1")), nil)
	wantErr(t, "DeleteAdminSession(again)", db.DeleteAdminSession(ctx, hash("s1")), store.ErrNotFound)
	_, err = db.AdminSessionByHash(ctx, hash("s1"))
	wantErr(t, "AdminSessionByHash(deleted)", err, store.ErrNotFound)
	if _, err := db.AdminSessionByHash(ctx, hash("m1")); err != nil {
		t.Errorf("AdminSessionByHash(master) after deleting s1 = %v", err)
	}
}

func testAdminSessionsBound(t *testing.T, b backend) {
	ctx := t.Context()
	clk := newClock()
	db := openClock(t, b.fresh(t), clk)
	a := mustOrg(t, db, "a")
	k1 := mustKey(t, db, store.AdminKey{OrgID: a.ID, Role: "viewer", Hash: hash("k1")})
	k2 := mustKey(t, db, store.AdminKey{OrgID: a.ID, Role: "viewer", Hash: hash("k2")})
	exp := clk.Now().Add(time.Hour)
	// Same creation time for all: the bound must go by creation order,
	// not by the clock.
	const keep = 3
	mk := func(name, keyID string, master bool) {
		t.Helper()
		if _, err := db.CreateAdminSession(ctx, store.AdminSession{Hash: hash(name), KeyID: keyID, Master: master,
			CSRF: "c", ExpiresAt: exp}, keep); err != nil {
			t.Fatalf("CreateAdminSession(%s) = %v", name, err)
		}
	}
	mk("other", k2.ID, false)
	mk("master", "", true)
	for i := range keep + 2 {
		mk(fmt.Sprint("s", i), k1.ID, false)
	}
	for i := range keep + 2 {
		_, err := db.AdminSessionByHash(ctx, hash(fmt.Sprint("s", i)))
		if i < 2 {
			wantErr(t, fmt.Sprintf("AdminSessionByHash(s%d, evicted)", i), err, store.ErrNotFound)
		} else {
			wantErr(t, fmt.Sprintf("AdminSessionByHash(s%d, kept)", i), err, nil)
		}
	}
	for _, name := range []string{"other", "master"} {
		_, err := db.AdminSessionByHash(ctx, hash(name))
		wantErr(t, "AdminSessionByHash("+name+") of another key", err, nil)
	}

	// Deleting the key deletes its sessions, and only its.
	wantErr(t, "DeleteAdminKey(k1)", db.DeleteAdminKey(ctx, a.ID, k1.ID), nil)
	for i := 2; i < keep+2; i++ {
		_, err := db.AdminSessionByHash(ctx, hash(fmt.Sprint("s", i)))
		wantErr(t, fmt.Sprintf("AdminSessionByHash(s%d) of a deleted key", i), err, store.ErrNotFound)
	}
	for _, name := range []string{"other", "master"} {
		_, err := db.AdminSessionByHash(ctx, hash(name))
		wantErr(t, "AdminSessionByHash("+name+") after deleting another key", err, nil)
	}
	got, err := db.AdminKey(ctx, "", k2.ID)
	if err != nil || got.ID != k2.ID {
		t.Errorf("AdminKey(k2) = %q, %v, want %q", got.ID, err, k2.ID)
	}
	_, err = db.AdminKey(ctx, "org_other", k2.ID)
	wantErr(t, "AdminKey(k2, other org)", err, store.ErrNotFound)
	_, err = db.AdminKey(ctx, "", k1.ID)
	wantErr(t, "AdminKey(deleted)", err, store.ErrNotFound)
}

func testAdminSessionsExpiry(t *testing.T, b backend) {
	ctx := t.Context()
	clk := newClock()
	db := openClock(t, b.fresh(t), clk)
	for i, ttl := range []time.Duration{time.Minute, time.Hour, 2 * time.Hour} {
		if _, err := db.CreateAdminSession(ctx, store.AdminSession{Hash: hash(fmt.Sprint("e", i)), Master: true,
			CSRF: "c", ExpiresAt: clk.Now().Add(ttl)}, 32); err != nil {
			t.Fatalf("CreateAdminSession(e%d) = %v", i, err)
		}
	}
	n, err := db.DeleteExpiredAdminSessions(ctx, clk.Now())
	if err != nil || n != 0 {
		t.Errorf("DeleteExpiredAdminSessions(now) = %d, %v, want 0", n, err)
	}
	// At the expiry itself the session is over.
	n, err = db.DeleteExpiredAdminSessions(ctx, clk.Now().Add(time.Hour))
	if err != nil || n != 2 {
		t.Errorf("DeleteExpiredAdminSessions(+1h) = %d, %v, want 2", n, err)
	}
	for i, want := range []error{store.ErrNotFound, store.ErrNotFound, nil} {
		_, err := db.AdminSessionByHash(ctx, hash(fmt.Sprint("e", i)))
		wantErr(t, fmt.Sprintf("AdminSessionByHash(e%d)", i), err, want)
	}
}
