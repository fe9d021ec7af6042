package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/aperio-dev/aperio/internal/hostname"
)

// MaxOrgHostnames bounds the patterns one organization may own, so that a
// replacement and the index every server builds from them stay small.
const MaxOrgHostnames = 1000

// OrgHostname is one hostname pattern an organization owns: an exact name
// ("a.example") or a wildcard ("*.a.example"), lowercase.
type OrgHostname struct {
	// Pattern is unique across the store, and overlaps no other
	// organization's pattern.
	Pattern string
	// OrgID is the owning organization.
	OrgID string
}

// OverlapError is SetOrgHostnames's refusal of a pattern that overlaps one
// another organization owns. It wraps ErrConflict.
type OverlapError struct {
	// Pattern is the refused pattern.
	Pattern string
	// OwnerOrgID owns OwnerPattern, which overlaps Pattern.
	OwnerOrgID   string
	OwnerPattern string
}

func (e *OverlapError) Error() string {
	return fmt.Sprintf("hostname %s overlaps %s, owned by organization %s", e.Pattern, e.OwnerPattern, e.OwnerOrgID)
}

// Unwrap makes errors.Is(err, ErrConflict) hold.
func (e *OverlapError) Unwrap() error { return ErrConflict }

// SetOrgHostnames replaces the patterns organization orgID owns with
// patterns (duplicates dropped, lowercased; empty means it owns none) and
// publishes ChangeOrgHostnames. It returns the stored set, sorted. The
// check and the write are one transaction, serialized against every other
// replacement on the database, so two organizations can never come to own
// overlapping patterns. The error is an *OverlapError (wrapping
// ErrConflict) when a pattern overlaps another organization's, wraps
// ErrNotFound when orgID does not exist, and is plain when a pattern is
// invalid or there are more than MaxOrgHostnames.
func (db *DB) SetOrgHostnames(ctx context.Context, orgID string, patterns []string) ([]string, error) {
	if db.closed.Load() {
		return nil, errClosed
	}
	if orgID == "" {
		return nil, errors.New("store: set org hostnames: empty org")
	}
	set := make(map[string]bool, len(patterns))
	var errs []error
	for _, p := range patterns {
		p = strings.ToLower(p)
		if err := hostname.Validate(p); err != nil {
			errs = append(errs, fmt.Errorf("store: set org hostnames: %w", err))
			continue
		}
		set[p] = true
	}
	if len(set) > MaxOrgHostnames {
		errs = append(errs, fmt.Errorf("store: set org hostnames: %d patterns, at most %d", len(set), MaxOrgHostnames))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	out := make([]string, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	slices.Sort(out)
	if err := db.b.setOrgHostnames(ctx, orgID, out); err != nil {
		return nil, db.fail("set hostnames of org "+orgID, err)
	}
	return out, nil
}

// ListOrgHostnames returns the patterns organization orgID owns ("" means
// every organization's), sorted by pattern.
func (db *DB) ListOrgHostnames(ctx context.Context, orgID string) ([]OrgHostname, error) {
	if db.closed.Load() {
		return nil, errClosed
	}
	hs, err := db.b.listOrgHostnames(ctx, orgID)
	if err != nil {
		return nil, db.fail("list org hostnames", err)
	}
	return hs, nil
}

// firstOverlap returns the refusal of the first of patterns (of orgID) that
// overlaps a pattern of another organization in stored, or nil.
// setOrgHostnames calls it inside the replacing transaction.
func firstOverlap(orgID string, patterns []string, stored []OrgHostname) *OverlapError {
	others := make(map[string]string, len(stored))
	for _, h := range stored {
		if h.OrgID != orgID {
			others[h.Pattern] = h.OrgID
		}
	}
	idx := hostname.NewOwners(others)
	for _, p := range patterns {
		if who, pat, ok := idx.Overlap(p); ok {
			return &OverlapError{Pattern: p, OwnerOrgID: who, OwnerPattern: pat}
		}
	}
	return nil
}
