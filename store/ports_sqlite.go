package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/aperio-dev/aperio/internal/portspec"
)

func (b *sqliteBackend) setOrgPorts(ctx context.Context, orgID string, rs []portspec.Range) error {
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
		rows, err := tx.QueryContext(ctx, `SELECT lo, hi, org_id FROM org_ports`)
		if err != nil {
			return err
		}
		stored, err := sqliteCollect(rows, sqliteScanOrgPorts)
		if err != nil {
			return err
		}
		if oe := firstPortOverlap(orgID, rs, stored); oe != nil {
			return oe
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM org_ports WHERE org_id = ?1`, orgID); err != nil {
			return err
		}
		for _, r := range rs {
			if _, err := tx.ExecContext(ctx, `INSERT INTO org_ports (lo, hi, org_id) VALUES (?1, ?2, ?3)`, r.Lo, r.Hi, orgID); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	b.publish(Change{Kind: ChangeOrgPorts, OrgID: orgID})
	return nil
}

func sqliteScanOrgPorts(s scanner) (OrgPorts, error) {
	var p OrgPorts
	if err := s.Scan(&p.Lo, &p.Hi, &p.OrgID); err != nil {
		return OrgPorts{}, sqliteErr(err)
	}
	return p, nil
}

func (b *sqliteBackend) listOrgPorts(ctx context.Context, orgID string) ([]OrgPorts, error) {
	rows, err := b.r.QueryContext(ctx,
		`SELECT lo, hi, org_id FROM org_ports WHERE (?1 = '' OR org_id = ?1) ORDER BY lo`, orgID)
	if err != nil {
		return nil, sqliteErr(err)
	}
	return sqliteCollect(rows, sqliteScanOrgPorts)
}
