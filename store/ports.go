package store

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/aperio-dev/aperio/internal/portspec"
)

// MaxOrgPorts bounds the port ranges one organization may own, as a
// token's allow_tcp_ports are bounded.
const MaxOrgPorts = portspec.MaxSpecs

// OrgPorts is one range of public ports an organization owns.
type OrgPorts struct {
	// Range is inclusive; no other organization's range overlaps it.
	portspec.Range
	// OrgID is the owning organization.
	OrgID string
}

// PortOverlapError is SetOrgPorts's refusal of a range that overlaps one
// another organization owns. It wraps ErrConflict.
type PortOverlapError struct {
	// Range is the refused range.
	Range portspec.Range
	// OwnerOrgID owns OwnerRange, which overlaps Range.
	OwnerOrgID string
	OwnerRange portspec.Range
}

func (e *PortOverlapError) Error() string {
	return fmt.Sprintf("ports %s overlap %s, owned by organization %s", e.Range, e.OwnerRange, e.OwnerOrgID)
}

// Unwrap makes errors.Is(err, ErrConflict) hold.
func (e *PortOverlapError) Unwrap() error { return ErrConflict }

// SetOrgPorts replaces the port ranges organization orgID owns with
// specs ("N" or "N-M"; overlapping and adjacent ranges merged; empty
// means it owns none) and publishes ChangeOrgPorts. It returns the stored
// ranges, sorted. The check and the write are one transaction, serialized
// against every other replacement on the database, so two organizations
// can never come to own the same port. The error is a *PortOverlapError
// (wrapping ErrConflict) when a range overlaps another organization's,
// wraps ErrNotFound when orgID does not exist, and is plain when a spec
// is invalid or there are more than MaxOrgPorts.
func (db *DB) SetOrgPorts(ctx context.Context, orgID string, specs []string) ([]portspec.Range, error) {
	if db.closed.Load() {
		return nil, errClosed
	}
	if orgID == "" {
		return nil, errors.New("store: set org ports: empty org")
	}
	rs, err := portspec.ParseList(specs)
	if err != nil {
		return nil, fmt.Errorf("store: set org ports: %w", err)
	}
	rs = mergeRanges(rs)
	if err := db.b.setOrgPorts(ctx, orgID, rs); err != nil {
		return nil, db.fail("set ports of org "+orgID, err)
	}
	return rs, nil
}

// ListOrgPorts returns the port ranges organization orgID owns ("" means
// every organization's), sorted by first port.
func (db *DB) ListOrgPorts(ctx context.Context, orgID string) ([]OrgPorts, error) {
	if db.closed.Load() {
		return nil, errClosed
	}
	ps, err := db.b.listOrgPorts(ctx, orgID)
	if err != nil {
		return nil, db.fail("list org ports", err)
	}
	return ps, nil
}

// mergeRanges sorts rs and merges ranges that overlap or touch.
func mergeRanges(rs []portspec.Range) []portspec.Range {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b portspec.Range) int { return a.Lo - b.Lo })
	out := make([]portspec.Range, 0, len(rs))
	for _, r := range rs {
		if n := len(out); n > 0 && r.Lo <= out[n-1].Hi+1 {
			out[n-1].Hi = max(out[n-1].Hi, r.Hi)
			continue
		}
		out = append(out, r)
	}
	return out
}

// firstPortOverlap returns the refusal of the first of rs (of orgID) that
// overlaps a range of another organization in stored, or nil. Backends
// call it inside the replacing transaction.
func firstPortOverlap(orgID string, rs []portspec.Range, stored []OrgPorts) *PortOverlapError {
	for _, r := range rs {
		for _, s := range stored {
			if s.OrgID != orgID && r.Lo <= s.Hi && s.Lo <= r.Hi {
				return &PortOverlapError{Range: r, OwnerOrgID: s.OrgID, OwnerRange: s.Range}
			}
		}
	}
	return nil
}

// setOrgPorts replaces orgID's port ranges (validated, merged, sorted)
// after checking them with firstPortOverlap against every stored range,
// both under a lock that serializes replacements.
func (b *backend) setOrgPorts(ctx context.Context, orgID string, rs []portspec.Range) error {
	return b.write(ctx, func(tx *txn) error {
		if err := b.lockOwned(ctx, tx, "org_ports", orgID); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT lo, hi, org_id FROM org_ports`)
		stored, err := collect(b.d, rows, err, scanOrgPorts)
		if err != nil {
			return err
		}
		if oe := firstPortOverlap(orgID, rs, stored); oe != nil {
			return oe
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM org_ports WHERE org_id = $1`, orgID); err != nil {
			return err
		}
		if len(rs) > 0 {
			args := make([]any, 0, 3*len(rs))
			for _, r := range rs {
				args = append(args, r.Lo, r.Hi, orgID)
			}
			if _, err := tx.ExecContext(ctx,
				`INSERT INTO org_ports (lo, hi, org_id) VALUES `+valuesRows(len(rs), 3), args...); err != nil {
				return err
			}
		}
		return tx.announce(ctx, Change{Kind: ChangeOrgPorts, OrgID: orgID})
	})
}

func scanOrgPorts(s scanner) (OrgPorts, error) {
	var p OrgPorts
	return p, s.Scan(&p.Lo, &p.Hi, &p.OrgID)
}

func (b *backend) listOrgPorts(ctx context.Context, orgID string) ([]OrgPorts, error) {
	return queryRows(ctx, b, scanOrgPorts,
		`SELECT lo, hi, org_id FROM org_ports WHERE ($1 = '' OR org_id = $1) ORDER BY lo`, orgID)
}
