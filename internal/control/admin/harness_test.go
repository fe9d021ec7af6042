package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/autoscale"
	"github.com/aperio-dev/aperio/internal/control/admin"
	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/store/storetest"
)

// masterToken is the master token of every fixture.
const masterToken = "test-master-token"

// clock is a fake clock. Every reading moves it on by a millisecond, so
// that records made one after another have distinct, increasing times and
// newest-first order is deterministic.
type clock struct {
	mu sync.Mutex // guards t
	t  time.Time
}

func newClock() *clock {
	return &clock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Millisecond)
	return c.t
}

// Advance moves the clock on by d.
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// fakeClients is a ClientLister with a fixed list.
type fakeClients struct {
	mu      sync.Mutex // guards list and drained
	list    []admin.ClientInfo
	drained []string // the id of every DrainClient call that found its client, in order
}

func (f *fakeClients) Clients() []admin.ClientInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]admin.ClientInfo(nil), f.list...)
}

// SetClientDisabled implements admin.ClientDisabler over the list.
func (f *fakeClients) SetClientDisabled(id string, disabled bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.list {
		if f.list[i].ID == id {
			f.list[i].Disabled = disabled
			return nil
		}
	}
	return admin.ErrNoClient
}

// DrainClient implements admin.ClientDrainer over the list.
func (f *fakeClients) DrainClient(id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.list {
		if f.list[i].ID == id {
			f.drained = append(f.drained, id)
			return nil
		}
	}
	return admin.ErrNoClient
}

// drains returns the ids DrainClient was called with, in order.
func (f *fakeClients) drains() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.drained...)
}

func (f *fakeClients) set(l ...admin.ClientInfo) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.list = l
}

// fakeScaling is a Scaling with a fixed list of records. List scopes it by
// organization as the controller does, Disarm removes a record, and every
// Disarm and History call is recorded.
type fakeScaling struct {
	mu        sync.Mutex // guards the following fields
	views     []autoscale.View
	histories map[string]autoscale.History    // by record ID
	disarms   []string                        // "orgID/id" of every Disarm call, in order
	histCalls []string                        // the id of every History call, in order
	lists     int                             // List calls
	arms      []autoscale.OperatorDeclaration // every Arm call, in order
	armErr    error                           // returned by Arm when set
	listErr   error                           // returned by List when set
	disarmErr error                           // returned by Disarm when set
}

func (f *fakeScaling) List(_ context.Context, orgID string) ([]autoscale.View, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	if f.listErr != nil {
		return nil, f.listErr
	}
	var out []autoscale.View
	for _, v := range f.views {
		if orgID == "" || v.OrgID == orgID {
			out = append(out, v)
		}
	}
	return out, nil
}

func (f *fakeScaling) Disarm(_ context.Context, orgID, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.disarms = append(f.disarms, orgID+"/"+id)
	if f.disarmErr != nil {
		return f.disarmErr
	}
	for i, v := range f.views {
		if v.ID == id && (orgID == "" || v.OrgID == orgID) {
			f.views = append(f.views[:i:i], f.views[i+1:]...)
			return nil
		}
	}
	return fmt.Errorf("autoscale: disarm %s: %w (%w)", id, autoscale.ErrNoRecord, store.ErrNotFound)
}

// Arm records d and creates or updates the view of its bind, as the
// controller does without the rules: the tests of those use a real one.
func (f *fakeScaling) Arm(_ context.Context, d autoscale.OperatorDeclaration) (autoscale.View, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.arms = append(f.arms, d)
	if f.armErr != nil {
		return autoscale.View{}, false, f.armErr
	}
	b := d.Block
	v := autoscale.View{OrgID: d.OrgID, Hostname: d.Hostname, Path: d.Path, URL: b.URL, Authenticated: b.Secret != "",
		Min: b.Min, Max: b.Max, ColdStart: b.ColdStart, TargetUtilization: b.TargetUtilization, Window: b.Window, Cooldown: b.Cooldown}
	for i, old := range f.views {
		if old.OrgID == d.OrgID && old.Hostname == d.Hostname && old.Path == d.Path {
			v.ID = old.ID
			f.views[i] = v
			return v, false, nil
		}
	}
	v.ID = fmt.Sprintf("scl_arm%d", len(f.arms))
	f.views = append(f.views, v)
	return v, true, nil
}

// armCalls returns the Arm calls so far.
func (f *fakeScaling) armCalls() []autoscale.OperatorDeclaration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]autoscale.OperatorDeclaration(nil), f.arms...)
}

// History returns the history set for id (zero when none), and records
// the call.
func (f *fakeScaling) History(id string) autoscale.History {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.histCalls = append(f.histCalls, id)
	return f.histories[id]
}

// setHistory makes History(id) answer h.
func (f *fakeScaling) setHistory(id string, h autoscale.History) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.histories == nil {
		f.histories = map[string]autoscale.History{}
	}
	f.histories[id] = h
}

// calls returns the List calls and the History calls so far.
func (f *fakeScaling) calls() (lists int, histories []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lists, append([]string(nil), f.histCalls...)
}

func (f *fakeScaling) set(vs ...autoscale.View) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.views = vs
}

// fail makes List answer listErr and Disarm disarmErr; nil restores them.
func (f *fakeScaling) fail(listErr, disarmErr error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listErr, f.disarmErr = listErr, disarmErr
}

// disarmCalls returns the Disarm calls so far, as "orgID/id".
func (f *fakeScaling) disarmCalls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.disarms...)
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a logger.
type syncBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// fixture is an admin API on a real SQLite store in a temporary directory,
// served by an httptest server.
type fixture struct {
	url     string // base URL of the server, without Prefix
	db      *store.DB
	clock   *clock
	clients *fakeClients
	scaling *fakeScaling
	logs    *syncBuffer
}

func newFixture(tb testing.TB) *fixture {
	tb.Helper()
	f := &fixture{clock: newClock(), clients: &fakeClients{}, scaling: &fakeScaling{}, logs: &syncBuffer{}}
	db, err := store.Open(context.Background(), store.Config{DataDir: storetest.MigratedDataDir(tb), Now: f.clock.Now})
	if err != nil {
		tb.Fatalf("store.Open: %v", err)
	}
	tb.Cleanup(func() {
		if err := db.Close(); err != nil {
			tb.Errorf("store Close: %v", err)
		}
	})
	f.db = db
	f.url = f.serve(tb, admin.Config{Clients: f.clients, Scaling: f.scaling})
	return f
}

// withScaling returns a fixture on f's store, clock and log whose API is
// built with s as its Scaling (nil: autoscaling off), and no clients.
func (f *fixture) withScaling(tb testing.TB, s admin.Scaling) *fixture {
	tb.Helper()
	g := *f
	g.clients, g.scaling = nil, nil
	g.url = g.serve(tb, admin.Config{Scaling: s})
	return &g
}

// withConfig returns a fixture on f's store, clock and log whose API is
// built with cfg (its master token, store, logger and clock replaced by
// the fixture's), and no clients or scaling.
func (f *fixture) withConfig(tb testing.TB, cfg admin.Config) *fixture {
	tb.Helper()
	g := *f
	g.clients, g.scaling = nil, nil
	g.url = g.serve(tb, cfg)
	return &g
}

// serve builds the API of cfg, with the fixture's master token, store,
// logger and clock, serves it, and returns the server's URL.
func (f *fixture) serve(tb testing.TB, cfg admin.Config) string {
	tb.Helper()
	srv := httptest.NewServer(f.handler(tb, cfg))
	tb.Cleanup(srv.Close)
	return srv.URL
}

// handler builds the API of cfg as serve does and returns the handler
// the server mounts it in.
func (f *fixture) handler(tb testing.TB, cfg admin.Config) http.Handler {
	tb.Helper()
	cfg.MasterToken = masterToken
	cfg.Store = f.db
	cfg.Logger = slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg.Now = f.clock.Now
	api, err := admin.New(cfg)
	if err != nil {
		tb.Fatalf("admin.New: %v", err)
	}
	mux := http.NewServeMux()
	mux.Handle(admin.Prefix+"/", api.Handler())
	// As the server wires the admin login: its paths, and the OIDC
	// callback when it ends an admin login.
	mux.Handle("/aperio/admin/", api.LoginHandler())
	mux.HandleFunc("/aperio/auth/callback", func(w http.ResponseWriter, r *http.Request) {
		if !api.LoginCallback(r) {
			http.Error(w, "no admin login in progress", http.StatusBadRequest)
			return
		}
		api.ServeLoginCallback(w, r)
	})
	return mux
}

// call sends method to Prefix+path with body as the raw JSON body ("" for
// none) and cred as the bearer credential ("" for no Authorization
// header), and returns the answer's status and body.
func (f *fixture) call(tb testing.TB, method, path, cred, body string) (int, []byte) {
	tb.Helper()
	resp := f.send(tb, method, path, cred, body)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp.StatusCode, data
}

func (f *fixture) send(tb testing.TB, method, path, cred, body string) *http.Response {
	tb.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, f.url+admin.Prefix+path, rd)
	if err != nil {
		tb.Fatalf("NewRequest: %v", err)
	}
	if cred != "" {
		req.Header.Set("Authorization", "Bearer "+cred)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

// expect calls like call, fails the test unless the status is want, and
// decodes a 2xx body into out when out is not nil.
func (f *fixture) expect(tb testing.TB, method, path, cred, body string, want int, out any) {
	tb.Helper()
	status, data := f.call(tb, method, path, cred, body)
	if status != want {
		tb.Fatalf("%s %s = %d %s, want %d", method, path, status, data, want)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			tb.Fatalf("%s %s: decode %s: %v", method, path, data, err)
		}
	}
}

// expectError calls like call and fails the test unless the answer is a
// JSON error body with status want whose message contains msg.
func (f *fixture) expectError(tb testing.TB, method, path, cred, body string, want int, msg string) {
	tb.Helper()
	status, data := f.call(tb, method, path, cred, body)
	var eb struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(data, &eb); err != nil || eb.Error == "" {
		tb.Fatalf("%s %s = %d %q, want a JSON error body", method, path, status, data)
	}
	if status != want || !strings.Contains(eb.Error, msg) {
		tb.Fatalf("%s %s = %d %q, want %d with %q", method, path, status, eb.Error, want, msg)
	}
}

// org creates an organization with the master token and returns its ID.
func (f *fixture) org(tb testing.TB, name string) string {
	tb.Helper()
	var o admin.Org
	f.expect(tb, "POST", "/orgs", masterToken, jsonOf(tb, admin.CreateOrgRequest{Name: name}), http.StatusCreated, &o)
	return o.ID
}

// key creates an admin key with role in orgID ("" for the default
// organization) with the master token.
func (f *fixture) key(tb testing.TB, orgID, role string) admin.MintedKey {
	tb.Helper()
	var k admin.MintedKey
	body := jsonOf(tb, admin.CreateKeyRequest{Name: role + " key", Role: role, OrgID: orgID})
	f.expect(tb, "POST", "/admin-keys", masterToken, body, http.StatusCreated, &k)
	return k
}

// own assigns patterns to orgID with the master token.
func (f *fixture) own(tb testing.TB, orgID string, patterns ...string) {
	tb.Helper()
	body := jsonOf(tb, admin.SetOrgHostnamesRequest{Patterns: patterns})
	f.expect(tb, "PUT", "/orgs/"+orgID+"/hostnames", masterToken, body, http.StatusOK, nil)
}

// token mints a token for hostname with cred.
func (f *fixture) token(tb testing.TB, cred, hostname string) admin.MintedToken {
	tb.Helper()
	var t admin.MintedToken
	body := jsonOf(tb, admin.CreateTokenRequest{Name: "t " + hostname, Hostnames: []string{hostname}})
	f.expect(tb, "POST", "/tokens", cred, body, http.StatusCreated, &t)
	return t
}

// audit returns the newest audit entries the master token sees.
func (f *fixture) audit(tb testing.TB) []admin.AuditEntry {
	tb.Helper()
	var es []admin.AuditEntry
	f.expect(tb, "GET", "/audit?limit=1000", masterToken, "", http.StatusOK, &es)
	return es
}

func jsonOf(tb testing.TB, v any) string {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatalf("json.Marshal: %v", err)
	}
	return string(b)
}
