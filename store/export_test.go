package store

import "context"

// ExecForTest runs raw SQL on db's database, bypassing the store's API:
// the conformance suite uses it to prove what the database itself refuses.
func (db *DB) ExecForTest(ctx context.Context, query string) error {
	return db.b.execForTest(ctx, query)
}

// SetRevocationBoundsForTest lowers the OIDC revocation bounds until the
// returned function restores them.
func SetRevocationBoundsForTest(perUser, perHost int64) (restore func()) {
	u, h := revokedPerUser, revocationsPerHost
	revokedPerUser, revocationsPerHost = perUser, perHost
	return func() { revokedPerUser, revocationsPerHost = u, h }
}
