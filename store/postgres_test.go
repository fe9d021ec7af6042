package store_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aperio-dev/aperio/migrations"
	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/store/storetest"
)

// needPostgres skips t, with the reason, unless a throwaway server is set.
func needPostgres(t *testing.T) {
	t.Helper()
	if os.Getenv(storetest.DSNEnv) == "" {
		t.Skip(storetest.SkipReason)
	}
}

func TestPostgres(t *testing.T) {
	needPostgres(t)
	t.Parallel()
	testStore(t, backend{name: store.BackendPostgres, fresh: storetest.MigratedPostgres, empty: storetest.Postgres, shared: true,
		dropAuditGuards: []string{`ALTER TABLE audit DISABLE TRIGGER USER`},
		blob:            func(b []byte) string { return fmt.Sprintf(`'\x%x'::bytea`, b) }})
}

// rawPostgres connects to dsn beside the store, for checks the API cannot
// make.
func rawPostgres(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() {
		if err := conn.Close(context.Background()); err != nil {
			t.Errorf("close raw connection: %v", err)
		}
	})
	return conn
}

// TestPostgresConcurrentOpen starts several stores at once on one fresh
// database: the advisory lock makes them take turns, so every Open succeeds
// and each migration is recorded once.
func TestPostgresConcurrentOpen(t *testing.T) {
	needPostgres(t)
	t.Parallel()
	dsn := storetest.PostgresDSN(t)
	const servers = 4
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		errs  = make([]error, servers)
	)
	for i := range servers {
		wg.Go(func() {
			<-start
			db, err := store.Open(t.Context(), store.Config{DatabaseURL: dsn, Logger: storetest.Logger()})
			if err != nil {
				errs[i] = err
				return
			}
			errs[i] = db.Close()
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("concurrent Open %d = %v", i, err)
		}
	}

	files, err := fs.Glob(migrations.Postgres(), "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	var applied, distinct int
	err = rawPostgres(t, dsn).QueryRow(t.Context(),
		`SELECT count(*), count(DISTINCT version_id) FROM goose_db_version WHERE version_id > 0`).Scan(&applied, &distinct)
	if err != nil {
		t.Fatalf("read goose_db_version: %v", err)
	}
	if applied != len(files) || distinct != len(files) {
		t.Errorf("goose_db_version holds %d rows for %d versions, want %d for %d", applied, distinct, len(files), len(files))
	}
}

func TestPostgresTruncateRefused(t *testing.T) {
	needPostgres(t)
	t.Parallel()
	cfg := storetest.MigratedPostgres(t)
	db := storetest.Open(t, cfg)
	e, err := db.AppendAudit(t.Context(), store.AuditEntry{Event: "token_minted"})
	if err != nil {
		t.Fatalf("AppendAudit() = %v", err)
	}
	if err := db.ExecForTest(t.Context(), `TRUNCATE audit`); err == nil {
		t.Error("raw TRUNCATE audit = nil, want the database to refuse it")
	}
	got, err := db.ListAudit(t.Context(), "", 0)
	if err != nil || len(got) != 1 || got[0].ID != e.ID {
		t.Errorf("ListAudit() after TRUNCATE = %+v, %v; want the one entry", got, err)
	}
}

func TestPostgresSchema(t *testing.T) {
	needPostgres(t)
	t.Parallel()
	cfg := storetest.Postgres(t)
	storetest.Open(t, cfg)
	conn := rawPostgres(t, cfg.DatabaseURL)
	var b strings.Builder
	dump := func(title, query string) {
		t.Helper()
		rows, err := conn.Query(t.Context(), query)
		if err != nil {
			t.Fatalf("%s: %v", title, err)
		}
		fmt.Fprintf(&b, "-- %s\n", title)
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				t.Fatalf("%s: %v", title, err)
			}
			fmt.Fprintln(&b, vals...)
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: %v", title, err)
		}
		b.WriteString("\n")
	}
	dump("columns", `SELECT table_name, column_name, data_type, is_nullable, coalesce(column_default, ''), is_identity
		FROM information_schema.columns WHERE table_schema = 'public' AND table_name <> 'goose_db_version'
		ORDER BY table_name, ordinal_position`)
	dump("constraints", `SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid)
		FROM pg_constraint WHERE connamespace = 'public'::regnamespace AND conrelid <> 'goose_db_version'::regclass
		ORDER BY 1, 2`)
	dump("indexes", `SELECT indexname, indexdef FROM pg_indexes
		WHERE schemaname = 'public' AND tablename <> 'goose_db_version' ORDER BY indexname`)
	dump("triggers", `SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger WHERE NOT tgisinternal ORDER BY tgname`)
	golden(t, "schema_postgres.golden", b.String())
}

// privatePostgres is a PostgreSQL server of one test's own, started with
// scripts/postgres-test.sh, so that stopping it disturbs no other test.
type privatePostgres struct {
	dir string // the script's APERIO_TEST_PG_DIR
	dsn string // superuser DSN
}

var script = filepath.Join("..", "scripts", "postgres-test.sh")

func startPrivatePostgres(t *testing.T) *privatePostgres {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(t.Context(), "bash", script, "start")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s start: %v\n%s", script, err, stderr.String())
	}
	p := &privatePostgres{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "export "), "=")
		if !ok {
			continue
		}
		v = strings.Trim(v, "'")
		switch k {
		case storetest.DSNEnv:
			p.dsn = v
		case "APERIO_TEST_PG_DIR":
			p.dir = v
		}
	}
	if p.dsn == "" || p.dir == "" {
		t.Fatalf("%s start printed no DSN and dir:\n%s", script, out)
	}
	t.Cleanup(func() { p.run(t, "stop") })
	return p
}

// run runs a subcommand of the script on p's cluster.
func (p *privatePostgres) run(t *testing.T, sub string) {
	t.Helper()
	out, err := exec.Command("bash", script, sub, p.dir).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", script, sub, err, out)
	}
}

// TestPostgresUnavailable stops the server under an open store: every call
// fails with ErrUnavailable, and when the server is back the next call
// works, the listener reconnects and subscribers are told to resync.
func TestPostgresUnavailable(t *testing.T) {
	needPostgres(t)
	t.Parallel()
	pg := startPrivatePostgres(t)
	cfg := store.Config{DatabaseURL: storetest.CreateDatabase(t, pg.dsn), Logger: storetest.Logger()}
	db := storetest.Open(t, cfg)
	ctx := t.Context()
	sub := db.Subscribe(ctx)
	f := seed(t, db)
	wantChange(t, sub, store.Change{Kind: store.ChangeMaintenanceSet, OrgID: f.org.ID, Hostname: f.host})
	wantChange(t, sub, scalingChange(store.ChangeScalingUpdated, f.scaling))

	pg.run(t, "down")
	for _, c := range calls(db, f) {
		start := time.Now()
		err := c.call(ctx)
		if !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%s with the server down = %v, want ErrUnavailable", c.name, err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%s with the server down took %v, want a prompt failure", c.name, d)
		}
	}
	if db2, err := store.Open(ctx, cfg); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Open() with the server down = %v, want ErrUnavailable", err)
		if err == nil {
			if err := db2.Close(); err != nil {
				t.Error(err)
			}
		}
	}

	pg.run(t, "up")
	// The very next call works: no reopening, no retry loop.
	toks, err := db.ListTokens(ctx, "")
	if err != nil {
		t.Fatalf("ListTokens() after the server came back = %v", err)
	}
	if len(toks) != 1 || toks[0].ID != f.token.ID {
		t.Errorf("ListTokens() after the server came back = %+v, want the seed token", toks)
	}
	for _, c := range calls(db, f) {
		if err := c.call(ctx); errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%s after the server came back = %v", c.name, err)
		}
	}
	// Notifications sent while the listener was away are lost: the
	// subscriber is told to resync, then gets changes again.
	wantChange(t, sub, store.Change{Kind: store.ChangeResync})
	tok := mustToken(t, db, store.Token{OrgID: f.org.ID, Hash: hash("after")})
	if _, err := db.RevokeToken(ctx, "", tok.ID, time.Now()); err != nil {
		t.Fatalf("RevokeToken() after the server came back = %v", err)
	}
	for {
		c := recv(t, sub)
		if c.Kind == store.ChangeTokenRevoked && c.ID == tok.ID {
			break
		}
		// Changes made by the calls above may arrive first, when the
		// listener reconnected before they committed.
	}
}
