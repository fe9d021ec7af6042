package store

import (
	"context"
	"slices"
	"time"
)

// ExecForTest runs raw SQL on db's database, bypassing the store's API:
// the conformance suite uses it to prove what the database itself refuses.
func (db *DB) ExecForTest(ctx context.Context, query string) error {
	return db.b.execForTest(ctx, query)
}

// dialectDrifts are edits of a dialect that a careless change of
// dialect.go could make, each of which the equivalence test must notice.
var dialectDrifts = map[string]func(d *dialect){
	// Times kept to the millisecond, not the microsecond.
	"time-millis": func(d *dialect) {
		enc := d.time
		d.time = func(t time.Time) any { return enc(t.Truncate(time.Millisecond)) }
	},
	// Lists stored sorted, not in their order.
	"list-sorted": func(d *dialect) {
		enc := d.list
		d.list = func(l []string) any { return enc(slices.Sorted(slices.Values(l))) }
	},
	// Membership by substring, not by element.
	"member-substring": func(d *dialect) {
		d.memberOf = func(elem, list string) string { return `instr(` + list + `, ` + elem + `) > 0` }
	},
	// Unique violations left unmapped: no ErrConflict.
	"errors-unmapped": func(d *dialect) {
		d.err = func(err error) error { return err }
	},
}

// DialectDriftsForTest names the drifts WithDialectDriftForTest knows.
func DialectDriftsForTest() []string {
	return slices.Sorted(func(yield func(string) bool) {
		for n := range dialectDrifts {
			if !yield(n) {
				return
			}
		}
	})
}

// WithDialectDriftForTest returns cfg opening a store whose dialect has
// drifted as the named drift says.
func WithDialectDriftForTest(cfg Config, drift string) Config {
	f, ok := dialectDrifts[drift]
	if !ok {
		panic("store: unknown dialect drift " + drift)
	}
	cfg.dialectForTest = f
	return cfg
}

// SetRevocationBoundsForTest lowers the OIDC revocation bounds until the
// returned function restores them.
func SetRevocationBoundsForTest(perUser, perHost int64) (restore func()) {
	u, h := revokedPerUser, revocationsPerHost
	revokedPerUser, revocationsPerHost = perUser, perHost
	return func() { revokedPerUser, revocationsPerHost = u, h }
}

// WithDatabaseClockForTest returns cfg opening a store whose database
// clock statement always reads t, as a database server whose clock
// differs from this process's would.
func WithDatabaseClockForTest(cfg Config, t time.Time) Config {
	cfg.dialectForTest = func(d *dialect) {
		if d.name == BackendPostgres {
			d.clock = `SELECT '` + t.UTC().Format(time.RFC3339Nano) + `'::timestamptz`
			return
		}
		d.clock = `SELECT '` + t.UTC().Format(sqliteTime) + `'`
	}
	return cfg
}

// CachedStmtsForTest returns how many prepared statements db's writer and
// reader pools keep.
func (db *DB) CachedStmtsForTest() (writer, reader int) {
	n := func(p *pool) int {
		if p.cache == nil {
			return 0
		}
		p.cache.mu.Lock()
		defer p.cache.mu.Unlock()
		return len(p.cache.stmts)
	}
	return n(db.b.w), n(db.b.r)
}
