package router

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// visitFrom sends GET path for host from ip and returns the answer.
func visitFrom(rt *Router, host, path, ip string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("GET", path, nil)
	req.Host = host
	req.RemoteAddr = ip + ":1234"
	rec := httptest.NewRecorder()
	rt.ServeHTTP(rec, req)
	return rec
}

func TestTokenRate(t *testing.T) {
	rt := newRouter(t, Config{})
	// One request per 1000 s: the burst of 1, and nothing refills during
	// the test however slow the machine.
	tok := rights{tokenID: "tok_1", maxRPS: 0.001, allowed: []string{"app.test", "two.test"}}
	rt.reg.updateAs(newConn("a", 1), ann(svc("", "app.test")), tok)
	rt.reg.updateAs(newConn("b", 2), ann(svc("", "two.test")), tok) // another client of the same token
	rt.reg.update(newConn("m", 3), ann(svc("", "master.test")))

	if rec := visitFrom(rt, "app.test", "/", "198.51.100.1"); rec.Code != 200 {
		t.Fatalf("first request of the token = %d, want 200", rec.Code)
	}
	rec := visitFrom(rt, "two.test", "/", "198.51.100.2")
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("X-Aperio-Limit") != "token-rate; setting=token.max_rps" || rec.Header().Get("Retry-After") != "1" {
		t.Fatalf("second request of the token (another client, another visitor) = %d %v, want 429 token-rate with Retry-After 1", rec.Code, rec.Header())
	}
	if got := rt.Counters().rateLimitedForTest("token-rate"); got != 1 {
		t.Errorf("Counters() 429s of token-rate = %d, want 1", got)
	}
	// The permit went back: the client is not left busy.
	if p := rt.reg.table.Load().match("two.test", "/"); p == nil || (*p.members.Load())[0].inflight.Load() != 0 {
		t.Error("a token-rate refusal kept the client's permit")
	}
	for i := range 5 {
		if rec := visitFrom(rt, "master.test", "/", "198.51.100.3"); rec.Code != 200 {
			t.Fatalf("master-token request %d = %d, want 200 (never limited)", i, rec.Code)
		}
	}

	// An edit of the token reaches its clients at their next update.
	tok.maxRPS = 1000
	rt.reg.updateAs(findConn(rt, "a"), rt.reg.clients[findConn(rt, "a")].ann, tok)
	rt.reg.updateAs(findConn(rt, "b"), rt.reg.clients[findConn(rt, "b")].ann, tok)
	for i := range 5 {
		if rec := visitFrom(rt, "two.test", "/", "198.51.100.2"); rec.Code != 200 {
			t.Fatalf("request %d after max_rps was raised = %d, want 200", i, rec.Code)
		}
	}
	// No max_rps: no bucket is kept.
	tok.maxRPS = 0
	for _, id := range []string{"a", "b"} {
		c := findConn(rt, id)
		rt.reg.updateAs(c, rt.reg.clients[c].ann, tok)
	}
	rt.reg.mu.Lock()
	n := len(rt.reg.rates)
	rt.reg.mu.Unlock()
	if n != 0 {
		t.Errorf("rates kept = %d after max_rps was cleared, want 0", n)
	}
}

// findConn returns the attached connection with id.
func findConn(rt *Router, id string) Conn {
	rt.reg.mu.Lock()
	defer rt.reg.mu.Unlock()
	for c := range rt.reg.clients {
		if c.ID() == id {
			return c
		}
	}
	return nil
}

func TestTokenRateReleasedOnDetach(t *testing.T) {
	rt := newRouter(t, Config{})
	tok := rights{tokenID: "tok_1", maxRPS: 5, allowed: []string{"app.test"}}
	a, b := newConn("a", 1), newConn("b", 2)
	rt.reg.updateAs(a, ann(svc("", "app.test")), tok)
	rt.reg.updateAs(b, ann(svc("", "app.test")), tok)
	rt.reg.detach(a)
	rt.reg.mu.Lock()
	kept := rt.reg.rates["tok_1"]
	rt.reg.mu.Unlock()
	if kept == nil || kept.refs != 1 {
		t.Fatalf("rates[tok_1] after one of two clients left = %+v, want one reference", kept)
	}
	rt.reg.detach(b)
	rt.reg.mu.Lock()
	defer rt.reg.mu.Unlock()
	if len(rt.reg.rates) != 0 {
		t.Errorf("rates after the last client left = %d, want 0", len(rt.reg.rates))
	}
}

func TestTokenPaths(t *testing.T) {
	rt := newRouter(t, Config{})
	tok := rights{tokenID: "tok_1", allowed: []string{"app.test"}, paths: []string{"/api"}}
	c := newConn("a", 1)
	notices := rt.reg.updateAs(c, ann(svc("/api", "app.test"), svc("/apix", "app.test"), svc("", "app.test")), tok)
	if len(notices) != 2 || !strings.Contains(strings.Join(notices, "|"), "not under the token's paths") {
		t.Fatalf("notices = %q, want /apix and / refused as not under the token's paths", notices)
	}
	if rec := visitFrom(rt, "app.test", "/api/v1", "198.51.100.1"); rec.Code != 200 {
		t.Errorf("GET /api/v1 = %d, want 200", rec.Code)
	}
	if rec := visitFrom(rt, "app.test", "/other", "198.51.100.1"); rec.Code != http.StatusBadGateway {
		t.Errorf("GET /other (bind refused) = %d, want 502", rec.Code)
	}
	// The attach refusal names it when nothing may be bound.
	err := rt.reg.attachRefusal("t", tok, ann(svc("/admin", "app.test")))
	if err == nil || !strings.Contains(err.Error(), "not under the token's paths") {
		t.Errorf("attachRefusal(/admin) = %v, want a refusal naming the paths", err)
	}
	// The token loses /api: the bind goes at the next update.
	tok.paths = []string{"/v2"}
	rt.reg.updateAs(c, rt.reg.clients[c].ann, tok)
	if rec := visitFrom(rt, "app.test", "/api/v1", "198.51.100.1"); rec.Code != http.StatusBadGateway {
		t.Errorf("GET /api/v1 after the token's paths changed = %d, want 502", rec.Code)
	}
}

func TestMayBindPath(t *testing.T) {
	cases := []struct {
		prefixes []string
		path     string
		want     bool
	}{
		{nil, "", true},
		{[]string{"/api"}, "/api", true},
		{[]string{"/api"}, "/api/v1", true},
		{[]string{"/api"}, "/apix", false},
		{[]string{"/api"}, "", false},
		{[]string{"/api"}, "/", false},
		{[]string{"/"}, "", true},
		{[]string{"/a", "/b/c"}, "/b/c/d", true},
		{[]string{"/a", "/b/c"}, "/b", false},
	}
	for _, c := range cases {
		if got := mayBindPath(c.prefixes, c.path); got != c.want {
			t.Errorf("mayBindPath(%q, %q) = %t, want %t", c.prefixes, c.path, got, c.want)
		}
	}
}

func TestStreamsPerIP(t *testing.T) {
	rt := newRouter(t, Config{MaxStreamsPerIP: 2, GatewayTimeout: time.Minute})
	g := newGateConn("g", 1)
	rt.reg.update(g, limited(0, "app.test"))
	done := make(chan int, 2)
	for range 2 {
		go func() { done <- visitFrom(rt, "app.test", "/", "198.51.100.1").Code }()
	}
	for range 2 {
		select {
		case <-g.entered:
		case <-time.After(30 * time.Second):
			t.Fatal("the held requests never reached the client")
		}
	}
	rec := visitFrom(rt, "app.test", "/", "198.51.100.1")
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("X-Aperio-Limit") != "streams-per-ip; setting=max_streams_per_ip" || rec.Header().Get("Retry-After") != "1" {
		t.Errorf("third concurrent request of one visitor = %d %v, want 429 streams-per-ip with Retry-After 1", rec.Code, rec.Header())
	}
	// Another visitor is not limited by the first one's streams.
	go func() { done <- visitFrom(rt, "app.test", "/", "198.51.100.2").Code }()
	select {
	case <-g.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("another visitor's request never reached the client")
	}
	close(g.release)
	for range 3 {
		if code := <-done; code != 200 {
			t.Errorf("held request = %d, want 200", code)
		}
	}
	// Every stream was released: the visitor has its two again, and the
	// table is empty between requests.
	if rec := visitFrom(rt, "app.test", "/", "198.51.100.1"); rec.Code != 200 {
		t.Errorf("request after the others ended = %d, want 200", rec.Code)
	}
	rt.limits.streams.mu.Lock()
	defer rt.limits.streams.mu.Unlock()
	if len(rt.limits.streams.n) != 0 {
		t.Errorf("streams table = %v after every request ended, want empty", rt.limits.streams.n)
	}
}

func TestMaxWSConnections(t *testing.T) {
	rt := newRouter(t, Config{MaxWSConnections: 1, GatewayTimeout: time.Minute})
	g := newGateConn("g", 1)
	rt.reg.update(g, limited(0, "app.test"))
	upgrade := func(ip string) int {
		req := httptest.NewRequest("GET", "/ws", nil)
		req.Host = "app.test"
		req.RemoteAddr = ip + ":1234"
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
		rec := httptest.NewRecorder()
		rt.ServeHTTP(rec, req)
		if rec.Code == http.StatusServiceUnavailable && rec.Header().Get("Retry-After") == "" {
			return -1
		}
		return rec.Code
	}
	done := make(chan int, 1)
	go func() { done <- upgrade("198.51.100.1") }()
	select {
	case <-g.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the first upgrade never reached the client")
	}
	if code := upgrade("198.51.100.2"); code != http.StatusServiceUnavailable {
		t.Errorf("second upgrade with max_ws_connections 1 = %d, want 503 with Retry-After", code)
	}
	if c := rt.Counters(); c.WebSocketsOpen != 1 || c.WebSocketsRefused != 1 {
		t.Errorf("Counters() WebSockets = %d open, %d refused; want 1, 1", c.WebSocketsOpen, c.WebSocketsRefused)
	}
	// Plain requests are not counted.
	close(g.release)
	if rec := visitFrom(rt, "app.test", "/", "198.51.100.3"); rec.Code != 200 {
		t.Errorf("plain request = %d, want 200", rec.Code)
	}
	<-done
	if open := rt.Counters().WebSocketsOpen; open != 0 {
		t.Errorf("Counters().WebSocketsOpen = %d after the upgrade ended, want 0", open)
	}
}
