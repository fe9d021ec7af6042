package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/aperio-dev/aperio/internal/bufpool"
	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/server"
	"github.com/aperio-dev/aperio/store/storetest"
)

// usageRows reads GET /usage as the master token, with query.
func usageRows(t testing.TB, c *http.Client, s *testServer, query string) []apitype.UsageRow {
	t.Helper()
	status, body := adminCall(t, c, s, "GET", "/usage?"+query, nil)
	if status != http.StatusOK {
		t.Fatalf("GET /usage?%s = %d %s, want 200", query, status, body)
	}
	var rows []apitype.UsageRow
	if err := json.Unmarshal([]byte(body), &rows); err != nil {
		t.Fatalf("GET /usage: %v in %s", err, body)
	}
	return rows
}

// tokenUsage sums the bytes and requests of token's rows.
func tokenUsage(rows []apitype.UsageRow, token string) (bytes, requests int64) {
	for _, r := range rows {
		if r.TokenID == token {
			bytes += r.Bytes
			requests += r.Requests
		}
	}
	return bytes, requests
}

// mintQuotaToken mints a token of the default organization for appHost
// with daily_max_bytes quota through s's admin API.
func mintQuotaToken(t testing.TB, c *http.Client, s *testServer, quota int64) (id, secret string) {
	t.Helper()
	status, body := adminCall(t, c, s, "POST", "/tokens", map[string]any{"name": "quota", "hostnames": []string{appHost}, "daily_max_bytes": quota})
	if status != http.StatusCreated {
		t.Fatalf("POST /tokens = %d %s, want 201", status, body)
	}
	var tok struct{ ID, Token string }
	if err := json.Unmarshal([]byte(body), &tok); err != nil {
		t.Fatal(err)
	}
	return tok.ID, tok.Token
}

// fixedBody answers every request with n bytes.
func fixedBody(n int) http.Handler {
	body := strings.Repeat("u", n)
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, body) })
}

// TestTokenDailyQuota: a token with daily_max_bytes serves until its
// visitors' bytes reach the quota, then gets 429 token-quota with no
// Retry-After; its usage shows in GET /usage after a flush and
// quota_exceeded is audited once.
func TestTokenDailyQuota(t *testing.T) {
	t.Parallel()
	const quota, size = 5000, 1000
	srv := startServer(t, func() server.Config {
		c := serverConfig(t)
		c.UsageFlushInterval = time.Second
		return c
	}(), nil, nil)
	visitor := newVisitor(t, srv)
	id, secret := mintQuotaToken(t, visitor, srv, quota)
	cfg := agentConfig(srv, service(startBackend(t, fixedBody(size)).URL))
	cfg.Token = secret
	startAgent(t, srv, cfg)
	waitClients(t, visitor, srv, 1)
	served := 0
	for i := range 10 {
		resp, body := do(t, visitor, newRequest(t, t.Context(), srv, "GET", appHost, fmt.Sprintf("/%d", i), nil))
		if resp.StatusCode == http.StatusOK {
			served += len(body)
			continue
		}
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("X-Aperio-Limit") != "token-quota; setting=token.daily_max_bytes" {
			t.Fatalf("request %d = %d %q, want 200 or 429 token-quota", i, resp.StatusCode, resp.Header.Get("X-Aperio-Limit"))
		}
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			t.Errorf("token-quota 429 has Retry-After %q, want none", ra)
		}
		break
	}
	// The counts are local until a flush: the quota is judged on them at
	// once, so exactly the quota's worth of requests passed.
	if served != quota {
		t.Errorf("bytes served before the 429 = %d, want %d (%d requests of %d)", served, quota, quota/size, size)
	}
	poll(t, waitFor, func() (bool, string) {
		b, n := tokenUsage(usageRows(t, visitor, srv, "token="+id), id)
		return b == quota && n == quota/size, fmt.Sprintf("GET /usage of %s = %d bytes in %d requests, want %d in %d", id, b, n, quota, quota/size)
	})
	poll(t, waitFor, func() (bool, string) {
		_, body := adminCall(t, visitor, srv, "GET", "/audit?event=quota_exceeded", nil)
		return strings.Count(body, "token "+id+" used 5000 of daily_max_bytes 5000 bytes") == 1, "one quota_exceeded entry naming " + id + "; got " + body
	})
	// Further flushes write no second entry for the same day.
	for range 2 {
		if err := srv.gw.FlushUsageForTest(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if _, body := adminCall(t, visitor, srv, "GET", "/audit?event=quota_exceeded", nil); strings.Count(body, "token "+id) != 1 {
		t.Errorf("audit after more flushes = %s, want one quota_exceeded of %s", body, id)
	}
	// Raising the quota through the API lets the token serve again
	// within a flush: the change feed refreshes the cached limit.
	if status, body := adminCall(t, visitor, srv, "PATCH", "/tokens/"+id, map[string]any{"daily_max_bytes": 2 * quota}); status != http.StatusOK {
		t.Fatalf("PATCH /tokens/%s = %d %s", id, status, body)
	}
	poll(t, waitFor, func() (bool, string) {
		code, _ := get(t, visitor, srv, appHost, "/again")
		return code == http.StatusOK, "200 once daily_max_bytes was raised"
	})
}

// TestUsageCountsWebSocket: a WebSocket's bytes count both ways, when it
// closes, against its token (here the master token, counted and never
// limited), and reach the store, GET /usage and aperio_token_bytes_total.
func TestUsageCountsWebSocket(t *testing.T) {
	t.Parallel()
	echo := wsEcho("", nil)
	st := startStack(t, echo, func(c *server.Config) { c.MetricsToken = "m-token" })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c, _ := wsDial(t, ctx, st, "/socket")
	const msgs, size = 8, 16 << 10
	payload := strings.Repeat("w", size)
	for range msgs {
		if err := c.WriteMessage(websocket.TextMessage, []byte(payload)); err != nil {
			t.Fatal(err)
		}
		if _, got, err := c.ReadMessage(); err != nil || len(got) != size {
			t.Fatalf("echo = %d bytes, %v; want %d", len(got), err, size)
		}
	}
	if err := wsClose(c, websocket.CloseNormalClosure, "done"); !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
		t.Fatalf("close = %v, want the backend's normal closure", err)
	}
	// The relay counts when both directions end, just after the close.
	poll(t, waitFor, func() (bool, string) {
		if err := st.server.gw.FlushUsageForTest(t.Context()); err != nil {
			t.Fatal(err)
		}
		b, n := tokenUsage(usageRows(t, st.visitor, st.server, "hostname="+appHost), "")
		// Each way carries the payloads plus framing (and the 101 head out).
		return n >= 1 && b >= 2*msgs*size, fmt.Sprintf("master token's usage on %s = %d bytes in %d requests, want at least %d", appHost, b, n, 2*msgs*size)
	})
	m := scrapeMetrics(t, st.visitor, st.server, "m-token")
	for _, dir := range []string{"in", "out"} {
		var v float64
		for _, line := range strings.Split(m, "\n") {
			if strings.HasPrefix(line, "aperio_token_bytes_total{") && strings.Contains(line, `direction="`+dir+`"`) && strings.Contains(line, `token="master"`) {
				fmt.Sscanf(line[strings.LastIndexByte(line, ' ')+1:], "%g", &v)
			}
		}
		if v < msgs*size {
			t.Errorf("aperio_token_bytes_total{token=master,direction=%s} = %v, want at least %d", dir, v, msgs*size)
		}
	}
}

// TestQuotaAcrossServers runs two servers on one PostgreSQL database, each
// with a client of the same token, and drives traffic through both until
// each refuses it: together they pass the token's daily_max_bytes by at
// most the documented bound (what the other server served since its
// last flush and this server's refresh, two flush intervals at the
// measured rate, plus the requests in flight), and the store holds
// exactly what visitors were served.
func TestQuotaAcrossServers(t *testing.T) {
	t.Parallel()
	dsn := storetest.PostgresDSN(t) // skips, naming the variable, without PostgreSQL
	const (
		quota    = 8 << 20
		size     = 4 << 10
		interval = time.Second
		workers  = 4 // per server
	)
	ctx := t.Context()
	var servers []*testServer
	for range 2 {
		db := openStoreOn(t, dsn)
		cfg := serverConfig(t)
		cfg.UsageFlushInterval = interval
		cfg.Router.IPLimitMax = 0 // every visitor is 127.0.0.1
		servers = append(servers, startServerOn(t, cfg, db))
	}
	visitor := newVisitor(t, servers[0])
	id, secret := mintQuotaToken(t, visitor, servers[0], quota)
	backend := startBackend(t, fixedBody(size))
	for _, s := range servers {
		cfg := agentConfig(s, service(backend.URL))
		cfg.Token = secret
		startAgent(t, s, cfg)
		waitClients(t, visitor, s, 1)
	}
	var (
		mu       sync.Mutex // guards the following fields
		served   int64
		requests int64
		last     time.Time
	)
	start := time.Now()
	var wg sync.WaitGroup
	for _, s := range servers {
		for w := range workers {
			wg.Go(func() {
				c := newVisitor(t, s)
				for i := 0; ; i++ {
					resp, err := c.Do(newRequest(t, ctx, s, "GET", appHost, fmt.Sprintf("/%d/%d", w, i), nil))
					if err != nil {
						t.Errorf("GET through %s = %v", s.addr, err)
						return
					}
					body, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					if err != nil {
						t.Errorf("GET through %s: body: %v", s.addr, err)
						return
					}
					if resp.StatusCode == http.StatusTooManyRequests && strings.HasPrefix(resp.Header.Get("X-Aperio-Limit"), "token-quota") {
						return // this server's view is over the quota, for good today
					}
					if resp.StatusCode != http.StatusOK || len(body) != size {
						t.Errorf("GET through %s = %d %q with %d bytes, want 200 with %d or 429 token-quota", s.addr, resp.StatusCode, resp.Header.Get("X-Aperio-Limit"), len(body), size)
						return
					}
					mu.Lock()
					served += size
					requests++
					last = time.Now()
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	elapsed := last.Sub(start)
	rate := float64(served) / elapsed.Seconds()
	overshoot := served - quota
	bound := int64(2*interval.Seconds()*rate) + 2*workers*size
	t.Logf("two servers, usage_flush_interval %v: served %d bytes in %v (%.0f KiB/s) against daily_max_bytes %d: overshoot %d bytes (%.2f flush intervals of traffic), bound %d",
		interval, served, elapsed.Round(time.Millisecond), rate/1024, quota, overshoot, float64(overshoot)/(interval.Seconds()*rate), bound)
	if overshoot < 0 {
		t.Errorf("served %d bytes, below the quota %d: a server refused early", served, quota)
	}
	if overshoot > bound {
		t.Errorf("overshoot %d bytes, want at most %d (2 × %v × %.0f B/s + %d requests in flight)", overshoot, bound, interval, rate, 2*workers)
	}
	// Every byte served is in the store once both servers flushed, and
	// either server's API shows the same total.
	for _, s := range servers {
		if err := s.gw.FlushUsageForTest(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range servers {
		b, n := tokenUsage(usageRows(t, visitor, s, "token="+id), id)
		if b != served || n != requests {
			t.Errorf("GET /usage through %s = %d bytes in %d requests, want %d in %d", s.addr, b, n, served, requests)
		}
	}
}

// TestOrgMonthlyQuota: an organization's monthly_max_bytes set while its
// client is connected applies within a flush (the change feed refreshes
// the cached limit), refusing its tokens with 429 org-quota and no
// Retry-After, while the master token's client of the same organization
// keeps serving.
func TestOrgMonthlyQuota(t *testing.T) {
	t.Parallel()
	const size = 1000
	cfg := serverConfig(t)
	cfg.UsageFlushInterval = time.Second
	srv := startServer(t, cfg, nil, nil)
	visitor := newVisitor(t, srv)
	_, secret := mintQuotaToken(t, visitor, srv, 0)
	backend := startBackend(t, fixedBody(size))
	acfg := agentConfig(srv, service(backend.URL))
	acfg.Token = secret
	startAgent(t, srv, acfg)
	mcfg := agentConfig(srv, config.Service{Target: backend.URL, Hostnames: []string{"master.test"}})
	startAgent(t, srv, mcfg)
	waitClients(t, visitor, srv, 2)
	status, body := adminCall(t, visitor, srv, "GET", "/orgs", nil)
	var orgs []struct{ ID, Name string }
	if err := json.Unmarshal([]byte(body), &orgs); status != http.StatusOK || err != nil {
		t.Fatalf("GET /orgs = %d %s", status, body)
	}
	var def string
	for _, o := range orgs {
		if o.Name == "default" {
			def = o.ID
		}
	}
	for i := range 3 {
		if code, _ := get(t, visitor, srv, appHost, fmt.Sprintf("/before/%d", i)); code != http.StatusOK {
			t.Fatalf("request %d before any quota = %d, want 200", i, code)
		}
	}
	if status, body := adminCall(t, visitor, srv, "PATCH", "/orgs/"+def, map[string]any{"monthly_max_bytes": 2 * size}); status != http.StatusOK {
		t.Fatalf("PATCH /orgs/%s = %d %s", def, status, body)
	}
	poll(t, waitFor, func() (bool, string) {
		resp, _ := do(t, visitor, newRequest(t, t.Context(), srv, "GET", appHost, "/after", nil))
		return resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("X-Aperio-Limit") == "org-quota; setting=org.monthly_max_bytes" &&
			resp.Header.Get("Retry-After") == "", fmt.Sprintf("429 org-quota without Retry-After once monthly_max_bytes is below the month's %d bytes", 3*size)
	})
	if code, _ := get(t, visitor, srv, "master.test", "/"); code != http.StatusOK {
		t.Errorf("master token's client in the organization over its month = %d, want 200 (never limited)", code)
	}
	poll(t, waitFor, func() (bool, string) {
		_, body := adminCall(t, visitor, srv, "GET", "/audit?event=quota_exceeded", nil)
		return strings.Contains(body, "organization "+def+" used ") && strings.Contains(body, "of monthly_max_bytes 2000 bytes"), "a quota_exceeded entry naming the organization; got " + body
	})
}

// TestQuotaCutsStreamEndToEnd: the probe's P4-4 (#38 item 13) through a
// real server and client: a streamed response that starts under a
// token's daily_max_bytes is cut at the quota, within a chunk, seen
// truncated over HTTP/1.1 and HTTP/2 (h2c), its cut counted in
// aperio_quota_cuts_total and named in the access log.
func TestQuotaCutsStreamEndToEnd(t *testing.T) {
	t.Parallel()
	// What is left of total after the cut fits the tunnel stream's window
	// (2 MiB), so the client's copy ends at once; a longer stream holds it
	// until the tunnel's StreamCloseTimeout (30 s), as a visitor that
	// leaves a stream does.
	const quota, chunk, total = 512 << 10, 32 << 10, 1 << 20
	for _, proto := range []string{"h1", "h2c"} {
		t.Run(proto, func(t *testing.T) {
			srv := startServer(t, func() server.Config {
				c := serverConfig(t)
				c.MetricsToken = "m-token"
				return c
			}(), nil, nil)
			visitor := newVisitor(t, srv)
			_, secret := mintQuotaToken(t, visitor, srv, quota)
			stream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				buf := []byte(strings.Repeat("s", chunk))
				for sent := 0; sent < total; sent += chunk {
					if _, err := w.Write(buf); err != nil {
						return
					}
					w.(http.Flusher).Flush()
				}
			})
			cfg := agentConfig(srv, service(startBackend(t, stream).URL))
			cfg.Token = secret
			startAgent(t, srv, cfg)
			waitClients(t, visitor, srv, 1)
			c := visitor
			if proto == "h2c" {
				c = &http.Client{Transport: h2cTransport(t)}
			}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			resp, err := c.Do(newRequest(t, ctx, srv, "GET", appHost, "/stream", nil))
			if err != nil {
				t.Fatal(err)
			}
			n, err := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || err == nil {
				t.Errorf("streamed response = %d, %d bytes read, %v; want 200 cut short (a read error)", resp.StatusCode, n, err)
			}
			// The copy writes a read, charges it and cuts before the next
			// one: past the quota by less than one read, and a read holds
			// what the tunnel gathered meanwhile, up to the copy buffer's
			// bufpool.Large (a loaded run read 3 of the backend's chunks
			// at once), not one of the backend's writes.
			if n > quota+bufpool.Large {
				t.Errorf("streamed response delivered %d bytes, want at most one copy buffer past the %d quota (the probe saw 5.7x)", n, quota)
			}
			poll(t, waitFor, func() (bool, string) {
				m := scrapeMetrics(t, visitor, srv, "m-token")
				return strings.Contains(m, `aperio_quota_cuts_total{limit="token-quota"} 1`), "aperio_quota_cuts_total token-quota 1"
			})
			if code, _ := get(t, visitor, srv, appHost, "/next"); code != http.StatusTooManyRequests {
				t.Errorf("next request = %d, want 429", code)
			}
		})
	}
}
