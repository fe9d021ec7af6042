package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/aperio-dev/aperio/internal/portspec"
)

func (b *pgBackend) setOrgPorts(ctx context.Context, orgID string, rs []portspec.Range) error {
	return b.write(ctx, func(tx pgx.Tx) error {
		// EXCLUSIVE lets readers on but serializes every replacement, on
		// every server, so that the overlap check sees the last one.
		if _, err := tx.Exec(ctx, `LOCK TABLE org_ports IN EXCLUSIVE MODE`); err != nil {
			return err
		}
		var one int
		if err := tx.QueryRow(ctx, `SELECT 1 FROM orgs WHERE id = $1`, orgID).Scan(&one); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("%w: org %s", ErrNotFound, orgID)
			}
			return err
		}
		rows, err := tx.Query(ctx, `SELECT lo, hi, org_id FROM org_ports`)
		stored, err := pgCollect(rows, err, pgScanOrgPorts)
		if err != nil {
			return err
		}
		if oe := firstPortOverlap(orgID, rs, stored); oe != nil {
			return oe
		}
		if _, err := tx.Exec(ctx, `DELETE FROM org_ports WHERE org_id = $1`, orgID); err != nil {
			return err
		}
		for _, r := range rs {
			if _, err := tx.Exec(ctx, `INSERT INTO org_ports (lo, hi, org_id) VALUES ($1, $2, $3)`, r.Lo, r.Hi, orgID); err != nil {
				return err
			}
		}
		return notify(ctx, tx, Change{Kind: ChangeOrgPorts, OrgID: orgID})
	})
}

func pgScanOrgPorts(r pgx.Row) (OrgPorts, error) {
	var p OrgPorts
	if err := r.Scan(&p.Lo, &p.Hi, &p.OrgID); err != nil {
		return OrgPorts{}, pgErr(err)
	}
	return p, nil
}

func (b *pgBackend) listOrgPorts(ctx context.Context, orgID string) ([]OrgPorts, error) {
	rows, err := b.pool.Query(ctx,
		`SELECT lo, hi, org_id FROM org_ports WHERE ($1 = '' OR org_id = $1) ORDER BY lo`, orgID)
	return pgCollect(rows, err, pgScanOrgPorts)
}
