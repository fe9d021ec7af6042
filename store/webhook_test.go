package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/aperio-dev/aperio/store"
)

func mustWebhook(t testing.TB, db *store.DB, in store.Webhook) store.Webhook {
	t.Helper()
	w, err := db.CreateWebhook(context.Background(), in)
	if err != nil {
		t.Fatalf("CreateWebhook(%s) = %v", in.URL, err)
	}
	return w
}

func testWebhooks(t *testing.T, b backend) {
	ctx := t.Context()
	clk := newClock()
	db := openClock(t, b.fresh(t), clk)
	a := mustOrg(t, db, "a")
	bo := mustOrg(t, db, "b")

	in := store.Webhook{OrgID: a.ID, URL: "https://hooks.example.com/a", Secret: "s3cret",
		Events: []string{"scaling_failed", "scaling_disarmed", "scaling_failed"}}
	w1 := mustWebhook(t, db, in)
	want := store.Webhook{ID: w1.ID, OrgID: a.ID, URL: in.URL, Secret: "s3cret",
		Events: []string{"scaling_failed", "scaling_disarmed"}, Format: "generic", CreatedAt: stored(clk.Now())}
	if diff := cmp.Diff(want, w1); diff != "" {
		t.Errorf("CreateWebhook() mismatch, want duplicates dropped (-want +got):\n%s", diff)
	}
	if !strings.HasPrefix(w1.ID, "whk_") {
		t.Errorf("CreateWebhook().ID = %q, want whk_…", w1.ID)
	}
	clk.Advance(time.Second)
	w2 := mustWebhook(t, db, store.Webhook{OrgID: bo.ID, URL: "https://hooks.example.com/b", Events: []string{"scaling_requested"}})
	// Same instant as w2: seq breaks the tie.
	w3 := mustWebhook(t, db, store.Webhook{OrgID: a.ID, URL: "https://hooks.example.com/a3", Events: []string{"scaling_requested"}})

	bad := []struct {
		name string
		in   store.Webhook
	}{
		{"no org", store.Webhook{URL: "https://x.example/", Events: []string{"e"}}},
		{"no url", store.Webhook{OrgID: a.ID, Events: []string{"e"}}},
		{"no events", store.Webhook{OrgID: a.ID, URL: "https://x.example/"}},
		{"empty event", store.Webhook{OrgID: a.ID, URL: "https://x.example/", Events: []string{""}}},
	}
	for _, tt := range bad {
		if _, err := db.CreateWebhook(ctx, tt.in); err == nil {
			t.Errorf("CreateWebhook(%s) = nil, want an error", tt.name)
		}
	}
	_, err := db.CreateWebhook(ctx, store.Webhook{OrgID: "org_missing", URL: "https://x.example/", Events: []string{"e"}})
	wantErr(t, "CreateWebhook(missing org)", err, store.ErrNotFound)

	lists := []struct {
		org  string
		want []store.Webhook
	}{
		{a.ID, []store.Webhook{w3, w1}},
		{bo.ID, []store.Webhook{w2}},
		{"", []store.Webhook{w3, w2, w1}},
		{"org_none", []store.Webhook{}},
	}
	for _, tt := range lists {
		got, err := db.ListWebhooks(ctx, tt.org)
		if err != nil {
			t.Errorf("ListWebhooks(%q) = %v", tt.org, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("ListWebhooks(%q) mismatch, want newest first (-want +got):\n%s", tt.org, diff)
		}
	}

	wantErr(t, "DeleteWebhook(other org)", db.DeleteWebhook(ctx, bo.ID, w1.ID), store.ErrNotFound)
	wantErr(t, "DeleteWebhook(org)", db.DeleteWebhook(ctx, a.ID, w1.ID), nil)
	wantErr(t, "DeleteWebhook(again)", db.DeleteWebhook(ctx, a.ID, w1.ID), store.ErrNotFound)
	wantErr(t, "DeleteWebhook(any org)", db.DeleteWebhook(ctx, "", w2.ID), nil)
	got, err := db.ListWebhooks(ctx, "")
	if err != nil {
		t.Fatalf("ListWebhooks() = %v", err)
	}
	if diff := cmp.Diff([]store.Webhook{w3}, got); diff != "" {
		t.Errorf("ListWebhooks() after deletes mismatch (-want +got):\n%s", diff)
	}
}

func testWebhooksFor(t *testing.T, b backend) {
	ctx := t.Context()
	clk := newClock()
	db := openClock(t, b.fresh(t), clk)
	a := mustOrg(t, db, "a")
	bo := mustOrg(t, db, "b")

	failed := mustWebhook(t, db, store.Webhook{OrgID: a.ID, URL: "https://x.example/1", Events: []string{"scaling_failed"}})
	clk.Advance(time.Second)
	both := mustWebhook(t, db, store.Webhook{OrgID: a.ID, URL: "https://x.example/2", Secret: "k",
		Events: []string{"scaling_requested", "scaling_failed"}})
	mustWebhook(t, db, store.Webhook{OrgID: bo.ID, URL: "https://x.example/3", Events: []string{"scaling_failed"}})
	// An event name that contains another must not match it.
	mustWebhook(t, db, store.Webhook{OrgID: a.ID, URL: "https://x.example/4", Events: []string{"scaling_failed_x"}})

	tests := []struct {
		org, event string
		want       []store.Webhook
	}{
		{a.ID, "scaling_failed", []store.Webhook{failed, both}},
		{a.ID, "scaling_requested", []store.Webhook{both}},
		{a.ID, "scaling_disarmed", []store.Webhook{}},
		{a.ID, "scaling", []store.Webhook{}},
		{"", "scaling_failed", []store.Webhook{}},
		{"org_none", "scaling_failed", []store.Webhook{}},
	}
	for _, tt := range tests {
		got, err := db.WebhooksFor(ctx, tt.org, tt.event)
		if err != nil {
			t.Errorf("WebhooksFor(%q, %q) = %v", tt.org, tt.event, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("WebhooksFor(%q, %q) mismatch, want oldest first (-want +got):\n%s", tt.org, tt.event, diff)
		}
	}
}
