package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/pressly/goose/v3"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/migrations"
)

// This file opens an SQLite store: one writer connection, so that this
// process's writes queue in Go instead of failing with SQLITE_BUSY, and a
// pool of read-only connections beside it (WAL).

const (
	// sqliteBusyTimeout is how long a statement waits for another
	// process's lock before failing with SQLITE_BUSY (ErrUnavailable).
	// Within one DB writes never contend: they share one connection.
	sqliteBusyTimeout = 10 * time.Second
	// sqliteReaders is the size of the read-only connection pool; WAL
	// lets readers run beside the writer.
	sqliteReaders = 4
)

func openSQLite(ctx context.Context, cfg Config, h *hub) (*backend, error) {
	path, err := filepath.Abs(filepath.Join(cfg.DataDir, DBFile))
	if err != nil {
		return nil, fmt.Errorf("store: data dir: %w", err)
	}
	// A file: URI, so that any byte of the path survives (a plain name
	// would be cut at the first '?').
	name := "file:" + (&url.URL{Path: path}).EscapedPath()
	busy := strconv.FormatInt(sqliteBusyTimeout.Milliseconds(), 10)
	if cfg.ReadOnly {
		return openSQLiteReadOnly(ctx, cfg, path, name+"?mode=ro&_busy_timeout="+busy+"&_query_only=1")
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("store: create data dir: %w", err)
	}

	// _txlock=immediate: every transaction on the writer is a write
	// transaction, holding the file's write lock from its first read.
	w, err := sql.Open("sqlite", name+"?_txlock=immediate&_busy_timeout="+busy+
		"&_foreign_keys=1&_journal_mode=WAL&_synchronous=NORMAL")
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetConnMaxIdleTime(0) // keep it: it holds the pragmas and the WAL open
	b := &backend{d: &sqliteDialect, w: newPool(w, true), publish: h.publish}
	if err := w.PingContext(ctx); err != nil {
		return nil, errors.Join(opError("open "+path, b.d.mapErr(err)), w.Close())
	}
	if err := migrate(ctx, cfg.Logger, goose.DialectSQLite3, w, migrations.SQLite(), nil); err != nil {
		if errors.Is(b.d.mapErr(err), ErrUnavailable) {
			err = fmt.Errorf("%w: %w", ErrUnavailable, err)
		} // a broken migration is no conflict or missing record
		return nil, errors.Join(opError(path, err), w.Close())
	}

	r, err := sql.Open("sqlite", name+"?_busy_timeout="+busy+"&_foreign_keys=1&_query_only=1")
	if err != nil {
		return nil, errors.Join(fmt.Errorf("store: open %s: %w", path, err), w.Close())
	}
	r.SetMaxOpenConns(sqliteReaders)
	r.SetMaxIdleConns(sqliteReaders)
	b.r = newPool(r, true)
	cfg.Logger.Info("store opened", logkey.Backend, BackendSQLite, logkey.Path, path)
	return b, nil
}

// openSQLiteReadOnly opens the existing database at path through dsn, a
// read-only URI: one pool serves as reader and writer, so that every write
// fails with SQLITE_READONLY (ErrUnavailable) instead of touching the file.
func openSQLiteReadOnly(ctx context.Context, cfg Config, path, dsn string) (*backend, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("store: open %s read-only: %w", path, err)
	}
	r, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	r.SetMaxOpenConns(sqliteReaders)
	p := newPool(r, true)
	b := &backend{d: &sqliteDialect, w: p, r: p, publish: func(Change) {}}
	if err := r.PingContext(ctx); err != nil {
		return nil, errors.Join(opError("open "+path, b.d.mapErr(err)), r.Close())
	}
	cfg.Logger.Info("store opened read-only", logkey.Backend, BackendSQLite, logkey.Path, path)
	return b, nil
}
