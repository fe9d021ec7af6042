package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"time"

	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// backend runs the store's SQL (queries.go) on one engine: every query is
// written once, and what differs between the engines is in d. DB
// validates input and assigns IDs and times before calling it, so a
// backend only stores, loads, maps errors onto ErrNotFound, ErrConflict
// and ErrUnavailable, and announces the changes it commits.
type backend struct {
	d *dialect
	// w runs every write and every transaction. On SQLite it is one
	// connection, so that this process's writes queue in Go instead of
	// failing with SQLITE_BUSY.
	w *pool
	// r runs reads: on SQLite a pool of query_only connections beside
	// the writer (WAL), on PostgreSQL w itself.
	r *pool
	// publish hands a committed change to this DB's subscribers; the
	// store calls it only when d.notify is "".
	publish func(Change)
	// stop stops the goroutines the backend owns (the PostgreSQL change
	// listener) and waits for them; nil when there are none.
	stop func()
	// now, when set, replaces the database's clock (Config.Now given, as
	// tests do); nil reads d.clock.
	now func() time.Time
}

// clockIn reads the store's clock in tx: the database's (d.clock), or
// the injected one. Every cluster-wide time decision reads it this way,
// in the transaction that decides, so that no server's own clock enters
// it.
func (b *backend) clockIn(ctx context.Context, tx *txn) (time.Time, error) {
	if b.now != nil {
		return stamp(b.now()), nil
	}
	var t time.Time
	if err := tx.QueryRowContext(ctx, b.d.clock).Scan(timeCol{&t}); err != nil {
		return time.Time{}, err
	}
	return stamp(t), nil
}

// clock reads the store's clock outside a transaction.
func (b *backend) clock(ctx context.Context) (time.Time, error) {
	if b.now != nil {
		return stamp(b.now()), nil
	}
	var t time.Time
	if err := b.r.QueryRowContext(ctx, b.d.clock).Scan(timeCol{&t}); err != nil {
		return time.Time{}, b.d.mapErr(err)
	}
	return stamp(t), nil
}

func (b *backend) name() string { return b.d.name }

func (b *backend) ping(ctx context.Context) error { return b.d.mapErr(b.r.PingContext(ctx)) }

// close stops any goroutine the backend owns, then closes the connections.
func (b *backend) close() error {
	if b.stop != nil {
		b.stop()
	}
	if b.r == b.w {
		return b.w.Close()
	}
	return errors.Join(b.r.Close(), b.w.Close())
}

// txn is a write transaction: a *sql.Tx that also announces the changes it
// makes, once it commits.
type txn struct {
	*cachedTx
	d       *dialect
	pending []Change // to publish after commit, when d.notify is ""
}

// changePayload is a Change as a NOTIFY payload carries it (JSON, short
// keys: a payload is limited to 8000 bytes).
type changePayload struct {
	Kind     string `json:"k"`
	ID       string `json:"i,omitempty"`
	OrgID    string `json:"o,omitempty"`
	Hostname string `json:"h,omitempty"`
}

// announce tells every subscriber of the database about c when tx
// commits, and nobody when it does not.
func (t *txn) announce(ctx context.Context, c Change) error {
	if t.d.notify == "" {
		t.pending = append(t.pending, c)
		return nil
	}
	payload, err := json.Marshal(changePayload(c))
	if err != nil {
		panic("store: marshal change: " + err.Error()) // impossible for a struct of strings
	}
	_, err = t.ExecContext(ctx, t.d.notify, string(payload))
	return err
}

// lock takes the transaction-scoped lock on key that serializes the
// writers of key (d.lockKey); nothing on an engine whose write
// transactions already exclude each other.
func (t *txn) lock(ctx context.Context, key string) error {
	if t.d.lockKey == "" {
		return nil
	}
	_, err := t.ExecContext(ctx, t.d.lockKey, key)
	return err
}

// write runs fn in a write transaction, commits it and then publishes
// what it announced. Every error is mapped (dialect.mapErr).
func (b *backend) write(ctx context.Context, fn func(tx *txn) error) error {
	sqlTx, err := b.w.beginTx(ctx, nil)
	if err != nil {
		return b.d.mapErr(err)
	}
	t := &txn{cachedTx: sqlTx, d: b.d}
	if err := fn(t); err != nil {
		if rbErr := sqlTx.Rollback(); rbErr != nil && !errors.Is(rbErr, sql.ErrTxDone) {
			err = errors.Join(err, rbErr)
		}
		return b.d.mapErr(err)
	}
	if err := sqlTx.Commit(); err != nil {
		return b.d.mapErr(err)
	}
	for _, c := range t.pending {
		b.publish(c)
	}
	b.w.warm(ctx, sqlTx)
	return nil
}

// read runs fn in a read-only transaction that sees one snapshot of the
// database throughout, then ends it.
func (b *backend) read(ctx context.Context, fn func(tx *cachedTx) error) error {
	t, err := b.r.beginTx(ctx, b.d.snapshot)
	if err != nil {
		return b.d.mapErr(err)
	}
	err = fn(t)
	if rbErr := t.Rollback(); rbErr != nil && err == nil {
		err = rbErr
	}
	b.r.warm(ctx, t)
	return b.d.mapErr(err)
}

// migrationLockID is the PostgreSQL advisory lock taken around migrations
// (pg_try_advisory_lock), distinct from goose's default so that another
// goose user of the same database does not wait on Aperio or the reverse.
const migrationLockID int64 = 0x61706572696f // "aperio"

// migrate applies the pending migrations of fsys to db. With a non-nil
// locker the whole run holds it, so concurrent servers take turns and each
// migration is applied once.
func migrate(ctx context.Context, log *slog.Logger, dialect goose.Dialect, db *sql.DB, fsys fs.FS, locker lock.SessionLocker) error {
	opts := []goose.ProviderOption{goose.WithLogger(goose.NopLogger())}
	if locker != nil {
		opts = append(opts, goose.WithSessionLocker(locker))
	}
	p, err := goose.NewProvider(dialect, db, fsys, opts...)
	if err != nil {
		return fmt.Errorf("load migrations: %w", err)
	}
	res, err := p.Up(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	version, err := p.GetDBVersion(ctx)
	if err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	log.Info("store migrated", logkey.Version, version, logkey.Applied, len(res))
	return nil
}
