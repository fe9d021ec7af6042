package admin_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/control/admin"
	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/telemetry"
	"github.com/aperio-dev/aperio/store"
)

// fakeTraffic is a Traffic with a fixed list of hostnames, each with one
// request in every window, one scaling event and held requests.
type fakeTraffic struct {
	hosts []string
	held  int
}

func (f *fakeTraffic) Read(keep func(string) bool) telemetry.StatsReading {
	out := telemetry.StatsReading{At: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	for _, h := range f.hosts {
		if keep(h) {
			w := apitype.StatsWindow{Requests: 1, Status2xx: 1}
			out.Hosts = append(out.Hosts, apitype.HostStats{Hostname: h, Windows: map[string]apitype.StatsWindow{apitype.Window1m: w, apitype.Window5m: w, apitype.Window1h: w}})
			out.ScalingEvents1h++
		}
	}
	return out
}

func (f *fakeTraffic) Held(keep func(string) bool) int {
	n := 0
	for _, h := range f.hosts {
		if keep(h) {
			n += f.held
		}
	}
	return n
}

func newHub(tb testing.TB, cfg telemetry.HubConfig) *telemetry.Hub {
	tb.Helper()
	h, err := telemetry.NewHub(cfg)
	if err != nil {
		tb.Fatalf("NewHub: %v", err)
	}
	tb.Cleanup(h.Close)
	return h
}

// feedWorld is organizations a and b owning a.test and b.test, a viewer
// key of a, and an API with traffic on both and a live stream.
type feedWorld struct {
	f      *fixture
	a, b   string
	viewer string
	hub    *telemetry.Hub
}

func newFeedWorld(t *testing.T, hub telemetry.HubConfig) *feedWorld {
	t.Helper()
	base := newFixture(t)
	w := &feedWorld{a: base.org(t, "a"), b: base.org(t, "b"), hub: newHub(t, hub)}
	base.own(t, w.a, "a.test", "*.a.test")
	base.own(t, w.b, "b.test", "*.b.test")
	w.viewer = base.key(t, w.a, "viewer").Secret
	base.clients.set(
		admin.ClientInfo{ID: "cli_a", OrgID: w.a, Hostnames: []string{"a.test", "x.a.test"}},
		admin.ClientInfo{ID: "cli_b", OrgID: w.b, Hostnames: []string{"b.test"}},
	)
	w.f = base.withConfig(t, admin.Config{Clients: base.clients, Traffic: &fakeTraffic{hosts: []string{"__other", "__unrouted", "a.test", "b.test", "x.a.test"}, held: 2},
		Stream: w.hub, StreamHeartbeat: time.Hour})
	return w
}

func TestStatsScope(t *testing.T) {
	w := newFeedWorld(t, telemetry.HubConfig{})
	tests := []struct {
		name, cred, query string
		hosts             string
		clients, names    int
	}{
		{"master", masterToken, "", "__other __unrouted a.test b.test x.a.test", 2, 3},
		{"viewer of a", w.viewer, "", "a.test x.a.test", 1, 2},
		{"viewer of a, own hostname", w.viewer, "?hostname=x.a.test", "x.a.test", 1, 1},
		{"viewer of a, b's hostname", w.viewer, "?hostname=b.test", "", 0, 0},
		{"master, hostname", masterToken, "?hostname=B.TEST", "b.test", 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var st apitype.Stats
			w.f.expect(t, "GET", "/stats"+tt.query, tt.cred, "", http.StatusOK, &st)
			var names []string
			for _, h := range st.Hosts {
				names = append(names, h.Hostname)
			}
			if got := strings.Join(names, " "); got != tt.hosts {
				t.Errorf("GET /stats%s hosts = %q, want %q", tt.query, got, tt.hosts)
			}
			if st.Clients != tt.clients || st.Hostnames != tt.names || st.Held != 2*len(names) || st.ScalingEvents1h != len(names) {
				t.Errorf("GET /stats%s = clients %d, hostnames %d, held %d, scaling %d; want %d, %d, %d, %d",
					tt.query, st.Clients, st.Hostnames, st.Held, st.ScalingEvents1h, tt.clients, tt.names, 2*len(names), len(names))
			}
		})
	}
}

func TestStatsWithoutTraffic(t *testing.T) {
	f := newFixture(t)
	status, body := f.call(t, "GET", "/stats", masterToken, "")
	if status != http.StatusOK || !strings.Contains(string(body), `"hosts":[]`) {
		t.Errorf("GET /stats with no Traffic = %d %s, want 200 with no host", status, body)
	}
}

func TestFeedHostileQueries(t *testing.T) {
	w := newFeedWorld(t, telemetry.HubConfig{})
	huge := strings.Repeat("a", 100_000)
	tests := []struct{ path, msg string }{
		{"/stats?hostname=" + huge, "hostname"},
		{"/stats?hostname=" + url.QueryEscape("a b"), "hostname"},
		{"/stream?hostname=" + huge, "hostname"},
		{"/stream?hostname=" + url.QueryEscape("*.a.test"), "hostname"},
		{"/stream?type=access,bogus", `type "bogus"`},
		{"/stream?type=", `type ""`},
		{"/stream?type=" + strings.Repeat("access,", 20), "type"},
		{"/audit?since=yesterday", "since"},
		{"/audit?until=2030-13-01T00:00:00Z", "until"},
		{"/audit?since=" + url.QueryEscape(huge), "since"},
		{"/audit?event=" + huge, "event"},
		{"/audit?actor=" + huge, "actor"},
		{"/audit?hostname=" + huge, "hostname"},
		{"/audit?limit=1001", "limit"},
	}
	for _, tt := range tests {
		path := tt.path
		if len(path) > 60 {
			path = path[:60] + "…"
		}
		t.Run(path, func(t *testing.T) {
			w.f.expectError(t, "GET", tt.path, w.viewer, "", http.StatusBadRequest, tt.msg)
		})
	}
	if n := w.hub.Subscribers(); n != 0 {
		t.Errorf("%d subscribers after refused streams, want 0", n)
	}
}

func TestAuditFilters(t *testing.T) {
	f := newFixture(t)
	a := f.org(t, "a")
	f.own(t, a, "a.test")
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, e := range []store.AuditEntry{
		{OrgID: a, Event: "maintenance_on", Actor: "master", Hostname: "a.test", At: t0},
		{OrgID: a, Event: "maintenance_off", Actor: "key:k1", Hostname: "a.test", At: t0.Add(time.Hour)},
		{OrgID: a, Event: "maintenance_on", Actor: "key:k1", Hostname: "x.a.test", At: t0.Add(2 * time.Hour)},
	} {
		if _, err := f.db.AppendAudit(t.Context(), e); err != nil {
			t.Fatalf("AppendAudit(%d) = %v", i, err)
		}
	}
	viewer := f.key(t, a, "viewer").Secret
	tests := []struct{ query, want string }{
		{"event=maintenance_on", "x.a.test a.test"},
		{"actor=key:k1", "x.a.test a.test"},
		{"hostname=a.test", "a.test a.test"},
		{"event=maintenance_on&hostname=a.test", "a.test"},
		{"since=2030-01-01T01:00:00Z&event=maintenance_off", "a.test"},
		{"until=2030-01-01T01:00:00Z&actor=master", "a.test"},
		{"since=2030-01-01T00:30:00%2B00:00&until=2030-01-01T01:30:00Z&hostname=a.test", "a.test"},
		{"event=maintenance_on&limit=1", "x.a.test"},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			var es []admin.AuditEntry
			f.expect(t, "GET", "/audit?"+tt.query, viewer, "", http.StatusOK, &es)
			var hosts []string
			for _, e := range es {
				hosts = append(hosts, e.Hostname)
			}
			if got := strings.Join(hosts, " "); got != tt.want {
				t.Errorf("GET /audit?%s hostnames = %q, want %q", tt.query, got, tt.want)
			}
		})
	}
}

func TestAuditVerify(t *testing.T) {
	f := newFixture(t)
	a := f.org(t, "a")
	adminKey := f.key(t, a, "admin").Secret
	viewer := f.key(t, a, "viewer").Secret
	var v apitype.AuditVerify
	f.expect(t, "GET", "/audit/verify", adminKey, "", http.StatusOK, &v)
	// org_created and two admin_key_created entries.
	if !v.OK || v.Entries != 3 || v.Error != "" {
		t.Errorf("GET /audit/verify = %+v, want ok with 3 entries", v)
	}
	f.expectError(t, "GET", "/audit/verify", viewer, "", http.StatusForbidden, "role admin")
}

// sseEvent is one event read off a stream.
type sseEvent struct{ typ, data string }

// openStream follows GET /stream+query with cred and returns its events,
// once the stream is open (subscribed). The stream ends with the test.
func openStream(t *testing.T, f *fixture, cred, query string) <-chan sseEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	resp := getStream(ctx, t, f, cred, query)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET /stream = %d %s, want 200 text/event-stream", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != ": stream open\n" {
		t.Fatalf("stream's first line = %q, %v; want the open comment", line, err)
	}
	out := make(chan sseEvent, 1024)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(out)
		var ev sseEvent
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimSuffix(line, "\n")
			switch {
			case strings.HasPrefix(line, "event: "):
				ev.typ = line[len("event: "):]
			case strings.HasPrefix(line, "data: "):
				ev.data = line[len("data: "):]
			case line == "" && ev.typ != "":
				out <- ev
				ev = sseEvent{}
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		resp.Body.Close()
		wg.Wait()
	})
	return out
}

// next returns the next event of c, failing after a generous bound.
func next(t *testing.T, c <-chan sseEvent) sseEvent {
	t.Helper()
	select {
	case e, ok := <-c:
		if !ok {
			t.Fatal("stream ended")
		}
		return e
	case <-time.After(30 * time.Second):
		t.Fatal("no event within 30s")
	}
	return sseEvent{}
}

func TestStreamScope(t *testing.T) {
	w := newFeedWorld(t, telemetry.HubConfig{})
	viewer := openStream(t, w.f, w.viewer, "")
	master := openStream(t, w.f, masterToken, "?type=access,client")
	onlyX := openStream(t, w.f, w.viewer, "?hostname=x.a.test")
	emit := func(typ, host string, hosts []string, org string, v any) {
		w.hub.Emit(typ, host, hosts, org, v)
	}
	emit(apitype.StreamAccess, "b.test", nil, "", apitype.StreamAccessEvent{Hostname: "b.test", Path: "/b"})
	emit(apitype.StreamAccess, "__unrouted", nil, "", apitype.StreamAccessEvent{Hostname: "__unrouted", Path: "/u"})
	emit(apitype.StreamClient, "", []string{"b.test"}, w.b, apitype.StreamClientEvent{ID: "cli_b", Event: apitype.ClientConnected})
	emit(apitype.StreamScaling, "b.test", nil, "", apitype.StreamScalingEvent{Hostname: "b.test"})
	emit(apitype.StreamScaling, "a.test", nil, "", apitype.StreamScalingEvent{Hostname: "a.test", Action: apitype.EventScalingRequested})
	emit(apitype.StreamClient, "", []string{"a.test"}, w.a, apitype.StreamClientEvent{ID: "cli_a", Event: apitype.ClientConnected})
	emit(apitype.StreamAccess, "x.a.test", nil, "", apitype.StreamAccessEvent{Hostname: "x.a.test", Path: "/x"})

	var got []string
	for range 3 {
		e := next(t, viewer)
		got = append(got, e.typ+" "+e.data)
	}
	want := []string{
		`scaling {"hostname":"a.test","path":"","action":"scaling_requested","reason":"","instances":0,"at":"0001-01-01T00:00:00Z"}`,
		`client {"id":"cli_a","name":"","hostnames":null,"event":"connected"}`,
		`access {"at":"0001-01-01T00:00:00Z","hostname":"x.a.test","method":"","path":"/x","status":0,"duration_ms":0,"queue_wait_ms":0,"hold_ms":0,"limit":"","client":"","request_id":""}`,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("viewer of a's stream =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var mt []string
	for range 5 {
		mt = append(mt, next(t, master).typ)
	}
	if fmt.Sprint(mt) != "[access access client client access]" {
		t.Errorf("master's stream of access,client = %v, want every access and client event", mt)
	}
	if e := next(t, onlyX); e.typ != apitype.StreamAccess || !strings.Contains(e.data, `"/x"`) {
		t.Errorf("stream ?hostname=x.a.test first event = %+v, want x.a.test's access", e)
	}
}

// TestStreamEndsWhenKeyDeleted deletes the key a stream follows with: the
// stream ends at its next heartbeat.
func TestStreamEndsWhenKeyDeleted(t *testing.T) {
	base := newFixture(t)
	org := base.org(t, "a")
	k := base.key(t, org, "viewer")
	f := base.withConfig(t, admin.Config{Stream: newHub(t, telemetry.HubConfig{}), StreamHeartbeat: 20 * time.Millisecond})
	c := openStream(t, f, k.Secret, "")
	f.expect(t, "DELETE", "/admin-keys/"+k.ID, masterToken, "", http.StatusNoContent, nil)
	select {
	case _, ok := <-c:
		if ok {
			t.Error("an event after the key was deleted, want the stream's end")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the stream of a deleted key did not end within 30s")
	}
}

func TestStreamSubscriberLimit(t *testing.T) {
	w := newFeedWorld(t, telemetry.HubConfig{MaxSubscribers: 1})
	openStream(t, w.f, w.viewer, "")
	w.f.expectError(t, "GET", "/stream", w.viewer, "", http.StatusServiceUnavailable, "max_stream_subscribers")
	w.hub.Close()
	// Closing the hub ends open streams, and refuses new ones.
	w.f.expectError(t, "GET", "/stream", w.viewer, "", http.StatusServiceUnavailable, "shutting down")
}

// getStream sends GET /stream+query with cred on ctx and returns the
// response, its body unread.
func getStream(ctx context.Context, t *testing.T, f *fixture, cred, query string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", f.url+admin.Prefix+"/stream"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+cred)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET /stream: %v", err)
	}
	return resp
}

// streamRefused asks GET /stream with cred and expects a 503 whose JSON
// error contains msg; a stream opened instead fails the test at once,
// without waiting for its end.
func streamRefused(t *testing.T, f *fixture, cred, msg string) {
	t.Helper()
	resp := getStream(t.Context(), t, f, cred, "")
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("GET /stream = %d, want 503 %q", resp.StatusCode, msg)
	}
	var eb struct {
		Error string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&eb); err != nil || !strings.Contains(eb.Error, msg) {
		t.Fatalf("GET /stream = 503 %q (%v), want an error with %q", eb.Error, err, msg)
	}
}

// TestStreamSlotsPerHolder (#38, F6): the live stream's slots are not
// first come, first served across the server. One credential holds at
// most its share, one organization at most a quarter of
// max_stream_subscribers, and the last slot is the master token's: a
// viewer of one organization opening streams until refused locks out
// neither another organization nor the master.
func TestStreamSlotsPerHolder(t *testing.T) {
	// 12 slots: 2 per credential, 3 per organization, 11 for all but
	// the master.
	w := newFeedWorld(t, telemetry.HubConfig{MaxSubscribers: 12, MaxPerCredential: 2})
	b1 := w.f.key(t, w.b, "viewer").Secret
	b2 := w.f.key(t, w.b, "admin").Secret
	openStream(t, w.f, b1, "")
	openStream(t, w.f, b1, "?type=client")
	streamRefused(t, w.f, b1, "this credential already follows")
	openStream(t, w.f, b2, "")
	streamRefused(t, w.f, b2, "organization "+w.b+" already follows")
	// The probe's lock-out: another organization and the master still
	// follow while b holds all it may.
	openStream(t, w.f, w.viewer, "")
	openStream(t, w.f, masterToken, "")
	// Two more organizations take their shares: 3+1+1+3+3 = 11, every
	// slot but the master's reserve.
	for _, name := range []string{"c", "d"} {
		org := w.f.org(t, name)
		k1, k2 := w.f.key(t, org, "viewer").Secret, w.f.key(t, org, "viewer").Secret
		openStream(t, w.f, k1, "")
		openStream(t, w.f, k1, "")
		openStream(t, w.f, k2, "")
	}
	streamRefused(t, w.f, w.viewer, "max_stream_subscribers")
	if got := w.hub.Subscribers(); got != 11 {
		t.Fatalf("Subscribers() = %d, want 11 (every slot but the master's)", got)
	}
	openStream(t, w.f, masterToken, "")
	streamRefused(t, w.f, masterToken, "max_stream_subscribers")
}

func TestStreamEndsOnHubClose(t *testing.T) {
	w := newFeedWorld(t, telemetry.HubConfig{})
	c := openStream(t, w.f, masterToken, "")
	w.hub.Close()
	select {
	case _, ok := <-c:
		if ok {
			t.Error("an event after the hub closed, want the stream's end")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the stream did not end within 30s of the hub closing")
	}
}

// stalledWriter is a ResponseWriter whose second write (the first event,
// after the open comment) blocks until release closes: a subscriber that
// stopped reading.
type stalledWriter struct {
	h       http.Header
	mu      sync.Mutex // guards buf and writes
	buf     strings.Builder
	writes  int
	opened  chan struct{} // closed by the first write: subscribed
	blocked chan struct{} // closed when the second write blocks
	told    chan struct{} // closed by a write of a dropped event
	release chan struct{}
}

func (s *stalledWriter) Header() http.Header { return s.h }
func (s *stalledWriter) WriteHeader(int)     {}
func (s *stalledWriter) Flush()              {}
func (s *stalledWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	s.writes++
	n := s.writes
	s.mu.Unlock()
	switch n {
	case 1:
		close(s.opened)
	case 2:
		close(s.blocked)
		<-s.release
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if strings.Contains(string(p), "event: dropped\n") && s.told != nil {
		close(s.told)
		s.told = nil
	}
	return s.buf.WriteString(string(p))
}

func (s *stalledWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// TestStreamStalledSubscriberToldDropped stalls a subscriber's writes:
// publishing goes on without waiting, the events past its buffer are
// dropped and counted, and once it reads again it is told how many.
func TestStreamStalledSubscriberToldDropped(t *testing.T) {
	const buffer = 4
	w := newFeedWorld(t, telemetry.HubConfig{Buffer: buffer})
	api, err := admin.New(admin.Config{MasterToken: masterToken, Store: w.f.db, Stream: w.hub, StreamHeartbeat: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	told := make(chan struct{})
	sw := &stalledWriter{h: http.Header{}, opened: make(chan struct{}), blocked: make(chan struct{}), told: told, release: make(chan struct{})}
	ctx, cancel := context.WithCancel(t.Context())
	req := httptest.NewRequestWithContext(ctx, "GET", admin.Prefix+"/stream", nil)
	req.Header.Set("Authorization", "Bearer "+masterToken)
	served := make(chan struct{})
	go func() {
		defer close(served)
		api.Handler().ServeHTTP(sw, req)
	}()
	t.Cleanup(func() {
		cancel()
		<-served
	})
	select {
	case <-sw.opened: // the handler subscribes before its first write
	case <-served:
		t.Fatalf("the stream ended before subscribing: %s", sw.String())
	}
	emit := func(i int) {
		w.hub.Emit(apitype.StreamAccess, "a.test", nil, "", apitype.StreamAccessEvent{Path: fmt.Sprintf("/%d", i)})
	}
	emit(0)
	<-sw.blocked // the writer holds event 0
	const total = 50
	for i := 1; i < total; i++ {
		emit(i) // never blocks: the test would hang here otherwise
	}
	close(sw.release)
	wantDropped := int64(total - 1 - buffer)
	if got := w.hub.Dropped(); got != wantDropped {
		t.Errorf("Hub.Dropped() = %d, want %d", got, wantDropped)
	}
	want := fmt.Sprintf("event: dropped\ndata: {\"count\":%d,\"sampled\":0}\n\n", wantDropped)
	select {
	case <-told:
	case <-time.After(30 * time.Second):
		t.Fatalf("stream = %q, want it to tell %q within 30s", sw.String(), want)
	}
	if !strings.Contains(sw.String(), want) {
		t.Errorf("stream = %q, want it to tell %q", sw.String(), want)
	}
	if n := strings.Count(sw.String(), "event: access\n"); n != 1+buffer {
		t.Errorf("stream delivered %d access events, want %d (the one held and the buffer)", n, 1+buffer)
	}
}

// TestStreamStalledReaderDisconnected follows the stream over TCP and
// stops reading: once the connection's buffers are full, a write misses
// its deadline and the server lets the subscriber go.
func TestStreamStalledReaderDisconnected(t *testing.T) {
	base := newFixture(t)
	hub := newHub(t, telemetry.HubConfig{})
	f := base.withConfig(t, admin.Config{Stream: hub, StreamHeartbeat: time.Hour, StreamWriteTimeout: 50 * time.Millisecond})
	u, err := url.Parse(f.url)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET %s/stream HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", admin.Prefix, u.Host, masterToken)
	br := bufio.NewReader(conn)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the stream's head: %v", err)
		}
		if strings.Contains(line, "stream open") {
			break
		}
	}
	// From here on nothing is read. Large events fill the socket buffers.
	big := apitype.StreamAccessEvent{Path: "/" + strings.Repeat("x", 64<<10)}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(60 * time.Second)
	for hub.Subscribers() > 0 {
		for range 8 {
			hub.Emit(apitype.StreamAccess, "a.test", nil, "", big)
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatal("a subscriber that stopped reading was still subscribed after 60s")
		}
	}
}
