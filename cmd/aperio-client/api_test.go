package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/autoscale"
	"github.com/aperio-dev/aperio/internal/control/admin"
	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/telemetry"
	"github.com/aperio-dev/aperio/router"
	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/store/storetest"
)

const testMaster = "cli-test-master-token"

// apiServer serves the admin API on a real SQLite store in a temporary
// directory, and isolates the test from the environment, the working
// directory and the home directory of whoever runs it.
type apiServer struct {
	url     string
	db      *store.DB // the server's store, to check what the API cannot show
	clients *staticClients
	scaling *staticScaling
	hub     *telemetry.Hub
	stream  *signalledStream
	stats   *telemetry.Stats
}

type staticClients struct {
	list    []admin.ClientInfo
	drained []string // the id of every DrainClient call that found its client
}

// DrainClient implements admin.ClientDrainer over the list.
func (s *staticClients) DrainClient(id string) error {
	for i := range s.list {
		if s.list[i].ID == id {
			s.drained = append(s.drained, id)
			return nil
		}
	}
	return admin.ErrNoClient
}

func (s *staticClients) Clients() []admin.ClientInfo { return s.list }

// SetClientDisabled implements admin.ClientDisabler over the list.
func (s *staticClients) SetClientDisabled(id string, disabled bool) error {
	for i := range s.list {
		if s.list[i].ID == id {
			s.list[i].Disabled = disabled
			return nil
		}
	}
	return admin.ErrNoClient
}

// staticScaling is an admin.Scaling with a fixed list of records: List
// scopes it by organization, Disarm removes a record and is recorded,
// History answers what setHistory set.
type staticScaling struct {
	mu        sync.Mutex // guards the following fields
	views     []autoscale.View
	disarms   []string                        // "orgID/id" of every Disarm call
	arms      []autoscale.OperatorDeclaration // every Arm call
	histories map[string]autoscale.History    // by record ID
}

func (s *staticScaling) History(id string) autoscale.History {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.histories[id]
}

func (s *staticScaling) setHistory(id string, h autoscale.History) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.histories == nil {
		s.histories = map[string]autoscale.History{}
	}
	s.histories[id] = h
}

func (s *staticScaling) List(_ context.Context, orgID string) ([]autoscale.View, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []autoscale.View
	for _, v := range s.views {
		if orgID == "" || v.OrgID == orgID {
			out = append(out, v)
		}
	}
	return out, nil
}

func (s *staticScaling) Disarm(_ context.Context, orgID, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.disarms = append(s.disarms, orgID+"/"+id)
	for i, v := range s.views {
		if v.ID == id && (orgID == "" || v.OrgID == orgID) {
			s.views = slices.Delete(slices.Clone(s.views), i, i+1)
			return nil
		}
	}
	return fmt.Errorf("autoscale: disarm %s: %w", id, autoscale.ErrNoRecord)
}

// Arm records d and creates or updates the view of its bind, 201 for a
// new one.
func (s *staticScaling) Arm(_ context.Context, d autoscale.OperatorDeclaration) (autoscale.View, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.arms = append(s.arms, d)
	b := d.Block
	v := autoscale.View{ID: "scl_armed", OrgID: d.OrgID, Hostname: d.Hostname, Path: d.Path, URL: b.URL, Authenticated: b.Secret != "",
		Min: b.Min, Max: b.Max, ColdStart: b.ColdStart, TargetUtilization: b.TargetUtilization, Window: b.Window, Cooldown: b.Cooldown}
	for i, old := range s.views {
		if old.OrgID == d.OrgID && old.Hostname == d.Hostname && old.Path == d.Path {
			v.ID = old.ID
			s.views = slices.Clone(s.views)
			s.views[i] = v
			return v, false, nil
		}
	}
	s.views = append(slices.Clone(s.views), v)
	return v, true, nil
}

func (s *staticScaling) set(vs ...autoscale.View) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.views = vs
}

func (s *staticScaling) disarmCalls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.disarms)
}

func newAPIServer(t *testing.T) *apiServer {
	t.Helper()
	for _, v := range []string{"APERIO_SERVER_URL", "APERIO_SERVER_API_KEY", "APERIO_API_KEY"} {
		t.Setenv(v, "")
	}
	t.Setenv("HOME", t.TempDir())
	t.Chdir(t.TempDir())
	db, err := store.Open(context.Background(), store.Config{DataDir: storetest.MigratedDataDir(t)})
	if err != nil {
		t.Fatalf("store.Open: %v", err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("store Close: %v", err)
		}
	})
	hub, err := telemetry.NewHub(telemetry.HubConfig{})
	if err != nil {
		t.Fatalf("NewHub: %v", err)
	}
	t.Cleanup(hub.Close)
	s := &apiServer{db: db, clients: &staticClients{}, scaling: &staticScaling{}, hub: hub,
		stream: &signalledStream{hub: hub, subscribed: make(chan struct{}, 16)}, stats: telemetry.NewStats(telemetry.StatsConfig{})}
	rt, err := router.New(router.Config{GatewayTimeout: time.Second, Fallbacks: []router.Fallback{{Hostname: "gone.example.com", URL: "https://status.example.com/"}}})
	if err != nil {
		t.Fatalf("router.New: %v", err)
	}
	rt.Registry().SetMaintenance([]router.Maintenance{{Hostname: "down.example.com"}})
	api, err := admin.New(admin.Config{MasterToken: testMaster, Store: db, Clients: s.clients, Disabler: s.clients, Drainer: s.clients, Scaling: s.scaling, Explainer: rt, Shares: cliShares{},
		Traffic: cliTraffic{s.stats}, Stream: s.stream, Webhooks: &cliSender{db: db}})
	if err != nil {
		t.Fatalf("admin.New: %v", err)
	}
	mux := http.NewServeMux()
	mux.Handle(admin.Prefix+"/", api.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

// cli runs aperio-client with args and returns its exit code and output.
func cli(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// ok runs aperio-client with args, fails the test unless it exits 0, and
// returns its standard output.
func ok(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := cli(t, args...)
	if code != 0 {
		t.Fatalf("aperio-client %s = exit %d, stderr %q, want 0", strings.Join(args, " "), code, errOut)
	}
	return out
}

// okJSON runs like ok and decodes the output into v.
func okJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	out := ok(t, args...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("aperio-client %s: output %q is not JSON: %v", strings.Join(args, " "), out, err)
	}
}

var columnSep = regexp.MustCompile(`\S+( \S+)*`)

// table parses a table as tabwriter prints it: the header's words (a name
// may hold single spaces) fix where each column starts, and every row must
// have its cells at those columns. It fails the test when the header is not
// want or a row is not aligned.
func table(t *testing.T, out string, want ...string) []map[string]string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	header := columnSep.FindAllStringIndex(lines[0], -1)
	var names []string
	for _, h := range header {
		names = append(names, lines[0][h[0]:h[1]])
	}
	if strings.Join(names, "|") != strings.Join(want, "|") {
		t.Fatalf("table header = %q, want %q", names, want)
	}
	var rows []map[string]string
	for _, line := range lines[1:] {
		row := map[string]string{}
		for i, h := range header {
			end := len(line)
			if i+1 < len(header) {
				end = min(header[i+1][0], len(line))
			}
			if h[0] > 0 && line[h[0]-1] != ' ' {
				t.Fatalf("row %q is not aligned with header %q", line, lines[0])
			}
			row[names[i]] = strings.TrimSpace(line[h[0]:end])
		}
		rows = append(rows, row)
	}
	return rows
}

func TestAPICommands(t *testing.T) {
	s := newAPIServer(t)
	t.Setenv("APERIO_SERVER_URL", s.url)
	t.Setenv("APERIO_API_KEY", testMaster)

	var org admin.Org
	okJSON(t, &org, "api", "orgs", "create", "--name", "acme", "--json")
	if org.Name != "acme" || !strings.HasPrefix(org.ID, "org_") {
		t.Fatalf("orgs create --json = %+v", org)
	}
	rows := table(t, ok(t, "api", "orgs", "list"), "ID", "NAME", "CREATED")
	if len(rows) != 1 || rows[0]["ID"] != org.ID || rows[0]["NAME"] != "acme" {
		t.Errorf("orgs list = %v, want acme", rows)
	}
	rows = table(t, ok(t, "api", "orgs", "hostnames", org.ID), "ORG", "PATTERN")
	if len(rows) != 1 || rows[0]["PATTERN"] != "(none)" {
		t.Errorf("orgs hostnames of a new org = %v, want (none)", rows)
	}
	rows = table(t, ok(t, "api", "orgs", "hostnames", org.ID, "app.example.com", "*.app.example.com", "api.example.com"), "ORG", "PATTERN")
	var patterns []string
	for _, r := range rows {
		patterns = append(patterns, r["PATTERN"])
	}
	if got, want := strings.Join(patterns, " "), "*.app.example.com api.example.com app.example.com"; got != want || rows[0]["ORG"] != org.ID {
		t.Errorf("orgs hostnames set = %v, want %s of %s", rows, want, org.ID)
	}
	var owned admin.OrgHostnames
	okJSON(t, &owned, "api", "orgs", "hostnames", org.ID, "--json")
	if strings.Join(owned.Patterns, " ") != strings.Join(patterns, " ") {
		t.Errorf("orgs hostnames --json = %+v, want %v", owned, patterns)
	}
	// Ports, the same way (#38).
	rows = table(t, ok(t, "api", "orgs", "ports", org.ID), "ORG", "PORTS")
	if len(rows) != 1 || rows[0]["PORTS"] != "(none)" {
		t.Errorf("orgs ports of a new org = %v, want (none)", rows)
	}
	rows = table(t, ok(t, "api", "orgs", "ports", org.ID, "20050-20099", "2222", "20000-20049"), "ORG", "PORTS")
	if len(rows) != 2 || rows[0]["PORTS"] != "2222" || rows[1]["PORTS"] != "20000-20099" || rows[0]["ORG"] != org.ID {
		t.Errorf("orgs ports set = %v, want 2222 and 20000-20099 of %s", rows, org.ID)
	}
	var ports admin.OrgPorts
	okJSON(t, &ports, "api", "orgs", "ports", org.ID, "--json")
	if strings.Join(ports.Ports, " ") != "2222 20000-20099" {
		t.Errorf("orgs ports --json = %+v", ports)
	}
	rows = table(t, ok(t, "api", "orgs", "ports", org.ID, "--clear"), "ORG", "PORTS")
	if len(rows) != 1 || rows[0]["PORTS"] != "(none)" {
		t.Errorf("orgs ports --clear = %v, want (none)", rows)
	}
	ok(t, "api", "orgs", "ports", org.ID, "2222")

	code, out, errOut := cli(t, "api", "admin-keys", "create", "--name", "ops", "--role", "admin", "--org-id", org.ID)
	if code != 0 || !strings.Contains(errOut, "shown once") {
		t.Fatalf("admin-keys create = %d %q %q", code, out, errOut)
	}
	fields := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(line, " ")
		fields[k] = strings.TrimSpace(v)
	}
	key := fields["key"]
	if !strings.HasPrefix(key, "apk_") || fields["role"] != "admin" || fields["org_id"] != org.ID || fields["name"] != "ops" {
		t.Fatalf("admin-keys create printed %q, want id, name, role, org_id and an apk_ key", out)
	}
	// From here on, the admin key of acme.
	t.Setenv("APERIO_API_KEY", key)

	before := time.Now()
	var tok admin.MintedToken
	okJSON(t, &tok, "api", "tokens", "create", "--name", "web", "--hostname", "app.example.com",
		"--hostname", "*.app.example.com", "--allowed-ip", "10.0.0.0/8", "--allowed-ip", "192.0.2.1", "--expires-in", "30d", "--json")
	after := time.Now()
	if !strings.HasPrefix(tok.Secret, "apr_") || strings.Join(tok.AllowedIPs, ",") != "10.0.0.0/8,192.0.2.1/32" ||
		strings.Join(tok.Hostnames, ",") != "app.example.com,*.app.example.com" {
		t.Errorf("tokens create --json = %+v", tok)
	}
	if e := tok.ExpiresAt; e == nil || e.Before(before.Add(30*24*time.Hour).Truncate(time.Microsecond)) || e.After(after.Add(30*24*time.Hour)) {
		t.Errorf("expires_at with --expires-in 30d = %v, want 30 days after the call", e)
	}
	out = ok(t, "api", "tokens", "create", "--name", "api", "--hostname", "api.example.com", "--expires-at", "2099-01-01T00:00:00Z")
	if !regexp.MustCompile(`(?m)^token +apr_[a-z2-7]{52}$`).MatchString(out) || !regexp.MustCompile(`(?m)^expires_at +2099-01-01T00:00:00Z$`).MatchString(out) {
		t.Errorf("tokens create printed %q, want the token and its expiry", out)
	}

	rows = table(t, ok(t, "api", "tokens", "list"), "ID", "NAME", "STATUS", "PREFIX", "HOSTNAMES", "ALLOWED IPS", "EXPIRES", "ORG", "CREATED")
	if len(rows) != 2 || rows[1]["ID"] != tok.ID || rows[1]["HOSTNAMES"] != "app.example.com,*.app.example.com" ||
		rows[1]["ALLOWED IPS"] != "10.0.0.0/8,192.0.2.1/32" || rows[1]["STATUS"] != "active" || rows[1]["PREFIX"] != tok.Secret[:8] ||
		rows[0]["ALLOWED IPS"] != "-" {
		t.Errorf("tokens list = %v", rows)
	}
	listed := ok(t, "api", "tokens", "list", "--json")
	var toks []admin.Token
	if err := json.Unmarshal([]byte(listed), &toks); err != nil || len(toks) != 2 {
		t.Errorf("tokens list --json = %q, %v", listed, err)
	}
	if strings.Contains(listed, tok.Secret) {
		t.Errorf("tokens list --json shows the secret")
	}
	rows = table(t, ok(t, "api", "tokens", "revoke", tok.ID), "ID", "NAME", "STATUS", "PREFIX", "HOSTNAMES", "ALLOWED IPS", "EXPIRES", "ORG", "CREATED")
	if len(rows) != 1 || rows[0]["STATUS"] != "revoked" {
		t.Errorf("tokens revoke = %v, want the token, revoked", rows)
	}

	if out := ok(t, "api", "maintenance", "on", "app.example.com"); out != "maintenance on for app.example.com\n" {
		t.Errorf("maintenance on printed %q", out)
	}
	if out := ok(t, "api", "maintenance", "on", "api.example.com", "--json"); out != "" {
		t.Errorf("maintenance on --json printed %q, want nothing", out)
	}
	rows = table(t, ok(t, "api", "maintenance", "list"), "HOSTNAME", "ORG", "BY", "SINCE", "UNTIL", "REASON")
	if len(rows) != 2 || rows[0]["HOSTNAME"] != "api.example.com" || rows[1]["ORG"] != org.ID || !strings.HasPrefix(rows[1]["BY"], "key:") || rows[0]["UNTIL"] != "-" {
		t.Errorf("maintenance list = %v", rows)
	}
	if out := ok(t, "api", "maintenance", "on", "*.app.example.com", "--reason", "db upgrade", "--ttl", "90m"); out != "maintenance on for *.app.example.com\n" {
		t.Errorf("maintenance on with reason and ttl printed %q", out)
	}
	var ms []admin.Maintenance
	okJSON(t, &ms, "api", "maintenance", "list", "--json")
	if len(ms) != 3 || ms[0].Hostname != "*.app.example.com" || ms[0].Reason != "db upgrade" || ms[0].ExpiresAt == nil || ms[0].ExpiresAt.Sub(ms[0].Since).Round(time.Second) != 90*time.Minute {
		t.Errorf("maintenance list --json = %+v, want *.app.example.com first, with its reason, ending 90m after it began", ms)
	}
	if out := ok(t, "api", "maintenance", "off", "*.app.example.com"); out != "maintenance off for *.app.example.com\n" {
		t.Errorf("maintenance off printed %q", out)
	}
	if out := ok(t, "api", "maintenance", "off", "app.example.com"); out != "maintenance off for app.example.com\n" {
		t.Errorf("maintenance off printed %q", out)
	}

	var viewer admin.MintedKey
	okJSON(t, &viewer, "api", "admin-keys", "create", "--name", "ro", "--role", "viewer", "--json")
	rows = table(t, ok(t, "api", "admin-keys", "list"), "ID", "NAME", "ROLE", "PREFIX", "ORG", "CREATED BY", "CREATED")
	if len(rows) != 2 || rows[0]["ID"] != viewer.ID || rows[0]["CREATED BY"] != "key:"+rows[1]["ID"] {
		t.Errorf("admin-keys list = %v", rows)
	}
	if out := ok(t, "api", "admin-keys", "delete", viewer.ID); out != "admin key "+viewer.ID+" deleted\n" {
		t.Errorf("admin-keys delete printed %q", out)
	}

	rows = table(t, ok(t, "api", "audit", "--limit", "3"), "SEQ", "AT", "EVENT", "ACTOR", "ORG", "HOSTNAME", "DETAIL")
	var events, seqs []string
	for _, r := range rows {
		events = append(events, r["EVENT"])
		seqs = append(seqs, r["SEQ"])
	}
	if got, want := strings.Join(events, " "), "admin_key_deleted admin_key_created maintenance_off"; got != want {
		t.Errorf("audit --limit 3 events = %s, want %s", got, want)
	}
	var newest []admin.AuditEntry
	okJSON(t, &newest, "api", "audit", "--limit", "1", "--json")
	if len(newest) != 1 || seqs[0] != fmt.Sprint(newest[0].Seq) || seqs[1] != fmt.Sprint(newest[0].Seq-1) {
		t.Errorf("audit SEQ column = %v, want the chain's seq counting down from %+v", seqs, newest)
	}

	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	s.clients.list = []admin.ClientInfo{
		{ID: "c1", Name: "web-1", OrgID: org.ID, Hostnames: []string{"app.example.com"}, MaxConcurrent: 10, Inflight: 2, Healthy: true, ConnectedAt: at, RemoteAddr: "192.0.2.9:4000", Version: "v1.4.0",
			Concurrency: &admin.Concurrency{Mode: "aimd", Desired: 10, Min: 1, Max: 40}},
		{ID: "c2", Name: "elsewhere", OrgID: "org_other"},
	}
	s.clients.list[0].RefusedBinds = []string{"evil.example.com"}
	rows = table(t, ok(t, "api", "clients"), "ID", "NAME", "VERSION", "ORG", "HOSTNAMES", "PATH", "PRIORITY", "INFLIGHT", "MAX", "LIMIT", "HEALTHY", "DRAINING", "DISABLED", "REFUSED", "CONNECTED", "REMOTE")
	want := map[string]string{
		"ID": "c1", "NAME": "web-1", "VERSION": "v1.4.0", "ORG": org.ID, "HOSTNAMES": "app.example.com", "PATH": "-", "PRIORITY": "0", "INFLIGHT": "2",
		"MAX": "10", "LIMIT": "aimd 1..40", "HEALTHY": "yes", "DRAINING": "no", "DISABLED": "no", "REFUSED": "evil.example.com",
		"CONNECTED": "2030-01-02T03:04:05Z", "REMOTE": "192.0.2.9:4000",
	}
	if len(rows) != 1 || !equalMaps(rows[0], want) {
		t.Errorf("clients = %v, want one row %v", rows, want)
	}
	if out := ok(t, "api", "clients", "disable", "c1"); !strings.Contains(out, "client c1 disabled") {
		t.Errorf("api clients disable c1 = %q, want the confirmation", out)
	}
	if rows = table(t, ok(t, "api", "clients"), "ID", "NAME", "VERSION", "ORG", "HOSTNAMES", "PATH", "PRIORITY", "INFLIGHT", "MAX", "LIMIT", "HEALTHY", "DRAINING", "DISABLED", "REFUSED", "CONNECTED", "REMOTE"); len(rows) != 1 || rows[0]["DISABLED"] != "yes" {
		t.Errorf("clients after disable = %v, want c1 DISABLED yes", rows)
	}
	if out := ok(t, "api", "clients", "enable", "c1"); !strings.Contains(out, "client c1 enabled") || s.clients.list[0].Disabled {
		t.Errorf("api clients enable c1 = %q, disabled %v; want the confirmation and the client enabled", out, s.clients.list[0].Disabled)
	}
	if out := ok(t, "api", "clients", "drain", "c1"); !strings.Contains(out, "client c1 asked to drain") || len(s.clients.drained) != 1 || s.clients.drained[0] != "c1" {
		t.Errorf("api clients drain c1 = %q, drained %v; want the confirmation and one drain of c1", out, s.clients.drained)
	}
	if code, _, errOut := cli(t, "api", "clients", "drain", "c2"); code == 0 || !strings.Contains(errOut, "not found") || len(s.clients.drained) != 1 {
		t.Errorf("api clients drain c2 (another organization's) = exit %d, stderr %q, drained %v; want a failure naming 404 not found and no drain", code, errOut, s.clients.drained)
	}
	var cs []admin.ClientInfo
	okJSON(t, &cs, "api", "clients", "--json")
	if len(cs) != 1 || cs[0].RemoteAddr != "192.0.2.9:4000" || cs[0].Concurrency == nil || cs[0].Concurrency.Max != 40 {
		t.Errorf("clients --json = %+v", cs)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestAPIExitCodes(t *testing.T) {
	s := newAPIServer(t)
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	t.Setenv("APERIO_SERVER_URL", s.url)
	t.Setenv("APERIO_API_KEY", testMaster)
	var viewer admin.MintedKey
	okJSON(t, &viewer, "api", "admin-keys", "create", "--name", "ro", "--role", "viewer", "--json")

	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"help", []string{"api"}, 0, ""},
		{"unknown command", []string{"api", "nope"}, 2, `unknown command "nope" for "aperio-client api"`},
		{"unknown subcommand", []string{"api", "tokens", "mint"}, 2, `unknown command "mint" for "aperio-client api tokens"`},
		{"group alone", []string{"api", "tokens"}, 0, ""},
		{"unknown flag", []string{"api", "tokens", "list", "--nope"}, 2, "unknown flag: --nope"},
		{"missing argument", []string{"api", "tokens", "revoke"}, 2, "accepts 1 arg(s), received 0"},
		{"missing required flag", []string{"api", "tokens", "create", "--hostname", "a.example.com"}, 2, `required flag(s) "name" not set`},
		{"bad --expires-in", []string{"api", "tokens", "create", "--name", "x", "--hostname", "a.example.com", "--expires-in", "soon"}, 2, `invalid argument "soon" for "--expires-in" flag: invalid duration`},
		{"bad --expires-at", []string{"api", "tokens", "create", "--name", "x", "--hostname", "a.example.com", "--expires-at", "tomorrow"}, 2, "is not an RFC 3339 time"},
		{"both expiries", []string{"api", "tokens", "create", "--name", "x", "--hostname", "a.example.com", "--expires-in", "1d", "--expires-at", "2099-01-01T00:00:00Z"}, 2, "if any flags in the group [expires-in expires-at] are set none of the others can be"},
		{"bad --role", []string{"api", "admin-keys", "create", "--name", "x", "--role", "root"}, 2, `--role "root" is not one of viewer, operator, admin`},
		{"bad --limit", []string{"api", "audit", "--limit", "many"}, 2, `invalid argument "many" for "--limit"`},
		{"no server", []string{"api", "clients", "--server-url", ""}, 2, "server.url (flag --server-url): required"},
		{"bad server url", []string{"api", "clients", "--server-url", "ftp://x"}, 2, "scheme must be http, https, ws or wss"},
		{"wrong key", []string{"api", "clients", "--api-key", "apk_wrong"}, 1, "aperio-client: missing or invalid credentials"},
		{"invalid hostname", []string{"api", "tokens", "create", "--name", "x", "--hostname", "bad_host!"}, 1, `aperio-client: hostnames[0]: invalid hostname "bad_host!"`},
		{"role too low", []string{"api", "tokens", "create", "--name", "x", "--hostname", "a.example.com", "--api-key", viewer.Secret}, 1, "aperio-client: an admin key with role viewer may not do this"},
		{"not found", []string{"api", "tokens", "revoke", "tok_nope"}, 1, `aperio-client: token "tok_nope" not found`},
		{"limit out of range", []string{"api", "audit", "--limit", "5000"}, 1, `aperio-client: limit "5000" is not a number from 1 to 1000`},
		{"server down", []string{"api", "clients", "--server-url", closed.URL}, 1, "connection refused"},
		{"duplicate org", []string{"api", "orgs", "create", "--name", "default"}, 1, `aperio-client: an organization named "default" already exists`},
		{"webhook without url", []string{"api", "webhooks", "create", "--events", "scaling_failed"}, 2, `required flag(s) "url" not set`},
		{"webhook without events", []string{"api", "webhooks", "create", "--url", "https://h.example.com/"}, 2, `required flag(s) "events" not set`},
		{"webhook delete without id", []string{"api", "webhooks", "delete"}, 2, "accepts 1 arg(s), received 0"},
		{"unknown webhook event", []string{"api", "webhooks", "create", "--url", "https://h.example.com/", "--events", "nope"}, 1,
			`aperio-client: events[0]: "nope" is not one of client_connected, client_disconnected, client_refused, instance_retired, token_created`},
		{"webhook over http", []string{"api", "webhooks", "create", "--url", "http://h.example.com/", "--events", "scaling_failed"}, 1,
			"aperio-client: url is not permitted by the outbound policy: http is not permitted, only https"},
		{"webhook role too low", []string{"api", "webhooks", "create", "--url", "https://h.example.com/", "--events", "scaling_failed", "--api-key", viewer.Secret}, 1,
			"aperio-client: an admin key with role viewer may not do this"},
		{"webhook not found", []string{"api", "webhooks", "delete", "whk_nope"}, 1, `aperio-client: webhook "whk_nope" not found`},
		{"hostnames without org", []string{"api", "orgs", "hostnames"}, 2, "requires at least 1 arg(s), only received 0"},
		{"hostnames clear with patterns", []string{"api", "orgs", "hostnames", "org_x", "a.example.com", "--clear"}, 2, "--clear takes no patterns"},
		{"hostnames of unknown org", []string{"api", "orgs", "hostnames", "org_nope", "a.example.com"}, 1, `aperio-client: organization "org_nope" not found`},
		{"hostnames as a key", []string{"api", "orgs", "hostnames", "org_nope", "a.example.com", "--api-key", viewer.Secret}, 1, "only the master token may do this"},
		{"ports clear with ports", []string{"api", "orgs", "ports", "org_x", "2222", "--clear"}, 2, "--clear takes no ports"},
		{"ports of unknown org", []string{"api", "orgs", "ports", "org_nope", "2222"}, 1, `aperio-client: organization "org_nope" not found`},
		{"ports as a key", []string{"api", "orgs", "ports", "org_nope", "2222", "--api-key", viewer.Secret}, 1, "only the master token may do this"},
	}
	// The default organization exists once a token is minted without org_id.
	ok(t, "api", "tokens", "create", "--name", "x", "--hostname", "a.example.com")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := cli(t, tt.args...)
			if code != tt.code || !strings.Contains(errOut, tt.stderr) {
				t.Errorf("aperio-client %s = exit %d, stderr %q; want %d, %q", strings.Join(tt.args, " "), code, errOut, tt.code, tt.stderr)
			}
		})
	}
}

// TestAPIKeyPrecedence checks the client precedence of server.api_key:
// --api-key > ./aperio.yaml (or --config) > environment > ~/.aperio.yaml.
func TestAPIKeyPrecedence(t *testing.T) {
	s := newAPIServer(t)
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	write := func(t *testing.T, path, key string) {
		t.Helper()
		if err := os.WriteFile(path, []byte("server:\n  url: "+s.url+"\n  api_key: "+key+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := os.Remove(path); err != nil {
				t.Error(err)
			}
		})
	}
	const bad = "apk_wrong"
	other := filepath.Join(t.TempDir(), "other.yaml")
	tests := []struct {
		name               string
		flag, file, config string // "" = not given
		env, homeFile      string
		want               int
	}{
		{name: "flag over environment", flag: testMaster, env: bad, want: 0},
		{name: "environment alone", env: bad, homeFile: testMaster, want: 1},
		{name: "flag over a bad environment and file", flag: testMaster, env: bad, file: bad, want: 0},
		{name: "file over environment", file: testMaster, env: bad, want: 0},
		{name: "environment over home file", env: bad, homeFile: testMaster, want: 1},
		{name: "home file alone", homeFile: testMaster, want: 0},
		{name: "--config over environment", config: testMaster, env: bad, want: 0},
		{name: "--config replaces ./aperio.yaml", config: bad, file: testMaster, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("APERIO_SERVER_URL", s.url)
			t.Setenv("APERIO_API_KEY", tt.env)
			args := []string{"api", "orgs", "list"}
			if tt.flag != "" {
				args = append(args, "--api-key", tt.flag)
			}
			if tt.file != "" {
				write(t, "aperio.yaml", tt.file)
			}
			if tt.homeFile != "" {
				write(t, filepath.Join(home, ".aperio.yaml"), tt.homeFile)
			}
			if tt.config != "" {
				write(t, other, tt.config)
				args = append(args, "--config", other)
			}
			if code, _, errOut := cli(t, args...); code != tt.want {
				t.Errorf("aperio-client %s = exit %d (%q), want %d", strings.Join(args, " "), code, errOut, tt.want)
			}
		})
	}
}

// TestRootStillRuns checks that the api subcommand leaves the root
// command's own flags and TARGET argument alone.
func TestRootStillRuns(t *testing.T) {
	newAPIServer(t)
	code, out, errOut := cli(t, "3000", "--hostname", "app.example.com", "--server-url", "https://t.example.com", "--server-token", "apr_x", "--check-config")
	if code != 0 || out != "configuration OK\n" {
		t.Errorf("aperio-client 3000 … --check-config = exit %d, %q %q; want 0, configuration OK", code, out, errOut)
	}
}

func TestAPIScaling(t *testing.T) {
	s := newAPIServer(t)
	t.Setenv("APERIO_SERVER_URL", s.url)
	t.Setenv("APERIO_API_KEY", testMaster)
	var acme, other admin.Org
	okJSON(t, &acme, "api", "orgs", "create", "--name", "acme", "--json")
	okJSON(t, &other, "api", "orgs", "create", "--name", "other", "--json")
	var operator, viewer admin.MintedKey
	okJSON(t, &operator, "api", "admin-keys", "create", "--name", "ops", "--role", "operator", "--org-id", acme.ID, "--json")
	okJSON(t, &viewer, "api", "admin-keys", "create", "--name", "ro", "--role", "viewer", "--org-id", acme.ID, "--json")

	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	called, failed := at.Add(-time.Minute), at.Add(-2*time.Minute)
	record := func(id, org, host string, age time.Duration) autoscale.View {
		return autoscale.View{
			ID: id, OrgID: org, Hostname: host, URL: "https://provider.example/scale", Authenticated: true,
			Max: 8, ColdStart: 45 * time.Second, TargetUtilization: 0.8, Window: 15 * time.Second, Cooldown: time.Minute,
			UpdatedAt: at.Add(-age),
		}
	}
	busy := record("scl_busy", acme.ID, "app.example.com", 0)
	busy.Path, busy.Instances, busy.Capacity, busy.Inflight, busy.Utilization = "/api", 2, 20, 17, 0.85
	busy.LastCallAt, busy.LastReason, busy.LastStatus = &called, "scale_out", 202
	broken := record("scl_broken", acme.ID, "broken.example.com", time.Hour)
	broken.Disarmed, broken.Conflict, broken.ConsecutiveFailures = true, true, 5
	broken.LastCallAt, broken.LastReason = &failed, "cold_start"
	fenced := record("scl_fenced", acme.ID, "fenced.example.com", 90*time.Minute)
	fenced.LastCallAt, fenced.LastReason = &failed, "cold_start"
	fenced.LastError = "autoscale: scaling hook: fence: refused https://10.0.0.1:443: 10.0.0.1 is private"
	idle := record("scl_idle", acme.ID, "idle.example.com", 2*time.Hour)
	refused := record("", acme.ID, "refused.example.com", 3*time.Hour)
	refused.Disarmed, refused.Refused = true, "url is refused by the server's outbound policy: http is not permitted, only https"
	s.scaling.set(broken, record("scl_other", other.ID, "other.example.com", 0), fenced, idle, busy, refused)

	t.Setenv("APERIO_API_KEY", operator.Secret)
	rows := table(t, ok(t, "api", "scaling", "list"),
		"ID", "HOSTNAME", "PATH", "INSTANCES", "CAPACITY", "INFLIGHT", "UTILIZATION", "STATE", "LAST CALL", "ERROR")
	want := []map[string]string{
		{"ID": "scl_busy", "HOSTNAME": "app.example.com", "PATH": "/api", "INSTANCES": "2", "CAPACITY": "20", "INFLIGHT": "17",
			"UTILIZATION": "85%", "STATE": "armed", "LAST CALL": "scale_out 202 2030-01-02T03:03:05Z", "ERROR": "-"},
		{"ID": "scl_broken", "HOSTNAME": "broken.example.com", "PATH": "-", "INSTANCES": "0", "CAPACITY": "0", "INFLIGHT": "0",
			"UTILIZATION": "-", "STATE": "disarmed,conflict", "LAST CALL": "cold_start no-response 2030-01-02T03:02:05Z", "ERROR": "-"},
		{"ID": "scl_fenced", "HOSTNAME": "fenced.example.com", "PATH": "-", "INSTANCES": "0", "CAPACITY": "0", "INFLIGHT": "0",
			"UTILIZATION": "-", "STATE": "armed", "LAST CALL": "cold_start failed 2030-01-02T03:02:05Z",
			"ERROR": "autoscale: scaling hook: fence: refused https://10.0.0.1:443: 10.0.0.1 is private"},
		{"ID": "scl_idle", "HOSTNAME": "idle.example.com", "PATH": "-", "INSTANCES": "0", "CAPACITY": "0", "INFLIGHT": "0",
			"UTILIZATION": "-", "STATE": "armed", "LAST CALL": "-", "ERROR": "-"},
		{"ID": "-", "HOSTNAME": "refused.example.com", "PATH": "-", "INSTANCES": "0", "CAPACITY": "0", "INFLIGHT": "0",
			"UTILIZATION": "-", "STATE": "disarmed,refused", "LAST CALL": "-",
			"ERROR": "declaration refused: url is refused by the server's outbound policy: http is not permitted, only https"},
	}
	if len(rows) != len(want) {
		t.Fatalf("scaling list = %v, want %d rows of acme", rows, len(want))
	}
	for i := range want {
		if !equalMaps(rows[i], want[i]) {
			t.Errorf("scaling list row %d = %v, want %v", i, rows[i], want[i])
		}
	}

	t.Run("--json is the API's JSON", func(t *testing.T) {
		var got, direct []map[string]any
		okJSON(t, &got, "api", "scaling", "list", "--json")
		req, err := http.NewRequest("GET", s.url+admin.Prefix+"/scaling", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+operator.Secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&direct); err != nil {
			t.Fatal(err)
		}
		if len(got) != 5 || !reflect.DeepEqual(got, direct) {
			t.Errorf("scaling list --json =\n%v\nwant GET /scaling's\n%v", got, direct)
		}
		if u := got[0]["utilization"]; u != 0.85 {
			t.Errorf("scaling list --json utilization = %v, want 0.85", u)
		}
		if u, ok := got[1]["utilization"]; !ok || u != nil {
			t.Errorf("scaling list --json utilization of an unmeasured pool = %v (present %v), want null", u, ok)
		}
	})

	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string // exactly, or for the help: a line it holds
		stderr string
	}{
		{"viewer may not disarm", []string{"api", "scaling", "disarm", "scl_busy", "--api-key", viewer.Secret}, 1, "", "aperio-client: an admin key with role viewer may not do this: it needs role operator"},
		{"disarm", []string{"api", "scaling", "disarm", "scl_busy"}, 0, "scaling record scl_busy disarmed\n", ""},
		{"disarm --json prints nothing", []string{"api", "scaling", "disarm", "scl_idle", "--json"}, 0, "", ""},
		{"disarmed already", []string{"api", "scaling", "disarm", "scl_busy"}, 1, "", `aperio-client: scaling record "scl_busy" not found`},
		{"another organization's record", []string{"api", "scaling", "disarm", "scl_other"}, 1, "", `aperio-client: scaling record "scl_other" not found`},
		{"no ID", []string{"api", "scaling", "disarm"}, 2, "", "accepts 1 arg(s), received 0"},
		{"two IDs", []string{"api", "scaling", "disarm", "scl_a", "scl_b"}, 2, "", "accepts 1 arg(s), received 2"},
		{"list takes no argument", []string{"api", "scaling", "list", "x"}, 2, "", `unknown command "x" for "aperio-client api scaling list"`},
		{"unknown subcommand", []string{"api", "scaling", "arm"}, 2, "", `unknown command "arm" for "aperio-client api scaling"`},
		{"group alone prints its help", []string{"api", "scaling"}, 0, "  disarm      Remove a scaling record", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := cli(t, tt.args...)
			outOK := out == tt.stdout
			if strings.HasPrefix(tt.name, "group alone") {
				outOK = strings.Contains(out, tt.stdout)
			}
			if code != tt.code || !outOK || !strings.Contains(errOut, tt.stderr) || tt.code == 0 && errOut != "" {
				t.Errorf("aperio-client %s = exit %d, %q, stderr %q; want %d, %q, %q",
					strings.Join(tt.args, " "), code, out, errOut, tt.code, tt.stdout, tt.stderr)
			}
		})
	}
	if got, want := s.scaling.disarmCalls(), []string{acme.ID + "/scl_busy", acme.ID + "/scl_idle"}; !slices.Equal(got, want) {
		t.Errorf("Disarm calls = %q, want %q", got, want)
	}
	rows = table(t, ok(t, "api", "scaling", "list"),
		"ID", "HOSTNAME", "PATH", "INSTANCES", "CAPACITY", "INFLIGHT", "UTILIZATION", "STATE", "LAST CALL", "ERROR")
	if len(rows) != 3 || rows[0]["ID"] != "scl_broken" || rows[1]["ID"] != "scl_fenced" || rows[2]["ID"] != "-" {
		t.Errorf("scaling list after two disarms = %v, want scl_broken, scl_fenced and the refused bind", rows)
	}
}

// TestAPIExplain: `api explain URL` prints the steps and the verdict, or
// the explanation as JSON; a bad URL is a usage error.
func TestAPIExplain(t *testing.T) {
	s := newAPIServer(t)
	t.Setenv("APERIO_SERVER_URL", s.url)
	t.Setenv("APERIO_API_KEY", testMaster)

	out := ok(t, "api", "explain", "https://down.example.com:8443/shop?x=1", "--ip", "203.0.113.7")
	for _, want := range []string{
		"REQUEST  down.example.com/shop from 203.0.113.7",
		"maintenance      stop",
		"VERDICT  503 maintenance (Retry-After: 300)",
		"STATUS   503",
		"PAGE     text (no Accept header given; a browser gets html, an API client json); the html page is the built-in one for 503",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("api explain output lacks %q:\n%s", want, out)
		}
	}
	steps := out[strings.Index(out, "STEP"):]
	steps = steps[:strings.Index(steps, "\n\n")]
	rows := table(t, steps, "STEP", "OUTCOME", "DETAIL")
	if len(rows) != 3 || rows[2]["STEP"] != router.StepMaintenance || rows[2]["OUTCOME"] != router.OutcomeStop {
		t.Errorf("api explain steps = %v, want reserved_prefix, ip_rate_limit, maintenance (stop)", rows)
	}

	var ex router.Explanation
	okJSON(t, &ex, "api", "explain", "gone.example.com/a/b", "--json")
	if ex.Host != "gone.example.com" || ex.Path != "/a/b" || ex.IP != "" || ex.Status != http.StatusFound ||
		ex.Verdict != "302 fallback redirect to https://status.example.com/" {
		t.Errorf("api explain --json = %+v, want gone.example.com/a/b redirected (302)", ex)
	}

	for _, tt := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"api", "explain"}, 2, "accepts 1 arg(s), received 0"},
		{[]string{"api", "explain", "http://"}, 2, "is not a URL with a hostname"},
		{[]string{"api", "explain", "app.example.com", "--ip", "1.2.3"}, 1, `ip "1.2.3" is not an IP address`},
	} {
		code, _, errOut := cli(t, tt.args...)
		if code != tt.code || !strings.Contains(errOut, tt.stderr) {
			t.Errorf("aperio-client %s = exit %d, stderr %q; want %d, %q", strings.Join(tt.args, " "), code, errOut, tt.code, tt.stderr)
		}
	}
}

// TestExplainTableSetting: the table names the setting that decided the
// verdict, and prints no SETTING line when none did.
func TestExplainTableSetting(t *testing.T) {
	var b bytes.Buffer
	explainTable(&b, router.Explanation{Host: "app.example.com", Path: "/", Verdict: "413 request body larger than max_body_size", Status: 413, Setting: "max_body_size"})
	if !strings.Contains(b.String(), "\nSETTING\tmax_body_size\n") {
		t.Errorf("explain table lacks the setting line:\n%s", b.String())
	}
	b.Reset()
	explainTable(&b, router.Explanation{Host: "app.example.com", Path: "/", Verdict: "502 no client", Status: 502})
	if strings.Contains(b.String(), "SETTING") {
		t.Errorf("explain table with no setting has a SETTING line:\n%s", b.String())
	}
}

// cliShares mints a fixed link naming what it was asked.
type cliShares struct{}

func (cliShares) Mint(_ *http.Request, _, host, path string, ttl time.Duration) (admin.ShareLink, string, error) {
	if path == "" {
		path = "/"
	}
	return admin.ShareLink{URL: "https://" + host + path + "?aperio_share=t-" + ttl.String(), Hostname: host, Path: path,
		ExpiresAt: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}, "n", nil
}

func (cliShares) RotateKey(_ context.Context, orgID string, revoke bool) (admin.ShareKey, error) {
	return admin.ShareKey{ID: "sk_cli", OrgID: orgID, Generation: 3, RevokedPrevious: revoke}, nil
}

// TestAPIShareRotate: api share rotate sends revoke_previous as --revoke
// says and prints the new key.
func TestAPIShareRotate(t *testing.T) {
	s := newAPIServer(t)
	t.Setenv("APERIO_SERVER_URL", s.url)
	t.Setenv("APERIO_API_KEY", testMaster)
	out := ok(t, "api", "share", "rotate")
	if !strings.Contains(out, "sk_cli") || !strings.Contains(out, "still valid") {
		t.Fatalf("share rotate printed %q, want the new key, previous still valid", out)
	}
	var key admin.ShareKey
	okJSON(t, &key, "api", "share", "rotate", "--revoke", "--json")
	if !key.RevokedPrevious || key.Generation != 3 {
		t.Fatalf("share rotate --revoke --json = %+v, want the previous key revoked", key)
	}
	if code, _, errOut := cli(t, "api", "share", "rotate", "extra"); code != 2 || errOut == "" {
		t.Fatalf("share rotate extra = %d %q, want a usage error", code, errOut)
	}
}

// TestAPIShare: api share create sends the hostname, path and ttl and
// prints the URL and expiry; a missing or non-positive --ttl is a usage
// error.
func TestAPIShare(t *testing.T) {
	s := newAPIServer(t)
	t.Setenv("APERIO_SERVER_URL", s.url)
	t.Setenv("APERIO_API_KEY", testMaster)
	out := ok(t, "api", "share", "create", "--hostname", "app.example.com", "--path", "/docs", "--ttl", "90m")
	if !strings.Contains(out, "https://app.example.com/docs?aperio_share=t-1h30m0s") || !strings.Contains(out, "2030-01-01T00:00:00Z") {
		t.Fatalf("share create printed %q, want the URL for 1h30m and the expiry", out)
	}
	var link admin.ShareLink
	okJSON(t, &link, "api", "share", "create", "--hostname", "app.example.com", "--ttl", "1h", "--json")
	if link.Path != "/" || link.Hostname != "app.example.com" {
		t.Fatalf("share create --json = %+v", link)
	}
	if code, _, errOut := cli(t, "api", "share", "create", "--hostname", "app.example.com"); code != 2 || !strings.Contains(errOut, `"ttl" not set`) {
		t.Fatalf("share create without --ttl = %d %q, want 2", code, errOut)
	}
	if code, _, errOut := cli(t, "api", "share", "create", "--hostname", "app.example.com", "--ttl", "-1h"); code != 2 || !strings.Contains(errOut, "not a positive duration") {
		t.Fatalf("share create --ttl -1h = %d %q, want 2", code, errOut)
	}
}

// TestAPIScalingShow: `api scaling show ID` prints the record, its pool's
// utilization as a sparkline with the samples at or above target marked,
// and its decisions newest first; --json is GET /scaling/{id}'s answer;
// another organization's record is not found.
func TestAPIScalingShow(t *testing.T) {
	s := newAPIServer(t)
	t.Setenv("APERIO_SERVER_URL", s.url)
	t.Setenv("APERIO_API_KEY", testMaster)
	var acme, other admin.Org
	okJSON(t, &acme, "api", "orgs", "create", "--name", "acme", "--json")
	okJSON(t, &other, "api", "orgs", "create", "--name", "other", "--json")
	var viewer admin.MintedKey
	okJSON(t, &viewer, "api", "admin-keys", "create", "--name", "ro", "--role", "viewer", "--org-id", acme.ID, "--json")

	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	busy := autoscale.View{
		ID: "scl_busy", OrgID: acme.ID, Hostname: "app.example.com", Path: "/api", URL: "https://provider.example/scale",
		Min: 1, Max: 8, ColdStart: 45 * time.Second, TargetUtilization: 0.8, Window: 15 * time.Second, Cooldown: time.Minute,
		Instances: 2, Capacity: 20, Inflight: 18, Utilization: 0.9, UpdatedAt: at,
	}
	s.scaling.set(busy, autoscale.View{ID: "scl_other", OrgID: other.ID, Hostname: "other.example.com", UpdatedAt: at})
	// Utilization 0, 1/7 … 1 over eight seconds, then one unmeasured sample.
	var series []apitype.ScalingPoint
	for i := range 8 {
		u := float64(i) / 7
		series = append(series, apitype.ScalingPoint{At: at.Add(time.Duration(i) * time.Second), Instances: 2, Capacity: 20, Inflight: i * 20 / 7, Utilization: &u})
	}
	series = append(series, apitype.ScalingPoint{At: at.Add(8 * time.Second), Instances: 0})
	s.scaling.setHistory("scl_busy", autoscale.History{
		Decisions: []apitype.ScalingDecision{
			{Seq: 3, At: at.Add(8 * time.Second), Action: "none", Reason: "held by the cooldown", Samples: []float64{0.85, 0.9},
				SampleCount: 20, Current: 2, Desired: 2, Outcome: "held", Repeats: 4},
			{Seq: 2, At: at.Add(7 * time.Second), Action: "scale_out", Reason: "busy", Samples: []float64{0.8, 0.95, 0.9},
				SampleCount: 16, Current: 2, Desired: 3, Outcome: "failed", Status: 502, Error: "bad gateway", Disarmed: true},
			{Seq: 1, At: at, Action: "cold_start", Reason: "empty", Samples: []float64{}, Current: 0, Desired: 1, Outcome: "accepted", Status: 202},
		},
		Series: series,
	})

	out := ok(t, "api", "scaling", "show", "scl_busy", "--api-key", viewer.Secret)
	head, decisions, found := strings.Cut(out, "\n\n")
	if !found {
		t.Fatalf("scaling show = %q, want the record, a blank line, the decisions", out)
	}
	for _, want := range []string{
		"id           scl_busy\n",
		"state        armed\n",
		"pool         2 instances, 18 in flight of 20, utilization 90%\n",
		"rules        min 1, max 8, target 80%, window 15s, cooldown 1m0s, cold_start 45s\n",
		// One block per level, a blank for the unmeasured sample; the
		// last two (6/7 and 1) are at or above the 80% target.
		"utilization  ▁▂▃▄▅▆▇█   - over 8s\n",
		"                   ^^   ^ at or above the 80% target\n",
	} {
		if !strings.Contains(head+"\n", want) {
			t.Errorf("scaling show record part =\n%s\nwant a line %q", head, want)
		}
	}
	rows := table(t, decisions, "AT", "ACTION", "OUTCOME", "INSTANCES", "STATUS", "SAMPLES", "REASON", "ERROR")
	want := []map[string]string{
		{"AT": "2030-01-02T03:04:13Z", "ACTION": "none", "OUTCOME": "held x5", "INSTANCES": "2->2", "STATUS": "-", "SAMPLES": "20 0.85..0.9", "REASON": "held by the cooldown", "ERROR": "-"},
		{"AT": "2030-01-02T03:04:12Z", "ACTION": "scale_out", "OUTCOME": "failed,disarmed", "INSTANCES": "2->3", "STATUS": "502", "SAMPLES": "16 0.8..0.95", "REASON": "busy", "ERROR": "bad gateway"},
		{"AT": "2030-01-02T03:04:05Z", "ACTION": "cold_start", "OUTCOME": "accepted", "INSTANCES": "0->1", "STATUS": "202", "SAMPLES": "-", "REASON": "empty", "ERROR": "-"},
	}
	if len(rows) != len(want) {
		t.Fatalf("scaling show decisions = %v, want %d rows", rows, len(want))
	}
	for i := range want {
		if !equalMaps(rows[i], want[i]) {
			t.Errorf("scaling show decision %d = %v, want %v", i, rows[i], want[i])
		}
	}

	t.Run("--json", func(t *testing.T) {
		var got apitype.ScalingRecordDetail
		okJSON(t, &got, "api", "scaling", "show", "scl_busy", "--json")
		if got.ID != "scl_busy" || len(got.Decisions) != 3 || got.Decisions[0].Seq != 3 || len(got.Series) != 9 || got.Series[8].Utilization != nil {
			t.Errorf("scaling show --json = %+v, want the record, 3 decisions newest first, 9 points", got)
		}
	})
	t.Run("no history", func(t *testing.T) {
		s.scaling.setHistory("scl_busy", autoscale.History{})
		out := ok(t, "api", "scaling", "show", "scl_busy")
		if !strings.Contains(out, "utilization  -\n") || !strings.HasSuffix(out, "\nno decisions remembered by this server\n") {
			t.Errorf("scaling show with no history = %q, want no sparkline and no decisions said", out)
		}
	})
	for _, tt := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"another organization's record", []string{"api", "scaling", "show", "scl_other", "--api-key", viewer.Secret}, 1, `aperio-client: scaling record "scl_other" not found`},
		{"unknown record", []string{"api", "scaling", "show", "scl_nope"}, 1, `aperio-client: scaling record "scl_nope" not found`},
		{"an ID no record has", []string{"api", "scaling", "show", strings.Repeat("x", 100)}, 1, "aperio-client: scaling record id must be 1 to 64 characters"},
		{"no ID", []string{"api", "scaling", "show"}, 2, "accepts 1 arg(s), received 0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := cli(t, tt.args...)
			if code != tt.code || out != "" || !strings.Contains(errOut, tt.stderr) {
				t.Errorf("aperio-client %.60s = exit %d, %q, stderr %q; want %d, nothing, %q", strings.Join(tt.args, " "), code, out, errOut, tt.code, tt.stderr)
			}
		})
	}
}

// TestSparkline pins the sparkline's levels, its blanks for unmeasured
// samples, its target marks and its width: more samples than columns are
// each column's highest.
func TestSparkline(t *testing.T) {
	pt := func(us ...float64) []apitype.ScalingPoint {
		var ps []apitype.ScalingPoint
		for _, u := range us {
			if u < 0 {
				ps = append(ps, apitype.ScalingPoint{})
				continue
			}
			ps = append(ps, apitype.ScalingPoint{Utilization: &u})
		}
		return ps
	}
	tests := []struct {
		name        string
		ps          []apitype.ScalingPoint
		width       int
		line, marks string
	}{
		{"levels", pt(0, 0.5, 1, 1.5), 60, "▁▅██", "  ^^"},
		{"unmeasured", pt(-1, 0.9, -1), 60, " ▇ ", " ^ "},
		{"at target is marked", pt(0.8, 0.79), 60, "▇▇", "^ "},
		{"wider than width takes each column's highest", pt(0, 1, 0, 0, 0.5, 0), 3, "█▁▅", "^  "},
		{"none", nil, 60, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			line, marks := sparkline(tt.ps, 0.8, tt.width)
			if line != tt.line || marks != tt.marks {
				t.Errorf("sparkline(%s) = %q, %q; want %q, %q", tt.name, line, marks, tt.line, tt.marks)
			}
		})
	}
}

// TestAPIScalingCreate: `api scaling create HOSTNAME --url URL …` sends
// POST /scaling with the flags as the body (durations in Go syntax, the
// secret from a file), prints the record, and fails with exit 2 on bad
// usage and 1 when the API refuses.
func TestAPIScalingCreate(t *testing.T) {
	s := newAPIServer(t)
	t.Setenv("APERIO_SERVER_URL", s.url)
	t.Setenv("APERIO_API_KEY", testMaster)
	var adminKey, operator admin.MintedKey
	okJSON(t, &adminKey, "api", "admin-keys", "create", "--name", "admin", "--role", "admin", "--json")
	okJSON(t, &operator, "api", "admin-keys", "create", "--name", "ops", "--role", "operator", "--json")
	t.Setenv("APERIO_API_KEY", adminKey.Secret)
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte("hook-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	var got apitype.ScalingRecordDetail
	okJSON(t, &got, "api", "scaling", "create", "App.Example.com", "--url", "https://provider.example.com/scale", "--path", "/api",
		"--secret-file", secretFile, "--min", "1", "--max", "4", "--cold-start", "90s", "--target-utilization", "0.7",
		"--window", "20s", "--cooldown", "2m", "--json")
	if got.ID != "scl_armed" || got.Hostname != "app.example.com" || got.Path != "/api" || !got.Authenticated || got.Min != 1 || got.Max != 4 {
		t.Errorf("scaling create --json = %+v, want the record", got)
	}
	s.scaling.mu.Lock()
	arms := slices.Clone(s.scaling.arms)
	s.scaling.mu.Unlock()
	want := autoscale.Declaration{URL: "https://provider.example.com/scale", Secret: "hook-secret", Min: 1, Max: 4,
		ColdStart: 90 * time.Second, TargetUtilization: 0.7, Window: 20 * time.Second, Cooldown: 2 * time.Minute}
	if len(arms) != 1 || arms[0].Block != want || arms[0].Hostname != "app.example.com" || arms[0].Path != "/api" || arms[0].Armer != "key:"+adminKey.ID {
		t.Fatalf("Arm calls = %+v, want one of %+v by key:%s", arms, want, adminKey.ID)
	}

	// Unset flags are left out: the server applies a client's defaults.
	out := ok(t, "api", "scaling", "create", "plain.example.com", "--url", "https://provider.example.com/plain")
	if !strings.Contains(out, "scl_armed") || !strings.Contains(out, "plain.example.com") {
		t.Errorf("scaling create prints %q, want the record", out)
	}
	s.scaling.mu.Lock()
	last := s.scaling.arms[len(s.scaling.arms)-1]
	s.scaling.mu.Unlock()
	if last.Block != (autoscale.Declaration{URL: "https://provider.example.com/plain"}) || last.Path != "" {
		t.Errorf("Arm of a bare create = %+v, want the URL alone", last)
	}

	for _, tt := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"no hostname", []string{"--url", "https://p.example.com/"}, 2, "accepts 1 arg(s), received 0"},
		{"no url", []string{"x.example.com"}, 2, `required flag(s) "url" not set`},
		{"bad duration", []string{"x.example.com", "--url", "https://p.example.com/", "--cold-start", "soon"}, 2, "invalid argument"},
		{"two secrets", []string{"x.example.com", "--url", "https://p.example.com/", "--secret", "a", "--secret-file", secretFile}, 2, "none of the others can be"},
		{"missing secret file", []string{"x.example.com", "--url", "https://p.example.com/", "--secret-file", secretFile + ".none"}, 2, "--secret-file"},
		{"refused by the API", []string{"bad host", "--url", "https://p.example.com/"}, 1, "aperio-client: hostname:"},
		{"operator may not", []string{"x.example.com", "--url", "https://p.example.com/", "--api-key", operator.Secret}, 1, "needs role admin"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := cli(t, append([]string{"api", "scaling", "create"}, tt.args...)...)
			if code != tt.code || out != "" || !strings.Contains(errOut, tt.stderr) {
				t.Errorf("scaling create %q = exit %d, %q, stderr %q; want %d with %q", tt.args, code, out, errOut, tt.code, tt.stderr)
			}
		})
	}
	s.scaling.mu.Lock()
	n := len(s.scaling.arms)
	s.scaling.mu.Unlock()
	if n != 2 {
		t.Errorf("%d Arm calls, want the two accepted creates alone", n)
	}
}
