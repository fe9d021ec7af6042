package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/server"
	"github.com/aperio-dev/aperio/tunnel"
)

// TestHostileScaling: a client's scaling declaration arms records only for
// the binds its token may bind, checked on every heartbeat; one
// organization's record never drives another's pool; and a flood of fresh
// hostnames is capped, at bounded cost.
func TestHostileScaling(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		run  func(t *testing.T, h *scalingHarness)
	}{
		{"guard/cross-org/out-of-scope-hostname", func(t *testing.T, h *scalingHarness) {
			// Org A's shop has its own record; its client is gone.
			tokA := h.token(t, h.orgA, "shop.example.com")
			a := h.clientWith(t, tokA, "/hook-a", true, "shop.example.com")
			a.announceNow(t)
			a.stop()
			waitClients(t, h.visitor, h.srv, 0)
			// A token of org B for b.example.net (the hello must be clean:
			// the handshake refuses names the token may not bind) adds
			// shop in its first heartbeat.
			tokB := h.token(t, h.orgB, "b.example.net")
			b := h.clientWith(t, tokB, "/hook-b", true, "b.example.net")
			b.setHosts("b.example.net", "shop.example.com")
			b.announceNow(t)
			h.wantRecords(t, "b.example.net", "shop.example.com")
			if !h.srv.gw.DrivesForTest(h.orgA, "shop.example.com", "") || h.srv.gw.DrivesForTest(h.orgB, "shop.example.com", "") {
				t.Errorf("shop.example.com driven by org A, org B = %v, %v; want true, false",
					h.srv.gw.DrivesForTest(h.orgA, "shop.example.com", ""), h.srv.gw.DrivesForTest(h.orgB, "shop.example.com", ""))
			}
			b.wantNotice(t, "scaling declaration for shop.example.com refused")
			h.visitNeverCalls(t, "shop.example.com", "/hook-b")
		}},
		{"guard/cross-org/wildcard-wider-than-token", func(t *testing.T, h *scalingHarness) {
			tok := h.token(t, h.orgB, "*.b.example.net")
			c := h.client(t, tok, "*.b.example.net")
			c.setHosts("*.b.example.net", "*.example.net", "*.net")
			c.announceNow(t)
			h.wantRecords(t, "*.b.example.net")
			c.wantNotice(t, "scaling declaration for *.example.net refused")
			c.wantNotice(t, "scaling declaration for *.net refused")
			if status, _ := get(t, h.visitor, h.srv, "anything.net", "/"); h.hookCalls() != 0 {
				t.Errorf("visitor of an unbound .net name = %d with %d hook calls, want none", status, h.hookCalls())
			}
		}},
		{"guard/cross-org/added-in-heartbeat", func(t *testing.T, h *scalingHarness) {
			tok := h.token(t, h.orgB, "b.example.net")
			c := h.client(t, tok, "b.example.net")
			c.announceNow(t)
			h.wantRecords(t, "b.example.net")
			c.setHosts("b.example.net", "victim.test", "*.com")
			c.announceNow(t)
			c.announceNow(t) // a second heartbeat: still refused
			h.wantRecords(t, "b.example.net")
			c.wantNotice(t, "scaling declaration for victim.test refused")
			c.wantNotice(t, "scaling declaration for *.com refused")
		}},
		{"guard/cross-org/cross-org-armed-bind", func(t *testing.T, h *scalingHarness) {
			// Org B owns every name under example.com at first, and arms
			// shop. Then the master reassigns shop to org A. Org B's token
			// and record outlive the change; its record must not drive org
			// A's pool, nor hold org A's visitors for org B's hook.
			h.own(t, h.orgA)
			h.own(t, h.orgB, "*.example.com")
			tokB := h.token(t, h.orgB, "*.example.com")
			b := h.clientWith(t, tokB, "/hook-b", true, "shop.example.com")
			b.announceNow(t)
			h.wantRecords(t, "shop.example.com")
			b.stop()
			waitClients(t, h.visitor, h.srv, 0)
			h.own(t, h.orgB, "b.example.net", "*.b.example.net")
			h.own(t, h.orgA, "shop.example.com")
			// The server applies an ownership change from the store's
			// change feed, its own as well, within milliseconds; wait
			// for it (a known window, docs/security.md), then check.
			poll(t, waitFor, func() (bool, string) {
				return !h.srv.gw.DrivesForTest(h.orgB, "shop.example.com", ""), "org B's record drives shop.example.com, now org A's"
			})
			h.visitNeverCalls(t, "shop.example.com", "/hook-b")
			// Org A's client serves shop (unhealthy for now) and declares
			// its own hook.
			tokA := h.token(t, h.orgA, "shop.example.com")
			a := h.clientWith(t, tokA, "/hook-a", false, "shop.example.com")
			a.announceNow(t)
			if h.srv.gw.DrivesForTest(h.orgB, "shop.example.com", "") {
				t.Errorf("org B's record drives org A's pool")
			}
			h.visitNeverCalls(t, "shop.example.com", "/hook-b")
		}},
		{"guard/flood/record-flood", func(t *testing.T, h *scalingHarness) {
			tok := h.token(t, h.orgB, "*.flood.test")
			c := h.client(t, tok, "x.flood.test")
			c.announceNow(t)
			before := h.srv.gw.ArmedLoadsForTest()
			start := time.Now()
			const beats, perBeat = 3, 1000
			for beat := range beats {
				hosts := make([]string, perBeat)
				for i := range hosts {
					hosts[i] = fmt.Sprintf("h%d-%d.flood.test", beat, i)
				}
				c.setHosts(hosts...)
				c.announceNow(t)
			}
			loads := h.srv.gw.ArmedLoadsForTest() - before
			elapsed := time.Since(start)
			recs := h.records(t)
			if want := server.DefaultConfig().Scaling.MaxRecordsPerToken; len(recs) > want {
				t.Errorf("%d heartbeats of %d fresh hostnames made %d records, want at most %d (scaling_max_records_per_token)", beats, perBeat, len(recs), want)
			}
			// One reload per announcement at most, plus the change feed's
			// (at most one a second).
			if limit := int64(beats) + 2 + int64(elapsed/time.Second); loads > limit {
				t.Errorf("%d heartbeats of %d fresh hostnames loaded the armed binds %d times in %v, want at most %d", beats, perBeat, loads, elapsed, limit)
			}
			c.wantNotice(t, "more scaling declarations refused")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.run(t, newScalingHarness(t))
		})
	}
}

// scalingHarness is a server with scaling on, two organizations and a
// hook server that counts calls by path.
type scalingHarness struct {
	srv        *testServer
	dataDir    string // the server's SQLite store lives here
	visitor    *http.Client
	orgA, orgB string
	hook       *httptest.Server

	mu    sync.Mutex // guards calls
	calls map[string]int
}

func newScalingHarness(t *testing.T) *scalingHarness {
	t.Helper()
	return newScalingHarnessWith(t, func(*server.Config) {})
}

// newScalingHarnessWith is newScalingHarness with the server's
// configuration changed by mutate before it starts.
func newScalingHarnessWith(t *testing.T, mutate func(*server.Config)) *scalingHarness {
	t.Helper()
	h := &scalingHarness{calls: map[string]int{}}
	h.hook = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.calls[r.URL.Path]++
		h.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(h.hook.Close)
	cfg := serverConfig(t)
	cfg.ScalingEnabled, cfg.Outbound.AllowHTTP, cfg.Outbound.AllowPrivate = true, true, true
	cfg.Router.GatewayTimeout = time.Second
	mutate(&cfg)
	h.dataDir = cfg.Store.DataDir
	h.srv = startServer(t, cfg, nil, nil)
	h.visitor = newVisitor(t, h.srv)
	h.orgA, h.orgB = h.org(t, "org-a"), h.org(t, "org-b")
	h.own(t, h.orgA, "shop.example.com")
	h.own(t, h.orgB, "b.example.net", "*.b.example.net", "*.flood.test")
	return h
}

// own makes patterns the hostnames org owns (none: it owns nothing).
func (h *scalingHarness) own(t *testing.T, org string, patterns ...string) {
	t.Helper()
	if patterns == nil {
		patterns = []string{}
	}
	status, body := adminCall(t, h.visitor, h.srv, "PUT", "/orgs/"+org+"/hostnames", map[string]any{"patterns": patterns})
	if status != http.StatusOK {
		t.Fatalf("PUT /orgs/%s/hostnames = %d %s, want 200", org, status, body)
	}
}

func (h *scalingHarness) org(t *testing.T, name string) string {
	t.Helper()
	status, body := adminCall(t, h.visitor, h.srv, "POST", "/orgs", map[string]any{"name": name})
	if status != http.StatusCreated {
		t.Fatalf("POST /orgs = %d %s, want 201", status, body)
	}
	var o struct{ ID string }
	if err := json.Unmarshal([]byte(body), &o); err != nil {
		t.Fatal(err)
	}
	return o.ID
}

// token mints a client token of org that may bind hostnames.
func (h *scalingHarness) token(t *testing.T, org string, hostnames ...string) string {
	t.Helper()
	status, body := adminCall(t, h.visitor, h.srv, "POST", "/tokens", map[string]any{
		"name": "t", "org_id": org, "hostnames": hostnames,
	})
	if status != http.StatusCreated {
		t.Fatalf("POST /tokens = %d %s, want 201", status, body)
	}
	var tok struct{ Token string }
	if err := json.Unmarshal([]byte(body), &tok); err != nil {
		t.Fatal(err)
	}
	return tok.Token
}

func (h *scalingHarness) hookCalls() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, c := range h.calls {
		n += c
	}
	return n
}

// visitNeverCalls visits host and fails unless the hook's path has never
// been called.
func (h *scalingHarness) visitNeverCalls(t *testing.T, host, hookPath string) {
	t.Helper()
	status, _ := get(t, h.visitor, h.srv, host, "/")
	h.mu.Lock()
	n := h.calls[hookPath]
	h.mu.Unlock()
	if n != 0 {
		t.Errorf("visitor of %s = %d, and hook %s was called %d times, want never", host, status, hookPath, n)
	}
}

// records returns the hostnames of every scaling record, sorted; refused
// declarations, listed without an ID, are not records.
func (h *scalingHarness) records(t *testing.T) []string {
	t.Helper()
	status, body := adminCall(t, h.visitor, h.srv, "GET", "/scaling", nil)
	if status != http.StatusOK {
		t.Fatalf("GET /scaling = %d %s", status, body)
	}
	var rs []struct{ ID, Hostname string }
	if err := json.Unmarshal([]byte(body), &rs); err != nil {
		t.Fatal(err)
	}
	var hosts []string
	for _, r := range rs {
		if r.ID != "" {
			hosts = append(hosts, r.Hostname)
		}
	}
	slices.Sort(hosts)
	return hosts
}

func (h *scalingHarness) wantRecords(t *testing.T, want ...string) {
	t.Helper()
	if got := h.records(t); !slices.Equal(got, want) {
		t.Fatalf("scaling records = %q, want %q", got, want)
	}
}

// client connects a raw tunnel client with token announcing one healthy
// service for hosts and a scaling block calling the hook's /hook.
func (h *scalingHarness) client(t *testing.T, token string, hosts ...string) *rawClient {
	t.Helper()
	return h.clientWith(t, token, "/hook", true, hosts...)
}

func (h *scalingHarness) clientWith(t *testing.T, token, hookPath string, healthy bool, hosts ...string) *rawClient {
	t.Helper()
	scaling := &tunnel.Scaling{URL: h.hook.URL + hookPath, ColdStart: time.Second, TargetUtilization: 0.8, Window: time.Second, Cooldown: time.Minute}
	return h.clientBlock(t, token, scaling, healthy, hosts...)
}

// clientBlock connects a raw tunnel client with token announcing one
// service for hosts and the scaling block scaling.
func (h *scalingHarness) clientBlock(t *testing.T, token string, scaling *tunnel.Scaling, healthy bool, hosts ...string) *rawClient {
	t.Helper()
	rc := h.startRawClient(t, token, scaling, healthy, hosts...)
	// Connected turns true once the session's control loop runs, the one
	// that serves AnnounceNow.
	poll(t, waitFor, func() (bool, string) { return rc.c.Connected(), "the raw client has not connected" })
	return rc
}

// startRawClient is clientBlock without waiting for the client to connect
// (for clients the server refuses).
func (h *scalingHarness) startRawClient(t *testing.T, token string, scaling *tunnel.Scaling, healthy bool, hosts ...string) *rawClient {
	t.Helper()
	rc := &rawClient{healthy: healthy, hosts: hosts, notices: &noticeLog{}}
	c, err := tunnel.NewClient(tunnel.ClientConfig{
		URL:   h.srv.url,
		Token: token,
		Announce: func() tunnel.Announcement {
			rc.mu.Lock()
			defer rc.mu.Unlock()
			return tunnel.Announcement{Name: "hostile", InstanceID: "hostile-1", Scaling: scaling,
				Services: []tunnel.Service{{ID: "0", Hostnames: slices.Clone(rc.hosts), Healthy: rc.healthy}}}
		},
		Forwarder: notFound{},
		Logger:    slog.New(rc.notices),
	})
	if err != nil {
		t.Fatalf("tunnel.NewClient() = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	rc.c = c
	rc.stop = sync.OnceFunc(func() {
		cancel()
		wait(t, done, waitFor, "the raw client's Run to return")
	})
	t.Cleanup(func() { rc.stop() })
	return rc
}

// rawClient is a tunnel client whose announcement the test scripts.
type rawClient struct {
	c       *tunnel.Client
	notices *noticeLog
	stop    func() // ends the client and waits for it; idempotent

	mu      sync.Mutex // guards the following
	hosts   []string
	healthy bool
}

func (rc *rawClient) setHosts(hosts ...string) {
	rc.mu.Lock()
	rc.hosts = hosts
	rc.mu.Unlock()
}

// announceNow sends the announcement and waits for the server's ack, by
// which the server has applied it.
func (rc *rawClient) announceNow(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := rc.c.AnnounceNow(ctx); err != nil {
		t.Fatalf("AnnounceNow() = %v, want nil", err)
	}
}

func (rc *rawClient) wantNotice(t *testing.T, text string) {
	t.Helper()
	if got := rc.notices.all(); !slices.ContainsFunc(got, func(n string) bool { return strings.Contains(n, text) }) {
		t.Errorf("server notices = %q, want one containing %q", got, text)
	}
}

// notFound answers every forwarded request 404.
type notFound struct{}

func (notFound) Forward(ctx context.Context, service string, req *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	http.NotFound(rec, req)
	return rec.Result(), nil
}

// noticeLog is a slog handler keeping the server notices a tunnel client
// logs, and counting the times its tunnel went down. It is safe for
// concurrent use.
type noticeLog struct {
	mu      sync.Mutex // guards notices and downs
	notices []string
	downs   int
}

func (l *noticeLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *noticeLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *noticeLog) WithGroup(string) slog.Handler            { return l }
func (l *noticeLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "tunnel down" {
		l.mu.Lock()
		l.downs++
		l.mu.Unlock()
	}
	if r.Message != "server notice" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "notice" {
			l.mu.Lock()
			l.notices = append(l.notices, a.Value.String())
			l.mu.Unlock()
		}
		return true
	})
	return nil
}

func (l *noticeLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.notices)
}

// tunnelDowns returns how many times the client's tunnel went down.
func (l *noticeLog) tunnelDowns() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.downs
}
