package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Every query of the store is written once (queries.go), in the SQL that
// both engines accept: $N placeholders (SQLite reads $N as the Nth
// argument, as PostgreSQL does), INSERT … ON CONFLICT … DO UPDATE with
// excluded, and RETURNING. A dialect holds all that still differs, and
// nothing else: two values of it exist, postgresDialect and sqliteDialect.
//
// Values come back through the scanners of columns.go, which accept what
// either driver yields, so a dialect needs to know only how values go in.
type dialect struct {
	// name is what DB.Backend reports.
	name string

	// clock is a statement reading the database's clock, the one clock
	// every server sharing the database decides cluster-wide times by
	// (see DB.Clock).
	clock string

	// forUpdate ends a SELECT whose rows the transaction goes on to
	// change, locking them until it ends. "" on SQLite, where a write
	// transaction (BEGIN IMMEDIATE on the one writer connection) already
	// excludes every other writer.
	forUpdate string
	// lockKey is a statement that takes a lock on the text $1 until the
	// transaction ends, so that writers of one key take turns; "" on
	// SQLite, as for forUpdate.
	lockKey string
	// lockTable returns a statement that locks table against every other
	// writer, readers still admitted, until the transaction ends; "" on
	// SQLite, as for forUpdate.
	lockTable func(table string) string
	// memberOf returns a condition that holds when elem is an element of
	// list, a list column or a parameter given through list.
	memberOf func(elem, list string) string
	// notify is a statement that announces the change $1 (a JSON
	// changePayload) to every listener when the transaction commits. ""
	// means the engine has no such thing, and the store publishes a
	// change to its own subscribers once the transaction has committed
	// (SQLite: only this process writes the file).
	notify string
	// snapshot is how a read transaction sees one snapshot of the
	// database throughout; nil when any transaction does (SQLite in WAL
	// mode).
	snapshot *sql.TxOptions

	// time, day and list turn a time (of a timestamp column), a date (a
	// day column, midnight UTC) and a list of strings into the argument
	// the engine stores.
	time func(time.Time) any
	day  func(time.Time) any
	list func([]string) any

	// err maps a driver's error onto ErrConflict, ErrNotFound (a missing
	// organization) or ErrUnavailable, keeping the driver's error in the
	// chain, or returns it as it is.
	err func(error) error
}

// postgresDialect: times are timestamptz, days date and lists text[], all
// passed to pgx as Go values; changes go out through NOTIFY; locks are row
// locks, advisory locks and LOCK TABLE.
var postgresDialect = dialect{
	name: BackendPostgres,
	// clock_timestamp, not now(): now() is when the transaction began,
	// before it waited for any lock.
	clock:     `SELECT clock_timestamp()`,
	forUpdate: " FOR UPDATE",
	lockKey:   `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`,
	lockTable: func(table string) string { return `LOCK TABLE ` + table + ` IN EXCLUSIVE MODE` },
	memberOf:  func(elem, list string) string { return elem + ` = ANY (` + list + `)` },
	notify:    `SELECT pg_notify('` + pgChannel + `', $1)`,
	// REPEATABLE READ: every statement sees the snapshot of the first.
	snapshot: &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true},
	time:     func(t time.Time) any { return t },
	day:      func(t time.Time) any { return t },
	list:     func(l []string) any { return list(l) }, // never nil: nil would be NULL
	err:      pgErr,
}

// sqliteDialect: times are TEXT in sqliteTime, days TEXT in time.DateOnly
// and lists JSON arrays (see migrations/sqlite); the one writer
// connection serializes every write transaction, so no statement locks.
var sqliteDialect = dialect{
	name: BackendSQLite,
	// The file's one host's clock, in sqliteTime's layout (SQLite keeps
	// milliseconds).
	clock:     `SELECT strftime('%Y-%m-%dT%H:%M:%f000Z', 'now')`,
	lockTable: func(string) string { return "" },
	memberOf:  func(elem, list string) string { return elem + ` IN (SELECT value FROM json_each(` + list + `))` },
	time:      func(t time.Time) any { return t.UTC().Format(sqliteTime) },
	day:       func(t time.Time) any { return t.Format(time.DateOnly) },
	list:      func(l []string) any { return jsonList(l) },
	err:       sqliteErr,
}

// sqliteTime is how SQLite stores times: UTC, fixed width so that text
// order is time order, to the microsecond as PostgreSQL keeps them.
const sqliteTime = "2006-01-02T15:04:05.000000Z"

// jsonList is l as a JSON array, [] for nil.
func jsonList(l []string) string {
	b, err := json.Marshal(list(l))
	if err != nil {
		panic("store: marshal string list: " + err.Error()) // impossible for []string
	}
	return string(b)
}

// pgErr maps PostgreSQL's errors. Anything that says the server could
// not be reached or the connection broke is ErrUnavailable; a cancelled or
// expired ctx stays the caller's own error.
func pgErr(err error) error {
	unavailable := func() error { return fmt.Errorf("%w: %w", ErrUnavailable, err) }
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "23505": // unique_violation
			return fmt.Errorf("%w: %w", ErrConflict, err)
		case pe.Code == "23503": // foreign_key_violation
			return fmt.Errorf("%w: org: %w", ErrNotFound, err)
		case strings.HasPrefix(pe.Code, "08"), // connection_exception
			strings.HasPrefix(pe.Code, "53"), // insufficient_resources (too many connections, disk full)
			pe.Code == "57P01",               // admin_shutdown
			pe.Code == "57P02",               // crash_shutdown
			pe.Code == "57P03":               // cannot_connect_now (starting up, shutting down)
			return unavailable()
		}
		return err
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return unavailable()
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	// database/sql answers driver.ErrBadConn once it has given up on
	// connections the driver found broken.
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, driver.ErrBadConn) || errors.Is(err, pgconn.ErrConnClosed) || pgconn.SafeToRetry(err) {
		return unavailable()
	}
	return err
}

// sqliteErr maps SQLite's errors: a file locked by another process, read
// only, unreadable or full is ErrUnavailable.
func sqliteErr(err error) error {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return err
	}
	switch se.Code() {
	case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
		return fmt.Errorf("%w: %w", ErrConflict, err)
	case sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
		return fmt.Errorf("%w: org: %w", ErrNotFound, err)
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_IOERR,
		sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_FULL, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PROTOCOL,
		sqlite3.SQLITE_NOTADB:
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// mapErr maps any error of a query onto the store's sentinels: no rows is
// ErrNotFound, and the rest is d.err's. Errors already mapped pass as they
// are.
func (d *dialect) mapErr(err error) error {
	switch {
	case err == nil || errors.Is(err, ErrNotFound) || errors.Is(err, ErrConflict) || errors.Is(err, ErrUnavailable):
		return err
	case errors.Is(err, sql.ErrNoRows):
		return ErrNotFound
	}
	return d.err(err)
}

// timeOrNil is d.time(*t), or NULL for nil.
func (d *dialect) timeOrNil(t *time.Time) any {
	if t == nil {
		return nil
	}
	return d.time(*t)
}
