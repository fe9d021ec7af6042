package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/server"
)

// feedEvent is one Server-Sent Event read off GET /aperio/api/stream.
type feedEvent struct{ typ, data string }

// follow opens GET /aperio/api/stream+query on s with the master token
// and returns its events once it is open (subscribed). read false leaves
// the stream unread after its first line: a follower that stalled. The
// stream ends at cleanup or when the server closes it (the channel
// closes then).
func follow(t testing.TB, s *testServer, query string, read bool) <-chan feedEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url+apitype.Prefix+"/stream"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	tr := &http.Transport{Proxy: nil, TLSClientConfig: s.tlsClientConfig()}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		cancel()
		t.Fatalf("GET /stream: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		t.Fatalf("GET /stream = %d %s, want 200", resp.StatusCode, b)
	}
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != ": stream open\n" {
		t.Fatalf("stream's first line = %q, %v; want the open comment", line, err)
	}
	out := make(chan feedEvent, 4096)
	var wg sync.WaitGroup
	if read {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(out)
			var ev feedEvent
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
					ev = feedEvent{}
				}
			}
		}()
	}
	t.Cleanup(func() {
		cancel()
		resp.Body.Close()
		wg.Wait()
		tr.CloseIdleConnections()
	})
	return out
}

// nextOf returns the next event of type typ on c, skipping others.
func nextOf(t testing.TB, c <-chan feedEvent, typ string) feedEvent {
	t.Helper()
	timer := time.NewTimer(waitFor)
	defer timer.Stop()
	for {
		select {
		case e, ok := <-c:
			if !ok {
				t.Fatalf("stream ended waiting for a %s event", typ)
			}
			if e.typ == typ {
				return e
			}
		case <-timer.C:
			t.Fatalf("no %s event within %v", typ, waitFor)
		}
	}
}

// TestStreamEndToEnd follows the stream while a client connects, a
// visitor's request goes through its tunnel and the client leaves; then
// reads the request back from GET /stats.
func TestStreamEndToEnd(t *testing.T) {
	t.Parallel()
	srv := startServer(t, serverConfig(t), nil, nil)
	events := follow(t, srv, "", true)
	backend := startBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hi") }))
	ag := startAgent(t, srv, agentConfig(srv, service(backend.URL)))

	var ce apitype.StreamClientEvent
	if err := json.Unmarshal([]byte(nextOf(t, events, apitype.StreamClient).data), &ce); err != nil {
		t.Fatal(err)
	}
	if ce.Event != apitype.ClientConnected || ce.Name != "e2e" || ce.ID == "" || strings.Join(ce.Hostnames, ",") != appHost {
		t.Errorf("client event = %+v, want e2e connected with %s", ce, appHost)
	}
	visitor := newVisitor(t, srv)
	waitClients(t, visitor, srv, 1)
	req := newRequest(t, t.Context(), srv, http.MethodGet, appHost, "/hello?token=secret", nil)
	req.Header.Set("X-Request-Id", "feed-rid-1")
	if resp, body := do(t, visitor, req); resp.StatusCode != http.StatusOK || body != "hi" {
		t.Fatalf("GET /hello = %d %q, want 200 hi", resp.StatusCode, body)
	}
	raw := nextOf(t, events, apitype.StreamAccess).data
	var ae apitype.StreamAccessEvent
	if err := json.Unmarshal([]byte(raw), &ae); err != nil {
		t.Fatal(err)
	}
	if ae.Hostname != appHost || ae.Method != "GET" || ae.Path != "/hello" || ae.Status != 200 || ae.Client != ce.ID || ae.At.IsZero() {
		t.Errorf("access event = %+v, want GET %s /hello 200 served by %s", ae, appHost, ce.ID)
	}
	if strings.Contains(raw, "secret") {
		t.Errorf("access event %s carries the query string", raw)
	}

	var st apitype.Stats
	admin := newAdminClient(t, srv)
	admin.getJSON(t, "/stats?hostname="+appHost, &st)
	if st.Clients != 1 || st.Hostnames != 1 || len(st.Hosts) != 1 {
		t.Fatalf("GET /stats = %+v, want one client, one hostname, one host", st)
	}
	if w := st.Hosts[0].Windows[apitype.Window1m]; w.Requests != 1 || w.Status2xx != 1 || w.P50MS <= 0 {
		t.Errorf("GET /stats 1m window = %+v, want one 2xx request with a latency", w)
	}

	if err := ag.stop(); err != nil {
		t.Fatalf("agent Run() = %v", err)
	}
	if err := json.Unmarshal([]byte(nextOf(t, events, apitype.StreamClient).data), &ce); err != nil {
		t.Fatal(err)
	}
	if ce.Event != apitype.ClientDisconnected || ce.Name != "e2e" {
		t.Errorf("client event after the agent stopped = %+v, want e2e disconnected", ce)
	}
}

// TestStreamManySubscribers follows the stream with 100 subscribers, half
// of which never read, and one more whose writer is stuck, while 500
// visitor requests go through: every request succeeds, and each reading
// subscriber, the stuck one too once it reads, accounts for every request,
// delivered or told dropped or sampled out.
func TestStreamManySubscribers(t *testing.T) {
	t.Parallel()
	const (
		subscribers = 100
		requests    = 500
		workers     = 8
	)
	st := startStack(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }), func(c *server.Config) {
		c.MetricsToken = "metrics-token"
		c.Router.IPLimitMax = 0 // every follower and visitor is 127.0.0.1
	})
	type tally struct{ delivered, dropped, lost int64 }
	tallies := make(chan tally, subscribers)
	for i := range subscribers {
		read := i%2 == 0
		events := follow(t, st.server, "?type=access", read)
		if !read {
			continue
		}
		go func() {
			var tl tally
			for e := range events {
				switch e.typ {
				case apitype.StreamAccess:
					tl.delivered++
				case apitype.StreamDropped:
					var d apitype.StreamDroppedEvent
					if json.Unmarshal([]byte(e.data), &d) == nil {
						tl.dropped += d.Count
						tl.lost += d.Count - d.Sampled
					}
				}
				if tl.delivered+tl.dropped >= requests {
					break
				}
			}
			tallies <- tl
		}()
	}
	stuck, err := st.server.gw.StallForTest()
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()
	if n := st.server.gw.StreamSubscribersForTest(); n != subscribers+1 {
		t.Fatalf("%d subscribers, want %d", n, subscribers+1)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // generous: no timing is asserted
	defer cancel()
	errs := make(chan error, requests)
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, st.server.url+"/r/"+strconv.Itoa(i), nil)
				if err != nil {
					errs <- err
					continue
				}
				req.Host = appHost
				status, body, err := fetch(st.visitor, req)
				if err == nil && (status != http.StatusOK || body != "ok") {
					err = fmt.Errorf("request %d = %d %q, want 200 ok", i, status, body)
				}
				errs <- err
			}
		}()
	}
	for i := range requests {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		if err != nil {
			failed++
			if failed <= 5 {
				t.Error(err)
			}
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d visitor requests failed with %d stream subscribers", failed, requests, subscribers)
	}

	var told int64
	for range subscribers / 2 {
		tl := wait(t, tallies, waitFor, "a reading subscriber's tally")
		if tl.delivered+tl.dropped != requests {
			t.Errorf("a reading subscriber got %d access events and was told of %d dropped, want %d in all", tl.delivered, tl.dropped, requests)
		}
		told += tl.lost
	}
	dropped := st.server.gw.StreamDroppedForTest()
	// The stuck subscriber never read: whenever it comes back, the ring
	// still accounts for every request, sent or sampled out.
	var late int64
	for {
		n, err := stuck.ReadAccess(64, func([]byte) error { late++; return nil })
		if err != nil || n < 64 {
			break
		}
	}
	if got := late + stuck.TakeSampled() + stuck.TakeDropped(); got != requests {
		t.Errorf("the stuck subscriber accounts for %d requests when it reads, want %d", got, requests)
	}
	if dropped < told {
		t.Errorf("hub dropped %d events, fewer than the %d its readers were told of", dropped, told)
	}
	body := scrapeMetrics(t, st.visitor, st.server, "metrics-token")
	m := regexp.MustCompile(`(?m)^aperio_stream_dropped_total (\d+)$`).FindStringSubmatch(body)
	if m == nil || m[1] != strconv.FormatInt(dropped, 10) {
		t.Errorf("/aperio/metrics aperio_stream_dropped_total = %v, want %d", m, dropped)
	}
	t.Logf("%d requests, %d subscribers: %d events dropped, %d of them told to readers", requests, subscribers, dropped, told)
}

func TestStreamSubscriberLimit(t *testing.T) {
	t.Parallel()
	cfg := serverConfig(t)
	cfg.MaxStreamSubscribers = 2
	srv := startServer(t, cfg, nil, nil)
	follow(t, srv, "", true)
	follow(t, srv, "?type=client", false)
	status, body := newAdminClient(t, srv).get(t, "/stream")
	if status != http.StatusServiceUnavailable || !strings.Contains(body, `"error"`) || !strings.Contains(body, "max_stream_subscribers") {
		t.Errorf("third GET /stream = %d %s, want 503 with a JSON error naming max_stream_subscribers", status, body)
	}
}

// TestStreamDoesNotHoldShutdown shuts the server down with followers
// open, one of them not reading: they end, and Serve returns well before
// shutdown_timeout.
func TestStreamDoesNotHoldShutdown(t *testing.T) {
	t.Parallel()
	cfg := serverConfig(t)
	cfg.ShutdownTimeout = time.Minute
	srv := startServer(t, cfg, nil, nil)
	events := follow(t, srv, "", true)
	follow(t, srv, "", false)
	start := time.Now()
	if err := srv.stop(); err != nil {
		t.Fatalf("Serve() = %v, want nil", err)
	}
	if took := time.Since(start); took >= cfg.ShutdownTimeout {
		t.Errorf("shutdown took %v with stream followers, want well under shutdown_timeout %v", took, cfg.ShutdownTimeout)
	}
	select {
	case _, ok := <-events:
		if ok {
			t.Error("an event after shutdown, want the stream's end")
		}
	case <-time.After(waitFor):
		t.Errorf("the stream did not end within %v of shutdown", waitFor)
	}
}

func TestStreamHostileQueries(t *testing.T) {
	t.Parallel()
	srv := startServer(t, serverConfig(t), nil, nil)
	a := newAdminClient(t, srv)
	for _, q := range []string{"?type=nope", "?type=access,,client", "?hostname=" + strings.Repeat("x", 5000), "?hostname=%00"} {
		if status, body := a.get(t, "/stream"+q); status != http.StatusBadRequest {
			t.Errorf("GET /stream%.40s = %d %s, want 400", q, status, body)
		}
	}
	if status, body := a.get(t, "/audit?since=2030-01-01"); status != http.StatusBadRequest {
		t.Errorf("GET /audit?since=2030-01-01 = %d %s, want 400", status, body)
	}
	if n := srv.gw.StreamSubscribersForTest(); n != 0 {
		t.Errorf("%d subscribers after refused streams, want 0", n)
	}
}
