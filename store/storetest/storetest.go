// Package storetest opens throwaway stores for tests: SQLite in the test's
// temp dir, always available, and PostgreSQL as a fresh database per test
// on the server that APERIO_TEST_POSTGRES_DSN names, skipped with a visible
// reason when the variable is unset. scripts/postgres-test.sh starts such a
// server.
package storetest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aperio-dev/aperio/migrations"
	"github.com/aperio-dev/aperio/store"
)

// DSNEnv names the environment variable holding a superuser DSN (URL form)
// of a throwaway PostgreSQL server. Tests create and drop databases on it.
const DSNEnv = "APERIO_TEST_POSTGRES_DSN"

// SkipReason is the message of a PostgreSQL test skipped for want of a
// server.
const SkipReason = DSNEnv + " is not set: skipping the PostgreSQL half. " +
	`Start a throwaway server with: eval "$(bash scripts/postgres-test.sh start)"`

// adminTimeout bounds each CREATE or DROP DATABASE.
const adminTimeout = 30 * time.Second

// SQLite returns a Config for a new SQLite store in a directory of its own
// under t.TempDir().
func SQLite(t testing.TB) store.Config {
	t.Helper()
	return store.Config{DataDir: t.TempDir(), Logger: Logger()}
}

// migratedDB holds an empty SQLite database with every migration applied,
// made once per test process. Migrating a fresh database costs about half
// a second of CPU under -race (checkptr in the pure-Go SQLite): a package
// whose every test opened a fresh store spent most of its time there. The
// migrations themselves are tested in store, from empty databases.
var migratedDB = sync.OnceValues(func() ([]byte, error) {
	dir, err := os.MkdirTemp("", "aperio-migrated-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	db, err := store.Open(context.Background(), store.Config{DataDir: dir, Logger: Logger()})
	if err != nil {
		return nil, err
	}
	if err := db.Close(); err != nil {
		return nil, err
	}
	// Closing the last connection checkpoints the WAL into the file and
	// removes it: the file alone is the whole database.
	if _, err := os.Stat(filepath.Join(dir, store.DBFile+"-wal")); !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s-wal still there after Close (%v): the copy would miss it", store.DBFile, err)
	}
	return os.ReadFile(filepath.Join(dir, store.DBFile))
})

// MigratedDataDir returns a new data directory under t.TempDir() holding
// its own copy of an empty SQLite database with every migration applied:
// a store opened on it finds nothing to migrate.
func MigratedDataDir(t testing.TB) string {
	t.Helper()
	b, err := migratedDB()
	if err != nil {
		t.Fatalf("migrated template database: %v", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, store.DBFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// MigratedSQLite returns a Config for a new SQLite store whose database
// already has every migration applied (MigratedDataDir).
func MigratedSQLite(t testing.TB) store.Config {
	t.Helper()
	return store.Config{DataDir: MigratedDataDir(t), Logger: Logger()}
}

// Postgres returns a Config for a new, empty PostgreSQL database that is
// dropped when t ends. It skips t when DSNEnv is unset.
func Postgres(t testing.TB) store.Config {
	t.Helper()
	return store.Config{DatabaseURL: PostgresDSN(t), Logger: Logger()}
}

// MigratedPostgres returns a Config for a new PostgreSQL database, dropped
// when t ends, that already has every migration applied: a copy (CREATE
// DATABASE ... TEMPLATE) of a template database migrated once. It skips t
// when DSNEnv is unset.
func MigratedPostgres(t testing.TB) store.Config {
	t.Helper()
	admin := os.Getenv(DSNEnv)
	if admin == "" {
		t.Skip(SkipReason)
	}
	tmpl, err := postgresTemplate()
	if err != nil {
		t.Fatalf("migrated template database: %v", err)
	}
	return store.Config{DatabaseURL: createDatabase(t, admin, " TEMPLATE "+tmpl), Logger: Logger()}
}

// postgresTemplate returns the name of the template database on the
// server of admin: aperio_tmpl_ and a hash of the migrations, made once
// and kept on the (throwaway) server, where later test processes find it.
// A template is made under a name of its own, migrated, and only then
// renamed: a database of the final name is always complete, whichever of
// two processes making it at once wins.
var postgresTemplate = sync.OnceValues(func() (string, error) {
	admin := os.Getenv(DSNEnv)
	sum, err := migrationsHash()
	if err != nil {
		return "", err
	}
	name := "aperio_tmpl_" + sum
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	exists := func() (bool, error) {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_database WHERE datname = $1`, name).Scan(&n)
		return n > 0, err
	}
	if ok, err := exists(); ok || err != nil {
		return name, err
	}
	u, err := url.Parse(admin)
	if err != nil {
		return "", err
	}
	work := name + "_" + strings.ToLower(rand.Text())[:8]
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+work); err != nil {
		return "", err
	}
	u.Path = "/" + work
	db, err := store.Open(ctx, store.Config{DatabaseURL: u.String(), Logger: Logger()})
	if err == nil {
		err = db.Close()
	}
	if err == nil {
		// The store's connections are closed; the server may still be
		// ending their sessions, and a template must have none.
		_, err = conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, work)
	}
	if err == nil {
		_, err = conn.Exec(ctx, `ALTER DATABASE `+work+` RENAME TO `+name)
	}
	if err != nil {
		conn.Exec(ctx, `DROP DATABASE IF EXISTS `+work+` WITH (FORCE)`)
		if ok, _ := exists(); ok { // another process made it meanwhile
			return name, nil
		}
		return "", err
	}
	return name, nil
})

// migrationsHash is the first 12 hex digits of a SHA-256 over the
// PostgreSQL migrations' names and contents.
func migrationsHash() (string, error) {
	h := sha256.New()
	fsys := migrations.Postgres()
	err := fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(b))
		h.Write(b)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))[:12], err
}

// PostgresDSN creates an empty database with a random name on the server
// DSNEnv names and returns its DSN; the database is dropped (sessions still
// on it are terminated) when t ends. It skips t when DSNEnv is unset and
// fails it when the server cannot be reached.
func PostgresDSN(t testing.TB) string {
	t.Helper()
	admin := os.Getenv(DSNEnv)
	if admin == "" {
		t.Skip(SkipReason)
	}
	return CreateDatabase(t, admin)
}

// CreateDatabase creates an empty database with a random name on the
// server of admin (a superuser DSN in URL form), returns the DSN of the
// new database, and drops the database when t ends.
func CreateDatabase(t testing.TB, admin string) string {
	t.Helper()
	return createDatabase(t, admin, "")
}

// createDatabase creates a database with a random name and the CREATE
// DATABASE options opts, as CreateDatabase does.
func createDatabase(t testing.TB, admin, opts string) string {
	t.Helper()
	u, err := url.Parse(admin)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("%s is not a postgres:// URL", DSNEnv)
	}
	name := "aperio_test_" + strings.ToLower(rand.Text())
	adminExec(t, admin, `CREATE DATABASE `+name+opts)
	t.Cleanup(func() { adminExec(t, admin, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`) })
	u.Path = "/" + name
	return u.String()
}

// adminExec runs one statement on its own connection to dsn.
func adminExec(t testing.TB, dsn, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect to %s: %v", DSNEnv, err)
	}
	defer func() {
		if err := conn.Close(ctx); err != nil {
			t.Errorf("close admin connection: %v", err)
		}
	}()
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// Open opens cfg and closes the store when t ends, failing t if either
// fails.
func Open(t testing.TB, cfg store.Config) *store.DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := store.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("store.Open(%s) = %v", describe(cfg), err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
	})
	return db
}

// Logger shows the store's logs on stderr under go test -v and discards
// them otherwise.
func Logger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

func describe(cfg store.Config) string {
	if cfg.DatabaseURL != "" {
		return "postgres"
	}
	return "sqlite in " + cfg.DataDir
}
