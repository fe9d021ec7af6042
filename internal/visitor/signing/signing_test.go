package signing_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/internal/visitor/access"
	"github.com/aperio-dev/aperio/internal/visitor/signing"
	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/store/storetest"
)

const master = "master-token-of-the-test-servers-0123456789"

// backend is one store the tests run on. open returns a DB on the same
// database each call: on SQLite the same DB (one server owns a file, and
// its change feed reaches only that DB's subscribers), on PostgreSQL a
// new connection pool, as another server would have.
type backend struct {
	name string
	open func(t *testing.T) *store.DB
	// exec runs raw SQL on the database, around the store, as someone
	// with write access to the database could.
	exec func(t *testing.T, query string)
}

// rawExec returns a backend's exec through database/sql's driver name
// (registered by the store's drivers) and data source.
func rawExec(driver, dsn string) func(t *testing.T, query string) {
	return func(t *testing.T, query string) {
		t.Helper()
		db, err := sql.Open(driver, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.ExecContext(t.Context(), query); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
	}
}

// backends returns SQLite, and PostgreSQL when storetest.DSNEnv is set;
// without it the PostgreSQL variant is left out, and the test log says so.
// The stores' clock is now (nil: time.Now).
func backends(t *testing.T, now func() time.Time) []backend {
	t.Helper()
	lite := storetest.SQLite(t)
	lite.Now = now
	var shared *store.DB
	out := []backend{{name: "sqlite", open: func(t *testing.T) *store.DB {
		if shared == nil {
			shared = storetest.Open(t, lite)
		}
		return shared
	}, exec: rawExec("sqlite", filepath.Join(lite.DataDir, store.DBFile)+"?_busy_timeout=10000")}}
	if os.Getenv(storetest.DSNEnv) == "" {
		t.Logf("%s is not set: the PostgreSQL variant is left out, SQLite only", storetest.DSNEnv)
		return out
	}
	pg := storetest.Postgres(t)
	pg.Now = now
	return append(out, backend{name: "postgres", open: func(t *testing.T) *store.DB { return storetest.Open(t, pg) },
		exec: rawExec("pgx", pg.DatabaseURL)})
}

// clock is a settable fake clock.
type clock struct {
	mu  sync.Mutex // guards now
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// logs records the messages of log lines, with their key_id.
type logs struct {
	mu    sync.Mutex // guards lines
	lines []string
}

func (l *logs) Enabled(context.Context, slog.Level) bool { return true }
func (l *logs) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logs) WithGroup(string) slog.Handler            { return l }
func (l *logs) Handle(_ context.Context, r slog.Record) error {
	line := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == logkey.KeyID {
			line += " " + a.Value.String()
		}
		return true
	})
	l.mu.Lock()
	l.lines = append(l.lines, line)
	l.mu.Unlock()
	return nil
}

func (l *logs) has(sub string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.lines {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// newKeys returns Keys on db with cfg's zero fields filled.
func newKeys(t *testing.T, db *store.DB, cfg signing.Config) *signing.Keys {
	t.Helper()
	cfg.Store = db
	if cfg.MasterToken == "" {
		cfg.MasterToken = master
	}
	cfg.Issuer = "aperio"
	k, err := signing.New(t.Context(), cfg)
	if err != nil {
		t.Fatalf("signing.New() = %v", err)
	}
	return k
}

// run runs k.Run until the test ends.
func run(t *testing.T, k *signing.Keys) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		k.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// poll waits until cond holds, failing t after 10 s.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: %s", what)
		}
		<-tick.C
	}
}

func mustOrg(t *testing.T, db *store.DB, name string) string {
	t.Helper()
	o, err := db.EnsureOrg(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	return o.ID
}

// mint returns a link of org for host, creating org's key first.
func mint(t *testing.T, k *signing.Keys, org, host string) string {
	t.Helper()
	if err := k.EnsureShareKey(t.Context(), org); err != nil {
		t.Fatalf("EnsureShareKey(%s) = %v", org, err)
	}
	tok, _, err := k.Shares().MintFor(org, host, "/", time.Hour)
	if err != nil {
		t.Fatalf("MintFor(%s) = %v", org, err)
	}
	return tok
}

func kids(t *testing.T, s *access.Signer) []string {
	t.Helper()
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(s.JWKS(), &set); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, k := range set.Keys {
		out = append(out, k.KeyID)
	}
	return out
}

// TestKeysRestartKeepsKeys: a server restarted on the same store (a new
// DB on the same SQLite file or database) publishes the same identity key
// and verifies the links minted before the restart.
func TestKeysRestartKeepsKeys(t *testing.T) {
	for _, b := range []store.Config{storetest.SQLite(t)} {
		ctx := t.Context()
		db1, err := store.Open(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		org := mustOrg(t, db1, "default")
		k1 := newKeys(t, db1, signing.Config{})
		tok := mint(t, k1, org, "app.example.com")
		jwks := k1.Signer().JWKS()
		if err := db1.Close(); err != nil {
			t.Fatal(err)
		}
		db2 := storetest.Open(t, b)
		k2 := newKeys(t, db2, signing.Config{})
		if !bytes.Equal(k2.Signer().JWKS(), jwks) {
			t.Errorf("JWKS after restart = %s, want %s", k2.Signer().JWKS(), jwks)
		}
		if _, err := k2.Shares().Verify(tok); err != nil {
			t.Errorf("Verify(link minted before the restart) = %v, want valid", err)
		}
	}
}

// TestKeysFirstStartRace: six servers starting at once on one empty store
// create exactly one identity key and all publish it.
func TestKeysFirstStartRace(t *testing.T) {
	for _, b := range backends(t, nil) {
		t.Run(b.name, func(t *testing.T) {
			dbs := make([]*store.DB, 6)
			for i := range dbs {
				dbs[i] = b.open(t)
			}
			keys := make([]*signing.Keys, len(dbs))
			errs := make([]error, len(dbs))
			var wg sync.WaitGroup
			for i := range dbs {
				wg.Go(func() {
					keys[i], errs[i] = signing.New(t.Context(), signing.Config{Store: dbs[i], MasterToken: master, Issuer: "aperio"})
				})
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Fatalf("signing.New() #%d = %v", i, err)
				}
			}
			for i, k := range keys[1:] {
				if !bytes.Equal(k.Signer().JWKS(), keys[0].Signer().JWKS()) {
					t.Errorf("server %d publishes %s, server 0 %s", i+1, k.Signer().JWKS(), keys[0].Signer().JWKS())
				}
			}
			rows, err := dbs[0].SigningKeys(t.Context(), store.KeyPurposeIdentity)
			if err != nil || len(rows) != 1 {
				t.Errorf("identity keys stored = %d, %v; want exactly 1", len(rows), err)
			}
		})
	}
}

// TestKeysRotateAndRevoke: after a plain rotation the old link still
// verifies, on the rotating server and on another sharing the store;
// after a rotation that revokes, it is refused on both (on the other once
// the change feed brings the rotation), a cookie already verified
// included; links minted under the new key verify everywhere.
func TestKeysRotateAndRevoke(t *testing.T) {
	for _, b := range backends(t, nil) {
		t.Run(b.name, func(t *testing.T) {
			dbA, dbB := b.open(t), b.open(t)
			org := mustOrg(t, dbA, "default")
			a := newKeys(t, dbA, signing.Config{})
			old := mint(t, a, org, "app.example.com")
			other := newKeys(t, dbB, signing.Config{})
			run(t, other)
			if _, err := other.Shares().Verify(old); err != nil {
				t.Fatalf("other server: Verify(link) = %v", err)
			}

			if _, err := a.RotateShareKey(t.Context(), org, false); err != nil {
				t.Fatalf("RotateShareKey(keep) = %v", err)
			}
			fresh, _, err := a.Shares().MintFor(org, "app.example.com", "/", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if kidOf(fresh) == kidOf(old) {
				t.Errorf("after a rotation the link %q names the old key", fresh)
			}
			poll(t, "the other server verifies links of the new key", func() bool {
				_, err := other.Shares().Verify(fresh)
				return err == nil
			})
			for name, k := range map[string]*signing.Keys{"rotating": a, "other": other} {
				if _, err := k.Shares().Verify(old); err != nil {
					t.Errorf("%s server after a plain rotation: Verify(old link) = %v, want valid", name, err)
				}
			}

			if _, err := a.RotateShareKey(t.Context(), org, true); err != nil {
				t.Fatalf("RotateShareKey(revoke) = %v", err)
			}
			if _, err := a.Shares().Verify(fresh); !errors.Is(err, access.ErrShareKey) {
				t.Errorf("rotating server after revoke: Verify(previous key's link) = %v, want ErrShareKey", err)
			}
			poll(t, "the other server refuses the revoked key's link", func() bool {
				_, err := other.Shares().Verify(fresh)
				return errors.Is(err, access.ErrShareKey)
			})
			if _, err := other.Shares().Verify(old); !errors.Is(err, access.ErrShareKey) {
				t.Errorf("other server after two rotations: Verify(first link) = %v, want ErrShareKey", err)
			}
			newest := mint(t, a, org, "app.example.com")
			for name, k := range map[string]*signing.Keys{"rotating": a, "other": other} {
				if _, err := k.Shares().Verify(newest); err != nil {
					t.Errorf("%s server: Verify(link of the current key) = %v", name, err)
				}
			}
		})
	}
}

// TestKeysCrossOrg: organization A's rotation with revoke leaves
// organization B's links valid.
func TestKeysCrossOrg(t *testing.T) {
	for _, b := range backends(t, nil) {
		t.Run(b.name, func(t *testing.T) {
			db := b.open(t)
			orgA, orgB := mustOrg(t, db, "a"), mustOrg(t, db, "b")
			k := newKeys(t, db, signing.Config{})
			linkA, linkB := mint(t, k, orgA, "a.example.com"), mint(t, k, orgB, "b.example.com")
			if _, err := k.RotateShareKey(t.Context(), orgA, true); err != nil {
				t.Fatal(err)
			}
			if _, err := k.RotateShareKey(t.Context(), orgA, true); err != nil {
				t.Fatal(err)
			}
			if _, err := k.Shares().Verify(linkA); !errors.Is(err, access.ErrShareKey) {
				t.Errorf("Verify(A's link) after A revoked = %v, want ErrShareKey", err)
			}
			if _, err := k.Shares().Verify(linkB); err != nil {
				t.Errorf("Verify(B's link) after A's rotations = %v, want valid", err)
			}
			restarted := newKeys(t, db, signing.Config{})
			if _, err := restarted.Shares().Verify(linkB); err != nil {
				t.Errorf("after a restart: Verify(B's link) = %v, want valid", err)
			}
		})
	}
}

// TestIdentityShared: three servers on one store publish identical key
// sets, and a restart keeps it.
func TestIdentityShared(t *testing.T) {
	for _, b := range backends(t, nil) {
		t.Run(b.name, func(t *testing.T) {
			var sets [][]byte
			for range 3 {
				sets = append(sets, newKeys(t, b.open(t), signing.Config{}).Signer().JWKS())
			}
			sets = append(sets, newKeys(t, b.open(t), signing.Config{}).Signer().JWKS()) // a restart
			for i, s := range sets[1:] {
				if !bytes.Equal(s, sets[0]) {
					t.Errorf("server %d publishes %s, server 0 %s", i+1, s, sets[0])
				}
			}
		})
	}
}

// TestIdentityRotationByAge: the identity key is replaced once older than
// the rotation, the old key still published beside it; the other server
// follows; 0 never rotates.
func TestIdentityRotationByAge(t *testing.T) {
	clk := &clock{now: time.Now()}
	for _, b := range backends(t, clk.Now) {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			db := b.open(t)
			k := newKeys(t, db, signing.Config{IdentityRotation: 720 * time.Hour, Now: clk.Now})
			never := newKeys(t, b.open(t), signing.Config{Now: clk.Now})
			run(t, never)
			first := kids(t, k.Signer())
			clk.Advance(719 * time.Hour)
			if err := k.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			if got := kids(t, k.Signer()); len(got) != 1 || got[0] != first[0] {
				t.Errorf("kids at 719h = %v, want %v: not due yet", got, first)
			}
			if err := never.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			if got := kids(t, never.Signer()); len(got) != 1 || got[0] != first[0] {
				t.Errorf("rotation 0 server's kids = %v, want %v", got, first)
			}
			clk.Advance(2 * time.Hour)
			if err := k.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			got := kids(t, k.Signer())
			if len(got) != 2 || got[0] == first[0] || got[1] != first[0] {
				t.Fatalf("kids at 721h = %v, want [new %s]", got, first[0])
			}
			poll(t, "the other server publishes the rotated key", func() bool {
				g := kids(t, never.Signer())
				return len(g) == 2 && g[0] == got[0]
			})
			clk.Advance(time.Hour)
			if err := k.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			if again := kids(t, k.Signer()); again[0] != got[0] {
				t.Errorf("kids an hour after a rotation = %v, want %s still current", again, got[0])
			}
		})
	}
}

// TestTamperedRowsRefused: a sealed row changed in the database, or
// copied to another organization, does not open: that organization has no
// key (its links refused, minting refused), the server says so in its log,
// and a server with another master token refuses to start.
func TestTamperedRowsRefused(t *testing.T) {
	for _, b := range backends(t, nil) {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			db := b.open(t)
			orgA, orgB := mustOrg(t, db, "a"), mustOrg(t, db, "b")
			k := newKeys(t, db, signing.Config{})
			linkA := mint(t, k, orgA, "a.example.com")
			rows, err := db.SigningKeys(ctx, store.KeyPurposeShare)
			if err != nil || len(rows) != 1 {
				t.Fatalf("SigningKeys() = %v, %v", rows, err)
			}
			// A's row moved to B: it opens for neither.
			b.exec(t, `UPDATE signing_keys SET org_id = '`+orgB+`' WHERE id = '`+rows[0].ID+`'`)
			var lg logs
			moved := newKeys(t, db, signing.Config{Logger: slog.New(&lg)})
			if _, err := moved.Shares().Verify(linkA); !errors.Is(err, access.ErrShareKey) {
				t.Errorf("Verify(link of a row moved to another org) = %v, want ErrShareKey", err)
			}
			if _, _, err := moved.Shares().MintFor(orgB, "b.example.com", "/", time.Hour); !errors.Is(err, access.ErrShareNoKey) {
				t.Errorf("MintFor(org B, holding A's row) = %v, want ErrShareNoKey", err)
			}
			if !lg.has("ERROR signing key does not open: every server sharing the database must have the same master token " + rows[0].ID) {
				t.Errorf("log = %q, want the unopenable key named", lg.lines)
			}
			// Flipped bytes in the sealed secret.
			b.exec(t, `UPDATE signing_keys SET org_id = '`+orgA+`', sealed = `+flipSQL(b.name)+` WHERE id = '`+rows[0].ID+`'`)
			flipped := newKeys(t, db, signing.Config{})
			if _, err := flipped.Shares().Verify(linkA); !errors.Is(err, access.ErrShareKey) {
				t.Errorf("Verify(link of a tampered row) = %v, want ErrShareKey", err)
			}
			// Another master token: the identity key does not open.
			var lg2 logs
			_, err = signing.New(ctx, signing.Config{Store: db, MasterToken: "another-master-token-0123456789abcdef", Issuer: "aperio", Logger: slog.New(&lg2)})
			if !errors.Is(err, signing.ErrUnopenable) {
				t.Errorf("signing.New(other master token) = %v, want ErrUnopenable", err)
			}
			if !lg2.has("ERROR signing key does not open") {
				t.Errorf("log = %q, want the unopenable identity key named", lg2.lines)
			}
		})
	}
}

// flipSQL is the dialect's expression of the sealed column with a byte
// appended: the GCM tag no longer matches.
func flipSQL(backend string) string {
	if backend == "postgres" {
		return `sealed || '\x00'::bytea`
	}
	return `CAST(sealed || x'00' AS BLOB)`
}

// kidOf returns the key id a share token names.
func kidOf(tok string) string { return strings.Split(tok, ".")[1] }
