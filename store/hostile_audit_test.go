package store_test

import (
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/pressly/goose/v3"

	"github.com/aperio-dev/aperio/migrations"
	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/store/storetest"
)

// legacyStore migrates the empty database of cfg up to version only, as an
// older release left it, and returns a raw connection to it, closed when t
// ends.
func legacyStore(t testing.TB, cfg store.Config, version int64) *sql.DB {
	t.Helper()
	var (
		raw     *sql.DB
		err     error
		dialect = goose.DialectSQLite3
		fsys    = migrations.SQLite()
	)
	if cfg.DatabaseURL != "" {
		dialect, fsys = goose.DialectPostgres, migrations.Postgres()
		raw, err = sql.Open("pgx", cfg.DatabaseURL)
	} else {
		path, aerr := filepath.Abs(filepath.Join(cfg.DataDir, store.DBFile))
		if aerr != nil {
			t.Fatal(aerr)
		}
		raw, err = sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath())
	}
	if err != nil {
		t.Fatalf("open raw database: %v", err)
	}
	t.Cleanup(func() {
		if err := raw.Close(); err != nil {
			t.Errorf("close raw database: %v", err)
		}
	})
	p, err := goose.NewProvider(dialect, raw, fsys, goose.WithLogger(goose.NopLogger()))
	if err != nil {
		t.Fatalf("goose.NewProvider() = %v", err)
	}
	if _, err := p.UpTo(t.Context(), version); err != nil {
		t.Fatalf("migrate up to %d: %v", version, err)
	}
	return raw
}

// hostileAuditBackend is one dialect for TestHostileAudit.
type hostileAuditBackend struct {
	name string
	// fresh returns the Config of a new database with the schema current:
	// a copy of one migrated once (storetest's Migrated*), as migrating
	// each test's own from empty cost most of the test's time.
	fresh func(testing.TB) store.Config
	// empty returns the Config of a new database without even the
	// schema, for the tests that migrate it themselves.
	empty func(testing.TB) store.Config
	// dropInsertGuard removes only the trigger that refuses unchained
	// inserts, as someone with DDL rights on the database could.
	dropInsertGuard string
	// dropGuards removes every trigger that keeps the log append-only.
	dropGuards []string
	blob       func([]byte) string
	at         func(time.Time) string
}

// forgedInsert is the probe's plain INSERT of an audit row around the
// store: a fabricated revocation attributed to the master token.
const forgedInsert = `INSERT INTO audit (at, org_id, event, actor, hostname, detail)
	VALUES ('2031-03-04T00:06:07.000000Z', '', 'forged', 'master', 'a.test', 'token tok_x revoked by operator')`

// TestHostileAudit: writes to the audit table that bypass the store are
// refused by the database or reported by VerifyAudit, on every dialect,
// and nothing the store does on open or verify makes them look genuine.
func TestHostileAudit(t *testing.T) {
	t.Parallel()
	backends := []hostileAuditBackend{
		{
			name: store.BackendSQLite, fresh: storetest.MigratedSQLite, empty: storetest.SQLite,
			dropInsertGuard: `DROP TRIGGER audit_chained_insert`,
			dropGuards:      []string{`DROP TRIGGER audit_no_update`, `DROP TRIGGER audit_no_delete`, `DROP TRIGGER audit_chained_insert`},
			blob:            func(b []byte) string { return fmt.Sprintf("X'%x'", b) },
			at:              func(t time.Time) string { return "'" + t.UTC().Format("2006-01-02T15:04:05.000000Z") + "'" },
		},
		{
			name: store.BackendPostgres, fresh: storetest.MigratedPostgres, empty: storetest.Postgres,
			dropInsertGuard: `ALTER TABLE audit DISABLE TRIGGER audit_chained_insert`,
			dropGuards:      []string{`ALTER TABLE audit DISABLE TRIGGER USER`},
			blob:            func(b []byte) string { return fmt.Sprintf(`'\x%x'::bytea`, b) },
			at:              func(t time.Time) string { return "'" + t.UTC().Format(time.RFC3339Nano) + "'::timestamptz" },
		},
	}
	tests := []struct {
		name string
		run  func(t *testing.T, b hostileAuditBackend)
	}{
		{"guard/audit/plain-insert-refused", func(t *testing.T, b hostileAuditBackend) {
			db := openClock(t, b.fresh(t), newClock())
			appendN(t, db, 2)
			if err := db.ExecForTest(t.Context(), forgedInsert); err == nil {
				t.Fatal("raw INSERT of an unchained audit row = nil error, want the trigger to refuse it")
			}
			if n, err := db.VerifyAudit(t.Context()); n != 2 || err != nil {
				t.Errorf("VerifyAudit() = %d, %v; want 2, nil", n, err)
			}
		}},
		{"guard/audit/insert-without-trigger-never-chained", func(t *testing.T, b hostileAuditBackend) {
			ctx := t.Context()
			cfg := b.fresh(t)
			db := openClock(t, cfg, newClock())
			appendN(t, db, 2)
			mustExec(t, db, b.dropInsertGuard, forgedInsert)
			// Reopening (a server restart) chains nothing, and neither
			// does a read-only open.
			for _, c := range []store.Config{cfg, {DataDir: cfg.DataDir, DatabaseURL: cfg.DatabaseURL, ReadOnly: true}} {
				again := storetest.Open(t, c)
				wantUnchained(t, again)
			}
			wantUnchained(t, db)
			got, err := db.ListAudit(ctx, "", 0)
			if err != nil {
				t.Fatalf("ListAudit() = %v", err)
			}
			for _, e := range got {
				if e.Event == "forged" && (e.Seq != 0 || e.Hash != nil) {
					t.Errorf("forged entry after reopening: seq %d hash %x, want no chain columns", e.Seq, e.Hash)
				}
			}
		}},
		{"guard/audit/chain-columns-set-later-refused", func(t *testing.T, b hostileAuditBackend) {
			db := openClock(t, b.fresh(t), newClock())
			es := appendN(t, db, 2)
			mustExec(t, db, b.dropInsertGuard, forgedInsert)
			forged := store.AuditEntry{Seq: 3, At: stored(time.Date(2031, 3, 4, 0, 6, 7, 0, time.UTC)), Event: "forged", Actor: "master", Hostname: "a.test", Detail: "token tok_x revoked by operator"}
			h := store.AuditHash(es[1].Hash, forged)
			q := fmt.Sprintf(`UPDATE audit SET seq = 3, prev_hash = %s, hash = %s WHERE event = 'forged'`, b.blob(es[1].Hash), b.blob(h))
			if err := db.ExecForTest(t.Context(), q); err == nil {
				t.Fatal("raw UPDATE setting the chain columns of an inserted row = nil error, want the trigger to refuse it")
			}
			wantUnchained(t, db)
		}},
		{"guard/audit/backdated-entry-broken", func(t *testing.T, b hostileAuditBackend) {
			clk := newClock()
			db := openClock(t, b.fresh(t), clk)
			es := appendN(t, db, 3)
			mustExec(t, db, b.dropGuards...)
			// A consistent forgery: right seq, prev_hash and hash, the head
			// moved on, but dated well before the entry it follows.
			forged := store.AuditEntry{Seq: 4, At: stored(es[2].At.Add(-store.AuditClockSkew - time.Second)), Event: "forged", Actor: "master", Detail: "backdated"}
			forged.Hash = store.AuditHash(es[2].Hash, forged)
			mustExec(t, db,
				fmt.Sprintf(`INSERT INTO audit (seq, prev_hash, hash, at, org_id, event, actor, hostname, detail) VALUES (4, %s, %s, %s, '', 'forged', 'master', '', 'backdated')`,
					b.blob(es[2].Hash), b.blob(forged.Hash), b.at(forged.At)),
				fmt.Sprintf(`UPDATE audit_chain_head SET seq = 4, hash = %s WHERE id = 1`, b.blob(forged.Hash)))
			_, err := db.VerifyAudit(t.Context())
			var ce *store.AuditChainError
			if !errors.As(err, &ce) || ce.Entry.Seq != 4 || !strings.Contains(ce.Reason, "backdated") {
				t.Fatalf("VerifyAudit() with a backdated entry = %v, want it broken at seq 4, backdated", err)
			}
		}},
		{"guard/audit/clock-skew-within-tolerance", func(t *testing.T, b hostileAuditBackend) {
			clk := newClock()
			db := openClock(t, b.fresh(t), clk)
			appendN(t, db, 1)
			clk.Advance(-store.AuditClockSkew / 2) // another server's clock, a little behind
			appendN(t, db, 1)
			if n, err := db.VerifyAudit(t.Context()); n != 2 || err != nil {
				t.Errorf("VerifyAudit() with times stepping back %s = %d, %v; want 2, nil", store.AuditClockSkew/2, n, err)
			}
		}},
		{"guard/audit/read-only-writes-nothing", func(t *testing.T, b hostileAuditBackend) {
			cfg := b.fresh(t)
			storetest.Open(t, cfg)
			cfg.ReadOnly = true
			ro := storetest.Open(t, cfg)
			if _, err := ro.AppendAudit(t.Context(), store.AuditEntry{Event: "token_minted"}); err == nil {
				t.Error("AppendAudit() on a read-only store = nil error, want the database to refuse the write")
			}
			if n, err := ro.VerifyAudit(t.Context()); n != 0 || err != nil {
				t.Errorf("read-only VerifyAudit() = %d, %v; want 0, nil", n, err)
			}
		}},
		{"guard/audit/control-characters-escaped", func(t *testing.T, b hostileAuditBackend) {
			db := openClock(t, b.fresh(t), newClock())
			e, err := db.AppendAudit(t.Context(), store.AuditEntry{Event: "client_refused", Actor: "token:\x1b[2J",
				Hostname: "a.test\n", Detail: "web\r\n2031-01-01 token_revoked by master\u202e\xff\x00"})
			if err != nil {
				t.Fatalf("AppendAudit() = %v", err)
			}
			want := store.AuditEntry{Actor: `token:\x1b[2J`, Hostname: `a.test\x0a`, Detail: `web\x0d\x0a2031-01-01 token_revoked by master\u202e` + "\uFFFD" + `\x00`}
			if e.Actor != want.Actor || e.Hostname != want.Hostname || e.Detail != want.Detail {
				t.Errorf("AppendAudit() stored actor %q hostname %q detail %q; want %q, %q, %q", e.Actor, e.Hostname, e.Detail, want.Actor, want.Hostname, want.Detail)
			}
			if n, err := db.VerifyAudit(t.Context()); n != 1 || err != nil {
				t.Errorf("VerifyAudit() = %d, %v; want 1, nil", n, err)
			}
		}},
		{"guard/audit/oversize-detail-cut", func(t *testing.T, b hostileAuditBackend) {
			db := openClock(t, b.fresh(t), newClock())
			e, err := db.AppendAudit(t.Context(), store.AuditEntry{Event: "token_minted", Detail: strings.Repeat("é", store.MaxAuditDetailBytes)})
			if err != nil {
				t.Fatalf("AppendAudit() = %v", err)
			}
			if len(e.Detail) > store.MaxAuditDetailBytes+64 || !strings.HasSuffix(e.Detail, "(8192 bytes cut)") || !utf8.ValidString(e.Detail) {
				t.Errorf("AppendAudit(%d-byte detail) stored %d bytes ending %q, want it cut to %d bytes and valid UTF-8",
					2*store.MaxAuditDetailBytes, len(e.Detail), e.Detail[len(e.Detail)-24:], store.MaxAuditDetailBytes)
			}
		}},
		{"guard/audit/legacy-backfill-once", func(t *testing.T, b hostileAuditBackend) {
			ctx := t.Context()
			cfg := b.empty(t)
			legacy := legacyStore(t, cfg, 3)
			if _, err := legacy.ExecContext(ctx, `INSERT INTO audit (at, org_id, event, actor, hostname, detail) VALUES ('2031-01-01T00:00:00.000000Z', '', 'legacy', 'master', '', 'old')`); err != nil {
				t.Fatalf("raw legacy INSERT = %v", err)
			}
			db := storetest.Open(t, cfg)
			if n, err := db.VerifyAudit(ctx); n != 1 || err != nil {
				t.Fatalf("VerifyAudit() after the upgrade = %d, %v; want 1, nil", n, err)
			}
			mustExec(t, db, b.dropInsertGuard, forgedInsert)
			if err := db.Close(); err != nil {
				t.Fatalf("Close() = %v", err)
			}
			wantUnchained(t, storetest.Open(t, cfg))
		}},
	}
	for _, tt := range tests {
		for _, b := range backends {
			t.Run(tt.name+"/"+b.name, func(t *testing.T) {
				t.Parallel()
				tt.run(t, b)
			})
		}
	}
}

// mustExec runs raw SQL on db's database, bypassing the store.
func mustExec(t *testing.T, db *store.DB, queries ...string) {
	t.Helper()
	for _, q := range queries {
		if err := db.ExecForTest(t.Context(), q); err != nil {
			t.Fatalf("raw %q = %v", q, err)
		}
	}
}

// wantUnchained checks that VerifyAudit names the forged row as having no
// chain columns.
func wantUnchained(t *testing.T, db *store.DB) {
	t.Helper()
	_, err := db.VerifyAudit(t.Context())
	var ce *store.AuditChainError
	if !errors.As(err, &ce) || ce.Entry.Event != "forged" || !strings.Contains(ce.Reason, "entry has no chain columns") {
		t.Fatalf("VerifyAudit() = %v, want the forged entry reported as having no chain columns", err)
	}
}

// TestReadOnlyMissingStore: a read-only open of a data dir with no store
// fails and creates nothing.
func TestReadOnlyMissingStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "missing")
	db, err := store.Open(t.Context(), store.Config{DataDir: dir, ReadOnly: true})
	if err == nil {
		t.Error("Open(read-only, missing data dir) = nil error, want one")
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("read-only Open created %s (%v), want it left alone", dir, err)
	}
}
