package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pressly/goose/v3"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/migrations"
)

// This file holds every SQLite query of the store.
//
// Conventions (see migrations/sqlite): times are TEXT in sqliteTime; lists
// are JSON arrays; positional parameters are ?N so that the org filter can
// reuse one.

const (
	// sqliteTime is how times are stored: UTC, fixed width so that text
	// order is time order, microseconds like PostgreSQL.
	sqliteTime = "2006-01-02T15:04:05.000000Z"
	// sqliteBusyTimeout is how long a statement waits for another
	// process's lock before failing with SQLITE_BUSY (ErrUnavailable).
	// Within one DB writes never contend: they share one connection.
	sqliteBusyTimeout = 10 * time.Second
	// sqliteReaders is the size of the read-only connection pool; WAL
	// lets readers run beside the writer.
	sqliteReaders = 4
)

// sqliteBackend keeps one writer connection, so that this process's writes
// queue in Go instead of failing with SQLITE_BUSY, and a pool of read-only
// connections.
type sqliteBackend struct {
	w       *sql.DB // one connection; every write and every transaction
	r       *sql.DB // query_only connections for reads
	publish func(Change)
}

func openSQLite(ctx context.Context, cfg Config, h *hub) (*sqliteBackend, error) {
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

	w, err := sql.Open("sqlite", name+"?_txlock=immediate&_busy_timeout="+busy+
		"&_foreign_keys=1&_journal_mode=WAL&_synchronous=NORMAL")
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetConnMaxIdleTime(0) // keep it: it holds the pragmas and the WAL open
	b := &sqliteBackend{w: w, publish: h.publish}
	if err := w.PingContext(ctx); err != nil {
		return nil, errors.Join(opError("open "+path, sqliteErr(err)), w.Close())
	}
	if err := migrate(ctx, cfg.Logger, goose.DialectSQLite3, w, migrations.SQLite(), nil); err != nil {
		if errors.Is(sqliteErr(err), ErrUnavailable) {
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
	b.r = r
	cfg.Logger.Info("store opened", logkey.Backend, BackendSQLite, logkey.Path, path)
	return b, nil
}

// openSQLiteReadOnly opens the existing database at path through dsn, a
// read-only URI: one pool serves as reader and writer, so that every write
// fails with SQLITE_READONLY (ErrUnavailable) instead of touching the file.
func openSQLiteReadOnly(ctx context.Context, cfg Config, path, dsn string) (*sqliteBackend, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("store: open %s read-only: %w", path, err)
	}
	r, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	r.SetMaxOpenConns(sqliteReaders)
	if err := r.PingContext(ctx); err != nil {
		return nil, errors.Join(opError("open "+path, sqliteErr(err)), r.Close())
	}
	cfg.Logger.Info("store opened read-only", logkey.Backend, BackendSQLite, logkey.Path, path)
	return &sqliteBackend{w: r, r: r, publish: func(Change) {}}, nil
}

func (b *sqliteBackend) name() string { return BackendSQLite }

func (b *sqliteBackend) ping(ctx context.Context) error {
	return sqliteErr(b.r.PingContext(ctx))
}

func (b *sqliteBackend) close() error {
	return errors.Join(b.r.Close(), b.w.Close()) // the same pool when read-only: sql.DB.Close is idempotent
}

// sqliteErr maps driver errors onto the store's sentinels, keeping the
// driver's error in the chain.
func sqliteErr(err error) error {
	if err == nil || errors.Is(err, ErrNotFound) || errors.Is(err, ErrConflict) || errors.Is(err, ErrUnavailable) {
		return err
	}
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
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

// write runs fn in a write transaction (BEGIN IMMEDIATE, on the writer
// connection) and commits it.
func (b *sqliteBackend) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := b.w.BeginTx(ctx, nil)
	if err != nil {
		return sqliteErr(err)
	}
	if err := fn(tx); err != nil {
		if rbErr := tx.Rollback(); rbErr != nil && !errors.Is(rbErr, sql.ErrTxDone) {
			err = errors.Join(err, rbErr)
		}
		return sqliteErr(err)
	}
	return sqliteErr(tx.Commit())
}

func sqliteFormat(t time.Time) string { return t.UTC().Format(sqliteTime) }

func sqliteFormatPtr(t *time.Time) sql.NullString {
	if t == nil {
		return sql.NullString{}
	}
	return sql.NullString{String: sqliteFormat(*t), Valid: true}
}

func sqliteParse(s string) (time.Time, error) {
	t, err := time.Parse(sqliteTime, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("stored time %q: %w", s, err)
	}
	return t, nil
}

func sqliteParsePtr(s sql.NullString) (*time.Time, error) {
	if !s.Valid {
		return nil, nil
	}
	t, err := sqliteParse(s.String)
	if err != nil {
		return nil, err
	}
	return &t, nil
}

func sqliteList(l []string) string {
	b, err := json.Marshal(list(l))
	if err != nil {
		panic("store: marshal string list: " + err.Error()) // impossible for []string
	}
	return string(b)
}

func sqliteParseList(s string) ([]string, error) {
	l := []string{}
	if err := json.Unmarshal([]byte(s), &l); err != nil {
		return nil, fmt.Errorf("stored list %q: %w", s, err)
	}
	return l, nil
}

// scanner is *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

// Orgs.

const sqliteOrgCols = `id, name, created_at, monthly_max_bytes, max_clients, max_tokens, max_admin_keys`

func sqliteScanOrg(s scanner) (Org, error) {
	var o Org
	var created string
	if err := s.Scan(&o.ID, &o.Name, &created, &o.Limits.MonthlyMaxBytes, &o.Limits.MaxClients,
		&o.Limits.MaxTokens, &o.Limits.MaxAdminKeys); err != nil {
		return Org{}, sqliteErr(err)
	}
	var err error
	o.CreatedAt, err = sqliteParse(created)
	return o, err
}

func (b *sqliteBackend) ensureOrg(ctx context.Context, o Org) (Org, error) {
	_, err := b.w.ExecContext(ctx,
		`INSERT INTO orgs (id, name, created_at) VALUES (?1, ?2, ?3) ON CONFLICT (name) DO NOTHING`,
		o.ID, o.Name, sqliteFormat(o.CreatedAt))
	if err != nil {
		return Org{}, sqliteErr(err)
	}
	return sqliteScanOrg(b.r.QueryRowContext(ctx, `SELECT `+sqliteOrgCols+` FROM orgs WHERE name = ?1`, o.Name))
}

func (b *sqliteBackend) insertOrg(ctx context.Context, o Org) error {
	_, err := b.w.ExecContext(ctx,
		`INSERT INTO orgs (id, name, created_at) VALUES (?1, ?2, ?3)`,
		o.ID, o.Name, sqliteFormat(o.CreatedAt))
	return sqliteErr(err)
}

func (b *sqliteBackend) org(ctx context.Context, id string) (Org, error) {
	return sqliteScanOrg(b.r.QueryRowContext(ctx, `SELECT `+sqliteOrgCols+` FROM orgs WHERE id = ?1`, id))
}

func (b *sqliteBackend) listOrgs(ctx context.Context) ([]Org, error) {
	rows, err := b.r.QueryContext(ctx, `SELECT `+sqliteOrgCols+` FROM orgs ORDER BY created_at DESC, seq DESC`)
	if err != nil {
		return nil, sqliteErr(err)
	}
	return sqliteCollect(rows, sqliteScanOrg)
}

func (b *sqliteBackend) setOrgLimits(ctx context.Context, id string, l OrgLimits) (Org, error) {
	var o Org
	err := b.write(ctx, func(tx *sql.Tx) error {
		var err error
		o, err = sqliteScanOrg(tx.QueryRowContext(ctx,
			`UPDATE orgs SET monthly_max_bytes = ?2, max_clients = ?3, max_tokens = ?4, max_admin_keys = ?5
			WHERE id = ?1 RETURNING `+sqliteOrgCols, id, l.MonthlyMaxBytes, l.MaxClients, l.MaxTokens, l.MaxAdminKeys))
		return err
	})
	if err != nil {
		return Org{}, err
	}
	b.publish(Change{Kind: ChangeOrgLimits, OrgID: o.ID})
	return o, nil
}

// sqliteCheckCap returns ErrLimit when the organization's cap (the orgs
// column capCol) is set and count, a query of ?1 (the org) and ?2 (now),
// reaches it; ErrNotFound when there is no such organization. It runs in
// the write transaction of the insert, which on SQLite is the only writer.
func sqliteCheckCap(ctx context.Context, tx *sql.Tx, orgID, capCol, count string, now time.Time) error {
	var capN int
	if err := tx.QueryRowContext(ctx, `SELECT `+capCol+` FROM orgs WHERE id = ?1`, orgID).Scan(&capN); err != nil {
		return err
	}
	if capN == 0 {
		return nil
	}
	var n int
	if err := tx.QueryRowContext(ctx, count, orgID, sqliteFormat(now)).Scan(&n); err != nil {
		return err
	}
	if n >= capN {
		return fmt.Errorf("%w: %s %d", ErrLimit, capCol, capN)
	}
	return nil
}

// sqliteCollect scans every row and closes rows. The result is never nil.
func sqliteCollect[T any](rows *sql.Rows, scan func(scanner) (T, error)) ([]T, error) {
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, sqliteErr(err)
	}
	return out, nil
}

// Tokens.

const sqliteTokenCols = `id, org_id, name, prefix, hash, hostnames, allowed_ips, expires_at, revoked_at, created_at, created_by, allow_catch_all, ` +
	`max_rps, daily_max_bytes, max_connections, paths, client_allowed_ips, generation, prev_hash, prev_expires_at, expiry_warned, allow_tcp_ports`

func sqliteScanToken(s scanner) (Token, error) {
	var (
		t                     Token
		hostnames, allowedIPs string
		paths, clientIPs      string
		tcpPorts              string
		expires, revoked      sql.NullString
		prevExpires           sql.NullString
		created               string
	)
	if err := s.Scan(&t.ID, &t.OrgID, &t.Name, &t.Prefix, &t.Hash, &hostnames, &allowedIPs,
		&expires, &revoked, &created, &t.CreatedBy, &t.AllowCatchAll,
		&t.Limits.MaxRPS, &t.Limits.DailyMaxBytes, &t.Limits.MaxConnections, &paths, &clientIPs,
		&t.Generation, &t.PrevHash, &prevExpires, &t.ExpiryWarned, &tcpPorts); err != nil {
		return Token{}, sqliteErr(err)
	}
	var errs [9]error
	t.Hostnames, errs[0] = sqliteParseList(hostnames)
	t.AllowedIPs, errs[1] = sqliteParseList(allowedIPs)
	t.ExpiresAt, errs[2] = sqliteParsePtr(expires)
	t.RevokedAt, errs[3] = sqliteParsePtr(revoked)
	t.CreatedAt, errs[4] = sqliteParse(created)
	t.Limits.Paths, errs[5] = sqliteParseList(paths)
	t.Limits.ClientAllowedIPs, errs[6] = sqliteParseList(clientIPs)
	t.PrevExpiresAt, errs[7] = sqliteParsePtr(prevExpires)
	t.Limits.AllowTCPPorts, errs[8] = sqliteParseList(tcpPorts)
	if err := errors.Join(errs[:]...); err != nil {
		return Token{}, fmt.Errorf("token %s: %w", t.ID, err)
	}
	return t, nil
}

func (b *sqliteBackend) insertToken(ctx context.Context, t Token, now time.Time) error {
	return b.write(ctx, func(tx *sql.Tx) error {
		err := sqliteCheckCap(ctx, tx, t.OrgID, "max_tokens",
			`SELECT count(*) FROM tokens WHERE org_id = ?1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?2)`, now)
		if err != nil {
			return err
		}
		l := t.Limits
		_, err = tx.ExecContext(ctx,
			`INSERT INTO tokens (`+sqliteTokenCols+`) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, 0, NULL, NULL, 0, ?18)`,
			t.ID, t.OrgID, t.Name, t.Prefix, t.Hash, sqliteList(t.Hostnames), sqliteList(t.AllowedIPs),
			sqliteFormatPtr(t.ExpiresAt), sqliteFormatPtr(t.RevokedAt), sqliteFormat(t.CreatedAt), t.CreatedBy, t.AllowCatchAll,
			l.MaxRPS, l.DailyMaxBytes, l.MaxConnections, sqliteList(l.Paths), sqliteList(l.ClientAllowedIPs), sqliteList(l.AllowTCPPorts))
		return err
	})
}

func (b *sqliteBackend) tokenByHash(ctx context.Context, hash []byte) (Token, error) {
	return sqliteScanToken(b.r.QueryRowContext(ctx,
		`SELECT `+sqliteTokenCols+` FROM tokens WHERE hash = ?1 UNION ALL SELECT `+sqliteTokenCols+` FROM tokens WHERE prev_hash = ?1 LIMIT 1`, hash))
}

func (b *sqliteBackend) updateToken(ctx context.Context, orgID, id string, e TokenEdit) (Token, error) {
	t, err := b.editToken(ctx, orgID, id, func(tx *sql.Tx) error {
		l := e.Limits
		_, err := tx.ExecContext(ctx,
			`UPDATE tokens SET name = ?3, hostnames = ?4, allowed_ips = ?5,
			expiry_warned = CASE WHEN expires_at IS ?6 THEN expiry_warned ELSE 0 END, expires_at = ?6,
			allow_catch_all = ?7, max_rps = ?8, daily_max_bytes = ?9, max_connections = ?10, paths = ?11, client_allowed_ips = ?12, allow_tcp_ports = ?13
			WHERE id = ?1 AND (?2 = '' OR org_id = ?2)`,
			id, orgID, e.Name, sqliteList(e.Hostnames), sqliteList(e.AllowedIPs), sqliteFormatPtr(e.ExpiresAt),
			e.AllowCatchAll, l.MaxRPS, l.DailyMaxBytes, l.MaxConnections, sqliteList(l.Paths), sqliteList(l.ClientAllowedIPs), sqliteList(l.AllowTCPPorts))
		return err
	})
	return t, err
}

func (b *sqliteBackend) rotateToken(ctx context.Context, orgID, id string, hash []byte, prefix string, graceEnds time.Time) (Token, error) {
	return b.editToken(ctx, orgID, id, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx,
			`UPDATE tokens SET prev_hash = hash, prev_expires_at = ?5, hash = ?3, prefix = ?4, generation = generation + 1
			WHERE id = ?1 AND (?2 = '' OR org_id = ?2)`, id, orgID, hash, prefix, sqliteFormat(graceEnds))
		return err
	})
}

// editToken runs change on a token that exists in orgID and is not
// revoked, in one transaction, and publishes ChangeTokenUpdated.
func (b *sqliteBackend) editToken(ctx context.Context, orgID, id string, change func(tx *sql.Tx) error) (Token, error) {
	var t Token
	err := b.write(ctx, func(tx *sql.Tx) error {
		cur, err := sqliteScanToken(tx.QueryRowContext(ctx,
			`SELECT `+sqliteTokenCols+` FROM tokens WHERE id = ?1 AND (?2 = '' OR org_id = ?2)`, id, orgID))
		if err != nil {
			return err
		}
		if cur.RevokedAt != nil {
			return fmt.Errorf("%w: token %s is revoked", ErrConflict, id)
		}
		if err := change(tx); err != nil {
			return err
		}
		t, err = sqliteScanToken(tx.QueryRowContext(ctx, `SELECT `+sqliteTokenCols+` FROM tokens WHERE id = ?1`, id))
		return err
	})
	if err != nil {
		return Token{}, err
	}
	b.publish(Change{Kind: ChangeTokenUpdated, ID: t.ID, OrgID: t.OrgID})
	return t, nil
}

func (b *sqliteBackend) tokensExpiring(ctx context.Context, now, by time.Time) ([]Token, error) {
	rows, err := b.r.QueryContext(ctx,
		`SELECT `+sqliteTokenCols+` FROM tokens WHERE revoked_at IS NULL AND expires_at > ?1 AND expires_at <= ?2 ORDER BY expires_at, seq`,
		sqliteFormat(now), sqliteFormat(by))
	if err != nil {
		return nil, sqliteErr(err)
	}
	return sqliteCollect(rows, sqliteScanToken)
}

func (b *sqliteBackend) claimExpiryWarning(ctx context.Context, id string, expiresAt time.Time, bit int) (bool, error) {
	res, err := b.w.ExecContext(ctx,
		`UPDATE tokens SET expiry_warned = expiry_warned | ?3 WHERE id = ?1 AND expires_at = ?2 AND expiry_warned & ?3 = 0`,
		id, sqliteFormat(expiresAt), bit)
	if err != nil {
		return false, sqliteErr(err)
	}
	n, err := res.RowsAffected()
	return n == 1, sqliteErr(err)
}

func (b *sqliteBackend) token(ctx context.Context, orgID, id string) (Token, error) {
	return sqliteScanToken(b.r.QueryRowContext(ctx,
		`SELECT `+sqliteTokenCols+` FROM tokens WHERE id = ?1 AND (?2 = '' OR org_id = ?2)`, id, orgID))
}

func (b *sqliteBackend) listTokens(ctx context.Context, orgID string) ([]Token, error) {
	rows, err := b.r.QueryContext(ctx,
		`SELECT `+sqliteTokenCols+` FROM tokens WHERE (?1 = '' OR org_id = ?1) ORDER BY created_at DESC, seq DESC`, orgID)
	if err != nil {
		return nil, sqliteErr(err)
	}
	return sqliteCollect(rows, sqliteScanToken)
}

func (b *sqliteBackend) revokeToken(ctx context.Context, orgID, id string, at time.Time) (Token, error) {
	var (
		t       Token
		changed bool
	)
	err := b.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx,
			`UPDATE tokens SET revoked_at = ?3 WHERE id = ?1 AND (?2 = '' OR org_id = ?2) AND revoked_at IS NULL`,
			id, orgID, sqliteFormat(at))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		changed = n == 1
		t, err = sqliteScanToken(tx.QueryRowContext(ctx,
			`SELECT `+sqliteTokenCols+` FROM tokens WHERE id = ?1 AND (?2 = '' OR org_id = ?2)`, id, orgID))
		return err
	})
	if err != nil {
		return Token{}, err
	}
	if changed {
		b.publish(Change{Kind: ChangeTokenRevoked, ID: t.ID, OrgID: t.OrgID})
	}
	return t, nil
}

// Admin keys.

const sqliteAdminKeyCols = `id, org_id, name, role, prefix, hash, created_at, created_by, expires_at`

func sqliteScanAdminKey(s scanner) (AdminKey, error) {
	var (
		k       AdminKey
		created string
		expires sql.NullString
	)
	if err := s.Scan(&k.ID, &k.OrgID, &k.Name, &k.Role, &k.Prefix, &k.Hash, &created, &k.CreatedBy, &expires); err != nil {
		return AdminKey{}, sqliteErr(err)
	}
	var errs [2]error
	k.CreatedAt, errs[0] = sqliteParse(created)
	k.ExpiresAt, errs[1] = sqliteParsePtr(expires)
	return k, errors.Join(errs[:]...)
}

func (b *sqliteBackend) insertAdminKey(ctx context.Context, k AdminKey, now time.Time) error {
	return b.write(ctx, func(tx *sql.Tx) error {
		err := sqliteCheckCap(ctx, tx, k.OrgID, "max_admin_keys",
			`SELECT count(*) FROM admin_keys WHERE org_id = ?1 AND (expires_at IS NULL OR expires_at > ?2)`, now)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx,
			`INSERT INTO admin_keys (`+sqliteAdminKeyCols+`) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)`,
			k.ID, k.OrgID, k.Name, k.Role, k.Prefix, k.Hash, sqliteFormat(k.CreatedAt), k.CreatedBy, sqliteFormatPtr(k.ExpiresAt))
		return err
	})
}

func (b *sqliteBackend) adminKeyByHash(ctx context.Context, hash []byte) (AdminKey, error) {
	return sqliteScanAdminKey(b.r.QueryRowContext(ctx, `SELECT `+sqliteAdminKeyCols+` FROM admin_keys WHERE hash = ?1`, hash))
}

func (b *sqliteBackend) listAdminKeys(ctx context.Context, orgID string) ([]AdminKey, error) {
	rows, err := b.r.QueryContext(ctx,
		`SELECT `+sqliteAdminKeyCols+` FROM admin_keys WHERE (?1 = '' OR org_id = ?1) ORDER BY created_at DESC, seq DESC`, orgID)
	if err != nil {
		return nil, sqliteErr(err)
	}
	return sqliteCollect(rows, sqliteScanAdminKey)
}

func (b *sqliteBackend) adminKey(ctx context.Context, orgID, id string) (AdminKey, error) {
	return sqliteScanAdminKey(b.r.QueryRowContext(ctx,
		`SELECT `+sqliteAdminKeyCols+` FROM admin_keys WHERE id = ?1 AND (?2 = '' OR org_id = ?2)`, id, orgID))
}

func (b *sqliteBackend) deleteAdminKey(ctx context.Context, orgID, id string) error {
	var keyOrg string
	err := b.write(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx,
			`DELETE FROM admin_keys WHERE id = ?1 AND (?2 = '' OR org_id = ?2) RETURNING org_id`, id, orgID).Scan(&keyOrg)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM admin_sessions WHERE key_id = ?1 AND master = 0`, id)
		return err
	})
	if err != nil {
		return err
	}
	b.publish(Change{Kind: ChangeAdminKeyDeleted, ID: id, OrgID: keyOrg})
	return nil
}

// Admin sessions.

const sqliteAdminSessionCols = `id, key_id, master, org_id, csrf, created_at, expires_at, remote_addr`

func sqliteScanAdminSession(s scanner) (AdminSession, error) {
	var (
		a                AdminSession
		created, expires string
	)
	if err := s.Scan(&a.Hash, &a.KeyID, &a.Master, &a.OrgID, &a.CSRF, &created, &expires, &a.RemoteAddr); err != nil {
		return AdminSession{}, sqliteErr(err)
	}
	var errs [2]error
	a.CreatedAt, errs[0] = sqliteParse(created)
	a.ExpiresAt, errs[1] = sqliteParse(expires)
	return a, errors.Join(errs[:]...)
}

func (b *sqliteBackend) insertAdminSession(ctx context.Context, s AdminSession, keep int) error {
	return b.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx,
			`INSERT INTO admin_sessions (`+sqliteAdminSessionCols+`) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)`,
			s.Hash, s.KeyID, s.Master, s.OrgID, s.CSRF, sqliteFormat(s.CreatedAt), sqliteFormat(s.ExpiresAt), s.RemoteAddr)
		if err != nil {
			return err
		}
		// SQLite has one writer: nobody inserts between the two.
		_, err = tx.ExecContext(ctx,
			`DELETE FROM admin_sessions WHERE key_id = ?1 AND master = ?2 AND seq NOT IN
				(SELECT seq FROM admin_sessions WHERE key_id = ?1 AND master = ?2 ORDER BY seq DESC LIMIT ?3)`,
			s.KeyID, s.Master, keep)
		return err
	})
}

func (b *sqliteBackend) adminSessionByHash(ctx context.Context, hash []byte) (AdminSession, error) {
	return sqliteScanAdminSession(b.r.QueryRowContext(ctx,
		`SELECT `+sqliteAdminSessionCols+` FROM admin_sessions WHERE id = ?1`, hash))
}

func (b *sqliteBackend) deleteAdminSession(ctx context.Context, hash []byte) error {
	res, err := b.w.ExecContext(ctx, `DELETE FROM admin_sessions WHERE id = ?1`, hash)
	if err != nil {
		return sqliteErr(err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return sqliteErr(err)
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}

func (b *sqliteBackend) deleteExpiredAdminSessions(ctx context.Context, now time.Time) (int64, error) {
	res, err := b.w.ExecContext(ctx, `DELETE FROM admin_sessions WHERE expires_at <= ?1`, sqliteFormat(now))
	if err != nil {
		return 0, sqliteErr(err)
	}
	n, err := res.RowsAffected()
	return n, sqliteErr(err)
}

// Maintenance.

func (b *sqliteBackend) setMaintenance(ctx context.Context, m Maintenance) error {
	// The WHERE makes the upsert a no-op when another org holds the
	// hostname; no row changed then means conflict.
	res, err := b.w.ExecContext(ctx,
		`INSERT INTO maintenance (hostname, org_id, set_by, since, reason, expires_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
		ON CONFLICT (hostname) DO UPDATE SET set_by = excluded.set_by, since = excluded.since,
			reason = excluded.reason, expires_at = excluded.expires_at
		WHERE maintenance.org_id = excluded.org_id`,
		m.Hostname, m.OrgID, m.By, sqliteFormat(m.Since), m.Reason, sqliteFormatPtr(m.ExpiresAt))
	if err != nil {
		return sqliteErr(err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return sqliteErr(err)
	}
	if n == 0 {
		return fmt.Errorf("hostname in maintenance for another org: %w", ErrConflict)
	}
	b.publish(Change{Kind: ChangeMaintenanceSet, OrgID: m.OrgID, Hostname: m.Hostname})
	return nil
}

func (b *sqliteBackend) clearMaintenance(ctx context.Context, orgID, hostname string) error {
	var org string
	err := b.w.QueryRowContext(ctx,
		`DELETE FROM maintenance WHERE hostname = ?1 AND (?2 = '' OR org_id = ?2) RETURNING org_id`,
		hostname, orgID).Scan(&org)
	if err != nil {
		return sqliteErr(err)
	}
	b.publish(Change{Kind: ChangeMaintenanceCleared, OrgID: org, Hostname: hostname})
	return nil
}

func (b *sqliteBackend) listMaintenance(ctx context.Context) ([]Maintenance, error) {
	rows, err := b.r.QueryContext(ctx,
		`SELECT hostname, org_id, set_by, since, reason, expires_at FROM maintenance ORDER BY since DESC, hostname`)
	if err != nil {
		return nil, sqliteErr(err)
	}
	return sqliteCollect(rows, func(s scanner) (Maintenance, error) {
		var (
			m       Maintenance
			since   string
			expires sql.NullString
		)
		if err := s.Scan(&m.Hostname, &m.OrgID, &m.By, &since, &m.Reason, &expires); err != nil {
			return Maintenance{}, sqliteErr(err)
		}
		var err error
		if m.Since, err = sqliteParse(since); err != nil {
			return m, err
		}
		m.ExpiresAt, err = sqliteParsePtr(expires)
		return m, err
	})
}

// Scaling records.

const sqliteScalingCols = `id, org_id, hostname, path, url, secret, min_instances, max_instances,
	cold_start_ms, window_ms, cooldown_ms, target_utilization, armed_by, conflict, disarmed,
	consecutive_failures, last_call_at, last_reason, last_status, created_at, updated_at,
	last_error, next_call_at, penalty_until`

// sqliteScalingArgs are r's values in sqliteScalingCols order, as ?1…?24.
func sqliteScalingArgs(r ScalingRecord) []any {
	return []any{r.ID, r.OrgID, r.Hostname, r.Path, r.URL, r.Secret, r.Min, r.Max,
		r.ColdStart.Milliseconds(), r.Window.Milliseconds(), r.Cooldown.Milliseconds(), r.TargetUtilization,
		sqliteList(r.ArmedBy), r.Conflict, r.Disarmed,
		r.ConsecutiveFailures, sqliteFormatPtr(r.LastCallAt), r.LastReason, r.LastStatus,
		sqliteFormat(r.CreatedAt), sqliteFormat(r.UpdatedAt),
		r.LastError, sqliteFormatPtr(r.NextCallAt), sqliteFormatPtr(r.PenaltyUntil)}
}

func sqliteScanScaling(s scanner) (ScalingRecord, error) {
	var (
		r                           ScalingRecord
		coldStart, window, cooldown int64
		armedBy, created, updated   string
		lastCall, nextCall, penalty sql.NullString
	)
	if err := s.Scan(&r.ID, &r.OrgID, &r.Hostname, &r.Path, &r.URL, &r.Secret, &r.Min, &r.Max,
		&coldStart, &window, &cooldown, &r.TargetUtilization, &armedBy, &r.Conflict, &r.Disarmed,
		&r.ConsecutiveFailures, &lastCall, &r.LastReason, &r.LastStatus, &created, &updated,
		&r.LastError, &nextCall, &penalty); err != nil {
		return ScalingRecord{}, sqliteErr(err)
	}
	r.ColdStart = time.Duration(coldStart) * time.Millisecond
	r.Window = time.Duration(window) * time.Millisecond
	r.Cooldown = time.Duration(cooldown) * time.Millisecond
	var errs [6]error
	r.ArmedBy, errs[0] = sqliteParseList(armedBy)
	r.LastCallAt, errs[1] = sqliteParsePtr(lastCall)
	r.CreatedAt, errs[2] = sqliteParse(created)
	r.UpdatedAt, errs[3] = sqliteParse(updated)
	r.NextCallAt, errs[4] = sqliteParsePtr(nextCall)
	r.PenaltyUntil, errs[5] = sqliteParsePtr(penalty)
	if err := errors.Join(errs[:]...); err != nil {
		return ScalingRecord{}, fmt.Errorf("scaling record %s: %w", r.ID, err)
	}
	return r, nil
}

func (b *sqliteBackend) declareScaling(ctx context.Context, fresh ScalingRecord, armer string, rearm bool) (ScalingRecord, bool, error) {
	var (
		rec     ScalingRecord
		changed bool
	)
	// The write transaction (BEGIN IMMEDIATE) holds the database's write
	// lock from the read to the write, so another DB on the same file
	// declaring the same bind waits for this one and then merges into it.
	err := b.write(ctx, func(tx *sql.Tx) error {
		old, err := sqliteScanScaling(tx.QueryRowContext(ctx,
			`SELECT `+sqliteScalingCols+` FROM scaling_records WHERE org_id = ?1 AND hostname = ?2 AND path = ?3`,
			fresh.OrgID, fresh.Hostname, fresh.Path))
		switch {
		case errors.Is(err, ErrNotFound):
			rec, changed = fresh, true
			_, err = tx.ExecContext(ctx, `INSERT INTO scaling_records (`+sqliteScalingCols+`)
				VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24)`,
				sqliteScalingArgs(rec)...)
			return err
		case err != nil:
			return err
		}
		rec, changed = mergeScaling(old, fresh, armer, rearm)
		// Every declared and breaker column and next_call_at; ?2…?4,
		// ?17…?20, ?22 and ?24 (the key, created_at and the rest of the
		// call state) go unused.
		_, err = tx.ExecContext(ctx, `UPDATE scaling_records SET url = ?5, secret = ?6,
			min_instances = ?7, max_instances = ?8, cold_start_ms = ?9, window_ms = ?10, cooldown_ms = ?11,
			target_utilization = ?12, armed_by = ?13, conflict = ?14, disarmed = ?15,
			consecutive_failures = ?16, updated_at = ?21, next_call_at = ?23
			WHERE id = ?1`, sqliteScalingArgs(rec)...)
		return err
	})
	if err != nil {
		return ScalingRecord{}, false, err
	}
	b.publish(scalingChange(ChangeScalingUpdated, rec))
	return rec, changed, nil
}

func (b *sqliteBackend) scalingRecord(ctx context.Context, orgID, id string) (ScalingRecord, error) {
	return sqliteScanScaling(b.r.QueryRowContext(ctx,
		`SELECT `+sqliteScalingCols+` FROM scaling_records WHERE id = ?1 AND (?2 = '' OR org_id = ?2)`, id, orgID))
}

func (b *sqliteBackend) scalingRecordByBind(ctx context.Context, orgID, hostname, path string) (ScalingRecord, error) {
	return sqliteScanScaling(b.r.QueryRowContext(ctx,
		`SELECT `+sqliteScalingCols+` FROM scaling_records WHERE hostname = ?2 AND path = ?3 AND (?1 = '' OR org_id = ?1)
		ORDER BY updated_at DESC, seq DESC LIMIT 1`, orgID, hostname, path))
}

func (b *sqliteBackend) listScalingRecords(ctx context.Context, orgID string) ([]ScalingRecord, error) {
	rows, err := b.r.QueryContext(ctx,
		`SELECT `+sqliteScalingCols+` FROM scaling_records WHERE (?1 = '' OR org_id = ?1) ORDER BY updated_at DESC, seq DESC`, orgID)
	if err != nil {
		return nil, sqliteErr(err)
	}
	return sqliteCollect(rows, sqliteScanScaling)
}

func (b *sqliteBackend) recordScalingCall(ctx context.Context, id string, c ScalingCall) (ScalingRecord, error) {
	var rec ScalingRecord
	err := b.write(ctx, func(tx *sql.Tx) error {
		var err error
		rec, err = sqliteScanScaling(tx.QueryRowContext(ctx,
			`UPDATE scaling_records SET last_call_at = ?2, last_reason = ?3, last_status = ?4,
			consecutive_failures = ?5, disarmed = ?6, last_error = ?7, next_call_at = ?8, penalty_until = ?9
			WHERE id = ?1 RETURNING `+sqliteScalingCols,
			id, sqliteFormat(c.At), c.Reason, c.Status, c.ConsecutiveFailures, c.Disarmed, c.Err,
			sqliteFormatPtr(timePtr(c.NextCallAt)), sqliteFormatPtr(timePtr(c.PenaltyUntil))))
		if err != nil || c.Holder == "" {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM scaling_leases WHERE record_id = ?1 AND holder = ?2`, id, c.Holder)
		return err
	})
	if err != nil {
		return ScalingRecord{}, err
	}
	b.publish(scalingChange(callChangeKind(c), rec))
	return rec, nil
}

func (b *sqliteBackend) acquireScalingLease(ctx context.Context, want ScalingLease) (ScalingLease, ScalingRecord, bool, error) {
	var (
		got ScalingLease
		rec ScalingRecord
		ok  bool
	)
	// The write transaction holds the database's write lock from the
	// reads to the write: attempts on the record take turns.
	err := b.write(ctx, func(tx *sql.Tx) error {
		var err error
		rec, err = sqliteScanScaling(tx.QueryRowContext(ctx,
			`SELECT `+sqliteScalingCols+` FROM scaling_records WHERE id = ?1`, want.RecordID))
		if err != nil {
			return err
		}
		var held *ScalingLease
		var h ScalingLease
		var acquired, expires string
		err = tx.QueryRowContext(ctx, `SELECT holder, reason, current_instances, desired_instances, idempotency_key,
			acquired_at, expires_at FROM scaling_leases WHERE record_id = ?1`, want.RecordID).
			Scan(&h.Holder, &h.Reason, &h.Current, &h.Desired, &h.IdempotencyKey, &acquired, &expires)
		switch err = sqliteErr(err); {
		case err == nil:
			h.RecordID = want.RecordID
			var errs [2]error
			h.AcquiredAt, errs[0] = sqliteParse(acquired)
			h.ExpiresAt, errs[1] = sqliteParse(expires)
			if err := errors.Join(errs[:]...); err != nil {
				return fmt.Errorf("scaling lease %s: %w", want.RecordID, err)
			}
			held = &h
		case !errors.Is(err, ErrNotFound):
			return err
		}
		got, ok = leaseVerdict(rec, held, want)
		if !ok {
			return nil
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO scaling_leases (record_id, holder, reason, current_instances,
			desired_instances, idempotency_key, acquired_at, expires_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
			ON CONFLICT (record_id) DO UPDATE SET holder = ?2, reason = ?3, current_instances = ?4,
			desired_instances = ?5, idempotency_key = ?6, acquired_at = ?7, expires_at = ?8`,
			got.RecordID, got.Holder, got.Reason, got.Current, got.Desired, got.IdempotencyKey,
			sqliteFormat(got.AcquiredAt), sqliteFormat(got.ExpiresAt))
		return err
	})
	if err != nil {
		return ScalingLease{}, ScalingRecord{}, false, err
	}
	return got, rec, ok, nil
}

func (b *sqliteBackend) deleteScalingRecord(ctx context.Context, orgID, id string) error {
	r := ScalingRecord{ID: id}
	err := b.w.QueryRowContext(ctx,
		`DELETE FROM scaling_records WHERE id = ?1 AND (?2 = '' OR org_id = ?2) RETURNING org_id, hostname`,
		id, orgID).Scan(&r.OrgID, &r.Hostname)
	if err != nil {
		return sqliteErr(err)
	}
	b.publish(scalingChange(ChangeScalingDeleted, r))
	return nil
}

func (b *sqliteBackend) releaseScalingArmer(ctx context.Context, armer string) ([]string, error) {
	var (
		ids     []string
		changes []Change
	)
	err := b.write(ctx, func(tx *sql.Tx) error {
		ids, changes = []string{}, nil
		// In ID order, the order PostgreSQL locks and announces them in.
		rows, err := tx.QueryContext(ctx, `SELECT `+sqliteScalingCols+` FROM scaling_records
			WHERE EXISTS (SELECT 1 FROM json_each(armed_by) WHERE value = ?1) ORDER BY id`, armer)
		if err != nil {
			return err
		}
		armed, err := sqliteCollect(rows, sqliteScanScaling)
		if err != nil {
			return err
		}
		for _, r := range armed {
			r.ArmedBy = releaseArmer(r.ArmedBy, armer)
			kind := ChangeScalingUpdated
			if len(r.ArmedBy) == 0 {
				kind = ChangeScalingDeleted
				_, err = tx.ExecContext(ctx, `DELETE FROM scaling_records WHERE id = ?1`, r.ID)
				ids = append(ids, r.ID)
			} else {
				_, err = tx.ExecContext(ctx, `UPDATE scaling_records SET armed_by = ?2 WHERE id = ?1`, r.ID, sqliteList(r.ArmedBy))
			}
			if err != nil {
				return err
			}
			changes = append(changes, scalingChange(kind, r))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, c := range changes {
		b.publish(c)
	}
	return ids, nil
}

func (b *sqliteBackend) deleteStaleScalingRecords(ctx context.Context, cutoff time.Time) ([]string, error) {
	var deleted []ScalingRecord
	err := b.write(ctx, func(tx *sql.Tx) error {
		// RETURNING gives no order: sort to announce in ID order, as
		// PostgreSQL does.
		rows, err := tx.QueryContext(ctx,
			`DELETE FROM scaling_records WHERE updated_at < ?1 RETURNING id, org_id, hostname`, sqliteFormat(cutoff))
		if err != nil {
			return err
		}
		deleted, err = sqliteCollect(rows, func(s scanner) (ScalingRecord, error) {
			var r ScalingRecord
			return r, sqliteErr(s.Scan(&r.ID, &r.OrgID, &r.Hostname))
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(deleted, func(x, y ScalingRecord) int { return strings.Compare(x.ID, y.ID) })
	ids := []string{}
	for _, r := range deleted {
		ids = append(ids, r.ID)
		b.publish(scalingChange(ChangeScalingDeleted, r))
	}
	return ids, nil
}

// Audit.

const sqliteAuditCols = `id, seq, prev_hash, hash, at, org_id, event, actor, hostname, detail`

func sqliteScanAudit(s scanner) (AuditEntry, error) {
	var (
		e   AuditEntry
		seq sql.NullInt64
		at  string
	)
	if err := s.Scan(&e.ID, &seq, &e.PrevHash, &e.Hash, &at, &e.OrgID, &e.Event, &e.Actor, &e.Hostname, &e.Detail); err != nil {
		return AuditEntry{}, sqliteErr(err)
	}
	e.Seq = seq.Int64
	var err error
	e.At, err = sqliteParse(at)
	return e, err
}

// sqliteAuditHead reads the chain head. The writer's single connection
// and BEGIN IMMEDIATE already serialize appends, so no row lock is needed.
func sqliteAuditHead(ctx context.Context, q interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}) (int64, []byte, error) {
	var (
		seq  int64
		hash []byte
	)
	err := q.QueryRowContext(ctx, `SELECT seq, hash FROM audit_chain_head WHERE id = 1`).Scan(&seq, &hash)
	return seq, hash, err
}

func (b *sqliteBackend) appendAudit(ctx context.Context, e AuditEntry) (AuditEntry, error) {
	err := b.write(ctx, func(tx *sql.Tx) error {
		seq, hash, err := sqliteAuditHead(ctx, tx)
		if err != nil {
			return err
		}
		e = chainAfter(e, seq, hash)
		if err := tx.QueryRowContext(ctx,
			`INSERT INTO audit (seq, prev_hash, hash, at, org_id, event, actor, hostname, detail)
			VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) RETURNING id`,
			e.Seq, e.PrevHash, e.Hash, sqliteFormat(e.At), e.OrgID, e.Event, e.Actor, e.Hostname, e.Detail).Scan(&e.ID); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE audit_chain_head SET seq = ?1, hash = ?2 WHERE id = 1`, e.Seq, e.Hash)
		return err
	})
	if err != nil {
		return AuditEntry{}, err
	}
	return e, nil
}

func (b *sqliteBackend) backfillAudit(ctx context.Context) (int64, error) {
	var n int64
	err := b.write(ctx, func(tx *sql.Tx) error {
		var through int64
		if err := tx.QueryRowContext(ctx, `SELECT through_id FROM audit_backfill WHERE id = 1`).Scan(&through); err != nil || through == 0 {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT `+sqliteAuditCols+` FROM audit WHERE hash IS NULL AND id <= ?1 ORDER BY id`, through)
		if err != nil {
			return err
		}
		pending, err := sqliteCollect(rows, sqliteScanAudit)
		if err != nil {
			return err
		}
		seq, hash, err := sqliteAuditHead(ctx, tx)
		if err != nil {
			return err
		}
		for _, e := range pending {
			e = chainAfter(e, seq, hash)
			if _, err := tx.ExecContext(ctx, `UPDATE audit SET seq = ?2, prev_hash = ?3, hash = ?4 WHERE id = ?1`,
				e.ID, e.Seq, e.PrevHash, e.Hash); err != nil {
				return err
			}
			seq, hash = e.Seq, e.Hash
		}
		n = int64(len(pending))
		if n > 0 {
			if _, err := tx.ExecContext(ctx, `UPDATE audit_chain_head SET seq = ?1, hash = ?2 WHERE id = 1`, seq, hash); err != nil {
				return err
			}
		}
		_, err = tx.ExecContext(ctx, `UPDATE audit_backfill SET through_id = 0 WHERE id = 1`)
		return err
	})
	return n, err
}

func (b *sqliteBackend) readAuditChain(ctx context.Context, fn func(AuditEntry) bool) (auditChain, error) {
	// One read transaction (on a query_only connection): in WAL mode it
	// sees one snapshot throughout.
	tx, err := b.r.BeginTx(ctx, nil)
	if err != nil {
		return auditChain{}, sqliteErr(err)
	}
	c, err := sqliteReadAuditChain(ctx, tx, fn)
	if rbErr := tx.Rollback(); rbErr != nil && err == nil {
		err = sqliteErr(rbErr)
	}
	return c, err
}

func sqliteReadAuditChain(ctx context.Context, tx *sql.Tx, fn func(AuditEntry) bool) (auditChain, error) {
	var (
		c   auditChain
		err error
	)
	if c.headSeq, c.headHash, err = sqliteAuditHead(ctx, tx); err != nil {
		return auditChain{}, sqliteErr(err)
	}
	rows, err := tx.QueryContext(ctx, `SELECT `+sqliteAuditCols+` FROM audit WHERE seq IS NOT NULL ORDER BY seq`)
	if err != nil {
		return auditChain{}, sqliteErr(err)
	}
	for rows.Next() {
		e, err := sqliteScanAudit(rows)
		if err != nil {
			return auditChain{}, errors.Join(err, rows.Close())
		}
		if !fn(e) {
			break
		}
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return auditChain{}, sqliteErr(err)
	}
	e, err := sqliteScanAudit(tx.QueryRowContext(ctx, `SELECT `+sqliteAuditCols+` FROM audit WHERE seq IS NULL OR hash IS NULL ORDER BY id LIMIT 1`))
	switch {
	case err == nil:
		c.unchained = &e
	case !errors.Is(err, ErrNotFound):
		return auditChain{}, err
	}
	return c, nil
}

func (b *sqliteBackend) listAudit(ctx context.Context, q AuditQuery, alias string) ([]AuditEntry, error) {
	// Times are stored fixed-width in UTC, so text order is time order;
	// an empty bound turns its condition off.
	var since, until string
	if !q.Since.IsZero() {
		since = sqliteFormat(q.Since)
	}
	if !q.Until.IsZero() {
		until = sqliteFormat(q.Until)
	}
	rows, err := b.r.QueryContext(ctx,
		`SELECT `+sqliteAuditCols+` FROM audit
		WHERE (?1 = '' OR org_id = ?1) AND (?2 = '' OR event = ?2 OR event = ?8) AND (?3 = '' OR actor = ?3)
		AND (?4 = '' OR hostname = ?4) AND (?5 = '' OR at >= ?5) AND (?6 = '' OR at < ?6)
		ORDER BY at DESC, id DESC LIMIT ?7`,
		q.OrgID, q.Event, q.Actor, q.Hostname, since, until, q.Limit, alias)
	if err != nil {
		return nil, sqliteErr(err)
	}
	return sqliteCollect(rows, sqliteScanAudit)
}

// Signing keys.

const sqliteSigningKeyCols = `id, purpose, org_id, generation, sealed, created_at, revoked_at`

func sqliteScanSigningKey(s scanner) (SigningKey, error) {
	var (
		k       SigningKey
		created string
		revoked sql.NullString
	)
	if err := s.Scan(&k.ID, &k.Purpose, &k.OrgID, &k.Generation, &k.Sealed, &created, &revoked); err != nil {
		return SigningKey{}, sqliteErr(err)
	}
	var errs [2]error
	k.CreatedAt, errs[0] = sqliteParse(created)
	k.RevokedAt, errs[1] = sqliteParsePtr(revoked)
	return k, errors.Join(errs[:]...)
}

func (b *sqliteBackend) addSigningKey(ctx context.Context, k SigningKey, revokeAt *time.Time) error {
	// One writer connection with BEGIN IMMEDIATE: the check and the
	// insert cannot interleave with another writer of this file.
	err := b.write(ctx, func(tx *sql.Tx) error {
		var top int64
		if err := tx.QueryRowContext(ctx,
			`SELECT COALESCE(MAX(generation), 0) FROM signing_keys WHERE purpose = ?1 AND org_id = ?2`,
			k.Purpose, k.OrgID).Scan(&top); err != nil {
			return err
		}
		if top != k.Generation-1 {
			return fmt.Errorf("%w: generation %d exists", ErrConflict, top)
		}
		if _, err := tx.ExecContext(ctx,
			`DELETE FROM signing_keys WHERE purpose = ?1 AND org_id = ?2 AND generation < ?3`,
			k.Purpose, k.OrgID, k.Generation-1); err != nil {
			return err
		}
		if revokeAt != nil {
			if _, err := tx.ExecContext(ctx,
				`UPDATE signing_keys SET revoked_at = ?4 WHERE purpose = ?1 AND org_id = ?2 AND generation = ?3 AND revoked_at IS NULL`,
				k.Purpose, k.OrgID, k.Generation-1, sqliteFormat(*revokeAt)); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx,
			`INSERT INTO signing_keys (`+sqliteSigningKeyCols+`) VALUES (?1, ?2, ?3, ?4, ?5, ?6, NULL)`,
			k.ID, k.Purpose, k.OrgID, k.Generation, k.Sealed, sqliteFormat(k.CreatedAt))
		return err
	})
	if err != nil {
		return err
	}
	b.publish(Change{Kind: ChangeSigningKeys, ID: k.ID, OrgID: k.OrgID})
	return nil
}

func (b *sqliteBackend) signingKeys(ctx context.Context, purpose string) ([]SigningKey, error) {
	rows, err := b.r.QueryContext(ctx,
		`SELECT `+sqliteSigningKeyCols+` FROM signing_keys WHERE purpose = ?1 ORDER BY org_id, generation DESC`, purpose)
	if err != nil {
		return nil, sqliteErr(err)
	}
	return sqliteCollect(rows, sqliteScanSigningKey)
}

func (b *sqliteBackend) execForTest(ctx context.Context, query string) error {
	_, err := b.w.ExecContext(ctx, query)
	return sqliteErr(err)
}

// Webhooks.

const sqliteWebhookCols = `id, org_id, url, secret, events, created_at, format`

func sqliteScanWebhook(s scanner) (Webhook, error) {
	var (
		w               Webhook
		events, created string
	)
	if err := s.Scan(&w.ID, &w.OrgID, &w.URL, &w.Secret, &events, &created, &w.Format); err != nil {
		return Webhook{}, sqliteErr(err)
	}
	var err error
	if w.Events, err = sqliteParseList(events); err != nil {
		return Webhook{}, err
	}
	w.CreatedAt, err = sqliteParse(created)
	return w, err
}

func (b *sqliteBackend) insertWebhook(ctx context.Context, w Webhook) error {
	_, err := b.w.ExecContext(ctx,
		`INSERT INTO webhooks (`+sqliteWebhookCols+`) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)`,
		w.ID, w.OrgID, w.URL, w.Secret, sqliteList(w.Events), sqliteFormat(w.CreatedAt), w.Format)
	return sqliteErr(err)
}

func (b *sqliteBackend) listWebhooks(ctx context.Context, orgID string) ([]Webhook, error) {
	rows, err := b.r.QueryContext(ctx,
		`SELECT `+sqliteWebhookCols+` FROM webhooks WHERE (?1 = '' OR org_id = ?1) ORDER BY created_at DESC, seq DESC`, orgID)
	if err != nil {
		return nil, sqliteErr(err)
	}
	return sqliteCollect(rows, sqliteScanWebhook)
}

func (b *sqliteBackend) deleteWebhook(ctx context.Context, orgID, id string) error {
	var org string
	err := b.w.QueryRowContext(ctx,
		`DELETE FROM webhooks WHERE id = ?1 AND (?2 = '' OR org_id = ?2) RETURNING org_id`, id, orgID).Scan(&org)
	return sqliteErr(err)
}

func (b *sqliteBackend) webhooksFor(ctx context.Context, orgID, event string) ([]Webhook, error) {
	rows, err := b.r.QueryContext(ctx,
		`SELECT `+sqliteWebhookCols+` FROM webhooks
		WHERE org_id = ?1 AND EXISTS (SELECT 1 FROM json_each(webhooks.events) WHERE json_each.value = ?2)
		ORDER BY created_at, seq`, orgID, event)
	if err != nil {
		return nil, sqliteErr(err)
	}
	return sqliteCollect(rows, sqliteScanWebhook)
}

// Webhook deliveries.

const sqliteDeliveryCols = `id, webhook_id, org_id, event, status, attempts, last_error, last_status_code,
	response_time_ms, body, created_at, updated_at`

func sqliteScanDelivery(s scanner) (WebhookDelivery, error) {
	var (
		d                WebhookDelivery
		ms               int64
		created, updated string
	)
	if err := s.Scan(&d.ID, &d.WebhookID, &d.OrgID, &d.Event, &d.Status, &d.Attempts, &d.LastError,
		&d.LastStatusCode, &ms, &d.Body, &created, &updated); err != nil {
		return WebhookDelivery{}, sqliteErr(err)
	}
	d.ResponseTime = time.Duration(ms) * time.Millisecond
	if d.Body == nil {
		d.Body = []byte{}
	}
	var err error
	if d.CreatedAt, err = sqliteParse(created); err != nil {
		return WebhookDelivery{}, err
	}
	d.UpdatedAt, err = sqliteParse(updated)
	return d, err
}

func (b *sqliteBackend) recordWebhookDelivery(ctx context.Context, d WebhookDelivery, keep int) (WebhookDelivery, error) {
	var out WebhookDelivery
	err := b.write(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = sqliteScanDelivery(tx.QueryRowContext(ctx,
			`UPDATE webhook_deliveries SET status = ?3, attempts = ?4, last_error = ?5, last_status_code = ?6,
				response_time_ms = ?7, updated_at = ?8
			WHERE id = ?1 AND webhook_id = ?2 RETURNING `+sqliteDeliveryCols,
			d.ID, d.WebhookID, d.Status, d.Attempts, d.LastError, d.LastStatusCode,
			d.ResponseTime.Milliseconds(), sqliteFormat(d.UpdatedAt)))
		if !errors.Is(err, ErrNotFound) {
			return err
		}
		out = d
		if _, err := tx.ExecContext(ctx,
			`INSERT INTO webhook_deliveries (`+sqliteDeliveryCols+`)
			VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)`,
			d.ID, d.WebhookID, d.OrgID, d.Event, d.Status, d.Attempts, d.LastError, d.LastStatusCode,
			d.ResponseTime.Milliseconds(), d.Body, sqliteFormat(d.CreatedAt), sqliteFormat(d.UpdatedAt)); err != nil {
			return err
		}
		// SQLite has one writer: nobody inserts between the two.
		_, err = tx.ExecContext(ctx,
			`DELETE FROM webhook_deliveries WHERE webhook_id = ?1 AND seq NOT IN
				(SELECT seq FROM webhook_deliveries WHERE webhook_id = ?1 ORDER BY seq DESC LIMIT ?2)`,
			d.WebhookID, keep)
		return err
	})
	return out, sqliteErr(err)
}

func (b *sqliteBackend) listWebhookDeliveries(ctx context.Context, orgID, webhookID string, limit int) ([]WebhookDelivery, error) {
	rows, err := b.r.QueryContext(ctx,
		`SELECT `+sqliteDeliveryCols+` FROM webhook_deliveries
		WHERE webhook_id = ?1 AND (?2 = '' OR org_id = ?2) ORDER BY seq DESC LIMIT ?3`, webhookID, orgID, limit)
	if err != nil {
		return nil, sqliteErr(err)
	}
	return sqliteCollect(rows, sqliteScanDelivery)
}

func (b *sqliteBackend) webhookDelivery(ctx context.Context, orgID, webhookID, id string) (WebhookDelivery, error) {
	return sqliteScanDelivery(b.r.QueryRowContext(ctx,
		`SELECT `+sqliteDeliveryCols+` FROM webhook_deliveries
		WHERE id = ?1 AND webhook_id = ?2 AND (?3 = '' OR org_id = ?3)`, id, webhookID, orgID))
}

// Hostname ownership.

func (b *sqliteBackend) setOrgHostnames(ctx context.Context, orgID string, patterns []string) error {
	// One writer connection with BEGIN IMMEDIATE: the check and the
	// replacement cannot interleave with another replacement.
	err := b.write(ctx, func(tx *sql.Tx) error {
		var one int
		if err := tx.QueryRowContext(ctx, `SELECT 1 FROM orgs WHERE id = ?1`, orgID).Scan(&one); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("%w: org %s", ErrNotFound, orgID)
			}
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT pattern, org_id FROM org_hostnames`)
		if err != nil {
			return err
		}
		stored, err := sqliteCollect(rows, sqliteScanOrgHostname)
		if err != nil {
			return err
		}
		if oe := firstOverlap(orgID, patterns, stored); oe != nil {
			return oe
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM org_hostnames WHERE org_id = ?1`, orgID); err != nil {
			return err
		}
		for _, p := range patterns {
			if _, err := tx.ExecContext(ctx, `INSERT INTO org_hostnames (pattern, org_id) VALUES (?1, ?2)`, p, orgID); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	b.publish(Change{Kind: ChangeOrgHostnames, OrgID: orgID})
	return nil
}

func sqliteScanOrgHostname(s scanner) (OrgHostname, error) {
	var h OrgHostname
	if err := s.Scan(&h.Pattern, &h.OrgID); err != nil {
		return OrgHostname{}, sqliteErr(err)
	}
	return h, nil
}

func (b *sqliteBackend) listOrgHostnames(ctx context.Context, orgID string) ([]OrgHostname, error) {
	rows, err := b.r.QueryContext(ctx,
		`SELECT pattern, org_id FROM org_hostnames WHERE (?1 = '' OR org_id = ?1) ORDER BY pattern`, orgID)
	if err != nil {
		return nil, sqliteErr(err)
	}
	return sqliteCollect(rows, sqliteScanOrgHostname)
}

// Usage. Days are TEXT in time.DateOnly form, which sorts as dates do.

func (b *sqliteBackend) addUsage(ctx context.Context, ds []UsageDelta) error {
	return b.write(ctx, func(tx *sql.Tx) error {
		for _, d := range ds {
			if _, err := tx.ExecContext(ctx,
				`INSERT INTO usage (day, token_id, org_id, hostname, bytes, requests) VALUES (?, ?, ?, ?, ?, ?)
				 ON CONFLICT (day, token_id, org_id, hostname) DO UPDATE SET bytes = bytes + excluded.bytes, requests = requests + excluded.requests`,
				d.Day.Format(time.DateOnly), d.TokenID, d.OrgID, d.Hostname, d.Bytes, d.Requests); err != nil {
				return err
			}
		}
		return nil
	})
}

// sqliteSums runs query (two columns: id, sum) with args into a map.
func (b *sqliteBackend) sqliteSums(ctx context.Context, query string, args ...any) (map[string]int64, error) {
	rows, err := b.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, sqliteErr(err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var id string
		var n int64
		if err := rows.Scan(&id, &n); err != nil {
			return nil, sqliteErr(err)
		}
		out[id] = n
	}
	return out, sqliteErr(rows.Err())
}

func (b *sqliteBackend) usageTotals(ctx context.Context, day, from, to time.Time, tokens, orgs []string) (map[string]int64, map[string]int64, error) {
	tt, err := b.sqliteSums(ctx,
		`SELECT token_id, SUM(bytes) FROM usage WHERE day = ? AND token_id IN (SELECT value FROM json_each(?)) GROUP BY token_id`,
		day.Format(time.DateOnly), sqliteList(tokens))
	if err != nil {
		return nil, nil, err
	}
	ot, err := b.sqliteSums(ctx,
		`SELECT org_id, SUM(bytes) FROM usage WHERE day >= ? AND day < ? AND org_id IN (SELECT value FROM json_each(?)) GROUP BY org_id`,
		from.Format(time.DateOnly), to.Format(time.DateOnly), sqliteList(orgs))
	if err != nil {
		return nil, nil, err
	}
	return tt, ot, nil
}

func (b *sqliteBackend) queryUsage(ctx context.Context, q UsageQuery, limit int) ([]UsageRow, error) {
	from, to := "", "9999-12-31"
	if !q.From.IsZero() {
		from = q.From.Format(time.DateOnly)
	}
	if !q.To.IsZero() {
		to = q.To.Format(time.DateOnly)
	}
	rows, err := b.r.QueryContext(ctx,
		`SELECT day, token_id, org_id, hostname, bytes, requests FROM usage
		 WHERE (? = '' OR org_id = ?) AND (? = '' OR token_id = ?) AND (? = '' OR hostname = ?) AND day >= ? AND day <= ?
		 ORDER BY day DESC, org_id, token_id, hostname LIMIT ?`,
		q.OrgID, q.OrgID, q.TokenID, q.TokenID, q.Hostname, q.Hostname, from, to, limit)
	if err != nil {
		return nil, sqliteErr(err)
	}
	return sqliteCollect(rows, func(s scanner) (UsageRow, error) {
		var r UsageRow
		var day string
		if err := s.Scan(&day, &r.TokenID, &r.OrgID, &r.Hostname, &r.Bytes, &r.Requests); err != nil {
			return UsageRow{}, err
		}
		d, err := time.Parse(time.DateOnly, day)
		if err != nil {
			return UsageRow{}, fmt.Errorf("usage day %q: %w", day, err)
		}
		r.Day = d
		return r, nil
	})
}
