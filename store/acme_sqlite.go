package store

import (
	"context"
	"database/sql"
	"time"
)

func (b *sqliteBackend) acmePut(ctx context.Context, key string, value []byte, at time.Time) error {
	return b.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx,
			`INSERT INTO acme_data (key, value, modified_at) VALUES (?, ?, ?)
			 ON CONFLICT (key) DO UPDATE SET value = excluded.value, modified_at = excluded.modified_at`,
			key, value, sqliteFormat(at))
		return err
	})
}

func (b *sqliteBackend) acmeGet(ctx context.Context, key string) ([]byte, error) {
	var v []byte
	err := b.r.QueryRowContext(ctx, `SELECT value FROM acme_data WHERE key = ?`, key).Scan(&v)
	return v, sqliteErr(err)
}

func (b *sqliteBackend) acmeDelete(ctx context.Context, key string) (int64, error) {
	var n int64
	err := b.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM acme_data WHERE key = ? OR key LIKE ? ESCAPE '\'`, key, acmeUnder(key))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

func (b *sqliteBackend) acmeList(ctx context.Context, prefix string) ([]ACMEItem, error) {
	rows, err := b.r.QueryContext(ctx,
		`SELECT key, length(value), modified_at FROM acme_data WHERE ?1 = '' OR key = ?1 OR key LIKE ?2 ESCAPE '\' ORDER BY key`,
		prefix, acmeUnder(prefix))
	if err != nil {
		return nil, sqliteErr(err)
	}
	defer rows.Close()
	var out []ACMEItem
	for rows.Next() {
		var it ACMEItem
		var at string
		if err := rows.Scan(&it.Key, &it.Size, &at); err != nil {
			return nil, sqliteErr(err)
		}
		if it.Modified, err = sqliteParse(at); err != nil {
			return nil, err
		}
		out = append(out, it)
	}
	return out, sqliteErr(rows.Err())
}

func (b *sqliteBackend) acmeLock(ctx context.Context, name, owner string, now, until time.Time) (bool, error) {
	var held bool
	err := b.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx,
			`INSERT INTO acme_locks (name, owner, expires_at) VALUES (?1, ?2, ?3)
			 ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
			 WHERE acme_locks.owner = ?2 OR acme_locks.expires_at <= ?4`,
			name, owner, sqliteFormat(until), sqliteFormat(now))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		held = n == 1
		return err
	})
	return held, err
}

func (b *sqliteBackend) acmeUnlock(ctx context.Context, name, owner string) error {
	return b.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM acme_locks WHERE name = ? AND owner = ?`, name, owner)
		return err
	})
}
