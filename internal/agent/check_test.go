package agent

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/testkit/blackhole"
	"github.com/aperio-dev/aperio/internal/testkit/echotest"
	"github.com/aperio-dev/aperio/tunnel"
)

// bindRegistry refuses, for good, a session that announces a hostname
// outside allowed, and records whether any session it saw was announced
// routable (not draining, or healthy).
type bindRegistry struct {
	allowed  map[string]bool
	routable chan string // hostnames of a routable announcement; buffered
}

func (r *bindRegistry) Attach(_ context.Context, s *tunnel.Session) error {
	ann := s.Announcement()
	for _, svc := range ann.Services {
		for _, h := range svc.Hostnames {
			if !r.allowed[h] {
				return tunnel.PermanentRefusal(tunnel.RefusalHostname, "may not bind "+h)
			}
		}
		if !ann.Draining || svc.Healthy {
			r.routable <- strings.Join(svc.Hostnames, ",")
		}
	}
	return nil
}

func (r *bindRegistry) Update(context.Context, *tunnel.Session) []string { return nil }
func (r *bindRegistry) Detach(context.Context, *tunnel.Session)          {}

// TestCheck runs Agent.Check against a tunnel server that allows one of
// two hostnames, a target that answers and one whose health endpoint
// fails: each item has its verdict, the failures say what to do, and no
// check session could have been routed to.
func TestCheck(t *testing.T) {
	reg := &bindRegistry{allowed: map[string]bool{"good.test": true}, routable: make(chan string, 16)}
	ln := startTunnelServer(t, tunnel.ServerConfig{Registry: reg})
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(app.Close)
	cfg := clientConfig(app.URL)
	cfg.ServerURL = "http://memnet"
	cfg.Services = []config.Service{
		{Name: "web", Target: app.URL, Hostnames: []string{"good.test", "bad.test"}},
		{Target: app.URL + "/", Hostnames: []string{"good.test"}, Path: "/api", Health: config.Health{Endpoint: "/healthz", Type: config.HealthHTTP, Success: config.Success2xx}},
	}
	a, err := New(cfg, Options{DialServer: ln.Dial})
	if err != nil {
		t.Fatal(err)
	}
	items := a.Check(t.Context(), 5*time.Second)
	want := []struct {
		what string
		ok   bool
		fix  string // part of the fix of a failed item
	}{
		{"server http://memnet: token", true, ""},
		{"server http://memnet: service web binds good.test", true, ""},
		{"server http://memnet: service web binds bad.test", false, "hostnames the token lists"},
		{"server http://memnet: service #1 binds good.test/api", true, ""},
		{"service web: target " + app.URL, true, ""},
		{"service #1: target " + app.URL + "/", true, ""},
		{"service #1: health endpoint /healthz", false, "fix the app's health"},
	}
	if len(items) != len(want) {
		t.Fatalf("Check() = %d items %+v, want %d", len(items), items, len(want))
	}
	for i, w := range want {
		it := items[i]
		if it.What != w.what || it.OK != w.ok || !strings.Contains(it.Fix, w.fix) || (it.OK != (it.Fix == "")) {
			t.Errorf("Check()[%d] = %+v, want %q ok=%v with a fix containing %q", i, it, w.what, w.ok, w.fix)
		}
	}
	if !strings.Contains(items[2].Detail, "may not bind bad.test") || !strings.Contains(items[6].Detail, "503") {
		t.Errorf("Check() details = %q, %q, want the server's reason and the probe's status", items[2].Detail, items[6].Detail)
	}
	select {
	case h := <-reg.routable:
		t.Errorf("a check session announced %s routable (not draining or healthy), want none", h)
	default:
	}
}

// TestCheckBounded: a server and a target whose TCP handshakes never
// complete fail their items within the step's timeout, and a server that
// cannot be reached is not asked about hostnames.
func TestCheckBounded(t *testing.T) {
	hole := blackhole.Addr(t)
	cfg := clientConfig("http://" + hole)
	cfg.ServerURL = "http://" + hole
	a, err := New(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	const step = 300 * time.Millisecond
	start := time.Now()
	items := a.Check(t.Context(), step)
	if d := time.Since(start); d > 10*step {
		t.Errorf("Check() took %v with a %v step, want about two steps", d, step)
	}
	if len(items) != 2 || items[0].OK || items[1].OK || !strings.Contains(items[0].Fix, "server.url") || !strings.Contains(items[1].Fix, "start the app") {
		t.Errorf("Check() = %+v, want the server and the target failed, with what to do", items)
	}
}

// TestCheckHostileReason: a server's refusal reason reaches the checklist
// without its control and formatting characters, and cut short.
func TestCheckHostileReason(t *testing.T) {
	reason := "may not bind\x1b[2J\r\nforged ✓ line\u202e" + strings.Repeat("x", 5000)
	ln := startTunnelServer(t, tunnel.ServerConfig{Registry: refuseAll{tunnel.PermanentRefusal(tunnel.RefusalHostname, reason)}})
	cfg := clientConfig("http://backend.test")
	cfg.ServerURL = "http://memnet"
	a, err := New(cfg, Options{DialServer: ln.Dial})
	if err != nil {
		t.Fatal(err)
	}
	it := a.checkServer(t.Context(), a.tunnels[0], time.Second)[0]
	if it.OK || strings.ContainsFunc(it.Detail, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\u202e' }) || len(it.Detail) > maxDetail+8 {
		t.Errorf("check of a hostile refusal: detail %q (%d bytes), want no control or formatting character and at most about %d bytes", it.Detail, len(it.Detail), maxDetail)
	}
	if !strings.HasPrefix(it.Detail, "may not bind?[2J??forged ✓ line?x") {
		t.Errorf("check of a hostile refusal: detail %.60q, want the reason with each control character as '?'", it.Detail)
	}
}

// refuseAll is a Registry that refuses every session with err.
type refuseAll struct{ err error }

func (r refuseAll) Attach(context.Context, *tunnel.Session) error  { return r.err }
func (refuseAll) Update(context.Context, *tunnel.Session) []string { return nil }
func (refuseAll) Detach(context.Context, *tunnel.Session)          {}

// poolRegistry stands for a server where another client already serves
// pool.test with allowed_ips 10.0.0.0/8: a bind announced with other
// access settings is taken with a "not routed" notice, as the router
// answers; a bind of warn.test gets a notice that is only informative.
// Expose entries inside 20000-20010 open; others are refused, and so is
// one that admits visitors (the check's session must never be picked for
// a visitor's connection while it is a member of a port).
type poolRegistry struct{}

func (poolRegistry) Attach(context.Context, *tunnel.Session) error { return nil }
func (poolRegistry) Detach(context.Context, *tunnel.Session)       {}
func (poolRegistry) Update(_ context.Context, s *tunnel.Session) []string {
	ann := s.Announcement()
	var notices []string
	for _, svc := range ann.Services {
		for _, h := range svc.Hostnames {
			switch {
			case h == "pool.test" && (svc.Access == nil || !slices.Equal(svc.Access.AllowedIPs, []string{"10.0.0.0/8"})):
				notices = append(notices, "pool.test is served by another client with other access settings: they must agree"+tunnel.NotRouted)
			case h == "warn.test":
				notices = append(notices, "service "+svc.ID+": weight 9999 is outside 1..1000; using 1000")
			}
		}
	}
	var st []tunnel.ExposeStatus
	for _, e := range ann.Expose {
		if !slices.Equal(e.AllowedIPs, []string{checkNoVisitor}) {
			st = append(st, tunnel.ExposeStatus{Name: e.Name, Protocol: e.Protocol, Error: "the check's entry admits visitors"})
			continue
		}
		if e.RemotePort >= 20000 && e.RemotePort <= 20010 {
			st = append(st, tunnel.ExposeStatus{Name: e.Name, Protocol: e.Protocol, Port: e.RemotePort})
		} else {
			st = append(st, tunnel.ExposeStatus{Name: e.Name, Protocol: e.Protocol, Error: fmt.Sprintf("port %d is outside the server's tcp_port_range", e.RemotePort)})
		}
	}
	s.SetExposed(st)
	return notices
}

// TestCheckNoticesAndExpose (issue 39, trap 5): a bind announced as the
// client announces it (its access settings too) passes where the pool
// agrees; a bind the server would not route is ✗, never ✓; an
// informative notice is a warning; every expose entry is checked, at the
// server (the port's admission) and at its target.
func TestCheckNoticesAndExpose(t *testing.T) {
	ln := startTunnelServer(t, tunnel.ServerConfig{Registry: poolRegistry{}})
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(app.Close)
	open := echotest.TCP(t)
	dead := blackhole.Refused(t)
	cfg := clientConfig(app.URL)
	cfg.ServerURL = "http://memnet"
	cfg.Services = []config.Service{
		{Name: "same", Target: app.URL, Hostnames: []string{"pool.test"}, AllowedIPs: []string{"10.0.0.0/8"}},
		{Name: "other", Target: app.URL, Hostnames: []string{"pool.test"}},
		{Name: "heavy", Target: app.URL, Hostnames: []string{"warn.test"}},
	}
	cfg.Expose = []config.Expose{
		{Expose: tunnel.Expose{Name: "ssh", Protocol: config.ExposeTCP, RemotePort: 20005}, Target: open},
		{Expose: tunnel.Expose{Name: "far", Protocol: config.ExposeTCP, RemotePort: 20999}, Target: dead},
		{Expose: tunnel.Expose{Name: "dns", Protocol: config.ExposeUDP, RemotePort: 20006}, Target: "127.0.0.1:53"},
	}
	a, err := New(cfg, Options{DialServer: ln.Dial})
	if err != nil {
		t.Fatal(err)
	}
	items := a.Check(t.Context(), 5*time.Second)
	type verdict struct {
		what     string
		ok, warn bool
		detail   string // part of the detail
	}
	want := []verdict{
		{"server http://memnet: token", true, false, ""},
		{"server http://memnet: service same binds pool.test", true, false, ""},
		{"server http://memnet: service other binds pool.test", false, false, "they must agree"},
		{"server http://memnet: service heavy binds warn.test", true, true, "weight 9999"},
		{"server http://memnet: expose ssh (tcp port 20005)", true, false, "port 20005"},
		{"server http://memnet: expose far (tcp port 20999)", false, false, "outside the server's tcp_port_range"},
		{"server http://memnet: expose dns (udp port 20006)", true, false, "port 20006"},
		{"service same: target " + app.URL, true, false, ""},
		{"service other: target " + app.URL, true, false, ""},
		{"service heavy: target " + app.URL, true, false, ""},
		{"expose ssh: target " + open, true, false, "accepts TCP"},
		{"expose far: target " + dead, false, false, "refused"},
		{"expose dns: target 127.0.0.1:53", true, true, "not checked"},
	}
	if len(items) != len(want) {
		t.Fatalf("Check() = %d items:\n%+v\nwant %d", len(items), items, len(want))
	}
	for i, w := range want {
		it := items[i]
		if it.What != w.what || it.OK != w.ok || it.Warn != w.warn || !strings.Contains(it.Detail, w.detail) || it.OK != (it.Fix == "") {
			t.Errorf("Check()[%d] = %+v\nwant %q ok=%v warn=%v with %q in the detail and a fix when failed", i, it, w.what, w.ok, w.warn, w.detail)
		}
	}
}
