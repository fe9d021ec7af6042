package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/migrations"
)

// This file opens a PostgreSQL store: queries go through database/sql
// (pgx's stdlib driver), and one native pgx connection LISTENs for the
// changes every server announces (postgresDialect.notify), the one thing
// database/sql cannot do.

const (
	// pgChannel is the LISTEN/NOTIFY channel of Change payloads (JSON).
	pgChannel = "aperio_changes"
	// pgConnectTimeout bounds one connection attempt unless the URL sets
	// connect_timeout: an unreachable server fails calls with
	// ErrUnavailable after this long instead of hanging.
	pgConnectTimeout = 5 * time.Second
	// TCP keepalive on every connection, so that a dead peer (no FIN) is
	// noticed in about Idle + Interval×Count = 30 s, the listener's
	// connection included.
	pgKeepAliveIdle     = 15 * time.Second
	pgKeepAliveInterval = 5 * time.Second
	pgKeepAliveCount    = 3
	// The listener reconnects with jittered exponential backoff between
	// these bounds.
	pgListenBackoffMin = 100 * time.Millisecond
	pgListenBackoffMax = 5 * time.Second
	// pgMigrationLockPoll is how often a server waiting for another's
	// migrations retries the advisory lock, and pgMigrationLockTries how
	// many times (goose's units: whole seconds, a count).
	pgMigrationLockPoll  = 1
	pgMigrationLockTries = 300
)

func openPostgres(ctx context.Context, cfg Config, h *hub) (*backend, error) {
	pc, err := parsePostgresURL(cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	cc := pc.ConnConfig
	if cc.ConnectTimeout == 0 {
		cc.ConnectTimeout = pgConnectTimeout
	}
	dialer := &net.Dialer{
		Timeout: cc.ConnectTimeout,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable:   true,
			Idle:     pgKeepAliveIdle,
			Interval: pgKeepAliveInterval,
			Count:    pgKeepAliveCount,
		},
	}
	cc.DialFunc = dialer.DialContext
	if cfg.ReadOnly {
		// Every transaction, implicit ones included, is read-only: the
		// server refuses any write this process could send.
		cc.RuntimeParams["default_transaction_read_only"] = "on"
	}
	// database/sql's pool, sized and aged as the URL's pool_max_conns,
	// pool_max_conn_lifetime and pool_max_conn_idle_time (or pgxpool's
	// defaults) say; idle connections are kept up to the same bound, not
	// database/sql's default of 2, so that a burst does not reconnect.
	db := stdlib.OpenDB(*cc.Copy())
	db.SetMaxOpenConns(int(pc.MaxConns))
	db.SetMaxIdleConns(int(pc.MaxConns))
	db.SetConnMaxLifetime(pc.MaxConnLifetime)
	db.SetConnMaxIdleTime(pc.MaxConnIdleTime)
	// pgx caches each connection's prepared statements itself.
	p := newPool(db, false)
	b := &backend{d: &postgresDialect, w: p, r: p, publish: h.publish}
	if err := db.PingContext(ctx); err != nil {
		return nil, errors.Join(opError("open postgres", b.d.mapErr(err)), db.Close())
	}
	if cfg.ReadOnly {
		cfg.Logger.Info("store opened read-only", logkey.Backend, BackendPostgres)
		return b, nil
	}

	locker, err := lock.NewPostgresSessionLocker(
		lock.WithLockID(migrationLockID),
		lock.WithLockTimeout(pgMigrationLockPoll, pgMigrationLockTries))
	if err != nil {
		panic("store: migration locker: " + err.Error()) // impossible: constant options
	}
	if err := migrate(ctx, cfg.Logger, goose.DialectPostgres, db, migrations.Postgres(), locker); err != nil {
		if errors.Is(pgErr(err), ErrUnavailable) {
			err = fmt.Errorf("%w: %w", ErrUnavailable, err)
		} else {
			err = fmt.Errorf("store: %w", err) // a broken migration is no conflict or missing record
		}
		return nil, errors.Join(err, db.Close())
	}

	// Listen before returning, so that a change committed after Open
	// returns reaches this DB's subscribers.
	l := &pgListener{config: cc.Copy(), hub: h, log: cfg.Logger}
	conn, err := l.connect(ctx)
	if err != nil {
		return nil, errors.Join(opError("listen for changes", b.d.mapErr(err)), db.Close())
	}
	lctx, stop := context.WithCancel(context.Background()) // the listener's own lifetime, ended by close
	l.wg.Add(1)
	go l.listenLoop(lctx, conn)
	b.stop = func() {
		stop()
		l.wg.Wait()
	}
	cfg.Logger.Info("store opened", logkey.Backend, BackendPostgres)
	return b, nil
}

// parsePostgresURL parses a DatabaseURL: the connection settings and the
// pool's bounds.
func parsePostgresURL(u string) (*pgxpool.Config, error) {
	pc, err := pgxpool.ParseConfig(u)
	if err != nil {
		// pgx's message, and the errors it wraps, quote the URL, where
		// redacting the password is best effort: say nothing of it.
		return nil, errors.New("store: database url: not a valid postgres:// URL or key=value DSN")
	}
	return pc, nil
}

// pgListener is the change listener: one dedicated connection that LISTENs
// on pgChannel and hands every notification to the hub.
type pgListener struct {
	config *pgx.ConnConfig
	hub    *hub
	log    *slog.Logger
	wg     sync.WaitGroup // the listenLoop goroutine
}

// connect opens the listener's connection and LISTENs on it.
func (l *pgListener) connect(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, l.config)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, `LISTEN `+pgChannel); err != nil {
		return nil, errors.Join(err, conn.Close(ctx))
	}
	return conn, nil
}

// listenLoop hands every notification to the hub until ctx ends. When the
// connection breaks it reconnects with backoff and then publishes
// ChangeResync, since notifications sent in the gap are lost.
func (l *pgListener) listenLoop(ctx context.Context, conn *pgx.Conn) {
	defer l.wg.Done()
	for {
		err := l.receive(ctx, conn)
		l.close(ctx, conn)
		if ctx.Err() != nil {
			return
		}
		l.log.Warn("change listener lost", logkey.Err, err)
		if conn = l.reconnect(ctx); conn == nil {
			return
		}
		l.log.Info("change listener restored")
		l.hub.publish(Change{Kind: ChangeResync})
	}
}

// receive publishes notifications until the connection fails or ctx ends.
func (l *pgListener) receive(ctx context.Context, conn *pgx.Conn) error {
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		var p changePayload
		if err := json.Unmarshal([]byte(n.Payload), &p); err != nil || p.Kind == "" {
			l.log.Warn("change notification unreadable", logkey.Err, err)
			continue
		}
		l.hub.publish(Change(p))
	}
}

// close closes conn, bounded even when ctx is already done.
func (l *pgListener) close(ctx context.Context, conn *pgx.Conn) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if err := conn.Close(cctx); err != nil {
		l.log.Debug("change listener close", logkey.Err, err)
	}
}

// reconnect retries connect with jittered exponential backoff. It returns
// nil when ctx ends first.
func (l *pgListener) reconnect(ctx context.Context) *pgx.Conn {
	delay := pgListenBackoffMin
	timer := time.NewTimer(jitter(delay))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		conn, err := l.connect(ctx)
		if err == nil {
			return conn
		}
		if ctx.Err() != nil {
			return nil
		}
		delay = min(delay*2, pgListenBackoffMax)
		wait := jitter(delay)
		l.log.Debug("change listener reconnect failed", logkey.Err, err, logkey.RetryIn, wait)
		timer.Reset(wait)
	}
}

// jitter returns a duration in [d/2, d], so that servers that lost the
// database together do not reconnect in step.
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d/2+1)
}
