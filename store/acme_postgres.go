package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

func (b *pgBackend) acmePut(ctx context.Context, key string, value []byte, at time.Time) error {
	return b.write(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx,
			`INSERT INTO acme_data (key, value, modified_at) VALUES ($1, $2, $3)
			 ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, modified_at = EXCLUDED.modified_at`,
			key, value, at)
		return err
	})
}

func (b *pgBackend) acmeGet(ctx context.Context, key string) ([]byte, error) {
	var v []byte
	err := b.pool.QueryRow(ctx, `SELECT value FROM acme_data WHERE key = $1`, key).Scan(&v)
	return v, pgErr(err)
}

func (b *pgBackend) acmeDelete(ctx context.Context, key string) (int64, error) {
	var n int64
	err := b.write(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM acme_data WHERE key = $1 OR key LIKE $2 ESCAPE '\'`, key, acmeUnder(key))
		n = tag.RowsAffected()
		return err
	})
	return n, err
}

func (b *pgBackend) acmeList(ctx context.Context, prefix string) ([]ACMEItem, error) {
	rows, err := b.pool.Query(ctx,
		`SELECT key, length(value), modified_at FROM acme_data WHERE $1 = '' OR key = $1 OR key LIKE $2 ESCAPE '\' ORDER BY key`,
		prefix, acmeUnder(prefix))
	if err != nil {
		return nil, pgErr(err)
	}
	defer rows.Close()
	var out []ACMEItem
	for rows.Next() {
		var it ACMEItem
		var size int32
		if err := rows.Scan(&it.Key, &size, &it.Modified); err != nil {
			return nil, pgErr(err)
		}
		it.Size = int64(size)
		it.Modified = it.Modified.UTC()
		out = append(out, it)
	}
	return out, pgErr(rows.Err())
}

func (b *pgBackend) acmeLock(ctx context.Context, name, owner string, now, until time.Time) (bool, error) {
	var held bool
	err := b.write(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx,
			`INSERT INTO acme_locks (name, owner, expires_at) VALUES ($1, $2, $3)
			 ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at
			 WHERE acme_locks.owner = $2 OR acme_locks.expires_at <= $4`,
			name, owner, until, now)
		held = tag.RowsAffected() == 1
		return err
	})
	return held, err
}

func (b *pgBackend) acmeUnlock(ctx context.Context, name, owner string) error {
	return b.write(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `DELETE FROM acme_locks WHERE name = $1 AND owner = $2`, name, owner)
		return err
	})
}
