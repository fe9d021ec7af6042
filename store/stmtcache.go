package store

import (
	"context"
	"database/sql"
	"errors"
	"sync"
)

// maxCachedStmts bounds the statements one pool keeps prepared. The
// store's queries are constants of its source, about two hundred; a query
// past the bound runs unprepared, as it would without the cache.
const maxCachedStmts = 512

// stmtCache keeps one prepared statement per query text of a pool, for a
// driver that compiles the SQL of every query it is given otherwise:
// modernc's SQLite parses and plans each QueryContext anew, which was the
// largest single cost of the store's reads and writes (a sixth of a
// whole-stack test package's CPU, in sqlite3Prepare). database/sql
// prepares a cached statement once per connection of the pool and reuses
// it, and a transaction borrows it (Tx.StmtContext) on its connection.
// pgx caches its statements itself, so PostgreSQL pools have none (nil).
// It is safe for concurrent use.
type stmtCache struct {
	db     *sql.DB
	mu     sync.Mutex
	stmts  map[string]*sql.Stmt
	closed bool
}

func newStmtCache(db *sql.DB) *stmtCache {
	return &stmtCache{db: db, stmts: make(map[string]*sql.Stmt)}
}

// lookup returns the prepared statement of q, or nil when there is none.
func (c *stmtCache) lookup(q string) *sql.Stmt {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stmts[q]
}

// stmt returns the prepared statement of q, preparing it on first use, or
// nil: without a cache, past the bound, once closed, or when preparing
// fails (the caller then runs q unprepared, which reports the same error).
// Preparing takes a connection of the pool: a caller holding one (in a
// transaction) must not call it, or it waits for itself when the pool
// has no other (the SQLite writer has one).
func (c *stmtCache) stmt(ctx context.Context, q string) *sql.Stmt {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	s, ok := c.stmts[q]
	full := len(c.stmts) >= maxCachedStmts
	c.mu.Unlock()
	if ok || full {
		return s
	}
	s, err := c.db.PrepareContext(ctx, q)
	if err != nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev, ok := c.stmts[q]; ok || c.closed || len(c.stmts) >= maxCachedStmts {
		// Another caller prepared it meanwhile, or the cache closed or
		// filled: this one is used once and closed when it is done.
		s.Close()
		if ok {
			return prev
		}
		return nil
	}
	c.stmts[q] = s
	return s
}

// close closes the cached statements; later calls of stmt return nil.
func (c *stmtCache) close() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	var errs []error
	for q, s := range c.stmts {
		errs = append(errs, s.Close())
		delete(c.stmts, q)
	}
	return errors.Join(errs...)
}

// pool is a database handle whose queries go through its statement cache
// (nil: none). Its methods are *sql.DB's, so the store's queries read the
// same either way.
type pool struct {
	*sql.DB
	cache *stmtCache
}

func newPool(db *sql.DB, cached bool) *pool {
	p := &pool{DB: db}
	if cached {
		p.cache = newStmtCache(db)
	}
	return p
}

func (p *pool) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if s := p.cache.stmt(ctx, q); s != nil {
		return s.QueryContext(ctx, args...)
	}
	return p.DB.QueryContext(ctx, q, args...)
}

func (p *pool) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	if s := p.cache.stmt(ctx, q); s != nil {
		return s.QueryRowContext(ctx, args...)
	}
	return p.DB.QueryRowContext(ctx, q, args...)
}

func (p *pool) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if s := p.cache.stmt(ctx, q); s != nil {
		return s.ExecContext(ctx, args...)
	}
	return p.DB.ExecContext(ctx, q, args...)
}

// Close closes the cached statements, then the pool.
func (p *pool) Close() error {
	return errors.Join(p.cache.close(), p.DB.Close())
}

// cachedTx is a transaction on a pool. Its queries use the pool's
// prepared statements (Tx.StmtContext reuses the one already prepared on
// the transaction's connection, or prepares it there); a query not yet
// cached runs unprepared and is noted in missed, for warm to prepare once
// the transaction has given its connection back. Its methods are
// *sql.Tx's.
type cachedTx struct {
	*sql.Tx
	cache  *stmtCache
	missed []string
}

// stmt returns the transaction's statement of q, or nil after noting q.
func (t *cachedTx) stmt(ctx context.Context, q string) *sql.Stmt {
	if t.cache == nil {
		return nil
	}
	if s := t.cache.lookup(q); s != nil {
		return t.Tx.StmtContext(ctx, s)
	}
	t.missed = append(t.missed, q)
	return nil
}

func (t *cachedTx) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if s := t.stmt(ctx, q); s != nil {
		return s.QueryContext(ctx, args...)
	}
	return t.Tx.QueryContext(ctx, q, args...)
}

func (t *cachedTx) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	if s := t.stmt(ctx, q); s != nil {
		return s.QueryRowContext(ctx, args...)
	}
	return t.Tx.QueryRowContext(ctx, q, args...)
}

func (t *cachedTx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if s := t.stmt(ctx, q); s != nil {
		return s.ExecContext(ctx, args...)
	}
	return t.Tx.ExecContext(ctx, q, args...)
}

// beginTx begins a transaction on p with opts.
func (p *pool) beginTx(ctx context.Context, opts *sql.TxOptions) (*cachedTx, error) {
	tx, err := p.DB.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &cachedTx{Tx: tx, cache: p.cache}, nil
}

// warm prepares the queries t ran unprepared, once t has ended and given
// its connection back; a failure only leaves a query uncached.
func (p *pool) warm(ctx context.Context, t *cachedTx) {
	for _, q := range t.missed {
		p.cache.stmt(ctx, q)
	}
	t.missed = nil
}
