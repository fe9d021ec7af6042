package main

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/telemetry"
)

// signalledStream is the admin API's Stream over a hub, telling each
// subscription on subscribed.
type signalledStream struct {
	hub        *telemetry.Hub
	subscribed chan struct{}
}

func (s *signalledStream) Subscribe(f telemetry.StreamFilter) (*telemetry.Subscription, error) {
	sub, err := s.hub.Subscribe(f)
	if err == nil {
		s.subscribed <- struct{}{}
	}
	return sub, err
}

// cliTraffic is the admin API's Traffic over a Stats, with nothing held.
type cliTraffic struct{ st *telemetry.Stats }

func (c cliTraffic) Read(keep func(string) bool) telemetry.StatsReading { return c.st.Read(keep) }
func (cliTraffic) Held(func(string) bool) int                           { return 0 }

// lines is a goroutine-safe writer that tells each write on wrote.
type lines struct {
	mu    sync.Mutex // guards b
	b     strings.Builder
	wrote chan struct{}
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, err := l.b.Write(p)
	select {
	case l.wrote <- struct{}{}:
	default:
	}
	return n, err
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestAPIStats(t *testing.T) {
	s := newAPIServer(t)
	t.Setenv("APERIO_SERVER_URL", s.url)
	t.Setenv("APERIO_API_KEY", testMaster)
	now := time.Now()
	for i, status := range []int{200, 200, 200, 503} {
		s.stats.Record(&telemetry.Request{Start: now, Duration: time.Duration(i+1) * 10 * time.Millisecond, Hostname: "app.example.com", Routed: true, Status: status})
	}
	s.stats.Record(&telemetry.Request{Start: now, Duration: time.Millisecond, Hostname: "scanner.example", Status: 502})
	out := ok(t, "api", "stats")
	head, tbl, found := strings.Cut(out, "\n\n")
	if !found || !strings.Contains(head, "clients 0, hostnames 0, held now 0") {
		t.Fatalf("api stats = %q, want a summary line, then the table", out)
	}
	rows := table(t, tbl, "HOSTNAME", "RPS", "ERRORS", "P50", "P99", "REQUESTS 1M", "REQUESTS 1H")
	// Unrouted requests have the dashboard's name, not the API's
	// __unrouted (issue 39: one name per thing).
	if i := slices.IndexFunc(rows, func(r map[string]string) bool { return r["HOSTNAME"] == "(no route)" }); i < 0 || strings.Contains(tbl, "__unrouted") {
		t.Errorf("api stats table = %q, want the unrouted row named (no route)", tbl)
	} else {
		rows = slices.Delete(rows, i, i+1)
	}
	if len(rows) != 1 || rows[0]["HOSTNAME"] != "app.example.com" || rows[0]["ERRORS"] != "25.0%" || rows[0]["REQUESTS 1M"] != "4" || rows[0]["RPS"] != "0.07" || !strings.HasSuffix(rows[0]["P99"], "ms") {
		t.Errorf("api stats rows = %v, want app.example.com with 4 requests, 25%% errors", rows)
	}
	var st apitype.Stats
	okJSON(t, &st, "api", "stats", "--json", "--hostname", "app.example.com")
	// The server has just started: the series begin at its start (at
	// most 60 buckets), holding the requests.
	var inSeries int64
	for _, h := range st.Hosts {
		for _, b := range h.Series {
			inSeries += b.Requests
		}
	}
	if len(st.Hosts) != 1 || st.Hosts[0].Windows[apitype.Window1m].Status5xx != 1 || len(st.Hosts[0].Series) < 1 || len(st.Hosts[0].Series) > 60 || inSeries != 4 {
		t.Errorf("api stats --json = %+v, want one host with one 5xx and 1 to 60 buckets holding the 4 requests", st)
	}
}

// TestAPITail follows the stream: each event prints one line, and the
// stream's end by the server exits 1 with a message.
func TestAPITail(t *testing.T) {
	for _, asJSON := range []bool{false, true} {
		t.Run(map[bool]string{false: "lines", true: "json"}[asJSON], func(t *testing.T) {
			s := newAPIServer(t)
			t.Setenv("APERIO_SERVER_URL", s.url)
			t.Setenv("APERIO_API_KEY", testMaster)
			stdout := &lines{wrote: make(chan struct{}, 1)}
			var stderr strings.Builder
			args := []string{"api", "tail", "--type", "access,client"}
			if asJSON {
				args = append(args, "--json")
			}
			code := make(chan int, 1)
			go func() { code <- run(args, stdout, &stderr) }()
			select {
			case <-s.stream.subscribed:
			case c := <-code:
				t.Fatalf("api tail = exit %d before subscribing: %s", c, stderr.String())
			}
			s.hub.Emit(apitype.StreamScaling, "app.example.com", nil, "", apitype.StreamScalingEvent{Hostname: "app.example.com"}) // not asked for
			s.hub.Emit(apitype.StreamAccess, "app.example.com", nil, "", apitype.StreamAccessEvent{At: time.Now(), Hostname: "app.example.com", Method: "GET", Path: "/p", Status: 404, DurationMS: 12, Limit: "ip"})
			s.hub.Emit(apitype.StreamClient, "", []string{"app.example.com"}, "", apitype.StreamClientEvent{ID: "cl_1", Name: "web", Hostnames: []string{"app.example.com"}, Event: apitype.ClientConnected})
			deadline := time.After(30 * time.Second)
			for strings.Count(stdout.String(), "\n") < 2 {
				select {
				case <-stdout.wrote:
				case <-deadline:
					t.Fatalf("api tail printed %q in 30s, want two lines", stdout.String())
				}
			}
			s.hub.Close()
			select {
			case c := <-code:
				if c != 1 || !strings.Contains(stderr.String(), "the server ended the stream") {
					t.Errorf("api tail after the server ended the stream = exit %d, stderr %q; want 1 with a message", c, stderr.String())
				}
			case <-time.After(30 * time.Second):
				t.Fatal("api tail did not exit within 30s of the stream's end")
			}
			got := strings.Split(strings.TrimSpace(stdout.String()), "\n")
			if len(got) != 2 {
				t.Fatalf("api tail printed %q, want two lines", got)
			}
			if asJSON {
				var ev struct {
					Event string          `json:"event"`
					Data  json.RawMessage `json:"data"`
				}
				if err := json.Unmarshal([]byte(got[0]), &ev); err != nil || ev.Event != "access" || !strings.Contains(string(ev.Data), `"path":"/p"`) {
					t.Errorf("api tail --json line %q = %+v, %v; want the access event", got[0], ev, err)
				}
				return
			}
			if !strings.Contains(got[0], "access app.example.com GET /p 404 12ms limit=ip") {
				t.Errorf("api tail access line = %q", got[0])
			}
			if !strings.Contains(got[1], "client connected web (cl_1) app.example.com") {
				t.Errorf("api tail client line = %q", got[1])
			}
		})
	}
}

func TestAPIFeedUsage(t *testing.T) {
	s := newAPIServer(t)
	t.Setenv("APERIO_SERVER_URL", s.url)
	t.Setenv("APERIO_API_KEY", testMaster)
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"bad --type", []string{"api", "tail", "--type", "access,nope"}, 2, `--type "nope" is not one of access, scaling, client`},
		{"bad --since", []string{"api", "audit", "--since", "yesterday"}, 2, `--since "yesterday" is not an RFC 3339 time`},
		{"bad stats hostname", []string{"api", "stats", "--hostname", "bad host"}, 1, `hostname "bad host"`},
		{"bad tail hostname", []string{"api", "tail", "--hostname", strings.Repeat("h", 600)}, 1, "hostname: 600 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := cli(t, tt.args...)
			if code != tt.code || !strings.Contains(errOut, tt.stderr) {
				t.Errorf("aperio-client %s = exit %d, stderr %q; want %d, %q", strings.Join(tt.args, " "), code, errOut, tt.code, tt.stderr)
			}
		})
	}
}

func TestAPIAuditFiltersAndVerify(t *testing.T) {
	s := newAPIServer(t)
	t.Setenv("APERIO_SERVER_URL", s.url)
	t.Setenv("APERIO_API_KEY", testMaster)
	ok(t, "api", "tokens", "create", "--name", "x", "--hostname", "a.example.com")
	ok(t, "api", "maintenance", "on", "a.example.com")
	rows := table(t, ok(t, "api", "audit", "--event", "maintenance_on", "--hostname", "a.example.com", "--since", "2020-01-01T00:00:00Z"),
		"SEQ", "AT", "EVENT", "ACTOR", "ORG", "HOSTNAME", "DETAIL")
	if len(rows) != 1 || rows[0]["EVENT"] != "maintenance_on" {
		t.Errorf("api audit --event maintenance_on = %v, want the one entry", rows)
	}
	if out := ok(t, "api", "audit", "--until", "2020-01-01T00:00:00Z"); strings.Count(out, "\n") != 1 {
		t.Errorf("api audit --until 2020 = %q, want the header alone", out)
	}
	if out := ok(t, "api", "audit", "verify"); !strings.HasPrefix(out, "audit chain ok: ") {
		t.Errorf("api audit verify = %q, want ok", out)
	}
	var v apitype.AuditVerify
	okJSON(t, &v, "api", "audit", "verify", "--json")
	if !v.OK || v.Entries < 2 {
		t.Errorf("api audit verify --json = %+v, want ok with the entries", v)
	}
}
