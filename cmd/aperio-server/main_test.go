package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite"

	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/store/storetest"
)

// runServer runs the command line with a controlled environment and
// returns its exit code and output.
func runServer(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	t.Chdir(t.TempDir()) // no ./aperio-server.yaml from the developer's tree
	for _, k := range []string{"APERIO_SERVER_TOKEN", "APERIO_PORT", "PORT", "APERIO_SERVER_CONFIG"} {
		t.Setenv(k, "")
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestCheckConfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "server.yaml")
	if err := os.WriteFile(file, []byte("server:\n  token: s3cret-0123456789abc\nmax_concurent_requests: 5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		env      map[string]string
		args     []string
		code     int
		stdout   string
		stderrIn []string
	}{
		{"valid", map[string]string{"APERIO_SERVER_TOKEN": "token-0123456789abcdef"}, []string{"--check-config"}, 0, "configuration OK\n", nil},
		{"missing token", nil, []string{"--check-config"}, 2, "", []string{"server.token"}},
		{"bad env value", map[string]string{"APERIO_SERVER_TOKEN": "token-0123456789abcdef", "APERIO_PORT": "eighty"}, []string{"--check-config"}, 2, "", []string{"APERIO_PORT"}},
		{"unknown key with suggestion", nil, []string{"--check-config", "--config", file}, 2, "", []string{"max_concurent_requests", "server.yaml:3", "did you mean", "max_concurrent_requests"}},
		{"missing explicit file", nil, []string{"--config", "/nonexistent/aperio.yaml"}, 2, "", []string{"/nonexistent/aperio.yaml"}},
		{"short master token", map[string]string{"APERIO_SERVER_TOKEN": "s3cr3t"}, []string{"--check-config"}, 2, "", []string{"server.token", "env APERIO_SERVER_TOKEN", "6 characters, at least 16 required"}},
		{"short master token stops startup", map[string]string{"APERIO_SERVER_TOKEN": "s3cr3t"}, nil, 2, "", []string{"server.token", "at least 16 required"}},
		{"weak master token warns", map[string]string{"APERIO_SERVER_TOKEN": "0123456789abcdef"}, []string{"--check-config"}, 0, "configuration OK\n", []string{"warning: server.token: 16 characters, at least 32 recommended"}},
		{"debug_listen loopback", map[string]string{"APERIO_SERVER_TOKEN": "token-0123456789abcdef", "APERIO_DEBUG_LISTEN": "localhost:6060"}, []string{"--check-config"}, 0, "configuration OK\n", nil},
		{"debug_listen every interface", map[string]string{"APERIO_SERVER_TOKEN": "token-0123456789abcdef", "APERIO_DEBUG_LISTEN": ":6060"}, []string{"--check-config"}, 2, "", []string{"debug_listen", "env APERIO_DEBUG_LISTEN", "must be a loopback address"}},
		{"debug_listen public stops startup", map[string]string{"APERIO_SERVER_TOKEN": "token-0123456789abcdef", "APERIO_DEBUG_LISTEN": "0.0.0.0:6060"}, nil, 2, "", []string{"debug_listen", "must be a loopback address"}},
		{"stray argument", map[string]string{"APERIO_SERVER_TOKEN": "token-0123456789abcdef"}, []string{"extra"}, 2, "", []string{"extra"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runServer(t, tt.env, tt.args...)
			if code != tt.code || (tt.stdout != "" && stdout != tt.stdout) {
				t.Fatalf("aperio-server %v = exit %d, stdout %q, stderr %q; want exit %d, stdout %q", tt.args, code, stdout, stderr, tt.code, tt.stdout)
			}
			for _, want := range tt.stderrIn {
				if !strings.Contains(stderr, want) {
					t.Errorf("aperio-server %v stderr = %q, want it to contain %q", tt.args, stderr, want)
				}
			}
		})
	}
}

func TestPrintConfigMasksSecrets(t *testing.T) {
	code, stdout, stderr := runServer(t, map[string]string{"APERIO_SERVER_TOKEN": "very-secret-token", "APERIO_PORT": "9999"}, "--print-config")
	if code != 0 {
		t.Fatalf("--print-config = exit %d, stderr %q, want 0", code, stderr)
	}
	if strings.Contains(stdout, "very-secret-token") {
		t.Fatalf("--print-config printed the token:\n%s", stdout)
	}
	for _, want := range []string{"<set>", "9999", "env APERIO_PORT"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("--print-config output lacks %q:\n%s", want, stdout)
		}
	}
}

func sqliteAuditStore(t *testing.T) (map[string]string, store.Config, func(string)) {
	dir := t.TempDir()
	cfg := store.Config{DataDir: dir}
	exec := func(q string) {
		t.Helper()
		raw, err := sql.Open("sqlite", "file:"+filepath.Join(dir, store.DBFile))
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		if _, err := raw.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("raw %q = %v", q, err)
		}
	}
	return map[string]string{"APERIO_DATA_DIR": dir}, cfg, exec
}

func postgresAuditStore(t *testing.T) (map[string]string, store.Config, func(string)) {
	dsn := storetest.PostgresDSN(t)
	exec := func(q string) {
		t.Helper()
		conn, err := pgx.Connect(t.Context(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(t.Context(), q); err != nil {
			t.Fatalf("raw %q = %v", q, err)
		}
	}
	return map[string]string{"APERIO_DATABASE_URL": dsn}, store.Config{DatabaseURL: dsn}, exec
}

// TestVerifyAudit: --verify-audit passes an intact chain, and fails naming
// the entry after a row is changed or deleted behind the store's back (the
// append-only triggers dropped first, as someone with database access could).
func TestVerifyAudit(t *testing.T) {
	backends := []struct {
		name  string
		open  func(t *testing.T) (map[string]string, store.Config, func(string))
		guard []string
	}{
		{"sqlite", sqliteAuditStore, []string{`DROP TRIGGER audit_no_update`, `DROP TRIGGER audit_no_delete`, `DROP TRIGGER audit_chained_insert`}},
		{"postgres", postgresAuditStore, []string{`ALTER TABLE audit DISABLE TRIGGER USER`}},
	}
	tampers := []struct {
		name     string
		query    string
		stderrIn []string
	}{
		{"none", "", nil},
		{"row updated", `UPDATE audit SET detail = 'forged' WHERE seq = 2`, []string{"seq 2", "event maintenance_on", "hash does not match"}},
		{"row deleted", `DELETE FROM audit WHERE seq = 2`, []string{"seq 3", "event token_revoked", "entry seq 2 missing"}},
		{"every row deleted", `DELETE FROM audit`, []string{"audit chain BROKEN: chain ends at seq 0 but its head records seq 3"}},
		{"row inserted around the store", `INSERT INTO audit (at, org_id, event, actor, hostname, detail) VALUES ('2026-12-01T14:30:50.000000Z', '', 'token_revoked', 'master', 'a.test', 'forged')`, []string{"event token_revoked", "entry has no chain columns"}},
	}
	for _, bk := range backends {
		for _, tt := range tampers {
			t.Run(bk.name+"/"+tt.name, func(t *testing.T) {
				env, cfg, exec := bk.open(t)
				env["APERIO_SERVER_TOKEN"] = "token-0123456789abcdef"
				db, err := store.Open(t.Context(), cfg)
				if err != nil {
					t.Fatalf("store.Open() = %v", err)
				}
				for _, ev := range []string{"token_minted", "maintenance_on", "token_revoked"} {
					if _, err := db.AppendAudit(t.Context(), store.AuditEntry{Event: ev, Actor: "master", Detail: "d"}); err != nil {
						t.Fatalf("AppendAudit(%s) = %v", ev, err)
					}
				}
				if err := db.Close(); err != nil {
					t.Fatalf("Close() = %v", err)
				}
				if tt.query != "" {
					for _, q := range append(bk.guard, tt.query) {
						exec(q)
					}
				}
				code, stdout, stderr := runServer(t, env, "--verify-audit")
				if tt.query == "" {
					if code != 0 || stdout != "audit chain OK (3 entries)\n" {
						t.Fatalf("--verify-audit = exit %d, stdout %q, stderr %q; want 0, %q", code, stdout, stderr, "audit chain OK (3 entries)\n")
					}
					return
				}
				if code != 1 || !strings.Contains(stderr, "audit chain BROKEN") {
					t.Fatalf("--verify-audit after %s = exit %d, stdout %q, stderr %q; want exit 1 and BROKEN", tt.name, code, stdout, stderr)
				}
				for _, want := range tt.stderrIn {
					if !strings.Contains(stderr, want) {
						t.Errorf("--verify-audit stderr = %q, want it to contain %q", stderr, want)
					}
				}
			})
		}
	}
}

func TestVerifyAuditNoStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "missing")
	code, stdout, stderr := runServer(t, map[string]string{"APERIO_SERVER_TOKEN": "token-0123456789abcdef", "APERIO_DATA_DIR": dir}, "--verify-audit")
	if code != 1 || !strings.Contains(stderr, "no store") {
		t.Fatalf("--verify-audit with no store = exit %d, stdout %q, stderr %q; want 1, no store", code, stdout, stderr)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("--verify-audit created %s (%v), want it left alone", dir, err)
	}
}

// TestCheckConfigWarnsOrgsWithoutPorts (#38): with a tcp_port_range,
// --check-config names the organizations (besides the default one) that
// hold a token for public ports but own no port; once each owns ports it
// is quiet again, and without a tcp_port_range it does not ask.
func TestCheckConfigWarnsOrgsWithoutPorts(t *testing.T) {
	env, cfg, _ := sqliteAuditStore(t)
	env["APERIO_SERVER_TOKEN"] = "token-0123456789abcdef0123456789abcdef"
	env["APERIO_TCP_PORT_RANGE"] = "20000-20099"
	db, err := store.Open(t.Context(), cfg)
	if err != nil {
		t.Fatalf("store.Open() = %v", err)
	}
	if _, err := db.EnsureOrg(t.Context(), "default"); err != nil {
		t.Fatal(err)
	}
	team, err := db.CreateOrg(t.Context(), "team-ssh")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.SetOrgHostnames(t.Context(), team.ID, []string{"ssh.example"}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateToken(t.Context(), store.Token{OrgID: team.ID, Name: "ssh", Hash: make([]byte, 32), Prefix: "apr_ssh",
		Limits: store.TokenLimits{AllowTCPPorts: []string{"20000"}}}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	const warning = "warning: 1 organization(s) hold tokens with allow_tcp_ports but own no ports (team-ssh)"
	code, stdout, stderr := runServer(t, env, "--check-config")
	if code != 0 || stdout != "configuration OK\n" || !strings.Contains(stderr, warning) {
		t.Fatalf("--check-config with a portless org = exit %d, stdout %q, stderr %q; want 0, OK and %q", code, stdout, stderr, warning)
	}
	off := maps.Clone(env)
	off["APERIO_TCP_PORT_RANGE"] = ""
	if code, _, stderr := runServer(t, off, "--check-config"); code != 0 || strings.Contains(stderr, "warning") {
		t.Fatalf("--check-config without tcp_port_range = exit %d, stderr %q; want 0, no warning", code, stderr)
	}
	db, err = store.Open(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.SetOrgPorts(t.Context(), team.ID, []string{"20000-20009"}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	env["APERIO_TCP_PORT_RANGE"] = "20000-20099"
	if code, _, stderr := runServer(t, env, "--check-config"); code != 0 || strings.Contains(stderr, "warning") {
		t.Fatalf("--check-config once the org owns ports = exit %d, stderr %q; want 0, no warning", code, stderr)
	}
}

// TestCheckConfigWarnsOrgsWithoutHostnames: --check-config looks into an
// existing store (read-only) and names the organizations besides the
// default one that own no hostname pattern; once each owns some, it is
// quiet again.
func TestCheckConfigWarnsOrgsWithoutHostnames(t *testing.T) {
	env, cfg, _ := sqliteAuditStore(t)
	env["APERIO_SERVER_TOKEN"] = "token-0123456789abcdef0123456789abcdef"
	code, stdout, stderr := runServer(t, env, "--check-config")
	if code != 0 || stdout != "configuration OK\n" || strings.Contains(stderr, "warning") {
		t.Fatalf("--check-config with no store = exit %d, stdout %q, stderr %q; want 0, OK, no warning", code, stdout, stderr)
	}
	db, err := store.Open(t.Context(), cfg)
	if err != nil {
		t.Fatalf("store.Open() = %v", err)
	}
	if _, err := db.EnsureOrg(t.Context(), "default"); err != nil {
		t.Fatal(err)
	}
	teamA, err := db.CreateOrg(t.Context(), "team-a")
	if err != nil {
		t.Fatal(err)
	}
	teamB, err := db.CreateOrg(t.Context(), "team-b")
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runServer(t, env, "--check-config")
	if code != 0 || stdout != "configuration OK\n" || !strings.Contains(stderr, "warning: 2 organization(s) own no hostname patterns (team-a, team-b)") {
		t.Fatalf("--check-config with two orgs without patterns = exit %d, stdout %q, stderr %q; want 0, OK and a warning naming both", code, stdout, stderr)
	}
	db, err = store.Open(t.Context(), cfg)
	if err != nil {
		t.Fatalf("store.Open() = %v", err)
	}
	for org, p := range map[string]string{teamA.ID: "*.a.example", teamB.ID: "b.example"} {
		if _, err := db.SetOrgHostnames(t.Context(), org, []string{p}); err != nil {
			t.Fatalf("SetOrgHostnames(%s) = %v", org, err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runServer(t, env, "--check-config")
	if code != 0 || stdout != "configuration OK\n" || strings.Contains(stderr, "warning") {
		t.Fatalf("--check-config once every org owns hostnames = exit %d, stdout %q, stderr %q; want 0, OK, no warning", code, stdout, stderr)
	}
}
