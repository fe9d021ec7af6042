package store_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/aperio-dev/aperio/store"
)

func testWebhookDeliveries(t *testing.T, b backend) {
	ctx := t.Context()
	clk := newClock()
	db := openClock(t, b.fresh(t), clk)
	a := mustOrg(t, db, "a")
	bo := mustOrg(t, db, "b")
	wa := mustWebhook(t, db, store.Webhook{OrgID: a.ID, URL: "https://hooks.example.com/a", Events: []string{"scaling_failed"}, Format: "slack"})
	wb := mustWebhook(t, db, store.Webhook{OrgID: bo.ID, URL: "https://hooks.example.com/b", Events: []string{"scaling_failed"}})
	if wa.Format != "slack" || wb.Format != "generic" {
		t.Errorf("CreateWebhook().Format = %q, %q, want slack, generic (the default)", wa.Format, wb.Format)
	}
	ws, err := db.ListWebhooks(ctx, a.ID)
	if err != nil || len(ws) != 1 || ws[0].Format != "slack" {
		t.Errorf("ListWebhooks(a) = %+v, %v, want the slack format read back", ws, err)
	}

	body := []byte(`{"event":"scaling_failed"}`)
	created := stored(clk.Now())
	first, err := db.RecordWebhookDelivery(ctx, store.WebhookDelivery{ID: "msg_1", WebhookID: wa.ID, OrgID: a.ID,
		Event: "scaling_failed", Status: store.DeliveryPending, Attempts: 1, LastError: "503 Service Unavailable",
		LastStatusCode: 503, ResponseTime: 1500*time.Millisecond + 700*time.Microsecond, Body: body}, 0)
	if err != nil {
		t.Fatalf("RecordWebhookDelivery(new) = %v", err)
	}
	want := store.WebhookDelivery{ID: "msg_1", WebhookID: wa.ID, OrgID: a.ID, Event: "scaling_failed",
		Status: store.DeliveryPending, Attempts: 1, LastError: "503 Service Unavailable", LastStatusCode: 503,
		ResponseTime: 1500 * time.Millisecond, Body: body, CreatedAt: created, UpdatedAt: created}
	if diff := cmp.Diff(want, first); diff != "" {
		t.Errorf("RecordWebhookDelivery(new) mismatch (-want +got):\n%s", diff)
	}

	// The next attempt updates the row; its body and creation stay.
	clk.Advance(2 * time.Second)
	got, err := db.RecordWebhookDelivery(ctx, store.WebhookDelivery{ID: "msg_1", WebhookID: wa.ID, OrgID: a.ID,
		Event: "scaling_failed", Status: store.DeliveryDelivered, Attempts: 2, LastStatusCode: 204,
		ResponseTime: 40 * time.Millisecond, Body: []byte("ignored")}, 0)
	if err != nil {
		t.Fatalf("RecordWebhookDelivery(update) = %v", err)
	}
	want.Status, want.Attempts, want.LastError, want.LastStatusCode = store.DeliveryDelivered, 2, "", 204
	want.ResponseTime, want.UpdatedAt = 40*time.Millisecond, stored(clk.Now())
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("RecordWebhookDelivery(update) mismatch (-want +got):\n%s", diff)
	}
	read, err := db.WebhookDelivery(ctx, a.ID, wa.ID, "msg_1")
	if err != nil {
		t.Fatalf("WebhookDelivery() = %v", err)
	}
	if diff := cmp.Diff(want, read); diff != "" {
		t.Errorf("WebhookDelivery() mismatch (-want +got):\n%s", diff)
	}
	_, err = db.WebhookDelivery(ctx, bo.ID, wa.ID, "msg_1")
	wantErr(t, "WebhookDelivery(other org)", err, store.ErrNotFound)
	_, err = db.WebhookDelivery(ctx, "", wb.ID, "msg_1")
	wantErr(t, "WebhookDelivery(other webhook)", err, store.ErrNotFound)
	// The same id under another subscription is a conflict, not an update.
	_, err = db.RecordWebhookDelivery(ctx, store.WebhookDelivery{ID: "msg_1", WebhookID: wb.ID, OrgID: bo.ID,
		Event: "scaling_failed", Status: store.DeliveryPending}, 0)
	wantErr(t, "RecordWebhookDelivery(id of another webhook)", err, store.ErrConflict)
	_, err = db.RecordWebhookDelivery(ctx, store.WebhookDelivery{ID: "msg_x", WebhookID: "whk_missing", OrgID: a.ID,
		Event: "ping", Status: store.DeliveryPending}, 0)
	wantErr(t, "RecordWebhookDelivery(missing webhook)", err, store.ErrNotFound)

	// Same instant: seq orders them.
	second, err := db.RecordWebhookDelivery(ctx, store.WebhookDelivery{ID: "msg_2", WebhookID: wa.ID, OrgID: a.ID,
		Event: "ping", Status: store.DeliveryDropped, LastError: "refused"}, 0)
	if err != nil {
		t.Fatalf("RecordWebhookDelivery(msg_2) = %v", err)
	}
	if second.Body == nil || len(second.Body) != 0 {
		t.Errorf("RecordWebhookDelivery(no body).Body = %#v, want empty, not nil", second.Body)
	}
	lists := []struct {
		org, webhook string
		limit        int
		want         []string
	}{
		{a.ID, wa.ID, 0, []string{"msg_2", "msg_1"}},
		{"", wa.ID, 1, []string{"msg_2"}},
		{bo.ID, wa.ID, 0, []string{}},
		{"", wb.ID, 0, []string{}},
	}
	for _, tt := range lists {
		ds, err := db.ListWebhookDeliveries(ctx, tt.org, tt.webhook, tt.limit)
		if err != nil {
			t.Errorf("ListWebhookDeliveries(%q, %s, %d) = %v", tt.org, tt.webhook, tt.limit, err)
			continue
		}
		ids := []string{}
		for _, d := range ds {
			ids = append(ids, d.ID)
		}
		if diff := cmp.Diff(tt.want, ids); diff != "" {
			t.Errorf("ListWebhookDeliveries(%q, %s, %d) mismatch, want newest first (-want +got):\n%s", tt.org, tt.webhook, tt.limit, diff)
		}
	}

	// Deleting the subscription deletes its log.
	wantErr(t, "DeleteWebhook(a)", db.DeleteWebhook(ctx, a.ID, wa.ID), nil)
	_, err = db.WebhookDelivery(ctx, "", wa.ID, "msg_1")
	wantErr(t, "WebhookDelivery(deleted webhook)", err, store.ErrNotFound)
}

func testWebhookDeliveriesBound(t *testing.T, b backend) {
	ctx := t.Context()
	db := openClock(t, b.fresh(t), newClock())
	a := mustOrg(t, db, "a")
	w1 := mustWebhook(t, db, store.Webhook{OrgID: a.ID, URL: "https://hooks.example.com/1", Events: []string{"scaling_failed"}})
	w2 := mustWebhook(t, db, store.Webhook{OrgID: a.ID, URL: "https://hooks.example.com/2", Events: []string{"scaling_failed"}})
	const keep = 3
	rec := func(id, webhook string) {
		t.Helper()
		if _, err := db.RecordWebhookDelivery(ctx, store.WebhookDelivery{ID: id, WebhookID: webhook, OrgID: a.ID,
			Event: "scaling_failed", Status: store.DeliveryPending, Body: []byte(id)}, keep); err != nil {
			t.Fatalf("RecordWebhookDelivery(%s) = %v", id, err)
		}
	}
	rec("other", w2.ID)
	for i := range keep + 2 {
		rec(fmt.Sprint("d", i), w1.ID)
	}
	// Updating the oldest kept one neither evicts nor revives anything.
	if _, err := db.RecordWebhookDelivery(ctx, store.WebhookDelivery{ID: "d2", WebhookID: w1.ID, OrgID: a.ID,
		Event: "scaling_failed", Status: store.DeliveryFailed, Attempts: 5}, keep); err != nil {
		t.Fatalf("RecordWebhookDelivery(d2 update) = %v", err)
	}
	ds, err := db.ListWebhookDeliveries(ctx, a.ID, w1.ID, store.MaxDeliveryKeep)
	if err != nil {
		t.Fatalf("ListWebhookDeliveries() = %v", err)
	}
	var ids []string
	for _, d := range ds {
		ids = append(ids, d.ID)
	}
	if diff := cmp.Diff([]string{"d4", "d3", "d2"}, ids); diff != "" {
		t.Errorf("ListWebhookDeliveries() after %d inserts with keep %d mismatch (-want +got):\n%s", keep+2, keep, diff)
	}
	if len(ds) == 3 && (ds[2].Status != store.DeliveryFailed || string(ds[2].Body) != "d2") {
		t.Errorf("d2 after update = %+v, want failed with its first body", ds[2])
	}
	if _, err := db.WebhookDelivery(ctx, "", w2.ID, "other"); err != nil {
		t.Errorf("WebhookDelivery(other webhook's) = %v, want kept: the bound is per subscription", err)
	}
}

func testWebhookDeliveriesHostile(t *testing.T, b backend) {
	ctx := t.Context()
	db := openClock(t, b.fresh(t), newClock())
	a := mustOrg(t, db, "a")
	w := mustWebhook(t, db, store.Webhook{OrgID: a.ID, URL: "https://hooks.example.com/", Events: []string{"scaling_failed"}})
	ok := store.WebhookDelivery{ID: "msg_ok", WebhookID: w.ID, OrgID: a.ID, Event: "ping", Status: store.DeliveryPending}
	bad := []struct {
		name string
		edit func(*store.WebhookDelivery)
		keep int
	}{
		{"empty id", func(d *store.WebhookDelivery) { d.ID = "" }, 0},
		{"long id", func(d *store.WebhookDelivery) { d.ID = strings.Repeat("i", store.MaxDeliveryField+1) }, 0},
		{"long event", func(d *store.WebhookDelivery) { d.Event = strings.Repeat("e", store.MaxDeliveryField+1) }, 0},
		{"unknown status", func(d *store.WebhookDelivery) { d.Status = "lost" }, 0},
		{"body too big", func(d *store.WebhookDelivery) { d.Body = make([]byte, store.MaxDeliveryBody+1) }, 0},
		{"negative attempts", func(d *store.WebhookDelivery) { d.Attempts = -1 }, 0},
		{"negative keep", func(*store.WebhookDelivery) {}, -1},
		{"huge keep", func(*store.WebhookDelivery) {}, store.MaxDeliveryKeep + 1},
		{"no webhook", func(d *store.WebhookDelivery) { d.WebhookID = "" }, 0},
	}
	for _, tt := range bad {
		d := ok
		tt.edit(&d)
		if _, err := db.RecordWebhookDelivery(ctx, d, tt.keep); err == nil {
			t.Errorf("RecordWebhookDelivery(%s) = nil, want an error", tt.name)
		}
	}
	for _, limit := range []int{-1, store.MaxDeliveryKeep + 1} {
		if _, err := db.ListWebhookDeliveries(ctx, "", w.ID, limit); err == nil {
			t.Errorf("ListWebhookDeliveries(limit %d) = nil, want an error", limit)
		}
	}

	// A long error is cut at a rune boundary; the largest body is kept
	// whole.
	d := ok
	d.LastError = strings.Repeat("é", store.MaxDeliveryError) // 2 bytes each
	d.Body = bytes.Repeat([]byte{0xff}, store.MaxDeliveryBody)
	got, err := db.RecordWebhookDelivery(ctx, d, 0)
	if err != nil {
		t.Fatalf("RecordWebhookDelivery(long error, largest body) = %v", err)
	}
	if len(got.LastError) != store.MaxDeliveryError || !utf8.ValidString(got.LastError) {
		t.Errorf("LastError cut to %d bytes (valid UTF-8 %t), want %d", len(got.LastError), utf8.ValidString(got.LastError), store.MaxDeliveryError)
	}
	read, err := db.WebhookDelivery(ctx, "", w.ID, d.ID)
	if err != nil {
		t.Fatalf("WebhookDelivery() = %v", err)
	}
	if !bytes.Equal(read.Body, d.Body) || read.LastError != got.LastError {
		t.Errorf("WebhookDelivery() body %d bytes, error %d bytes, want the stored %d and %d", len(read.Body), len(read.LastError), len(d.Body), len(got.LastError))
	}
}
