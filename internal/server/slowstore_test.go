package server_test

import (
	"context"
	"database/sql"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/server"
	"github.com/aperio-dev/aperio/store"
)

// TestSlowStoreKeepsClientsConnected: while every write to the store
// blocks (another process holds SQLite's write lock, so each write waits
// for up to the store's 10 s busy timeout), heartbeats that declare new
// scaling records are still acked in time: the client stays connected
// through several heartbeat intervals and keeps serving visitors. Once the
// lock is released the declarations land and their notices reach the
// client with a later ack.
func TestSlowStoreKeepsClientsConnected(t *testing.T) {
	t.Parallel()
	// A heartbeat every 500 ms; the client gives up after 1.5 s without an
	// ack, far less than a blocked write takes.
	const threshold = 1500 * time.Millisecond
	const interval = threshold / 3
	h := newScalingHarnessWith(t, func(cfg *server.Config) { cfg.Tunnel.DownThreshold = threshold })
	tok := h.token(t, h.orgB, "b.example.net", "*.b.example.net")
	c := h.client(t, tok, "b.example.net")
	c.announceNow(t)
	h.wantRecords(t, "b.example.net")

	unlock := lockStore(t, h.dataDir)
	// evil.test is not the token's: its declaration is refused, with a
	// notice, by the job blocked behind x.b.example.net's write.
	c.setHosts("b.example.net", "x.b.example.net", "evil.test")
	const refusal = "scaling declaration for evil.test refused"
	start := time.Now()
	beats := 0
	for time.Since(start) < 5*interval {
		c.announceNow(t)
		beats++
		if status, body := get(t, h.visitor, h.srv, "b.example.net", "/"); status != 404 || !strings.Contains(body, "404 page not found") {
			t.Fatalf("GET b.example.net with the store blocked = %d %q, want the client's 404", status, body)
		}
	}
	if n := c.notices.tunnelDowns(); n != 0 || !c.c.Connected() {
		t.Fatalf("after %v of blocked store writes the tunnel went down %d times (connected %v), want 0 (true)", time.Since(start), n, c.c.Connected())
	}
	if n := h.srv.gw.DeclarationsLateForTest(); n == 0 {
		t.Errorf("%d acks went before their declarations, want some: the store was locked", n)
	}
	if got := h.records(t); slices.Contains(got, "x.b.example.net") {
		t.Fatalf("scaling records with the store blocked = %q, want x.b.example.net not written yet", got)
	}
	if got := c.notices.all(); slices.ContainsFunc(got, func(n string) bool { return strings.Contains(n, refusal) }) {
		t.Fatalf("server notices with the store blocked = %q, want none containing %q yet", got, refusal)
	}
	t.Logf("%d heartbeats acked in %v with the store blocked", beats, time.Since(start))

	unlock()
	poll(t, waitFor, func() (bool, string) {
		got := h.records(t)
		return slices.Equal(got, []string{"b.example.net", "x.b.example.net"}),
			"scaling records after the store was released = " + strings.Join(got, ", ") + ", want b.example.net, x.b.example.net"
	})
	poll(t, waitFor, func() (bool, string) {
		c.announceNow(t)
		got := c.notices.all()
		return slices.ContainsFunc(got, func(n string) bool { return strings.Contains(n, refusal) }),
			"server notices after the store was released = " + strings.Join(got, "; ") + ", want one containing " + refusal
	})
	if n := c.notices.tunnelDowns(); n != 0 {
		t.Errorf("the tunnel went down %d times, want 0", n)
	}
}

// lockStore takes the write lock of the SQLite store in dataDir from a
// connection of its own, as another process would, so that every write of
// the server waits. It returns the function that releases the lock; the
// lock is released when the test ends in any case.
func lockStore(t *testing.T, dataDir string) (unlock func()) {
	t.Helper()
	path, err := filepath.Abs(filepath.Join(dataDir, store.DBFile))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?_busy_timeout=10000")
	if err != nil {
		t.Fatalf("open raw database: %v", err)
	}
	conn, err := raw.Conn(t.Context())
	if err != nil {
		t.Fatalf("raw connection: %v", err)
	}
	if _, err := conn.ExecContext(t.Context(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatalf("BEGIN IMMEDIATE: %v", err)
	}
	released := false
	unlock = func() {
		if released {
			return
		}
		released = true
		if _, err := conn.ExecContext(context.Background(), "ROLLBACK"); err != nil {
			t.Errorf("ROLLBACK: %v", err)
		}
		if err := conn.Close(); err != nil {
			t.Errorf("close raw connection: %v", err)
		}
		if err := raw.Close(); err != nil {
			t.Errorf("close raw database: %v", err)
		}
	}
	t.Cleanup(unlock)
	return unlock
}
