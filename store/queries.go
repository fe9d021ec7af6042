package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// This file holds every query of the store, once, for both engines: the
// SQL both accept, with what differs between them taken from b.d (see
// dialect.go). Arguments of the types the engines store differently go
// through b.d.time, b.d.day and b.d.list; columns of those types come back
// through the scanners of columns.go.

// queryRow runs the query q on b's readers and scans its one row with
// scan: no row is ErrNotFound, and every error is mapped.
func queryRow[T any](ctx context.Context, b *backend, scan func(scanner) (T, error), q string, args ...any) (T, error) {
	v, err := scan(b.r.QueryRowContext(ctx, q, args...))
	if err != nil {
		var zero T
		return zero, b.d.mapErr(err)
	}
	return v, nil
}

// queryRows runs the query q on b's readers and scans every row with
// scan. The result is never nil.
func queryRows[T any](ctx context.Context, b *backend, scan func(scanner) (T, error), q string, args ...any) ([]T, error) {
	rows, err := b.r.QueryContext(ctx, q, args...)
	return collect(b.d, rows, err, scan)
}

// affected returns the rows an Exec changed.
func affected(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// valuesRows returns the VALUES rows of a multi-row insert of n rows of
// width columns: ($1, $2), ($3, $4), ….
func valuesRows(n, width int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		for j := range width {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(i*width + j + 1))
		}
		b.WriteByte(')')
	}
	return b.String()
}

// Orgs.

const orgCols = `id, name, created_at, monthly_max_bytes, max_clients, max_tokens, max_admin_keys`

func scanOrg(s scanner) (Org, error) {
	var o Org
	err := s.Scan(&o.ID, &o.Name, timeCol{&o.CreatedAt}, &o.Limits.MonthlyMaxBytes, &o.Limits.MaxClients,
		&o.Limits.MaxTokens, &o.Limits.MaxAdminKeys)
	return o, err
}

func (b *backend) ensureOrg(ctx context.Context, o Org) (Org, error) {
	_, err := b.w.ExecContext(ctx,
		`INSERT INTO orgs (id, name, created_at) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING`,
		o.ID, o.Name, b.d.time(o.CreatedAt))
	if err != nil {
		return Org{}, b.d.mapErr(err)
	}
	return queryRow(ctx, b, scanOrg, `SELECT `+orgCols+` FROM orgs WHERE name = $1`, o.Name)
}

func (b *backend) insertOrg(ctx context.Context, o Org) error {
	_, err := b.w.ExecContext(ctx, `INSERT INTO orgs (id, name, created_at) VALUES ($1, $2, $3)`,
		o.ID, o.Name, b.d.time(o.CreatedAt))
	return b.d.mapErr(err)
}

func (b *backend) org(ctx context.Context, id string) (Org, error) {
	return queryRow(ctx, b, scanOrg, `SELECT `+orgCols+` FROM orgs WHERE id = $1`, id)
}

func (b *backend) listOrgs(ctx context.Context) ([]Org, error) {
	return queryRows(ctx, b, scanOrg, `SELECT `+orgCols+` FROM orgs ORDER BY created_at DESC, seq DESC`)
}

func (b *backend) setOrgLimits(ctx context.Context, id string, l OrgLimits) (Org, error) {
	var o Org
	err := b.write(ctx, func(tx *txn) error {
		var err error
		o, err = scanOrg(tx.QueryRowContext(ctx,
			`UPDATE orgs SET monthly_max_bytes = $2, max_clients = $3, max_tokens = $4, max_admin_keys = $5
			WHERE id = $1 RETURNING `+orgCols, id, l.MonthlyMaxBytes, l.MaxClients, l.MaxTokens, l.MaxAdminKeys))
		if err != nil {
			return err
		}
		return tx.announce(ctx, Change{Kind: ChangeOrgLimits, OrgID: o.ID})
	})
	return o, err
}

// checkCap returns ErrLimit when the organization's cap (the orgs column
// capCol) is set and count, a query of $1 (the org) and $2 (now), reaches
// it; ErrNotFound when there is no such organization. It locks the
// organization's row for the transaction (on SQLite the transaction is
// the only writer), so that concurrent inserts on every server take turns
// and none passes the cap.
func checkCap(ctx context.Context, tx *txn, orgID, capCol, count string, now time.Time) error {
	var capN int
	if err := tx.QueryRowContext(ctx, `SELECT `+capCol+` FROM orgs WHERE id = $1`+tx.d.forUpdate, orgID).Scan(&capN); err != nil {
		return err
	}
	if capN == 0 {
		return nil
	}
	var n int
	if err := tx.QueryRowContext(ctx, count, orgID, tx.d.time(now)).Scan(&n); err != nil {
		return err
	}
	if n >= capN {
		return fmt.Errorf("%w: %s %d", ErrLimit, capCol, capN)
	}
	return nil
}

// Tokens.

const tokenCols = `id, org_id, name, prefix, hash, hostnames, allowed_ips, expires_at, revoked_at, created_at, created_by, allow_catch_all, ` +
	`max_rps, daily_max_bytes, max_connections, paths, client_allowed_ips, generation, prev_hash, prev_expires_at, expiry_warned, allow_tcp_ports`

func scanToken(s scanner) (Token, error) {
	var t Token
	err := s.Scan(&t.ID, &t.OrgID, &t.Name, &t.Prefix, &t.Hash, listCol{&t.Hostnames}, listCol{&t.AllowedIPs},
		nullTimeCol{&t.ExpiresAt}, nullTimeCol{&t.RevokedAt}, timeCol{&t.CreatedAt}, &t.CreatedBy, &t.AllowCatchAll,
		&t.Limits.MaxRPS, &t.Limits.DailyMaxBytes, &t.Limits.MaxConnections, listCol{&t.Limits.Paths}, listCol{&t.Limits.ClientAllowedIPs},
		&t.Generation, &t.PrevHash, nullTimeCol{&t.PrevExpiresAt}, &t.ExpiryWarned, listCol{&t.Limits.AllowTCPPorts})
	return t, err
}

func (b *backend) insertToken(ctx context.Context, t Token, now time.Time) error {
	return b.write(ctx, func(tx *txn) error {
		err := checkCap(ctx, tx, t.OrgID, "max_tokens",
			`SELECT count(*) FROM tokens WHERE org_id = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > $2)`, now)
		if err != nil {
			return err
		}
		d, l := b.d, t.Limits
		_, err = tx.ExecContext(ctx,
			`INSERT INTO tokens (`+tokenCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, 0, NULL, NULL, 0, $18)`,
			t.ID, t.OrgID, t.Name, t.Prefix, t.Hash, d.list(t.Hostnames), d.list(t.AllowedIPs),
			d.timeOrNil(t.ExpiresAt), d.timeOrNil(t.RevokedAt), d.time(t.CreatedAt), t.CreatedBy, t.AllowCatchAll,
			l.MaxRPS, l.DailyMaxBytes, l.MaxConnections, d.list(l.Paths), d.list(l.ClientAllowedIPs), d.list(l.AllowTCPPorts))
		return err
	})
}

func (b *backend) tokenByHash(ctx context.Context, hash []byte) (Token, error) {
	return queryRow(ctx, b, scanToken,
		`SELECT `+tokenCols+` FROM tokens WHERE hash = $1 UNION ALL SELECT `+tokenCols+` FROM tokens WHERE prev_hash = $1 LIMIT 1`, hash)
}

func (b *backend) updateToken(ctx context.Context, orgID, id string, e TokenEdit) (Token, error) {
	return b.editToken(ctx, orgID, id, func(tx *txn) error {
		d, l := b.d, e.Limits
		_, err := tx.ExecContext(ctx,
			`UPDATE tokens SET name = $3, hostnames = $4, allowed_ips = $5,
			expiry_warned = CASE WHEN expires_at IS NOT DISTINCT FROM $6 THEN expiry_warned ELSE 0 END, expires_at = $6,
			allow_catch_all = $7, max_rps = $8, daily_max_bytes = $9, max_connections = $10, paths = $11, client_allowed_ips = $12, allow_tcp_ports = $13
			WHERE id = $1 AND ($2 = '' OR org_id = $2)`,
			id, orgID, e.Name, d.list(e.Hostnames), d.list(e.AllowedIPs), d.timeOrNil(e.ExpiresAt),
			e.AllowCatchAll, l.MaxRPS, l.DailyMaxBytes, l.MaxConnections, d.list(l.Paths), d.list(l.ClientAllowedIPs), d.list(l.AllowTCPPorts))
		return err
	})
}

func (b *backend) rotateToken(ctx context.Context, orgID, id string, hash []byte, prefix string, graceEnds time.Time) (Token, error) {
	return b.editToken(ctx, orgID, id, func(tx *txn) error {
		_, err := tx.ExecContext(ctx,
			`UPDATE tokens SET prev_hash = hash, prev_expires_at = $5, hash = $3, prefix = $4, generation = generation + 1
			WHERE id = $1 AND ($2 = '' OR org_id = $2)`, id, orgID, hash, prefix, b.d.time(graceEnds))
		return err
	})
}

// editToken runs change on a token that exists in orgID and is not
// revoked, under its row lock, and announces ChangeTokenUpdated.
func (b *backend) editToken(ctx context.Context, orgID, id string, change func(tx *txn) error) (Token, error) {
	var t Token
	err := b.write(ctx, func(tx *txn) error {
		cur, err := scanToken(tx.QueryRowContext(ctx,
			`SELECT `+tokenCols+` FROM tokens WHERE id = $1 AND ($2 = '' OR org_id = $2)`+b.d.forUpdate, id, orgID))
		if err != nil {
			return err
		}
		if cur.RevokedAt != nil {
			return fmt.Errorf("%w: token %s is revoked", ErrConflict, id)
		}
		if err := change(tx); err != nil {
			return err
		}
		if t, err = scanToken(tx.QueryRowContext(ctx, `SELECT `+tokenCols+` FROM tokens WHERE id = $1`, id)); err != nil {
			return err
		}
		return tx.announce(ctx, Change{Kind: ChangeTokenUpdated, ID: t.ID, OrgID: t.OrgID})
	})
	if err != nil {
		return Token{}, err
	}
	return t, nil
}

func (b *backend) tokensExpiring(ctx context.Context, now, by time.Time) ([]Token, error) {
	return queryRows(ctx, b, scanToken,
		`SELECT `+tokenCols+` FROM tokens WHERE revoked_at IS NULL AND expires_at > $1 AND expires_at <= $2 ORDER BY expires_at, seq`,
		b.d.time(now), b.d.time(by))
}

func (b *backend) claimExpiryWarning(ctx context.Context, id string, expiresAt time.Time, bit int) (bool, error) {
	n, err := affected(b.w.ExecContext(ctx,
		`UPDATE tokens SET expiry_warned = expiry_warned | $3 WHERE id = $1 AND expires_at = $2 AND expiry_warned & $3 = 0`,
		id, b.d.time(expiresAt), bit))
	return n == 1, b.d.mapErr(err)
}

func (b *backend) token(ctx context.Context, orgID, id string) (Token, error) {
	return queryRow(ctx, b, scanToken,
		`SELECT `+tokenCols+` FROM tokens WHERE id = $1 AND ($2 = '' OR org_id = $2)`, id, orgID)
}

func (b *backend) listTokens(ctx context.Context, orgID string) ([]Token, error) {
	return queryRows(ctx, b, scanToken,
		`SELECT `+tokenCols+` FROM tokens WHERE ($1 = '' OR org_id = $1) ORDER BY created_at DESC, seq DESC`, orgID)
}

func (b *backend) revokeToken(ctx context.Context, orgID, id string, at time.Time) (Token, error) {
	var t Token
	err := b.write(ctx, func(tx *txn) error {
		// A concurrent revoke waits for the row (or the writer), then
		// finds revoked_at set and changes nothing: the first time wins.
		var err error
		t, err = scanToken(tx.QueryRowContext(ctx,
			`UPDATE tokens SET revoked_at = $3 WHERE id = $1 AND ($2 = '' OR org_id = $2) AND revoked_at IS NULL
			RETURNING `+tokenCols, id, orgID, b.d.time(at)))
		switch {
		case err == nil:
			return tx.announce(ctx, Change{Kind: ChangeTokenRevoked, ID: t.ID, OrgID: t.OrgID})
		case errors.Is(err, sql.ErrNoRows): // absent, in another org, or already revoked
			t, err = scanToken(tx.QueryRowContext(ctx,
				`SELECT `+tokenCols+` FROM tokens WHERE id = $1 AND ($2 = '' OR org_id = $2)`, id, orgID))
		}
		return err
	})
	if err != nil {
		return Token{}, err
	}
	return t, nil
}

// Admin keys.

const adminKeyCols = `id, org_id, name, role, prefix, hash, created_at, created_by, expires_at`

func scanAdminKey(s scanner) (AdminKey, error) {
	var k AdminKey
	err := s.Scan(&k.ID, &k.OrgID, &k.Name, &k.Role, &k.Prefix, &k.Hash, timeCol{&k.CreatedAt}, &k.CreatedBy, nullTimeCol{&k.ExpiresAt})
	return k, err
}

func (b *backend) insertAdminKey(ctx context.Context, k AdminKey, now time.Time) error {
	return b.write(ctx, func(tx *txn) error {
		err := checkCap(ctx, tx, k.OrgID, "max_admin_keys",
			`SELECT count(*) FROM admin_keys WHERE org_id = $1 AND (expires_at IS NULL OR expires_at > $2)`, now)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx,
			`INSERT INTO admin_keys (`+adminKeyCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
			k.ID, k.OrgID, k.Name, k.Role, k.Prefix, k.Hash, b.d.time(k.CreatedAt), k.CreatedBy, b.d.timeOrNil(k.ExpiresAt))
		return err
	})
}

func (b *backend) adminKeyByHash(ctx context.Context, hash []byte) (AdminKey, error) {
	return queryRow(ctx, b, scanAdminKey, `SELECT `+adminKeyCols+` FROM admin_keys WHERE hash = $1`, hash)
}

func (b *backend) listAdminKeys(ctx context.Context, orgID string) ([]AdminKey, error) {
	return queryRows(ctx, b, scanAdminKey,
		`SELECT `+adminKeyCols+` FROM admin_keys WHERE ($1 = '' OR org_id = $1) ORDER BY created_at DESC, seq DESC`, orgID)
}

func (b *backend) adminKey(ctx context.Context, orgID, id string) (AdminKey, error) {
	return queryRow(ctx, b, scanAdminKey,
		`SELECT `+adminKeyCols+` FROM admin_keys WHERE id = $1 AND ($2 = '' OR org_id = $2)`, id, orgID)
}

// deleteAdminKey deletes the key and its sessions in one transaction.
func (b *backend) deleteAdminKey(ctx context.Context, orgID, id string) error {
	return b.write(ctx, func(tx *txn) error {
		var keyOrg string
		err := tx.QueryRowContext(ctx,
			`DELETE FROM admin_keys WHERE id = $1 AND ($2 = '' OR org_id = $2) RETURNING org_id`, id, orgID).Scan(&keyOrg)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM admin_sessions WHERE key_id = $1 AND NOT master`, id); err != nil {
			return err
		}
		return tx.announce(ctx, Change{Kind: ChangeAdminKeyDeleted, ID: id, OrgID: keyOrg})
	})
}

// Admin sessions.

const adminSessionCols = `id, key_id, master, org_id, csrf, created_at, expires_at, remote_addr`

func scanAdminSession(s scanner) (AdminSession, error) {
	var a AdminSession
	err := s.Scan(&a.Hash, &a.KeyID, &a.Master, &a.OrgID, &a.CSRF, timeCol{&a.CreatedAt}, timeCol{&a.ExpiresAt}, &a.RemoteAddr)
	return a, err
}

// insertAdminSession inserts s and deletes the oldest sessions of its key
// (or of the master token) beyond keep, in one transaction.
func (b *backend) insertAdminSession(ctx context.Context, s AdminSession, keep int) error {
	return b.write(ctx, func(tx *txn) error {
		// Concurrent logins of one key take turns, so that the bound
		// holds exactly: each sees the rows the one before committed.
		if err := tx.lock(ctx, "admin_sessions:"+s.KeyID); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx,
			`INSERT INTO admin_sessions (`+adminSessionCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
			s.Hash, s.KeyID, s.Master, s.OrgID, s.CSRF, b.d.time(s.CreatedAt), b.d.time(s.ExpiresAt), s.RemoteAddr)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx,
			`DELETE FROM admin_sessions WHERE key_id = $1 AND master = $2 AND seq NOT IN
				(SELECT seq FROM admin_sessions WHERE key_id = $1 AND master = $2 ORDER BY seq DESC LIMIT $3)`,
			s.KeyID, s.Master, keep)
		return err
	})
}

func (b *backend) adminSessionByHash(ctx context.Context, hash []byte) (AdminSession, error) {
	return queryRow(ctx, b, scanAdminSession,
		`SELECT `+adminSessionCols+` FROM admin_sessions WHERE id = $1`, hash)
}

func (b *backend) deleteAdminSession(ctx context.Context, hash []byte) error {
	n, err := affected(b.w.ExecContext(ctx, `DELETE FROM admin_sessions WHERE id = $1`, hash))
	if err != nil {
		return b.d.mapErr(err)
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}

func (b *backend) deleteExpiredAdminSessions(ctx context.Context, now time.Time) (int64, error) {
	n, err := affected(b.w.ExecContext(ctx, `DELETE FROM admin_sessions WHERE expires_at <= $1`, b.d.time(now)))
	return n, b.d.mapErr(err)
}

// Maintenance.

func (b *backend) setMaintenance(ctx context.Context, m Maintenance) error {
	return b.write(ctx, func(tx *txn) error {
		// The WHERE makes the upsert a no-op when another org holds the
		// hostname; no row changed then means conflict.
		n, err := affected(tx.ExecContext(ctx,
			`INSERT INTO maintenance (hostname, org_id, set_by, since, reason, expires_at) VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (hostname) DO UPDATE SET set_by = excluded.set_by, since = excluded.since,
				reason = excluded.reason, expires_at = excluded.expires_at
			WHERE maintenance.org_id = excluded.org_id`,
			m.Hostname, m.OrgID, m.By, b.d.time(m.Since), m.Reason, b.d.timeOrNil(m.ExpiresAt)))
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("hostname in maintenance for another org: %w", ErrConflict)
		}
		return tx.announce(ctx, Change{Kind: ChangeMaintenanceSet, OrgID: m.OrgID, Hostname: m.Hostname})
	})
}

func (b *backend) clearMaintenance(ctx context.Context, orgID, hostname string) error {
	return b.write(ctx, func(tx *txn) error {
		var org string
		err := tx.QueryRowContext(ctx,
			`DELETE FROM maintenance WHERE hostname = $1 AND ($2 = '' OR org_id = $2) RETURNING org_id`,
			hostname, orgID).Scan(&org)
		if err != nil {
			return err
		}
		return tx.announce(ctx, Change{Kind: ChangeMaintenanceCleared, OrgID: org, Hostname: hostname})
	})
}

func scanMaintenance(s scanner) (Maintenance, error) {
	var m Maintenance
	err := s.Scan(&m.Hostname, &m.OrgID, &m.By, timeCol{&m.Since}, &m.Reason, nullTimeCol{&m.ExpiresAt})
	return m, err
}

func (b *backend) listMaintenance(ctx context.Context) ([]Maintenance, error) {
	return queryRows(ctx, b, scanMaintenance,
		`SELECT hostname, org_id, set_by, since, reason, expires_at FROM maintenance ORDER BY since DESC, hostname`)
}

// Scaling records.

const scalingCols = `id, org_id, hostname, path, url, secret, min_instances, max_instances,
	cold_start_ms, window_ms, cooldown_ms, target_utilization, armed_by, conflict, disarmed,
	consecutive_failures, last_call_at, last_reason, last_status, created_at, updated_at,
	last_error, next_call_at, penalty_until`

// declareTries bounds how often declareScaling finds its bind inserted by
// another transaction and then deleted by a third before it could lock it.
const declareTries = 5

func scanScaling(s scanner) (ScalingRecord, error) {
	var (
		r                           ScalingRecord
		coldStart, window, cooldown int64
	)
	if err := s.Scan(&r.ID, &r.OrgID, &r.Hostname, &r.Path, &r.URL, &r.Secret, &r.Min, &r.Max,
		&coldStart, &window, &cooldown, &r.TargetUtilization, listCol{&r.ArmedBy}, &r.Conflict, &r.Disarmed,
		&r.ConsecutiveFailures, nullTimeCol{&r.LastCallAt}, &r.LastReason, &r.LastStatus, timeCol{&r.CreatedAt}, timeCol{&r.UpdatedAt},
		&r.LastError, nullTimeCol{&r.NextCallAt}, nullTimeCol{&r.PenaltyUntil}); err != nil {
		return ScalingRecord{}, err
	}
	r.ColdStart = time.Duration(coldStart) * time.Millisecond
	r.Window = time.Duration(window) * time.Millisecond
	r.Cooldown = time.Duration(cooldown) * time.Millisecond
	return r, nil
}

// scanScalingRef scans the columns that name a record in a change: id,
// org_id, hostname.
func scanScalingRef(s scanner) (ScalingRecord, error) {
	var r ScalingRecord
	return r, s.Scan(&r.ID, &r.OrgID, &r.Hostname)
}

// declareScaling stores fresh (a complete new record) when its bind has
// none, or else the mergeScaling of the stored record and fresh, under a
// lock on the bind.
func (b *backend) declareScaling(ctx context.Context, fresh ScalingRecord, armer string, rearm bool) (ScalingRecord, bool, error) {
	var (
		rec     ScalingRecord
		changed bool
	)
	err := b.write(ctx, func(tx *txn) error {
		d := b.d
		// Lock the bind's row, or insert it. On PostgreSQL each statement
		// sees what was committed before it began (READ COMMITTED): an
		// insert that finds the bind taken has waited for the inserting
		// transaction to commit, so the next lock attempt sees its row.
		// Another server declaring the bind at once therefore either
		// merges into this record or this one merges into its, and no
		// armer is lost. On SQLite the write transaction holds the file's
		// write lock from the read on, and the first attempt decides.
		for range declareTries {
			old, err := scanScaling(tx.QueryRowContext(ctx,
				`SELECT `+scalingCols+` FROM scaling_records WHERE org_id = $1 AND hostname = $2 AND path = $3`+d.forUpdate,
				fresh.OrgID, fresh.Hostname, fresh.Path))
			if err == nil {
				rec, changed = mergeScaling(old, fresh, armer, rearm)
				_, err = tx.ExecContext(ctx, `UPDATE scaling_records SET url = $2, secret = $3,
					min_instances = $4, max_instances = $5, cold_start_ms = $6, window_ms = $7, cooldown_ms = $8,
					target_utilization = $9, armed_by = $10, conflict = $11, disarmed = $12,
					consecutive_failures = $13, updated_at = $14, next_call_at = $15
					WHERE id = $1`,
					rec.ID, rec.URL, rec.Secret, rec.Min, rec.Max,
					rec.ColdStart.Milliseconds(), rec.Window.Milliseconds(), rec.Cooldown.Milliseconds(),
					rec.TargetUtilization, d.list(rec.ArmedBy), rec.Conflict, rec.Disarmed,
					rec.ConsecutiveFailures, d.time(rec.UpdatedAt), d.timeOrNil(rec.NextCallAt))
				if err != nil {
					return err
				}
				return tx.announce(ctx, scalingChange(ChangeScalingUpdated, rec))
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return err
			}
			r := fresh
			n, err := affected(tx.ExecContext(ctx, `INSERT INTO scaling_records (`+scalingCols+`)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24)
				ON CONFLICT (org_id, hostname, path) DO NOTHING`,
				r.ID, r.OrgID, r.Hostname, r.Path, r.URL, r.Secret, r.Min, r.Max,
				r.ColdStart.Milliseconds(), r.Window.Milliseconds(), r.Cooldown.Milliseconds(), r.TargetUtilization,
				d.list(r.ArmedBy), r.Conflict, r.Disarmed,
				r.ConsecutiveFailures, d.timeOrNil(r.LastCallAt), r.LastReason, r.LastStatus, d.time(r.CreatedAt), d.time(r.UpdatedAt),
				r.LastError, d.timeOrNil(r.NextCallAt), d.timeOrNil(r.PenaltyUntil)))
			if err != nil {
				return err
			}
			if n == 1 {
				rec, changed = r, true
				return tx.announce(ctx, scalingChange(ChangeScalingUpdated, rec))
			}
			// Another transaction inserted the bind first: lock its row.
		}
		return fmt.Errorf("bind inserted and deleted by others %d times in a row", declareTries)
	})
	if err != nil {
		return ScalingRecord{}, false, err
	}
	return rec, changed, nil
}

func (b *backend) scalingRecord(ctx context.Context, orgID, id string) (ScalingRecord, error) {
	return queryRow(ctx, b, scanScaling,
		`SELECT `+scalingCols+` FROM scaling_records WHERE id = $1 AND ($2 = '' OR org_id = $2)`, id, orgID)
}

func (b *backend) scalingRecordByBind(ctx context.Context, orgID, hostname, path string) (ScalingRecord, error) {
	return queryRow(ctx, b, scanScaling,
		`SELECT `+scalingCols+` FROM scaling_records WHERE hostname = $2 AND path = $3 AND ($1 = '' OR org_id = $1)
		ORDER BY updated_at DESC, seq DESC LIMIT 1`, orgID, hostname, path)
}

func (b *backend) listScalingRecords(ctx context.Context, orgID string) ([]ScalingRecord, error) {
	return queryRows(ctx, b, scanScaling,
		`SELECT `+scalingCols+` FROM scaling_records WHERE ($1 = '' OR org_id = $1) ORDER BY updated_at DESC, seq DESC`, orgID)
}

// recordScalingCall stores c on the record and deletes c.Holder's lease of
// it, in one transaction, by the store's clock: a zero c.At is now, and
// c.NextCallIn and c.PenaltyFor count from c.At. A c.Generation older
// than the record's latest lease stores nothing (ErrConflict).
func (b *backend) recordScalingCall(ctx context.Context, id string, c ScalingCall) (ScalingRecord, error) {
	var rec ScalingRecord
	err := b.write(ctx, func(tx *txn) error {
		var gen int64
		err := tx.QueryRowContext(ctx, `SELECT lease_generation FROM scaling_records WHERE id = $1`+b.d.forUpdate, id).Scan(&gen)
		if err != nil {
			return err
		}
		if c.Generation > 0 && gen > c.Generation {
			return fmt.Errorf("%w: the call's lease (generation %d) was taken over (generation %d)", ErrConflict, c.Generation, gen)
		}
		if c.At.IsZero() {
			if c.At, err = b.clockIn(ctx, tx); err != nil {
				return err
			}
		}
		if c.NextCallIn > 0 {
			c.NextCallAt = stamp(c.At.Add(c.NextCallIn))
		}
		if c.PenaltyFor > 0 {
			c.PenaltyUntil = stamp(c.At.Add(c.PenaltyFor))
		}
		rec, err = scanScaling(tx.QueryRowContext(ctx,
			`UPDATE scaling_records SET last_call_at = $2, last_reason = $3, last_status = $4,
			consecutive_failures = $5, disarmed = $6, last_error = $7, next_call_at = $8, penalty_until = $9
			WHERE id = $1 RETURNING `+scalingCols,
			id, b.d.time(c.At), c.Reason, c.Status, c.ConsecutiveFailures, c.Disarmed, c.Err,
			b.d.timeOrNil(timePtr(c.NextCallAt)), b.d.timeOrNil(timePtr(c.PenaltyUntil))))
		if err != nil {
			return err
		}
		if c.Holder != "" {
			if _, err := tx.ExecContext(ctx, `DELETE FROM scaling_leases WHERE record_id = $1 AND holder = $2`, id, c.Holder); err != nil {
				return err
			}
		}
		return tx.announce(ctx, scalingChange(callChangeKind(c), rec))
	})
	if err != nil {
		return ScalingRecord{}, err
	}
	return rec, nil
}

// acquireScalingLease reads the record and its lease under a lock on the
// record, then the store's clock, decides with leaseVerdict, and when the
// lease is granted takes a call from the shared budget (want.CallsPerMinute)
// and the next lease generation under the lock of the one scaling_cluster
// row, and stores the lease.
func (b *backend) acquireScalingLease(ctx context.Context, want ScalingLease, ttl time.Duration) (ScalingLease, ScalingRecord, bool, error) {
	var (
		got ScalingLease
		rec ScalingRecord
		ok  bool
	)
	err := b.write(ctx, func(tx *txn) error {
		// The record's row lock (or the writer) makes every server's
		// attempt on the record take turns: the lease row may not exist
		// yet to be locked.
		var err error
		rec, err = scanScaling(tx.QueryRowContext(ctx,
			`SELECT `+scalingCols+` FROM scaling_records WHERE id = $1`+b.d.forUpdate, want.RecordID))
		if err != nil {
			return err
		}
		var held *ScalingLease
		h := ScalingLease{RecordID: want.RecordID}
		err = tx.QueryRowContext(ctx, `SELECT holder, reason, current_instances, desired_instances, idempotency_key,
			acquired_at, expires_at, generation FROM scaling_leases WHERE record_id = $1`, want.RecordID).
			Scan(&h.Holder, &h.Reason, &h.Current, &h.Desired, &h.IdempotencyKey, timeCol{&h.AcquiredAt}, timeCol{&h.ExpiresAt}, &h.Generation)
		switch {
		case err == nil:
			held = &h
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		// Read after the lock, so that a lease's lifetime starts when it
		// is taken, not before a wait for the lock.
		now, err := b.clockIn(ctx, tx)
		if err != nil {
			return err
		}
		got, ok = leaseVerdict(rec, held, want, now, ttl)
		if !ok {
			return nil
		}
		// Every lease taken, of any record, takes turns on this row; they
		// are few (bounded by the budget) and short.
		var (
			gen, units int64
			at         *time.Time
		)
		if err := tx.QueryRowContext(ctx, `SELECT lease_generation, budget_units, budget_at FROM scaling_cluster WHERE id = 1`+b.d.forUpdate).
			Scan(&gen, &units, nullTimeCol{&at}); err != nil {
			return err
		}
		budgetAt := at
		if want.CallsPerMinute > 0 {
			var taken bool
			var retry time.Time
			units, taken, retry = takeBudget(units, at, want.CallsPerMinute, now)
			if !taken {
				got, ok = ScalingLease{RetryAt: retry}, false
				return nil
			}
			budgetAt = &now
		}
		got.Generation = gen + 1
		got.CallsPerMinute = 0
		if _, err := tx.ExecContext(ctx, `UPDATE scaling_cluster SET lease_generation = $1, budget_units = $2, budget_at = $3 WHERE id = 1`,
			got.Generation, units, b.d.timeOrNil(budgetAt)); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE scaling_records SET lease_generation = $2 WHERE id = $1`, got.RecordID, got.Generation); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO scaling_leases (record_id, holder, reason, current_instances,
			desired_instances, idempotency_key, acquired_at, expires_at, generation) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
			ON CONFLICT (record_id) DO UPDATE SET holder = $2, reason = $3, current_instances = $4,
			desired_instances = $5, idempotency_key = $6, acquired_at = $7, expires_at = $8, generation = $9`,
			got.RecordID, got.Holder, got.Reason, got.Current, got.Desired, got.IdempotencyKey,
			b.d.time(got.AcquiredAt), b.d.time(got.ExpiresAt), got.Generation)
		return err
	})
	if err != nil {
		return ScalingLease{}, ScalingRecord{}, false, err
	}
	return got, rec, ok, nil
}

func (b *backend) deleteScalingRecord(ctx context.Context, orgID, id string) error {
	return b.write(ctx, func(tx *txn) error {
		r, err := scanScalingRef(tx.QueryRowContext(ctx,
			`DELETE FROM scaling_records WHERE id = $1 AND ($2 = '' OR org_id = $2) RETURNING id, org_id, hostname`, id, orgID))
		if err != nil {
			return err
		}
		return tx.announce(ctx, scalingChange(ChangeScalingDeleted, r))
	})
}

// releaseScalingArmer and deleteStaleScalingRecords announce their changes
// in record ID order and return the deleted records' IDs in that order,
// never nil.
func (b *backend) releaseScalingArmer(ctx context.Context, armer string) ([]string, error) {
	return b.writeIDs(ctx, func(tx *txn) ([]string, error) {
		// Lock every record armer armed, in ID order so that concurrent
		// releases and sweeps cannot deadlock. A declaration holding one
		// of them finishes first and is then seen: its armer is kept.
		rows, err := tx.QueryContext(ctx,
			`SELECT `+scalingCols+` FROM scaling_records WHERE `+b.d.memberOf("$1", "armed_by")+` ORDER BY id`+b.d.forUpdate, armer)
		armed, err := collect(b.d, rows, err, scanScaling)
		if err != nil {
			return nil, err
		}
		var ids []string
		for _, r := range armed {
			r.ArmedBy = releaseArmer(r.ArmedBy, armer)
			kind := ChangeScalingUpdated
			if len(r.ArmedBy) == 0 {
				kind = ChangeScalingDeleted
				_, err = tx.ExecContext(ctx, `DELETE FROM scaling_records WHERE id = $1`, r.ID)
				ids = append(ids, r.ID)
			} else {
				_, err = tx.ExecContext(ctx, `UPDATE scaling_records SET armed_by = $2 WHERE id = $1`, r.ID, b.d.list(r.ArmedBy))
			}
			if err == nil {
				err = tx.announce(ctx, scalingChange(kind, r))
			}
			if err != nil {
				return nil, err
			}
		}
		return ids, nil
	})
}

func (b *backend) deleteStaleScalingRecords(ctx context.Context, cutoff time.Time) ([]string, error) {
	return b.writeIDs(ctx, func(tx *txn) ([]string, error) {
		// Lock in ID order, as releaseScalingArmer does. A record being
		// refreshed is rechecked once the refresh commits, and survives.
		rows, err := tx.QueryContext(ctx, `DELETE FROM scaling_records WHERE id IN (
			SELECT id FROM scaling_records WHERE updated_at < $1 ORDER BY id`+b.d.forUpdate+`
		) RETURNING id, org_id, hostname`, b.d.time(cutoff))
		deleted, err := collect(b.d, rows, err, scanScalingRef)
		if err != nil {
			return nil, err
		}
		// RETURNING gives no order: announce in ID order.
		slices.SortFunc(deleted, func(x, y ScalingRecord) int { return strings.Compare(x.ID, y.ID) })
		ids := make([]string, 0, len(deleted))
		for _, r := range deleted {
			ids = append(ids, r.ID)
			if err := tx.announce(ctx, scalingChange(ChangeScalingDeleted, r)); err != nil {
				return nil, err
			}
		}
		return ids, nil
	})
}

// writeIDs runs fn in a write transaction (see write) and returns the IDs
// it returned, never nil.
func (b *backend) writeIDs(ctx context.Context, fn func(tx *txn) ([]string, error)) ([]string, error) {
	var ids []string
	err := b.write(ctx, func(tx *txn) error {
		var err error
		ids, err = fn(tx)
		return err
	})
	if err != nil {
		return nil, err
	}
	if ids == nil {
		ids = []string{}
	}
	return ids, nil
}

// The automatic TLS storage.

func (b *backend) acmePut(ctx context.Context, key string, value []byte, at time.Time) error {
	_, err := b.w.ExecContext(ctx,
		`INSERT INTO acme_data (key, value, modified_at) VALUES ($1, $2, $3)
		 ON CONFLICT (key) DO UPDATE SET value = excluded.value, modified_at = excluded.modified_at`,
		key, value, b.d.time(at))
	return b.d.mapErr(err)
}

func (b *backend) acmeGet(ctx context.Context, key string) ([]byte, error) {
	var v []byte
	err := b.r.QueryRowContext(ctx, `SELECT value FROM acme_data WHERE key = $1`, key).Scan(&v)
	return v, b.d.mapErr(err)
}

// acmeDelete deletes key and the keys under key + "/".
func (b *backend) acmeDelete(ctx context.Context, key string) (int64, error) {
	n, err := affected(b.w.ExecContext(ctx, `DELETE FROM acme_data WHERE key = $1 OR key LIKE $2 ESCAPE '\'`, key, acmeUnder(key)))
	return n, b.d.mapErr(err)
}

func (b *backend) acmeList(ctx context.Context, prefix string) ([]ACMEItem, error) {
	items, err := queryRows(ctx, b, func(s scanner) (ACMEItem, error) {
		var it ACMEItem
		return it, s.Scan(&it.Key, &it.Size, timeCol{&it.Modified})
	}, `SELECT key, length(value), modified_at FROM acme_data WHERE $1 = '' OR key = $1 OR key LIKE $2 ESCAPE '\' ORDER BY key`,
		prefix, acmeUnder(prefix))
	if len(items) == 0 {
		return nil, err // none is nil, as it always was
	}
	return items, err
}

// acmeLock takes or extends the lock when it is free, expired or owner's,
// and reports whether owner holds it.
func (b *backend) acmeLock(ctx context.Context, name, owner string, now, until time.Time) (bool, error) {
	n, err := affected(b.w.ExecContext(ctx,
		`INSERT INTO acme_locks (name, owner, expires_at) VALUES ($1, $2, $3)
		 ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
		 WHERE acme_locks.owner = $2 OR acme_locks.expires_at <= $4`,
		name, owner, b.d.time(until), b.d.time(now)))
	return n == 1, b.d.mapErr(err)
}

func (b *backend) acmeUnlock(ctx context.Context, name, owner string) error {
	_, err := b.w.ExecContext(ctx, `DELETE FROM acme_locks WHERE name = $1 AND owner = $2`, name, owner)
	return b.d.mapErr(err)
}

// Webhooks.

const webhookCols = `id, org_id, url, secret, events, created_at, format`

func scanWebhook(s scanner) (Webhook, error) {
	var w Webhook
	err := s.Scan(&w.ID, &w.OrgID, &w.URL, &w.Secret, listCol{&w.Events}, timeCol{&w.CreatedAt}, &w.Format)
	return w, err
}

func (b *backend) insertWebhook(ctx context.Context, w Webhook) error {
	_, err := b.w.ExecContext(ctx,
		`INSERT INTO webhooks (`+webhookCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		w.ID, w.OrgID, w.URL, w.Secret, b.d.list(w.Events), b.d.time(w.CreatedAt), w.Format)
	return b.d.mapErr(err)
}

func (b *backend) listWebhooks(ctx context.Context, orgID string) ([]Webhook, error) {
	return queryRows(ctx, b, scanWebhook,
		`SELECT `+webhookCols+` FROM webhooks WHERE ($1 = '' OR org_id = $1) ORDER BY created_at DESC, seq DESC`, orgID)
}

func (b *backend) deleteWebhook(ctx context.Context, orgID, id string) error {
	var org string
	err := b.w.QueryRowContext(ctx,
		`DELETE FROM webhooks WHERE id = $1 AND ($2 = '' OR org_id = $2) RETURNING org_id`, id, orgID).Scan(&org)
	return b.d.mapErr(err)
}

// webhooksFor returns orgID's webhooks whose events hold event, oldest
// first.
func (b *backend) webhooksFor(ctx context.Context, orgID, event string) ([]Webhook, error) {
	return queryRows(ctx, b, scanWebhook,
		`SELECT `+webhookCols+` FROM webhooks WHERE org_id = $1 AND `+b.d.memberOf("$2", "events")+` ORDER BY created_at, seq`,
		orgID, event)
}

// Webhook deliveries.

const deliveryCols = `id, webhook_id, org_id, event, status, attempts, last_error, last_status_code,
	response_time_ms, body, created_at, updated_at`

func scanDelivery(s scanner) (WebhookDelivery, error) {
	var (
		d  WebhookDelivery
		ms int64
	)
	if err := s.Scan(&d.ID, &d.WebhookID, &d.OrgID, &d.Event, &d.Status, &d.Attempts, &d.LastError,
		&d.LastStatusCode, &ms, &d.Body, timeCol{&d.CreatedAt}, timeCol{&d.UpdatedAt}); err != nil {
		return WebhookDelivery{}, err
	}
	d.ResponseTime = time.Duration(ms) * time.Millisecond
	if d.Body == nil {
		d.Body = []byte{}
	}
	return d, nil
}

// recordWebhookDelivery updates the stored delivery d.ID of d.WebhookID
// (not its body or created_at), or else inserts d and deletes the
// subscription's deliveries beyond the keep newest, in one transaction,
// and returns the row as stored.
func (b *backend) recordWebhookDelivery(ctx context.Context, d WebhookDelivery, keep int) (WebhookDelivery, error) {
	var out WebhookDelivery
	err := b.write(ctx, func(tx *txn) error {
		// Writers of one subscription's log take turns, so that the
		// bound holds exactly and an update never races its insert.
		if err := tx.lock(ctx, "webhook_deliveries:"+d.WebhookID); err != nil {
			return err
		}
		var err error
		out, err = scanDelivery(tx.QueryRowContext(ctx,
			`UPDATE webhook_deliveries SET status = $3, attempts = $4, last_error = $5, last_status_code = $6,
				response_time_ms = $7, updated_at = $8
			WHERE id = $1 AND webhook_id = $2 RETURNING `+deliveryCols,
			d.ID, d.WebhookID, d.Status, d.Attempts, d.LastError, d.LastStatusCode,
			d.ResponseTime.Milliseconds(), b.d.time(d.UpdatedAt)))
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		out = d
		if _, err := tx.ExecContext(ctx,
			`INSERT INTO webhook_deliveries (`+deliveryCols+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
			d.ID, d.WebhookID, d.OrgID, d.Event, d.Status, d.Attempts, d.LastError, d.LastStatusCode,
			d.ResponseTime.Milliseconds(), d.Body, b.d.time(d.CreatedAt), b.d.time(d.UpdatedAt)); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx,
			`DELETE FROM webhook_deliveries WHERE webhook_id = $1 AND seq NOT IN
				(SELECT seq FROM webhook_deliveries WHERE webhook_id = $1 ORDER BY seq DESC LIMIT $2)`,
			d.WebhookID, keep)
		return err
	})
	return out, err
}

func (b *backend) listWebhookDeliveries(ctx context.Context, orgID, webhookID string, limit int) ([]WebhookDelivery, error) {
	return queryRows(ctx, b, scanDelivery,
		`SELECT `+deliveryCols+` FROM webhook_deliveries
		WHERE webhook_id = $1 AND ($2 = '' OR org_id = $2) ORDER BY seq DESC LIMIT $3`, webhookID, orgID, limit)
}

func (b *backend) webhookDelivery(ctx context.Context, orgID, webhookID, id string) (WebhookDelivery, error) {
	return queryRow(ctx, b, scanDelivery,
		`SELECT `+deliveryCols+` FROM webhook_deliveries
		WHERE id = $1 AND webhook_id = $2 AND ($3 = '' OR org_id = $3)`, id, webhookID, orgID)
}

// Hostname ownership.

// setOrgHostnames replaces orgID's patterns (validated, sorted) after
// checking them with firstOverlap against every stored pattern, both under
// a lock that serializes replacements.
func (b *backend) setOrgHostnames(ctx context.Context, orgID string, patterns []string) error {
	return b.write(ctx, func(tx *txn) error {
		if err := b.lockOwned(ctx, tx, "org_hostnames", orgID); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT pattern, org_id FROM org_hostnames`)
		stored, err := collect(b.d, rows, err, scanOrgHostname)
		if err != nil {
			return err
		}
		if oe := firstOverlap(orgID, patterns, stored); oe != nil {
			return oe
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM org_hostnames WHERE org_id = $1`, orgID); err != nil {
			return err
		}
		if len(patterns) > 0 {
			args := make([]any, 0, 2*len(patterns))
			for _, p := range patterns {
				args = append(args, p, orgID)
			}
			if _, err := tx.ExecContext(ctx,
				`INSERT INTO org_hostnames (pattern, org_id) VALUES `+valuesRows(len(patterns), 2), args...); err != nil {
				return err
			}
		}
		return tx.announce(ctx, Change{Kind: ChangeOrgHostnames, OrgID: orgID})
	})
}

// lockOwned begins the replacement of what orgID owns in table (its
// hostnames or ports): readers stay on, but every replacement, on every
// server, takes its turn, so that the overlap check sees the last one;
// ErrNotFound when orgID does not exist.
func (b *backend) lockOwned(ctx context.Context, tx *txn, table, orgID string) error {
	if lock := b.d.lockTable(table); lock != "" {
		if _, err := tx.ExecContext(ctx, lock); err != nil {
			return err
		}
	}
	var exists int
	if err := tx.QueryRowContext(ctx, `SELECT 1 FROM orgs WHERE id = $1`, orgID).Scan(&exists); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: org %s", ErrNotFound, orgID)
		}
		return err
	}
	return nil
}

func scanOrgHostname(s scanner) (OrgHostname, error) {
	var h OrgHostname
	return h, s.Scan(&h.Pattern, &h.OrgID)
}

func (b *backend) listOrgHostnames(ctx context.Context, orgID string) ([]OrgHostname, error) {
	return queryRows(ctx, b, scanOrgHostname,
		`SELECT pattern, org_id FROM org_hostnames WHERE ($1 = '' OR org_id = $1) ORDER BY pattern`, orgID)
}

// Audit.

const auditCols = `id, seq, prev_hash, hash, at, org_id, event, actor, hostname, detail`

func scanAudit(s scanner) (AuditEntry, error) {
	var (
		e   AuditEntry
		seq sql.NullInt64
	)
	err := s.Scan(&e.ID, &seq, &e.PrevHash, &e.Hash, timeCol{&e.At}, &e.OrgID, &e.Event, &e.Actor, &e.Hostname, &e.Detail)
	e.Seq = seq.Int64
	return e, err
}

// lockAuditHead reads the chain head, locking its row for the rest of tx:
// appends by every server on the database queue here (on SQLite, behind
// the one writer), so each sees the head the one before it wrote and the
// chain stays linear.
func lockAuditHead(ctx context.Context, tx *txn) (int64, []byte, error) {
	var (
		seq  int64
		hash []byte
	)
	err := tx.QueryRowContext(ctx, `SELECT seq, hash FROM audit_chain_head WHERE id = 1`+tx.d.forUpdate).Scan(&seq, &hash)
	return seq, hash, err
}

// appendAudit inserts e (its At already stamped) as the next link of the
// chain, with the chain head locked for the transaction, and returns it
// with ID, Seq, PrevHash and Hash set.
func (b *backend) appendAudit(ctx context.Context, e AuditEntry) (AuditEntry, error) {
	err := b.write(ctx, func(tx *txn) error {
		seq, hash, err := lockAuditHead(ctx, tx)
		if err != nil {
			return err
		}
		e = chainAfter(e, seq, hash)
		if err := tx.QueryRowContext(ctx,
			`INSERT INTO audit (seq, prev_hash, hash, at, org_id, event, actor, hostname, detail)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id`,
			e.Seq, e.PrevHash, e.Hash, b.d.time(e.At), e.OrgID, e.Event, e.Actor, e.Hostname, e.Detail).Scan(&e.ID); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE audit_chain_head SET seq = $1, hash = $2 WHERE id = 1`, e.Seq, e.Hash)
		return err
	})
	if err != nil {
		return AuditEntry{}, err
	}
	return e, nil
}

// backfillAudit chains the entries that have no chain columns and an ID up
// to the one migration 0006 recorded (written before migration 0004),
// oldest ID first, after the head, spends that record in the same
// transaction, and returns how many it chained. Once the record is spent
// it chains nothing.
func (b *backend) backfillAudit(ctx context.Context) (int64, error) {
	var n int64
	err := b.write(ctx, func(tx *txn) error {
		seq, hash, err := lockAuditHead(ctx, tx) // first: a server starting beside this one waits, then finds the record spent
		if err != nil {
			return err
		}
		var through int64
		if err := tx.QueryRowContext(ctx, `SELECT through_id FROM audit_backfill WHERE id = 1`).Scan(&through); err != nil || through == 0 {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT `+auditCols+` FROM audit WHERE hash IS NULL AND id <= $1 ORDER BY id`, through)
		pending, err := collect(b.d, rows, err, scanAudit)
		if err != nil {
			return err
		}
		for _, e := range pending {
			e = chainAfter(e, seq, hash)
			if _, err := tx.ExecContext(ctx, `UPDATE audit SET seq = $2, prev_hash = $3, hash = $4 WHERE id = $1`,
				e.ID, e.Seq, e.PrevHash, e.Hash); err != nil {
				return err
			}
			seq, hash = e.Seq, e.Hash
		}
		n = int64(len(pending))
		if n > 0 {
			if _, err := tx.ExecContext(ctx, `UPDATE audit_chain_head SET seq = $1, hash = $2 WHERE id = 1`, seq, hash); err != nil {
				return err
			}
		}
		_, err = tx.ExecContext(ctx, `UPDATE audit_backfill SET through_id = 0 WHERE id = 1`)
		return err
	})
	return n, err
}

// readAuditChain calls fn with every chained entry in Seq order until fn
// returns false, then returns the head and the oldest unchained entry, all
// read from one snapshot.
func (b *backend) readAuditChain(ctx context.Context, fn func(AuditEntry) bool) (auditChain, error) {
	var c auditChain
	err := b.read(ctx, func(tx *cachedTx) error {
		if err := tx.QueryRowContext(ctx, `SELECT seq, hash FROM audit_chain_head WHERE id = 1`).Scan(&c.headSeq, &c.headHash); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT `+auditCols+` FROM audit WHERE seq IS NOT NULL ORDER BY seq`)
		if err != nil {
			return err
		}
		for rows.Next() {
			e, err := scanAudit(rows)
			if err != nil {
				return errors.Join(err, rows.Close())
			}
			if !fn(e) {
				break
			}
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return err
		}
		e, err := scanAudit(tx.QueryRowContext(ctx, `SELECT `+auditCols+` FROM audit WHERE seq IS NULL OR hash IS NULL ORDER BY id LIMIT 1`))
		switch {
		case err == nil:
			c.unchained = &e
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		return nil
	})
	return c, err
}

// Bounds of a time range that stand for no bound: every stored time lies
// between them. A bound is always a value, never NULL, so that PostgreSQL
// knows its parameter's type without a cast that SQLite would read
// otherwise.
var (
	timeFloor   = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	timeCeiling = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
)

// orFloor and orCeiling are t, or the bound that stands for none for the
// zero time.
func orFloor(t time.Time) time.Time {
	if t.IsZero() {
		return timeFloor
	}
	return t
}

func orCeiling(t time.Time) time.Time {
	if t.IsZero() {
		return timeCeiling
	}
	return t
}

func (b *backend) listAudit(ctx context.Context, q AuditQuery, alias string) ([]AuditEntry, error) {
	// A zero text filter is '' and turns its condition off, so that one
	// statement serves every combination.
	return queryRows(ctx, b, scanAudit,
		`SELECT `+auditCols+` FROM audit
		WHERE ($1 = '' OR org_id = $1) AND ($2 = '' OR event = $2 OR event = $8) AND ($3 = '' OR actor = $3)
		AND ($4 = '' OR hostname = $4) AND at >= $5 AND at < $6
		ORDER BY at DESC, id DESC LIMIT $7`,
		q.OrgID, q.Event, q.Actor, q.Hostname, b.d.time(orFloor(q.Since)), b.d.time(orCeiling(q.Until)), q.Limit, alias)
}

// Signing keys.

const signingKeyCols = `id, purpose, org_id, generation, sealed, created_at, revoked_at`

func scanSigningKey(s scanner) (SigningKey, error) {
	var k SigningKey
	err := s.Scan(&k.ID, &k.Purpose, &k.OrgID, &k.Generation, &k.Sealed, timeCol{&k.CreatedAt}, nullTimeCol{&k.RevokedAt})
	return k, err
}

// addSigningKey inserts k after checking, under a lock that serializes
// writers of the series, that k.Generation is one more than its highest
// (ErrConflict otherwise); it removes the generations below
// k.Generation-1 and, with revokeAt set, marks k.Generation-1 revoked then,
// all in one transaction.
func (b *backend) addSigningKey(ctx context.Context, k SigningKey, revokeAt *time.Time) error {
	return b.write(ctx, func(tx *txn) error {
		// Two PostgreSQL writers reading the same highest generation both
		// insert the next one: the unique (purpose, org_id, generation)
		// refuses the second, which waits for the first's commit. A writer
		// that read a stale highest one is refused by the check. (SQLite's
		// one writer runs them one after the other.)
		var top int64
		if err := tx.QueryRowContext(ctx,
			`SELECT COALESCE(MAX(generation), 0) FROM signing_keys WHERE purpose = $1 AND org_id = $2`,
			k.Purpose, k.OrgID).Scan(&top); err != nil {
			return err
		}
		if top != k.Generation-1 {
			return fmt.Errorf("%w: generation %d exists", ErrConflict, top)
		}
		if _, err := tx.ExecContext(ctx,
			`INSERT INTO signing_keys (`+signingKeyCols+`) VALUES ($1, $2, $3, $4, $5, $6, NULL)`,
			k.ID, k.Purpose, k.OrgID, k.Generation, k.Sealed, b.d.time(k.CreatedAt)); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx,
			`DELETE FROM signing_keys WHERE purpose = $1 AND org_id = $2 AND generation < $3`,
			k.Purpose, k.OrgID, k.Generation-1); err != nil {
			return err
		}
		if revokeAt != nil {
			if _, err := tx.ExecContext(ctx,
				`UPDATE signing_keys SET revoked_at = $4 WHERE purpose = $1 AND org_id = $2 AND generation = $3 AND revoked_at IS NULL`,
				k.Purpose, k.OrgID, k.Generation-1, b.d.time(*revokeAt)); err != nil {
				return err
			}
		}
		return tx.announce(ctx, Change{Kind: ChangeSigningKeys, ID: k.ID, OrgID: k.OrgID})
	})
}

// signingKeys returns every key of purpose, by org_id then generation
// descending.
func (b *backend) signingKeys(ctx context.Context, purpose string) ([]SigningKey, error) {
	return queryRows(ctx, b, scanSigningKey,
		`SELECT `+signingKeyCols+` FROM signing_keys WHERE purpose = $1 ORDER BY org_id, generation DESC`, purpose)
}

// execForTest runs raw SQL, bypassing the store's API.
func (b *backend) execForTest(ctx context.Context, query string) error {
	_, err := b.w.ExecContext(ctx, query)
	return b.d.mapErr(err)
}

// Usage.

// usageChunk bounds the rows of one multi-row INSERT of addUsage, well
// under either engine's limit on parameters (SQLite 32,766; PostgreSQL
// 65,535) at 6 a row.
const usageChunk = 1000

// addUsage increments the rows of ds (days at midnight UTC) in one
// transaction: one statement for each usageChunk rows, so that a flush
// costs a round trip or two, not one a row.
func (b *backend) addUsage(ctx context.Context, ds []UsageDelta) error {
	// One row a key: an INSERT may not upsert one row twice (PostgreSQL
	// refuses it). The order is the callers', so that concurrent
	// flushes lock rows in the same order as often as they can.
	type key struct {
		day                      time.Time
		tokenID, orgID, hostname string
	}
	merged := make([]UsageDelta, 0, len(ds))
	at := make(map[key]int, len(ds))
	for _, d := range ds {
		k := key{d.Day, d.TokenID, d.OrgID, d.Hostname}
		if i, ok := at[k]; ok {
			merged[i].Bytes += d.Bytes
			merged[i].Requests += d.Requests
			continue
		}
		at[k] = len(merged)
		merged = append(merged, d)
	}
	return b.write(ctx, func(tx *txn) error {
		for chunk := range slices.Chunk(merged, usageChunk) {
			args := make([]any, 0, 6*len(chunk))
			for _, d := range chunk {
				args = append(args, b.d.day(d.Day), d.TokenID, d.OrgID, d.Hostname, d.Bytes, d.Requests)
			}
			if _, err := tx.ExecContext(ctx,
				`INSERT INTO usage (day, token_id, org_id, hostname, bytes, requests) VALUES `+valuesRows(len(chunk), 6)+`
				ON CONFLICT (day, token_id, org_id, hostname) DO UPDATE SET bytes = usage.bytes + excluded.bytes, requests = usage.requests + excluded.requests`,
				args...); err != nil {
				return err
			}
		}
		return nil
	})
}

// sums runs query (two columns: id, sum) with args into a map.
func (b *backend) sums(ctx context.Context, query string, args ...any) (map[string]int64, error) {
	type sum struct {
		id string
		n  int64
	}
	got, err := queryRows(ctx, b, func(s scanner) (sum, error) {
		var v sum
		return v, s.Scan(&v.id, &v.n)
	}, query, args...)
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(got))
	for _, v := range got {
		out[v.id] = v.n
	}
	return out, nil
}

// usageTotals sums bytes per token on day and per org for from <= day < to.
func (b *backend) usageTotals(ctx context.Context, day, from, to time.Time, tokens, orgs []string) (map[string]int64, map[string]int64, error) {
	tt, err := b.sums(ctx,
		`SELECT token_id, CAST(SUM(bytes) AS BIGINT) FROM usage WHERE day = $1 AND `+b.d.memberOf("token_id", "$2")+` GROUP BY token_id`,
		b.d.day(day), b.d.list(tokens))
	if err != nil {
		return nil, nil, err
	}
	ot, err := b.sums(ctx,
		`SELECT org_id, CAST(SUM(bytes) AS BIGINT) FROM usage WHERE day >= $1 AND day < $2 AND `+b.d.memberOf("org_id", "$3")+` GROUP BY org_id`,
		b.d.day(from), b.d.day(to), b.d.list(orgs))
	if err != nil {
		return nil, nil, err
	}
	return tt, ot, nil
}

// queryUsage returns the rows q selects, newest day first, at most limit.
func (b *backend) queryUsage(ctx context.Context, q UsageQuery, limit int) ([]UsageRow, error) {
	return queryRows(ctx, b, func(s scanner) (UsageRow, error) {
		var u UsageRow
		return u, s.Scan(dayCol{&u.Day}, &u.TokenID, &u.OrgID, &u.Hostname, &u.Bytes, &u.Requests)
	}, `SELECT day, token_id, org_id, hostname, bytes, requests FROM usage
		 WHERE ($1 = '' OR org_id = $1) AND ($2 = '' OR token_id = $2) AND ($3 = '' OR hostname = $3)
		   AND day >= $4 AND day <= $5
		 ORDER BY day DESC, org_id, token_id, hostname LIMIT $6`,
		q.OrgID, q.TokenID, q.Hostname, b.d.day(orFloor(q.From)), b.d.day(orCeiling(q.To)), limit)
}
