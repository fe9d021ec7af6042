package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/migrations"
)

// This file holds every PostgreSQL query of the store, and the change
// listener.
//
// Conventions (see migrations/postgres): times are timestamptz, lists are
// text[]; every change is announced with pg_notify on pgChannel inside the
// transaction that makes it, so a rolled-back change is never announced and
// a committed one always is (to the listeners connected at commit).

const (
	// pgChannel is the LISTEN/NOTIFY channel of Change payloads (JSON).
	pgChannel = "aperio_changes"
	// pgConnectTimeout bounds one connection attempt unless the URL sets
	// connect_timeout: an unreachable server fails calls with
	// ErrUnavailable after this long instead of hanging.
	pgConnectTimeout = 5 * time.Second
	// TCP keepalive on every connection, so that a dead peer (no FIN) is
	// noticed in about Idle + Interval×Count = 30 s, the listener's
	// connection included.
	pgKeepAliveIdle     = 15 * time.Second
	pgKeepAliveInterval = 5 * time.Second
	pgKeepAliveCount    = 3
	// The listener reconnects with jittered exponential backoff between
	// these bounds.
	pgListenBackoffMin = 100 * time.Millisecond
	pgListenBackoffMax = 5 * time.Second
	// pgMigrationLockPoll is how often a server waiting for another's
	// migrations retries the advisory lock, and pgMigrationLockTries how
	// many times (goose's units: whole seconds, a count).
	pgMigrationLockPoll  = 1
	pgMigrationLockTries = 300
)

// pgBackend is a pgx pool for queries plus one dedicated connection that
// LISTENs for changes.
type pgBackend struct {
	pool   *pgxpool.Pool
	listen *pgx.ConnConfig // the listener's connection settings
	hub    *hub
	log    *slog.Logger

	stop context.CancelFunc // ends the listener's lifetime context
	wg   sync.WaitGroup     // the listener goroutine
}

func openPostgres(ctx context.Context, cfg Config, h *hub) (*pgBackend, error) {
	pc, err := parsePostgresURL(cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	if pc.ConnConfig.ConnectTimeout == 0 {
		pc.ConnConfig.ConnectTimeout = pgConnectTimeout
	}
	dialer := &net.Dialer{
		Timeout: pc.ConnConfig.ConnectTimeout,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable:   true,
			Idle:     pgKeepAliveIdle,
			Interval: pgKeepAliveInterval,
			Count:    pgKeepAliveCount,
		},
	}
	pc.ConnConfig.DialFunc = dialer.DialContext
	if cfg.ReadOnly {
		// Every transaction, implicit ones included, is read-only: the
		// server refuses any write this process could send.
		pc.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, opError("open postgres", pgErr(err))
	}
	b := &pgBackend{
		pool:   pool,
		listen: pc.ConnConfig.Copy(),
		hub:    h,
		log:    cfg.Logger,
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, opError("open postgres", pgErr(err))
	}
	if cfg.ReadOnly {
		b.stop = func() {} // no listener: nothing to stop
		cfg.Logger.Info("store opened read-only", logkey.Backend, BackendPostgres)
		return b, nil
	}

	sqlDB := stdlib.OpenDBFromPool(pool) // closing it leaves the pool open
	locker, err := lock.NewPostgresSessionLocker(
		lock.WithLockID(migrationLockID),
		lock.WithLockTimeout(pgMigrationLockPoll, pgMigrationLockTries))
	if err != nil {
		panic("store: migration locker: " + err.Error()) // impossible: constant options
	}
	err = migrate(ctx, cfg.Logger, goose.DialectPostgres, sqlDB, migrations.Postgres(), locker)
	if cerr := sqlDB.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		pool.Close()
		if errors.Is(pgErr(err), ErrUnavailable) {
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return nil, fmt.Errorf("store: %w", err) // a broken migration is no conflict or missing record
	}

	// Listen before returning, so that a change committed after Open
	// returns reaches this DB's subscribers.
	conn, err := b.connectListener(ctx)
	if err != nil {
		pool.Close()
		return nil, opError("listen for changes", pgErr(err))
	}
	lctx, stop := context.WithCancel(context.Background()) // the listener's own lifetime, ended by close
	b.stop = stop
	b.wg.Add(1)
	go b.listenLoop(lctx, conn)
	cfg.Logger.Info("store opened", logkey.Backend, BackendPostgres)
	return b, nil
}

// parsePostgresURL parses a DatabaseURL into a pool configuration.
func parsePostgresURL(u string) (*pgxpool.Config, error) {
	pc, err := pgxpool.ParseConfig(u)
	if err != nil {
		// pgx's message, and the errors it wraps, quote the URL, where
		// redacting the password is best effort: say nothing of it.
		return nil, errors.New("store: database url: not a valid postgres:// URL or key=value DSN")
	}
	return pc, nil
}

func (b *pgBackend) name() string { return BackendPostgres }

func (b *pgBackend) ping(ctx context.Context) error { return pgErr(b.pool.Ping(ctx)) }

func (b *pgBackend) close() error {
	b.stop()
	b.wg.Wait()
	b.pool.Close()
	return nil
}

// pgErr maps driver errors onto the store's sentinels, keeping the
// driver's error in the chain. Anything that says the server could not be
// reached or the connection broke is ErrUnavailable; a cancelled or expired
// ctx stays the caller's own error.
func pgErr(err error) error {
	if err == nil || errors.Is(err, ErrNotFound) || errors.Is(err, ErrConflict) || errors.Is(err, ErrUnavailable) {
		return err
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
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
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, pgconn.ErrConnClosed) || pgconn.SafeToRetry(err) {
		return unavailable()
	}
	return err
}

// write runs fn in a transaction and commits it.
func (b *pgBackend) write(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return pgErr(pgx.BeginFunc(ctx, b.pool, fn))
}

// pgPayload is a Change as a NOTIFY payload carries it (JSON, short keys:
// a payload is limited to 8000 bytes).
type pgPayload struct {
	Kind     string `json:"k"`
	ID       string `json:"i,omitempty"`
	OrgID    string `json:"o,omitempty"`
	Hostname string `json:"h,omitempty"`
}

// notify announces c to every listener when tx commits.
func notify(ctx context.Context, tx pgx.Tx, c Change) error {
	payload, err := json.Marshal(pgPayload(c))
	if err != nil {
		panic("store: marshal change: " + err.Error()) // impossible for a struct of strings
	}
	_, err = tx.Exec(ctx, `SELECT pg_notify($1, $2)`, pgChannel, string(payload))
	return err
}

// pgCollect scans every row and closes rows. The result is never nil.
func pgCollect[T any](rows pgx.Rows, err error, scan func(pgx.Row) (T, error)) ([]T, error) {
	if err != nil {
		return nil, pgErr(err)
	}
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
		return nil, pgErr(err)
	}
	return out, nil
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// Orgs.

const pgOrgCols = `id, name, created_at, monthly_max_bytes, max_clients, max_tokens, max_admin_keys`

func pgScanOrg(r pgx.Row) (Org, error) {
	var o Org
	if err := r.Scan(&o.ID, &o.Name, &o.CreatedAt, &o.Limits.MonthlyMaxBytes, &o.Limits.MaxClients,
		&o.Limits.MaxTokens, &o.Limits.MaxAdminKeys); err != nil {
		return Org{}, pgErr(err)
	}
	o.CreatedAt = o.CreatedAt.UTC()
	return o, nil
}

func (b *pgBackend) ensureOrg(ctx context.Context, o Org) (Org, error) {
	_, err := b.pool.Exec(ctx,
		`INSERT INTO orgs (id, name, created_at) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING`,
		o.ID, o.Name, o.CreatedAt)
	if err != nil {
		return Org{}, pgErr(err)
	}
	return pgScanOrg(b.pool.QueryRow(ctx, `SELECT `+pgOrgCols+` FROM orgs WHERE name = $1`, o.Name))
}

func (b *pgBackend) insertOrg(ctx context.Context, o Org) error {
	_, err := b.pool.Exec(ctx, `INSERT INTO orgs (id, name, created_at) VALUES ($1, $2, $3)`,
		o.ID, o.Name, o.CreatedAt)
	return pgErr(err)
}

func (b *pgBackend) org(ctx context.Context, id string) (Org, error) {
	return pgScanOrg(b.pool.QueryRow(ctx, `SELECT `+pgOrgCols+` FROM orgs WHERE id = $1`, id))
}

func (b *pgBackend) listOrgs(ctx context.Context) ([]Org, error) {
	rows, err := b.pool.Query(ctx, `SELECT `+pgOrgCols+` FROM orgs ORDER BY created_at DESC, seq DESC`)
	return pgCollect(rows, err, pgScanOrg)
}

func (b *pgBackend) setOrgLimits(ctx context.Context, id string, l OrgLimits) (Org, error) {
	var o Org
	err := b.write(ctx, func(tx pgx.Tx) error {
		var err error
		o, err = pgScanOrg(tx.QueryRow(ctx,
			`UPDATE orgs SET monthly_max_bytes = $2, max_clients = $3, max_tokens = $4, max_admin_keys = $5
			WHERE id = $1 RETURNING `+pgOrgCols, id, l.MonthlyMaxBytes, l.MaxClients, l.MaxTokens, l.MaxAdminKeys))
		if err != nil {
			return err
		}
		return notify(ctx, tx, Change{Kind: ChangeOrgLimits, OrgID: o.ID})
	})
	return o, err
}

// pgCheckCap returns ErrLimit when the organization's cap (the orgs
// column capCol) is set and count, a query of $1 (the org) and $2 (now),
// reaches it; ErrNotFound when there is no such organization. It locks
// the organization's row for the transaction, so that concurrent inserts
// on every server take turns and none passes the cap.
func pgCheckCap(ctx context.Context, tx pgx.Tx, orgID, capCol, count string, now time.Time) error {
	var capN int
	if err := tx.QueryRow(ctx, `SELECT `+capCol+` FROM orgs WHERE id = $1 FOR UPDATE`, orgID).Scan(&capN); err != nil {
		return err
	}
	if capN == 0 {
		return nil
	}
	var n int
	if err := tx.QueryRow(ctx, count, orgID, now).Scan(&n); err != nil {
		return err
	}
	if n >= capN {
		return fmt.Errorf("%w: %s %d", ErrLimit, capCol, capN)
	}
	return nil
}

// Tokens.

const pgTokenCols = `id, org_id, name, prefix, hash, hostnames, allowed_ips, expires_at, revoked_at, created_at, created_by, allow_catch_all, ` +
	`max_rps, daily_max_bytes, max_connections, paths, client_allowed_ips, generation, prev_hash, prev_expires_at, expiry_warned, allow_tcp_ports`

func pgScanToken(r pgx.Row) (Token, error) {
	var t Token
	if err := r.Scan(&t.ID, &t.OrgID, &t.Name, &t.Prefix, &t.Hash, &t.Hostnames, &t.AllowedIPs,
		&t.ExpiresAt, &t.RevokedAt, &t.CreatedAt, &t.CreatedBy, &t.AllowCatchAll,
		&t.Limits.MaxRPS, &t.Limits.DailyMaxBytes, &t.Limits.MaxConnections, &t.Limits.Paths, &t.Limits.ClientAllowedIPs,
		&t.Generation, &t.PrevHash, &t.PrevExpiresAt, &t.ExpiryWarned, &t.Limits.AllowTCPPorts); err != nil {
		return Token{}, pgErr(err)
	}
	t.Hostnames = list(t.Hostnames)
	t.AllowedIPs = list(t.AllowedIPs)
	t.Limits = t.Limits.clean()
	t.ExpiresAt = utcPtr(t.ExpiresAt)
	t.RevokedAt = utcPtr(t.RevokedAt)
	t.PrevExpiresAt = utcPtr(t.PrevExpiresAt)
	t.CreatedAt = t.CreatedAt.UTC()
	return t, nil
}

func (b *pgBackend) insertToken(ctx context.Context, t Token, now time.Time) error {
	return b.write(ctx, func(tx pgx.Tx) error {
		err := pgCheckCap(ctx, tx, t.OrgID, "max_tokens",
			`SELECT count(*) FROM tokens WHERE org_id = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > $2)`, now)
		if err != nil {
			return err
		}
		l := t.Limits
		_, err = tx.Exec(ctx,
			`INSERT INTO tokens (`+pgTokenCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, 0, NULL, NULL, 0, $18)`,
			t.ID, t.OrgID, t.Name, t.Prefix, t.Hash, list(t.Hostnames), list(t.AllowedIPs),
			t.ExpiresAt, t.RevokedAt, t.CreatedAt, t.CreatedBy, t.AllowCatchAll,
			l.MaxRPS, l.DailyMaxBytes, l.MaxConnections, list(l.Paths), list(l.ClientAllowedIPs), list(l.AllowTCPPorts))
		return err
	})
}

func (b *pgBackend) tokenByHash(ctx context.Context, hash []byte) (Token, error) {
	return pgScanToken(b.pool.QueryRow(ctx,
		`(SELECT `+pgTokenCols+` FROM tokens WHERE hash = $1) UNION ALL (SELECT `+pgTokenCols+` FROM tokens WHERE prev_hash = $1) LIMIT 1`, hash))
}

func (b *pgBackend) updateToken(ctx context.Context, orgID, id string, e TokenEdit) (Token, error) {
	return b.editToken(ctx, orgID, id, func(tx pgx.Tx) error {
		l := e.Limits
		_, err := tx.Exec(ctx,
			`UPDATE tokens SET name = $3, hostnames = $4, allowed_ips = $5,
			expiry_warned = CASE WHEN expires_at IS NOT DISTINCT FROM $6 THEN expiry_warned ELSE 0 END, expires_at = $6,
			allow_catch_all = $7, max_rps = $8, daily_max_bytes = $9, max_connections = $10, paths = $11, client_allowed_ips = $12, allow_tcp_ports = $13
			WHERE id = $1 AND ($2 = '' OR org_id = $2)`,
			id, orgID, e.Name, list(e.Hostnames), list(e.AllowedIPs), e.ExpiresAt,
			e.AllowCatchAll, l.MaxRPS, l.DailyMaxBytes, l.MaxConnections, list(l.Paths), list(l.ClientAllowedIPs), list(l.AllowTCPPorts))
		return err
	})
}

func (b *pgBackend) rotateToken(ctx context.Context, orgID, id string, hash []byte, prefix string, graceEnds time.Time) (Token, error) {
	return b.editToken(ctx, orgID, id, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx,
			`UPDATE tokens SET prev_hash = hash, prev_expires_at = $5, hash = $3, prefix = $4, generation = generation + 1
			WHERE id = $1 AND ($2 = '' OR org_id = $2)`, id, orgID, hash, prefix, graceEnds)
		return err
	})
}

// editToken runs change on a token that exists in orgID and is not
// revoked, under its row lock, and announces ChangeTokenUpdated.
func (b *pgBackend) editToken(ctx context.Context, orgID, id string, change func(tx pgx.Tx) error) (Token, error) {
	var t Token
	err := b.write(ctx, func(tx pgx.Tx) error {
		cur, err := pgScanToken(tx.QueryRow(ctx,
			`SELECT `+pgTokenCols+` FROM tokens WHERE id = $1 AND ($2 = '' OR org_id = $2) FOR UPDATE`, id, orgID))
		if err != nil {
			return err
		}
		if cur.RevokedAt != nil {
			return fmt.Errorf("%w: token %s is revoked", ErrConflict, id)
		}
		if err := change(tx); err != nil {
			return err
		}
		t, err = pgScanToken(tx.QueryRow(ctx, `SELECT `+pgTokenCols+` FROM tokens WHERE id = $1`, id))
		if err != nil {
			return err
		}
		return notify(ctx, tx, Change{Kind: ChangeTokenUpdated, ID: t.ID, OrgID: t.OrgID})
	})
	if err != nil {
		return Token{}, err
	}
	return t, nil
}

func (b *pgBackend) tokensExpiring(ctx context.Context, now, by time.Time) ([]Token, error) {
	rows, err := b.pool.Query(ctx,
		`SELECT `+pgTokenCols+` FROM tokens WHERE revoked_at IS NULL AND expires_at > $1 AND expires_at <= $2 ORDER BY expires_at, seq`, now, by)
	return pgCollect(rows, err, pgScanToken)
}

func (b *pgBackend) claimExpiryWarning(ctx context.Context, id string, expiresAt time.Time, bit int) (bool, error) {
	tag, err := b.pool.Exec(ctx,
		`UPDATE tokens SET expiry_warned = expiry_warned | $3 WHERE id = $1 AND expires_at = $2 AND expiry_warned & $3 = 0`,
		id, expiresAt, bit)
	if err != nil {
		return false, pgErr(err)
	}
	return tag.RowsAffected() == 1, nil
}

func (b *pgBackend) token(ctx context.Context, orgID, id string) (Token, error) {
	return pgScanToken(b.pool.QueryRow(ctx,
		`SELECT `+pgTokenCols+` FROM tokens WHERE id = $1 AND ($2 = '' OR org_id = $2)`, id, orgID))
}

func (b *pgBackend) listTokens(ctx context.Context, orgID string) ([]Token, error) {
	rows, err := b.pool.Query(ctx,
		`SELECT `+pgTokenCols+` FROM tokens WHERE ($1 = '' OR org_id = $1) ORDER BY created_at DESC, seq DESC`, orgID)
	return pgCollect(rows, err, pgScanToken)
}

func (b *pgBackend) revokeToken(ctx context.Context, orgID, id string, at time.Time) (Token, error) {
	var t Token
	err := b.write(ctx, func(tx pgx.Tx) error {
		// A concurrent revoke blocks on the row lock, then finds
		// revoked_at set and changes nothing: the first time wins.
		var err error
		t, err = pgScanToken(tx.QueryRow(ctx,
			`UPDATE tokens SET revoked_at = $3 WHERE id = $1 AND ($2 = '' OR org_id = $2) AND revoked_at IS NULL
			RETURNING `+pgTokenCols, id, orgID, at))
		switch {
		case err == nil:
			return notify(ctx, tx, Change{Kind: ChangeTokenRevoked, ID: t.ID, OrgID: t.OrgID})
		case errors.Is(err, ErrNotFound): // absent, in another org, or already revoked
			t, err = pgScanToken(tx.QueryRow(ctx,
				`SELECT `+pgTokenCols+` FROM tokens WHERE id = $1 AND ($2 = '' OR org_id = $2)`, id, orgID))
			return err
		}
		return err
	})
	if err != nil {
		return Token{}, err
	}
	return t, nil
}

// Admin keys.

const pgAdminKeyCols = `id, org_id, name, role, prefix, hash, created_at, created_by, expires_at`

func pgScanAdminKey(r pgx.Row) (AdminKey, error) {
	var k AdminKey
	if err := r.Scan(&k.ID, &k.OrgID, &k.Name, &k.Role, &k.Prefix, &k.Hash, &k.CreatedAt, &k.CreatedBy, &k.ExpiresAt); err != nil {
		return AdminKey{}, pgErr(err)
	}
	k.CreatedAt = k.CreatedAt.UTC()
	k.ExpiresAt = utcPtr(k.ExpiresAt)
	return k, nil
}

func (b *pgBackend) insertAdminKey(ctx context.Context, k AdminKey, now time.Time) error {
	return b.write(ctx, func(tx pgx.Tx) error {
		err := pgCheckCap(ctx, tx, k.OrgID, "max_admin_keys",
			`SELECT count(*) FROM admin_keys WHERE org_id = $1 AND (expires_at IS NULL OR expires_at > $2)`, now)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx,
			`INSERT INTO admin_keys (`+pgAdminKeyCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
			k.ID, k.OrgID, k.Name, k.Role, k.Prefix, k.Hash, k.CreatedAt, k.CreatedBy, k.ExpiresAt)
		return err
	})
}

func (b *pgBackend) adminKeyByHash(ctx context.Context, hash []byte) (AdminKey, error) {
	return pgScanAdminKey(b.pool.QueryRow(ctx, `SELECT `+pgAdminKeyCols+` FROM admin_keys WHERE hash = $1`, hash))
}

func (b *pgBackend) listAdminKeys(ctx context.Context, orgID string) ([]AdminKey, error) {
	rows, err := b.pool.Query(ctx,
		`SELECT `+pgAdminKeyCols+` FROM admin_keys WHERE ($1 = '' OR org_id = $1) ORDER BY created_at DESC, seq DESC`, orgID)
	return pgCollect(rows, err, pgScanAdminKey)
}

func (b *pgBackend) adminKey(ctx context.Context, orgID, id string) (AdminKey, error) {
	return pgScanAdminKey(b.pool.QueryRow(ctx,
		`SELECT `+pgAdminKeyCols+` FROM admin_keys WHERE id = $1 AND ($2 = '' OR org_id = $2)`, id, orgID))
}

func (b *pgBackend) deleteAdminKey(ctx context.Context, orgID, id string) error {
	return b.write(ctx, func(tx pgx.Tx) error {
		var keyOrg string
		err := tx.QueryRow(ctx,
			`DELETE FROM admin_keys WHERE id = $1 AND ($2 = '' OR org_id = $2) RETURNING org_id`, id, orgID).Scan(&keyOrg)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM admin_sessions WHERE key_id = $1 AND NOT master`, id); err != nil {
			return err
		}
		return notify(ctx, tx, Change{Kind: ChangeAdminKeyDeleted, ID: id, OrgID: keyOrg})
	})
}

// Admin sessions.

const pgAdminSessionCols = `id, key_id, master, org_id, csrf, created_at, expires_at, remote_addr`

func pgScanAdminSession(r pgx.Row) (AdminSession, error) {
	var a AdminSession
	if err := r.Scan(&a.Hash, &a.KeyID, &a.Master, &a.OrgID, &a.CSRF, &a.CreatedAt, &a.ExpiresAt, &a.RemoteAddr); err != nil {
		return AdminSession{}, pgErr(err)
	}
	a.CreatedAt, a.ExpiresAt = a.CreatedAt.UTC(), a.ExpiresAt.UTC()
	return a, nil
}

func (b *pgBackend) insertAdminSession(ctx context.Context, s AdminSession, keep int) error {
	return b.write(ctx, func(tx pgx.Tx) error {
		// Concurrent logins of one key take turns, so that the bound
		// holds exactly: each sees the rows the one before committed.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('admin_sessions:' || $1, 0))`, s.KeyID); err != nil {
			return err
		}
		_, err := tx.Exec(ctx,
			`INSERT INTO admin_sessions (`+pgAdminSessionCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
			s.Hash, s.KeyID, s.Master, s.OrgID, s.CSRF, s.CreatedAt, s.ExpiresAt, s.RemoteAddr)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx,
			`DELETE FROM admin_sessions WHERE key_id = $1 AND master = $2 AND seq NOT IN
				(SELECT seq FROM admin_sessions WHERE key_id = $1 AND master = $2 ORDER BY seq DESC LIMIT $3)`,
			s.KeyID, s.Master, keep)
		return err
	})
}

func (b *pgBackend) adminSessionByHash(ctx context.Context, hash []byte) (AdminSession, error) {
	return pgScanAdminSession(b.pool.QueryRow(ctx,
		`SELECT `+pgAdminSessionCols+` FROM admin_sessions WHERE id = $1`, hash))
}

func (b *pgBackend) deleteAdminSession(ctx context.Context, hash []byte) error {
	tag, err := b.pool.Exec(ctx, `DELETE FROM admin_sessions WHERE id = $1`, hash)
	if err != nil {
		return pgErr(err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

func (b *pgBackend) deleteExpiredAdminSessions(ctx context.Context, now time.Time) (int64, error) {
	tag, err := b.pool.Exec(ctx, `DELETE FROM admin_sessions WHERE expires_at <= $1`, now)
	if err != nil {
		return 0, pgErr(err)
	}
	return tag.RowsAffected(), nil
}

// Maintenance.

func (b *pgBackend) setMaintenance(ctx context.Context, m Maintenance) error {
	return b.write(ctx, func(tx pgx.Tx) error {
		// The WHERE makes the upsert a no-op when another org holds the
		// hostname; no row changed then means conflict.
		tag, err := tx.Exec(ctx,
			`INSERT INTO maintenance (hostname, org_id, set_by, since, reason, expires_at) VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (hostname) DO UPDATE SET set_by = excluded.set_by, since = excluded.since,
				reason = excluded.reason, expires_at = excluded.expires_at
			WHERE maintenance.org_id = excluded.org_id`,
			m.Hostname, m.OrgID, m.By, m.Since, m.Reason, m.ExpiresAt)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("hostname in maintenance for another org: %w", ErrConflict)
		}
		return notify(ctx, tx, Change{Kind: ChangeMaintenanceSet, OrgID: m.OrgID, Hostname: m.Hostname})
	})
}

func (b *pgBackend) clearMaintenance(ctx context.Context, orgID, hostname string) error {
	return b.write(ctx, func(tx pgx.Tx) error {
		var org string
		err := tx.QueryRow(ctx,
			`DELETE FROM maintenance WHERE hostname = $1 AND ($2 = '' OR org_id = $2) RETURNING org_id`,
			hostname, orgID).Scan(&org)
		if err != nil {
			return err
		}
		return notify(ctx, tx, Change{Kind: ChangeMaintenanceCleared, OrgID: org, Hostname: hostname})
	})
}

func (b *pgBackend) listMaintenance(ctx context.Context) ([]Maintenance, error) {
	rows, err := b.pool.Query(ctx, `SELECT hostname, org_id, set_by, since, reason, expires_at FROM maintenance ORDER BY since DESC, hostname`)
	return pgCollect(rows, err, func(r pgx.Row) (Maintenance, error) {
		var m Maintenance
		if err := r.Scan(&m.Hostname, &m.OrgID, &m.By, &m.Since, &m.Reason, &m.ExpiresAt); err != nil {
			return Maintenance{}, pgErr(err)
		}
		m.Since = m.Since.UTC()
		if m.ExpiresAt != nil {
			e := m.ExpiresAt.UTC()
			m.ExpiresAt = &e
		}
		return m, nil
	})
}

// Scaling records.

const pgScalingCols = `id, org_id, hostname, path, url, secret, min_instances, max_instances,
	cold_start_ms, window_ms, cooldown_ms, target_utilization, armed_by, conflict, disarmed,
	consecutive_failures, last_call_at, last_reason, last_status, created_at, updated_at,
	last_error, next_call_at, penalty_until`

// pgDeclareTries bounds how often declareScaling finds its bind inserted by
// another transaction and then deleted by a third before it could lock it.
const pgDeclareTries = 5

func pgScanScaling(r pgx.Row) (ScalingRecord, error) {
	var (
		s                           ScalingRecord
		coldStart, window, cooldown int64
	)
	if err := r.Scan(&s.ID, &s.OrgID, &s.Hostname, &s.Path, &s.URL, &s.Secret, &s.Min, &s.Max,
		&coldStart, &window, &cooldown, &s.TargetUtilization, &s.ArmedBy, &s.Conflict, &s.Disarmed,
		&s.ConsecutiveFailures, &s.LastCallAt, &s.LastReason, &s.LastStatus, &s.CreatedAt, &s.UpdatedAt,
		&s.LastError, &s.NextCallAt, &s.PenaltyUntil); err != nil {
		return ScalingRecord{}, pgErr(err)
	}
	s.ColdStart = time.Duration(coldStart) * time.Millisecond
	s.Window = time.Duration(window) * time.Millisecond
	s.Cooldown = time.Duration(cooldown) * time.Millisecond
	s.ArmedBy = list(s.ArmedBy)
	s.LastCallAt = utcPtr(s.LastCallAt)
	s.NextCallAt = utcPtr(s.NextCallAt)
	s.PenaltyUntil = utcPtr(s.PenaltyUntil)
	s.CreatedAt = s.CreatedAt.UTC()
	s.UpdatedAt = s.UpdatedAt.UTC()
	return s, nil
}

// pgScanScalingRef scans the columns that name a record in a change: id,
// org_id, hostname.
func pgScanScalingRef(r pgx.Row) (ScalingRecord, error) {
	var s ScalingRecord
	return s, pgErr(r.Scan(&s.ID, &s.OrgID, &s.Hostname))
}

func (b *pgBackend) declareScaling(ctx context.Context, fresh ScalingRecord, armer string, rearm bool) (ScalingRecord, bool, error) {
	var (
		rec     ScalingRecord
		changed bool
	)
	err := b.write(ctx, func(tx pgx.Tx) error {
		// Lock the bind's row, or insert it. Each statement sees what was
		// committed before it began (READ COMMITTED): an insert that finds
		// the bind taken has waited for the inserting transaction to
		// commit, so the next lock attempt sees its row. Another server
		// declaring the bind at once therefore either merges into this
		// record or this one merges into its, and no armer is lost.
		for range pgDeclareTries {
			old, err := pgScanScaling(tx.QueryRow(ctx,
				`SELECT `+pgScalingCols+` FROM scaling_records WHERE org_id = $1 AND hostname = $2 AND path = $3 FOR UPDATE`,
				fresh.OrgID, fresh.Hostname, fresh.Path))
			if err == nil {
				rec, changed = mergeScaling(old, fresh, armer, rearm)
				_, err = tx.Exec(ctx, `UPDATE scaling_records SET url = $2, secret = $3,
					min_instances = $4, max_instances = $5, cold_start_ms = $6, window_ms = $7, cooldown_ms = $8,
					target_utilization = $9, armed_by = $10, conflict = $11, disarmed = $12,
					consecutive_failures = $13, updated_at = $14, next_call_at = $15
					WHERE id = $1`,
					rec.ID, rec.URL, rec.Secret, rec.Min, rec.Max,
					rec.ColdStart.Milliseconds(), rec.Window.Milliseconds(), rec.Cooldown.Milliseconds(),
					rec.TargetUtilization, rec.ArmedBy, rec.Conflict, rec.Disarmed,
					rec.ConsecutiveFailures, rec.UpdatedAt, rec.NextCallAt)
				if err != nil {
					return err
				}
				return notify(ctx, tx, scalingChange(ChangeScalingUpdated, rec))
			}
			if !errors.Is(err, ErrNotFound) {
				return err
			}
			r := fresh
			tag, err := tx.Exec(ctx, `INSERT INTO scaling_records (`+pgScalingCols+`)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24)
				ON CONFLICT (org_id, hostname, path) DO NOTHING`,
				r.ID, r.OrgID, r.Hostname, r.Path, r.URL, r.Secret, r.Min, r.Max,
				r.ColdStart.Milliseconds(), r.Window.Milliseconds(), r.Cooldown.Milliseconds(), r.TargetUtilization,
				r.ArmedBy, r.Conflict, r.Disarmed,
				r.ConsecutiveFailures, r.LastCallAt, r.LastReason, r.LastStatus, r.CreatedAt, r.UpdatedAt,
				r.LastError, r.NextCallAt, r.PenaltyUntil)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 1 {
				rec, changed = r, true
				return notify(ctx, tx, scalingChange(ChangeScalingUpdated, rec))
			}
			// Another transaction inserted the bind first: lock its row.
		}
		return fmt.Errorf("bind inserted and deleted by others %d times in a row", pgDeclareTries)
	})
	if err != nil {
		return ScalingRecord{}, false, err
	}
	return rec, changed, nil
}

func (b *pgBackend) scalingRecord(ctx context.Context, orgID, id string) (ScalingRecord, error) {
	return pgScanScaling(b.pool.QueryRow(ctx,
		`SELECT `+pgScalingCols+` FROM scaling_records WHERE id = $1 AND ($2 = '' OR org_id = $2)`, id, orgID))
}

func (b *pgBackend) scalingRecordByBind(ctx context.Context, orgID, hostname, path string) (ScalingRecord, error) {
	return pgScanScaling(b.pool.QueryRow(ctx,
		`SELECT `+pgScalingCols+` FROM scaling_records WHERE hostname = $2 AND path = $3 AND ($1 = '' OR org_id = $1)
		ORDER BY updated_at DESC, seq DESC LIMIT 1`, orgID, hostname, path))
}

func (b *pgBackend) listScalingRecords(ctx context.Context, orgID string) ([]ScalingRecord, error) {
	rows, err := b.pool.Query(ctx,
		`SELECT `+pgScalingCols+` FROM scaling_records WHERE ($1 = '' OR org_id = $1) ORDER BY updated_at DESC, seq DESC`, orgID)
	return pgCollect(rows, err, pgScanScaling)
}

func (b *pgBackend) recordScalingCall(ctx context.Context, id string, c ScalingCall) (ScalingRecord, error) {
	var rec ScalingRecord
	err := b.write(ctx, func(tx pgx.Tx) error {
		var err error
		rec, err = pgScanScaling(tx.QueryRow(ctx,
			`UPDATE scaling_records SET last_call_at = $2, last_reason = $3, last_status = $4,
			consecutive_failures = $5, disarmed = $6, last_error = $7, next_call_at = $8, penalty_until = $9
			WHERE id = $1 RETURNING `+pgScalingCols,
			id, c.At, c.Reason, c.Status, c.ConsecutiveFailures, c.Disarmed, c.Err,
			timePtr(c.NextCallAt), timePtr(c.PenaltyUntil)))
		if err != nil {
			return err
		}
		if c.Holder != "" {
			if _, err := tx.Exec(ctx, `DELETE FROM scaling_leases WHERE record_id = $1 AND holder = $2`, id, c.Holder); err != nil {
				return err
			}
		}
		return notify(ctx, tx, scalingChange(callChangeKind(c), rec))
	})
	if err != nil {
		return ScalingRecord{}, err
	}
	return rec, nil
}

func (b *pgBackend) acquireScalingLease(ctx context.Context, want ScalingLease) (ScalingLease, ScalingRecord, bool, error) {
	var (
		got ScalingLease
		rec ScalingRecord
		ok  bool
	)
	err := b.write(ctx, func(tx pgx.Tx) error {
		// The record's row lock makes every server's attempt on the record
		// take turns: the lease row may not exist yet to be locked.
		var err error
		rec, err = pgScanScaling(tx.QueryRow(ctx,
			`SELECT `+pgScalingCols+` FROM scaling_records WHERE id = $1 FOR UPDATE`, want.RecordID))
		if err != nil {
			return err
		}
		var held *ScalingLease
		h := ScalingLease{RecordID: want.RecordID}
		err = pgErr(tx.QueryRow(ctx, `SELECT holder, reason, current_instances, desired_instances, idempotency_key,
			acquired_at, expires_at FROM scaling_leases WHERE record_id = $1`, want.RecordID).
			Scan(&h.Holder, &h.Reason, &h.Current, &h.Desired, &h.IdempotencyKey, &h.AcquiredAt, &h.ExpiresAt))
		switch {
		case err == nil:
			h.AcquiredAt, h.ExpiresAt = h.AcquiredAt.UTC(), h.ExpiresAt.UTC()
			held = &h
		case !errors.Is(err, ErrNotFound):
			return err
		}
		got, ok = leaseVerdict(rec, held, want)
		if !ok {
			return nil
		}
		_, err = tx.Exec(ctx, `INSERT INTO scaling_leases (record_id, holder, reason, current_instances,
			desired_instances, idempotency_key, acquired_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
			ON CONFLICT (record_id) DO UPDATE SET holder = $2, reason = $3, current_instances = $4,
			desired_instances = $5, idempotency_key = $6, acquired_at = $7, expires_at = $8`,
			got.RecordID, got.Holder, got.Reason, got.Current, got.Desired, got.IdempotencyKey,
			got.AcquiredAt, got.ExpiresAt)
		return err
	})
	if err != nil {
		return ScalingLease{}, ScalingRecord{}, false, err
	}
	return got, rec, ok, nil
}

func (b *pgBackend) deleteScalingRecord(ctx context.Context, orgID, id string) error {
	return b.write(ctx, func(tx pgx.Tx) error {
		r, err := pgScanScalingRef(tx.QueryRow(ctx,
			`DELETE FROM scaling_records WHERE id = $1 AND ($2 = '' OR org_id = $2) RETURNING id, org_id, hostname`, id, orgID))
		if err != nil {
			return err
		}
		return notify(ctx, tx, scalingChange(ChangeScalingDeleted, r))
	})
}

func (b *pgBackend) releaseScalingArmer(ctx context.Context, armer string) ([]string, error) {
	ids := []string{}
	err := b.write(ctx, func(tx pgx.Tx) error {
		ids = ids[:0]
		// Lock every record armer armed, in ID order so that concurrent
		// releases and sweeps cannot deadlock. A declaration holding one
		// of them finishes first and is then seen: its armer is kept.
		rows, err := tx.Query(ctx,
			`SELECT `+pgScalingCols+` FROM scaling_records WHERE $1 = ANY (armed_by) ORDER BY id FOR UPDATE`, armer)
		armed, err := pgCollect(rows, err, pgScanScaling)
		if err != nil {
			return err
		}
		for _, r := range armed {
			r.ArmedBy = releaseArmer(r.ArmedBy, armer)
			kind := ChangeScalingUpdated
			if len(r.ArmedBy) == 0 {
				kind = ChangeScalingDeleted
				_, err = tx.Exec(ctx, `DELETE FROM scaling_records WHERE id = $1`, r.ID)
				ids = append(ids, r.ID)
			} else {
				_, err = tx.Exec(ctx, `UPDATE scaling_records SET armed_by = $2 WHERE id = $1`, r.ID, r.ArmedBy)
			}
			if err != nil {
				return err
			}
			if err := notify(ctx, tx, scalingChange(kind, r)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}

func (b *pgBackend) deleteStaleScalingRecords(ctx context.Context, cutoff time.Time) ([]string, error) {
	ids := []string{}
	err := b.write(ctx, func(tx pgx.Tx) error {
		// Lock in ID order, as releaseScalingArmer does. A record being
		// refreshed is rechecked once the refresh commits, and survives.
		rows, err := tx.Query(ctx, `DELETE FROM scaling_records WHERE id IN (
			SELECT id FROM scaling_records WHERE updated_at < $1 ORDER BY id FOR UPDATE
		) RETURNING id, org_id, hostname`, cutoff)
		deleted, err := pgCollect(rows, err, pgScanScalingRef)
		if err != nil {
			return err
		}
		// RETURNING gives no order: announce in ID order.
		slices.SortFunc(deleted, func(x, y ScalingRecord) int { return strings.Compare(x.ID, y.ID) })
		ids = ids[:0]
		for _, r := range deleted {
			ids = append(ids, r.ID)
			if err := notify(ctx, tx, scalingChange(ChangeScalingDeleted, r)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// Audit.

const pgAuditCols = `id, seq, prev_hash, hash, at, org_id, event, actor, hostname, detail`

func pgScanAudit(r pgx.Row) (AuditEntry, error) {
	var (
		e   AuditEntry
		seq *int64
	)
	if err := r.Scan(&e.ID, &seq, &e.PrevHash, &e.Hash, &e.At, &e.OrgID, &e.Event, &e.Actor, &e.Hostname, &e.Detail); err != nil {
		return AuditEntry{}, pgErr(err)
	}
	if seq != nil {
		e.Seq = *seq
	}
	e.At = e.At.UTC()
	return e, nil
}

// pgLockAuditHead locks the chain head row for the rest of tx: appends by
// every server on the database queue here, so each sees the head the one
// before it wrote and the chain stays linear.
func pgLockAuditHead(ctx context.Context, tx pgx.Tx) (int64, []byte, error) {
	var (
		seq  int64
		hash []byte
	)
	err := tx.QueryRow(ctx, `SELECT seq, hash FROM audit_chain_head WHERE id = 1 FOR UPDATE`).Scan(&seq, &hash)
	return seq, hash, err
}

func (b *pgBackend) appendAudit(ctx context.Context, e AuditEntry) (AuditEntry, error) {
	err := b.write(ctx, func(tx pgx.Tx) error {
		seq, hash, err := pgLockAuditHead(ctx, tx)
		if err != nil {
			return err
		}
		e = chainAfter(e, seq, hash)
		// One round trip for both writes: the head stays locked for as
		// short a time as the protocol allows.
		// (PostgreSQL runs a data-modifying WITH whether or not the main
		// statement reads it.)
		return tx.QueryRow(ctx, `WITH moved AS (UPDATE audit_chain_head SET seq = $1, hash = $3 WHERE id = 1)
			INSERT INTO audit (seq, prev_hash, hash, at, org_id, event, actor, hostname, detail)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id`,
			e.Seq, e.PrevHash, e.Hash, e.At, e.OrgID, e.Event, e.Actor, e.Hostname, e.Detail).Scan(&e.ID)
	})
	if err != nil {
		return AuditEntry{}, err
	}
	return e, nil
}

func (b *pgBackend) backfillAudit(ctx context.Context) (int64, error) {
	var n int64
	err := b.write(ctx, func(tx pgx.Tx) error {
		seq, hash, err := pgLockAuditHead(ctx, tx) // first: a server starting beside this one waits, then finds the marker spent
		if err != nil {
			return err
		}
		var through int64
		if err := tx.QueryRow(ctx, `SELECT through_id FROM audit_backfill WHERE id = 1`).Scan(&through); err != nil || through == 0 {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT `+pgAuditCols+` FROM audit WHERE hash IS NULL AND id <= $1 ORDER BY id`, through)
		pending, err := pgCollect(rows, err, pgScanAudit)
		if err != nil {
			return err
		}
		for _, e := range pending {
			e = chainAfter(e, seq, hash)
			if _, err := tx.Exec(ctx, `UPDATE audit SET seq = $2, prev_hash = $3, hash = $4 WHERE id = $1`,
				e.ID, e.Seq, e.PrevHash, e.Hash); err != nil {
				return err
			}
			seq, hash = e.Seq, e.Hash
		}
		n = int64(len(pending))
		if n > 0 {
			if _, err := tx.Exec(ctx, `UPDATE audit_chain_head SET seq = $1, hash = $2 WHERE id = 1`, seq, hash); err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, `UPDATE audit_backfill SET through_id = 0 WHERE id = 1`)
		return err
	})
	return n, err
}

func (b *pgBackend) readAuditChain(ctx context.Context, fn func(AuditEntry) bool) (auditChain, error) {
	var c auditChain
	// REPEATABLE READ: every statement sees the snapshot of the first, so
	// appends committing meanwhile do not make the head disagree.
	err := pgx.BeginTxFunc(ctx, b.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT seq, hash FROM audit_chain_head WHERE id = 1`).Scan(&c.headSeq, &c.headHash); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT `+pgAuditCols+` FROM audit WHERE seq IS NOT NULL ORDER BY seq`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			e, err := pgScanAudit(rows)
			if err != nil {
				return err
			}
			if !fn(e) {
				break
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		e, err := pgScanAudit(tx.QueryRow(ctx, `SELECT `+pgAuditCols+` FROM audit WHERE seq IS NULL OR hash IS NULL ORDER BY id LIMIT 1`))
		switch {
		case err == nil:
			c.unchained = &e
		case !errors.Is(err, ErrNotFound):
			return err
		}
		return nil
	})
	return c, pgErr(err)
}

func (b *pgBackend) listAudit(ctx context.Context, q AuditQuery, alias string) ([]AuditEntry, error) {
	// A zero filter is '' or NULL and turns its condition off, so that one
	// statement serves every combination.
	rows, err := b.pool.Query(ctx,
		`SELECT `+pgAuditCols+` FROM audit
		WHERE ($1 = '' OR org_id = $1) AND ($2 = '' OR event = $2 OR event = $8) AND ($3 = '' OR actor = $3)
		AND ($4 = '' OR hostname = $4)
		AND ($5::timestamptz IS NULL OR at >= $5) AND ($6::timestamptz IS NULL OR at < $6)
		ORDER BY at DESC, id DESC LIMIT $7`,
		q.OrgID, q.Event, q.Actor, q.Hostname, pgTimeOrNull(q.Since), pgTimeOrNull(q.Until), q.Limit, alias)
	return pgCollect(rows, err, pgScanAudit)
}

// pgTimeOrNull is t, or NULL for the zero time.
func pgTimeOrNull(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// Signing keys.

const pgSigningKeyCols = `id, purpose, org_id, generation, sealed, created_at, revoked_at`

func pgScanSigningKey(r pgx.Row) (SigningKey, error) {
	var k SigningKey
	if err := r.Scan(&k.ID, &k.Purpose, &k.OrgID, &k.Generation, &k.Sealed, &k.CreatedAt, &k.RevokedAt); err != nil {
		return SigningKey{}, pgErr(err)
	}
	k.CreatedAt = k.CreatedAt.UTC()
	k.RevokedAt = utcPtr(k.RevokedAt)
	return k, nil
}

func (b *pgBackend) addSigningKey(ctx context.Context, k SigningKey, revokeAt *time.Time) error {
	return b.write(ctx, func(tx pgx.Tx) error {
		// Two writers reading the same highest generation both insert the
		// next one: the unique (purpose, org_id, generation) refuses the
		// second, which waits for the first's commit. A writer that read
		// a stale highest one is refused by the check.
		var top int64
		if err := tx.QueryRow(ctx,
			`SELECT COALESCE(MAX(generation), 0) FROM signing_keys WHERE purpose = $1 AND org_id = $2`,
			k.Purpose, k.OrgID).Scan(&top); err != nil {
			return err
		}
		if top != k.Generation-1 {
			return fmt.Errorf("%w: generation %d exists", ErrConflict, top)
		}
		if _, err := tx.Exec(ctx,
			`INSERT INTO signing_keys (`+pgSigningKeyCols+`) VALUES ($1, $2, $3, $4, $5, $6, NULL)`,
			k.ID, k.Purpose, k.OrgID, k.Generation, k.Sealed, k.CreatedAt); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx,
			`DELETE FROM signing_keys WHERE purpose = $1 AND org_id = $2 AND generation < $3`,
			k.Purpose, k.OrgID, k.Generation-1); err != nil {
			return err
		}
		if revokeAt != nil {
			if _, err := tx.Exec(ctx,
				`UPDATE signing_keys SET revoked_at = $4 WHERE purpose = $1 AND org_id = $2 AND generation = $3 AND revoked_at IS NULL`,
				k.Purpose, k.OrgID, k.Generation-1, *revokeAt); err != nil {
				return err
			}
		}
		return notify(ctx, tx, Change{Kind: ChangeSigningKeys, ID: k.ID, OrgID: k.OrgID})
	})
}

func (b *pgBackend) signingKeys(ctx context.Context, purpose string) ([]SigningKey, error) {
	rows, err := b.pool.Query(ctx,
		`SELECT `+pgSigningKeyCols+` FROM signing_keys WHERE purpose = $1 ORDER BY org_id, generation DESC`, purpose)
	return pgCollect(rows, err, pgScanSigningKey)
}

func (b *pgBackend) execForTest(ctx context.Context, query string) error {
	_, err := b.pool.Exec(ctx, query)
	return pgErr(err)
}

// The change listener.

// connectListener opens the listener's connection and LISTENs on it.
func (b *pgBackend) connectListener(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, b.listen)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, `LISTEN `+pgChannel); err != nil {
		return nil, errors.Join(err, conn.Close(ctx))
	}
	return conn, nil
}

// listenLoop hands every notification to the hub until ctx ends. When the
// connection breaks it reconnects with backoff and then publishes
// ChangeResync, since notifications sent in the gap are lost.
func (b *pgBackend) listenLoop(ctx context.Context, conn *pgx.Conn) {
	defer b.wg.Done()
	for {
		err := b.receive(ctx, conn)
		b.closeListener(ctx, conn)
		if ctx.Err() != nil {
			return
		}
		b.log.Warn("change listener lost", logkey.Err, err)
		if conn = b.reconnect(ctx); conn == nil {
			return
		}
		b.log.Info("change listener restored")
		b.hub.publish(Change{Kind: ChangeResync})
	}
}

// receive publishes notifications until the connection fails or ctx ends.
func (b *pgBackend) receive(ctx context.Context, conn *pgx.Conn) error {
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		var p pgPayload
		if err := json.Unmarshal([]byte(n.Payload), &p); err != nil || p.Kind == "" {
			b.log.Warn("change notification unreadable", logkey.Err, err)
			continue
		}
		b.hub.publish(Change(p))
	}
}

// closeListener closes conn, bounded even when ctx is already done.
func (b *pgBackend) closeListener(ctx context.Context, conn *pgx.Conn) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if err := conn.Close(cctx); err != nil {
		b.log.Debug("change listener close", logkey.Err, err)
	}
}

// reconnect retries connectListener with jittered exponential backoff. It
// returns nil when ctx ends first.
func (b *pgBackend) reconnect(ctx context.Context) *pgx.Conn {
	delay := pgListenBackoffMin
	timer := time.NewTimer(jitter(delay))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		conn, err := b.connectListener(ctx)
		if err == nil {
			return conn
		}
		if ctx.Err() != nil {
			return nil
		}
		delay = min(delay*2, pgListenBackoffMax)
		wait := jitter(delay)
		b.log.Debug("change listener reconnect failed", logkey.Err, err, logkey.RetryIn, wait)
		timer.Reset(wait)
	}
}

// jitter returns a duration in [d/2, d], so that servers that lost the
// database together do not reconnect in step.
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d/2+1)
}

// Webhooks.

const pgWebhookCols = `id, org_id, url, secret, events, created_at, format`

func pgScanWebhook(r pgx.Row) (Webhook, error) {
	var w Webhook
	if err := r.Scan(&w.ID, &w.OrgID, &w.URL, &w.Secret, &w.Events, &w.CreatedAt, &w.Format); err != nil {
		return Webhook{}, pgErr(err)
	}
	w.Events = list(w.Events)
	w.CreatedAt = w.CreatedAt.UTC()
	return w, nil
}

func (b *pgBackend) insertWebhook(ctx context.Context, w Webhook) error {
	_, err := b.pool.Exec(ctx,
		`INSERT INTO webhooks (`+pgWebhookCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		w.ID, w.OrgID, w.URL, w.Secret, w.Events, w.CreatedAt, w.Format)
	return pgErr(err)
}

func (b *pgBackend) listWebhooks(ctx context.Context, orgID string) ([]Webhook, error) {
	rows, err := b.pool.Query(ctx,
		`SELECT `+pgWebhookCols+` FROM webhooks WHERE ($1 = '' OR org_id = $1) ORDER BY created_at DESC, seq DESC`, orgID)
	return pgCollect(rows, err, pgScanWebhook)
}

func (b *pgBackend) deleteWebhook(ctx context.Context, orgID, id string) error {
	var org string
	err := b.pool.QueryRow(ctx,
		`DELETE FROM webhooks WHERE id = $1 AND ($2 = '' OR org_id = $2) RETURNING org_id`, id, orgID).Scan(&org)
	return pgErr(err)
}

func (b *pgBackend) webhooksFor(ctx context.Context, orgID, event string) ([]Webhook, error) {
	rows, err := b.pool.Query(ctx,
		`SELECT `+pgWebhookCols+` FROM webhooks WHERE org_id = $1 AND $2 = ANY (events) ORDER BY created_at, seq`, orgID, event)
	return pgCollect(rows, err, pgScanWebhook)
}

// Webhook deliveries.

const pgDeliveryCols = `id, webhook_id, org_id, event, status, attempts, last_error, last_status_code,
	response_time_ms, body, created_at, updated_at`

func pgScanDelivery(r pgx.Row) (WebhookDelivery, error) {
	var (
		d  WebhookDelivery
		ms int64
	)
	if err := r.Scan(&d.ID, &d.WebhookID, &d.OrgID, &d.Event, &d.Status, &d.Attempts, &d.LastError,
		&d.LastStatusCode, &ms, &d.Body, &d.CreatedAt, &d.UpdatedAt); err != nil {
		return WebhookDelivery{}, pgErr(err)
	}
	d.ResponseTime = time.Duration(ms) * time.Millisecond
	if d.Body == nil {
		d.Body = []byte{}
	}
	d.CreatedAt, d.UpdatedAt = d.CreatedAt.UTC(), d.UpdatedAt.UTC()
	return d, nil
}

func (b *pgBackend) recordWebhookDelivery(ctx context.Context, d WebhookDelivery, keep int) (WebhookDelivery, error) {
	var out WebhookDelivery
	err := b.write(ctx, func(tx pgx.Tx) error {
		// Writers of one subscription's log take turns, so that the
		// bound holds exactly and an update never races its insert.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('webhook_deliveries:' || $1, 0))`, d.WebhookID); err != nil {
			return err
		}
		var err error
		out, err = pgScanDelivery(tx.QueryRow(ctx,
			`UPDATE webhook_deliveries SET status = $3, attempts = $4, last_error = $5, last_status_code = $6,
				response_time_ms = $7, updated_at = $8
			WHERE id = $1 AND webhook_id = $2 RETURNING `+pgDeliveryCols,
			d.ID, d.WebhookID, d.Status, d.Attempts, d.LastError, d.LastStatusCode,
			d.ResponseTime.Milliseconds(), d.UpdatedAt))
		if !errors.Is(err, ErrNotFound) {
			return err
		}
		out = d
		if _, err := tx.Exec(ctx,
			`INSERT INTO webhook_deliveries (`+pgDeliveryCols+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
			d.ID, d.WebhookID, d.OrgID, d.Event, d.Status, d.Attempts, d.LastError, d.LastStatusCode,
			d.ResponseTime.Milliseconds(), d.Body, d.CreatedAt, d.UpdatedAt); err != nil {
			return err
		}
		_, err = tx.Exec(ctx,
			`DELETE FROM webhook_deliveries WHERE webhook_id = $1 AND seq NOT IN
				(SELECT seq FROM webhook_deliveries WHERE webhook_id = $1 ORDER BY seq DESC LIMIT $2)`,
			d.WebhookID, keep)
		return err
	})
	return out, pgErr(err)
}

func (b *pgBackend) listWebhookDeliveries(ctx context.Context, orgID, webhookID string, limit int) ([]WebhookDelivery, error) {
	rows, err := b.pool.Query(ctx,
		`SELECT `+pgDeliveryCols+` FROM webhook_deliveries
		WHERE webhook_id = $1 AND ($2 = '' OR org_id = $2) ORDER BY seq DESC LIMIT $3`, webhookID, orgID, limit)
	return pgCollect(rows, err, pgScanDelivery)
}

func (b *pgBackend) webhookDelivery(ctx context.Context, orgID, webhookID, id string) (WebhookDelivery, error) {
	return pgScanDelivery(b.pool.QueryRow(ctx,
		`SELECT `+pgDeliveryCols+` FROM webhook_deliveries
		WHERE id = $1 AND webhook_id = $2 AND ($3 = '' OR org_id = $3)`, id, webhookID, orgID))
}

// Hostname ownership.

func (b *pgBackend) setOrgHostnames(ctx context.Context, orgID string, patterns []string) error {
	return b.write(ctx, func(tx pgx.Tx) error {
		// EXCLUSIVE lets readers on but serializes every replacement, on
		// every server, so that the overlap check sees the last one.
		if _, err := tx.Exec(ctx, `LOCK TABLE org_hostnames IN EXCLUSIVE MODE`); err != nil {
			return err
		}
		var one int
		if err := tx.QueryRow(ctx, `SELECT 1 FROM orgs WHERE id = $1`, orgID).Scan(&one); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("%w: org %s", ErrNotFound, orgID)
			}
			return err
		}
		rows, err := tx.Query(ctx, `SELECT pattern, org_id FROM org_hostnames`)
		stored, err := pgCollect(rows, err, pgScanOrgHostname)
		if err != nil {
			return err
		}
		if oe := firstOverlap(orgID, patterns, stored); oe != nil {
			return oe
		}
		if _, err := tx.Exec(ctx, `DELETE FROM org_hostnames WHERE org_id = $1`, orgID); err != nil {
			return err
		}
		if len(patterns) > 0 {
			if _, err := tx.Exec(ctx,
				`INSERT INTO org_hostnames (pattern, org_id) SELECT unnest($1::text[]), $2`, patterns, orgID); err != nil {
				return err
			}
		}
		return notify(ctx, tx, Change{Kind: ChangeOrgHostnames, OrgID: orgID})
	})
}

func pgScanOrgHostname(r pgx.Row) (OrgHostname, error) {
	var h OrgHostname
	if err := r.Scan(&h.Pattern, &h.OrgID); err != nil {
		return OrgHostname{}, pgErr(err)
	}
	return h, nil
}

func (b *pgBackend) listOrgHostnames(ctx context.Context, orgID string) ([]OrgHostname, error) {
	rows, err := b.pool.Query(ctx,
		`SELECT pattern, org_id FROM org_hostnames WHERE ($1 = '' OR org_id = $1) ORDER BY pattern`, orgID)
	return pgCollect(rows, err, pgScanOrgHostname)
}

// Usage.

func (b *pgBackend) addUsage(ctx context.Context, ds []UsageDelta) error {
	return b.write(ctx, func(tx pgx.Tx) error {
		batch := &pgx.Batch{}
		for _, d := range ds {
			batch.Queue(`INSERT INTO usage (day, token_id, org_id, hostname, bytes, requests) VALUES ($1, $2, $3, $4, $5, $6)
				ON CONFLICT (day, token_id, org_id, hostname) DO UPDATE SET bytes = usage.bytes + EXCLUDED.bytes, requests = usage.requests + EXCLUDED.requests`,
				d.Day, d.TokenID, d.OrgID, d.Hostname, d.Bytes, d.Requests)
		}
		return tx.SendBatch(ctx, batch).Close()
	})
}

// pgSums runs query (two columns: id, sum) with args into a map.
func (b *pgBackend) pgSums(ctx context.Context, query string, args ...any) (map[string]int64, error) {
	rows, err := b.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, pgErr(err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var id string
		var n int64
		if err := rows.Scan(&id, &n); err != nil {
			return nil, pgErr(err)
		}
		out[id] = n
	}
	return out, pgErr(rows.Err())
}

func (b *pgBackend) usageTotals(ctx context.Context, day, from, to time.Time, tokens, orgs []string) (map[string]int64, map[string]int64, error) {
	tt, err := b.pgSums(ctx,
		`SELECT token_id, SUM(bytes)::bigint FROM usage WHERE day = $1 AND token_id = ANY($2) GROUP BY token_id`, day, tokens)
	if err != nil {
		return nil, nil, err
	}
	ot, err := b.pgSums(ctx,
		`SELECT org_id, SUM(bytes)::bigint FROM usage WHERE day >= $1 AND day < $2 AND org_id = ANY($3) GROUP BY org_id`, from, to, orgs)
	if err != nil {
		return nil, nil, err
	}
	return tt, ot, nil
}

func (b *pgBackend) queryUsage(ctx context.Context, q UsageQuery, limit int) ([]UsageRow, error) {
	var from, to *time.Time
	if !q.From.IsZero() {
		from = &q.From
	}
	if !q.To.IsZero() {
		to = &q.To
	}
	rows, err := b.pool.Query(ctx,
		`SELECT day, token_id, org_id, hostname, bytes, requests FROM usage
		 WHERE ($1 = '' OR org_id = $1) AND ($2 = '' OR token_id = $2) AND ($3 = '' OR hostname = $3)
		   AND ($4::date IS NULL OR day >= $4) AND ($5::date IS NULL OR day <= $5)
		 ORDER BY day DESC, org_id, token_id, hostname LIMIT $6`,
		q.OrgID, q.TokenID, q.Hostname, from, to, limit)
	return pgCollect(rows, err, func(r pgx.Row) (UsageRow, error) {
		var u UsageRow
		if err := r.Scan(&u.Day, &u.TokenID, &u.OrgID, &u.Hostname, &u.Bytes, &u.Requests); err != nil {
			return UsageRow{}, pgErr(err)
		}
		u.Day = u.Day.UTC()
		return u, nil
	})
}
