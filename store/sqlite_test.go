package store_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/store/storetest"
)

// TestSQLite runs the conformance suite on databases copied from one
// migrated once (storetest.MigratedSQLite): migrating costs about half a
// second of CPU under -race, paid once instead of once a test. The tests
// of migrating open empty ones (empty).
func TestSQLite(t *testing.T) {
	t.Parallel()
	testStore(t, backend{name: store.BackendSQLite, fresh: storetest.MigratedSQLite, empty: storetest.SQLite,
		dropAuditGuards: []string{`DROP TRIGGER audit_no_update`, `DROP TRIGGER audit_no_delete`, `DROP TRIGGER audit_chained_insert`},
		blob:            func(b []byte) string { return fmt.Sprintf("X'%x'", b) }})
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     store.Config
		wantErr bool
	}{
		{"zero", store.Config{}, true},
		{"sqlite", store.Config{DataDir: "data"}, false},
		{"postgres url", store.Config{DatabaseURL: "postgres://u:pw@127.0.0.1:5432/db?sslmode=disable"}, false},
		{"postgres dsn", store.Config{DatabaseURL: "host=127.0.0.1 dbname=db"}, false},
		{"bad url", store.Config{DatabaseURL: "postgres://u:hunter2@[::1/db"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if (err != nil) != tt.wantErr {
				t.Fatalf("Validate() = %v, want error %v", err, tt.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), "hunter2") {
				t.Errorf("Validate() = %v: the error shows the password", err)
			}
			if !tt.wantErr {
				return
			}
			if db, err := store.Open(t.Context(), tt.cfg); err == nil {
				t.Errorf("Open(%s) = nil error, want Validate's", tt.name)
				if err := db.Close(); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// rawSQLite opens the store's database file beside the store, for checks
// the API cannot make.
func rawSQLite(t *testing.T, dataDir string) *sql.DB {
	t.Helper()
	path, err := filepath.Abs(filepath.Join(dataDir, store.DBFile))
	if err != nil {
		t.Fatal(err)
	}
	// The URI form, as the store opens it: a plain name is cut at '?'.
	raw, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath())
	if err != nil {
		t.Fatalf("open raw sqlite: %v", err)
	}
	t.Cleanup(func() {
		if err := raw.Close(); err != nil {
			t.Errorf("close raw sqlite: %v", err)
		}
	})
	return raw
}

func TestSQLiteFile(t *testing.T) {
	t.Parallel()
	// A data dir that does not exist yet, with characters a URI or a
	// query string would misread.
	dir := filepath.Join(t.TempDir(), "da ta?x=1#frag%20", "nested")
	storetest.Open(t, store.Config{DataDir: dir})
	if _, err := os.Stat(filepath.Join(dir, store.DBFile)); err != nil {
		t.Fatalf("database file: %v", err)
	}
	raw := rawSQLite(t, dir)
	var mode string
	if err := raw.QueryRowContext(t.Context(), `PRAGMA journal_mode`).Scan(&mode); err != nil {
		t.Fatalf("PRAGMA journal_mode: %v", err)
	}
	if mode != "wal" {
		t.Errorf("journal_mode = %q, want wal", mode)
	}
}

func TestSQLiteDataDirIsAFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(t.Context(), store.Config{DataDir: file})
	if err == nil {
		t.Error("Open(data dir is a file) = nil error, want one")
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	}
}

// TestSQLiteLockedWriteWaits holds the database's write lock from another
// connection (another process, as far as the store can tell): a write fails
// instead of slipping through, and works once the lock goes.
func TestSQLiteLockedWriteWaits(t *testing.T) {
	t.Parallel()
	cfg := storetest.MigratedSQLite(t)
	db := storetest.Open(t, cfg)
	raw := rawSQLite(t, cfg.DataDir)
	conn, err := raw.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(t.Context(), `BEGIN IMMEDIATE`); err != nil {
		t.Fatalf("BEGIN IMMEDIATE: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err = db.CreateOrg(ctx, "blocked")
	if err == nil {
		t.Fatal("CreateOrg() while another connection holds the write lock = nil, want an error")
	}
	if !errors.Is(err, store.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("CreateOrg() while locked = %v, want ErrUnavailable or the deadline", err)
	}
	if _, err := conn.ExecContext(t.Context(), `ROLLBACK`); err != nil {
		t.Fatalf("ROLLBACK: %v", err)
	}
	if _, err := db.CreateOrg(t.Context(), "blocked"); err != nil {
		t.Errorf("CreateOrg() after the lock went = %v", err)
	}
}

func TestSQLiteSchema(t *testing.T) {
	t.Parallel()
	cfg := storetest.SQLite(t)
	storetest.Open(t, cfg)
	rows, err := rawSQLite(t, cfg.DataDir).QueryContext(t.Context(),
		`SELECT type, name, sql FROM sqlite_schema
		WHERE name NOT LIKE 'sqlite_%' AND tbl_name != 'goose_db_version' AND sql IS NOT NULL
		ORDER BY type, name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var typ, name, def string
		if err := rows.Scan(&typ, &name, &def); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "-- %s %s\n%s;\n\n", typ, name, def)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	golden(t, "schema_sqlite.golden", b.String())
}
