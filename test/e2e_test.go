//go:build e2e

package e2e

import (
	"fmt"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// figures collects the numbers the suite prints at the end.
type figures struct {
	mu    sync.Mutex // guards the following field
	lines []string
}

func (f *figures) add(t *testing.T, format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	t.Log("FIGURE " + line)
	f.mu.Lock()
	f.lines = append(f.lines, line)
	f.mu.Unlock()
}

// TestEndToEnd runs the mission against a real multi-host topology: each
// scenario builds on the state the previous one left, so the first
// failure stops the run.
func TestEndToEnd(t *testing.T) {
	tp := up(t)
	figs := &figures{}
	t.Cleanup(func() {
		figs.mu.Lock()
		defer figs.mu.Unlock()
		t.Logf("e2e figures:\n  %s", strings.Join(figs.lines, "\n  "))
	})
	var load *loadGen
	var lost int64 // requests lost while both servers were reachable or while the surviving one was the target

	var issued acmeIssued // acme_on_demand's certificate, for acme_renewal

	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		// First: it needs none of the scaling steps' state, and should not
		// wait behind them.
		{"oidc_login", func(t *testing.T) {
			tp.t = t
			tp.oidcLogin(t, figs)
		}},
		{"tcp_port_through_two_servers", tcpPortThroughTwoServers(tp, figs)},

		// Independent of the scaling steps too: their servers, acme-a and
		// acme-b, take no part in them. acme_renewal follows at once: it
		// waits for the renewal of the certificate acme_on_demand
		// obtained, which Pebble makes short-lived.
		{"acme_on_demand", func(t *testing.T) {
			tp.t = t
			issued = tp.acmeOnDemand(t, figs)
		}},
		{"acme_renewal", func(t *testing.T) {
			tp.t = t
			tp.acmeRenewal(t, figs, issued)
		}},

		{"seed_then_idle_retire_to_zero", func(t *testing.T) {
			tp.t = t
			// Every server's image declares a HEALTHCHECK (aperio-server
			// --healthcheck, run every second here).
			for _, s := range []string{"server-a", "server-b"} {
				took := tp.waitHealthy(s, tp.containerID(s), 30*time.Second)
				figs.add(t, "health: %s healthy %v after it answered readyz", s, took.Round(100*time.Millisecond))
			}
			tp.seed(1)
			var name string
			for _, s := range []string{"server-a", "server-b"} {
				tp.waitFor(s+" lists the seeded client", 60*time.Second, func() bool {
					cs := tp.clients(s)
					if len(cs) == 1 {
						name = cs[0].Name
					}
					return len(cs) == 1 && cs[0].Healthy
				})
			}
			// The app's image checks its client with `aperio-client
			// status` every 2 s. Asked before the first request, which
			// restarts the idle_timeout clock (it runs since the tunnel
			// came up).
			if ids := tp.apps(false); len(ids) != 1 {
				t.Fatalf("running app containers = %v, want the one seeded", ids)
			} else {
				took := tp.waitHealthy("the seeded app container", ids[0], 15*time.Second)
				figs.add(t, "health: app container healthy %v after both servers listed its client", took.Round(100*time.Millisecond))
			}
			status, body, _, err := tp.visit(tp.port("server-a", 8080), "/")
			if err != nil || status != http.StatusOK || body != "hello from "+name+"\n" {
				t.Fatalf("GET / = %d %q %v, want 200 from %s", status, body, err, name)
			}
			took := tp.waitFor("the seeded instance retires itself (idle_timeout)", idleTimeout+30*time.Second, func() bool {
				return len(tp.apps(false)) == 0
			})
			ids := tp.apps(true)
			if len(ids) != 1 {
				t.Fatalf("app containers = %v, want the one seeded", ids)
			}
			if code := docker(t, "inspect", "-f", "{{.State.ExitCode}}", ids[0]); code != "0" {
				t.Fatalf("retired container exit code = %s, want 0 (it should leave on its own)", code)
			}
			for _, s := range []string{"server-a", "server-b"} {
				tp.waitFor(s+" lists no client", 30*time.Second, func() bool { return len(tp.clients(s)) == 0 })
			}
			figs.add(t, "idle retire (seed): container exited 0 %v after its request (idle_timeout %v)", took.Round(100*time.Millisecond), idleTimeout)
		}},

		{"cold_start_from_zero", func(t *testing.T) {
			tp.t = t
			if ids := tp.apps(true); len(ids) != 1 {
				t.Fatalf("app containers before the cold start = %v, want the retired one", ids)
			}
			ttfbs, perServer := tp.coldStart(40)
			figs.add(t, "cold start from zero, docker start of the retired container: time to first byte %v (first) / %v (median) / %v (last) for a burst of %d held requests, all served, cold_start calls per server %v",
				ttfbs[0].Round(time.Millisecond), ttfbs[len(ttfbs)/2].Round(time.Millisecond), ttfbs[len(ttfbs)-1].Round(time.Millisecond), len(ttfbs), perServer)
		}},

		{"scale_out_under_load", func(t *testing.T) {
			tp.t = t
			before := len(tp.providerCalls())
			start := time.Now()
			load = tp.startLoad(10, "/slow?ms=200", tp.port("server-a", 8080), tp.port("server-b", 8080))
			took := tp.waitFor(fmt.Sprintf("%d app containers run", scalingMax), 90*time.Second, func() bool {
				return len(tp.apps(false)) == scalingMax
			})
			var first time.Time
			n := 0
			for _, c := range tp.providerCalls()[before:] {
				if c.Reason == "scale_out" && !c.Duplicate {
					if first.IsZero() {
						first = c.At
					}
					n++
				}
			}
			if first.IsZero() {
				t.Fatal("no scale_out call reached the provider")
			}
			for _, s := range []string{"server-a", "server-b"} {
				tp.waitFor(fmt.Sprintf("%s lists %d clients", s, scalingMax), 60*time.Second, func() bool {
					return len(tp.clients(s)) == scalingMax
				})
			}
			ok, failed := load.counts()
			lost += failed
			if failed != 0 {
				t.Errorf("requests lost under scale out = %d of %d, want 0: %v", failed, ok+failed, load.failures())
			}
			figs.add(t, "scale out: first scale_out call %v after load began, %d containers running after %v (%d scale_out calls), %d requests served, lost %d",
				first.Sub(start).Round(time.Millisecond), scalingMax, took.Round(100*time.Millisecond), n, ok, failed)
		}},

		{"sigkill_app_mid_request", func(t *testing.T) {
			tp.t = t
			ok0, failed0 := load.counts()
			// Pick an instance with requests in flight (its short id is its
			// client name), so that the kill lands mid-request.
			var victim string
			inflight := 0
			tp.waitFor("an app instance has requests in flight", 30*time.Second, func() bool {
				for _, id := range tp.apps(false) {
					inflight = 0
					for _, s := range []string{"server-a", "server-b"} {
						for _, c := range tp.clients(s) {
							if c.Name == id {
								inflight += c.Inflight
							}
						}
					}
					if inflight > 0 {
						victim = id
						return true
					}
				}
				return false
			})
			// docker wait, started before the kill, returns the exit code
			// of this run's end: the provider may start the container
			// again on the next scale_out, and a wait started after that
			// would block until the new run ends (inspect would show the
			// new run).
			if code := killAndWait(t, victim); code != "137" {
				t.Errorf("killed container exit code = %s, want 137 (SIGKILL)", code)
			}
			tp.waitFor("the load goes on for 100 more requests", 60*time.Second, func() bool {
				ok, _ := load.counts()
				return ok >= ok0+100
			})
			ok, failed := load.counts()
			lost += failed - failed0
			if failed != failed0 {
				t.Errorf("GETs lost after SIGKILL of app %s = %d, want 0 (failover retry): %v", victim, failed-failed0, load.failures())
			}
			figs.add(t, "SIGKILL of an app container under load (%d requests in flight on it just before): %d GETs served after, lost %d", inflight, ok-ok0, failed-failed0)
		}},

		{"kill_one_server", func(t *testing.T) {
			tp.t = t
			a, b := tp.port("server-a", 8080), tp.port("server-b", 8080)
			load.setBases(b)
			tp.waitFor("no request in flight through server-a", 60*time.Second, func() bool { return load.counter(a).Load() == 0 })
			ok0, failed0 := load.counts()
			tp.mustCompose("kill", "-s", "SIGKILL", "server-a")
			tp.waitFor("server-b serves 100 more requests", 60*time.Second, func() bool {
				ok, _ := load.counts()
				return ok >= ok0+100
			})
			ok, failed := load.counts()
			lost += failed - failed0
			if failed != failed0 {
				t.Errorf("requests through server-b lost while server-a is down = %d, want 0: %v", failed-failed0, load.failures())
			}
			running := len(tp.apps(false))
			if got := len(tp.clients("server-b")); got != running {
				t.Errorf("server-b lists %d clients while server-a is down, want all %d running instances", got, running)
			}
			tp.mustCompose("start", "server-a")
			tp.forgetPorts("server-a")
			a = tp.port("server-a", 8080)
			tp.waitFor("server-a is ready again", 60*time.Second, func() bool {
				return tp.statusOf("GET", "http://"+a+"/aperio/readyz") == http.StatusOK
			})
			took := tp.waitFor(fmt.Sprintf("the %d clients reconnect to server-a", running), 90*time.Second, func() bool {
				return len(tp.clients("server-a")) >= running
			})
			load.setBases(a, b)
			figs.add(t, "server-a SIGKILLed: %d requests through server-b meanwhile, lost %d; clients back on the restarted server-a %v after it was ready",
				ok-ok0, failed-failed0, took.Round(100*time.Millisecond))
		}},

		{"network_partition", func(t *testing.T) {
			tp.t = t
			ok0, failed0 := load.counts()
			// The scaling steps leave the pool moving (cooldown 2 s): an
			// instance the provider just started or is stopping may be on
			// one server only. The victim is one both servers list.
			var victim, name string
			tp.waitFor("an app instance both servers list, to partition", 60*time.Second, func() bool {
				for _, id := range tp.apps(false) {
					n := docker(t, "inspect", "-f", "{{.Config.Hostname}}", id)
					if tp.hasClient("server-a", n) && tp.hasClient("server-b", n) {
						victim, name = id, n
						return true
					}
				}
				return false
			})
			docker(t, "network", "disconnect", "-f", tp.network, victim)
			detect := tp.waitFor("server-b drops the partitioned client", 3*clientDownThreshold, func() bool {
				return !tp.hasClient("server-b", name)
			})
			// The server sweeps heartbeat ages on a tick, so the drop may
			// come up to a couple of seconds past the threshold itself.
			if limit := clientDownThreshold + 3*time.Second; detect > limit {
				t.Errorf("partition detected after %v, want within client_down_threshold %v (+3s sweep)", detect, clientDownThreshold)
			}
			docker(t, "network", "connect", tp.network, victim)
			heal := tp.waitFor("the partitioned client is back on both servers", 120*time.Second, func() bool {
				return tp.hasClient("server-a", name) && tp.hasClient("server-b", name)
			})
			ok, failed := load.counts()
			figs.add(t, "network partition: detected after %v (client_down_threshold %v), healed %v after reconnecting; %d requests served meanwhile, %d failed",
				detect.Round(100*time.Millisecond), clientDownThreshold, heal.Round(100*time.Millisecond), ok-ok0, failed-failed0)
			if failed != failed0 {
				t.Errorf("requests lost during the partition = %d, want 0 (GETs fail over once the client is dropped): %v", failed-failed0, load.failures())
			}
			lost += failed - failed0
		}},

		{"restart_postgres", func(t *testing.T) {
			tp.t = t
			var created struct {
				ID string `json:"id"`
			}
			if _, err := tp.api("server-a", "POST", "/tokens", map[string]any{"name": "e2e-before-restart", "hostnames": []string{"before.e2e.test"}}, &created); err != nil {
				t.Fatal(err)
			}
			ok0, failed0 := load.counts()
			pg := tp.containerID("postgres")
			started := docker(t, "inspect", "-f", "{{.State.StartedAt}}", pg)
			tp.mustCompose("restart", "-t", "10", "postgres")
			if again := docker(t, "inspect", "-f", "{{.State.StartedAt}}", pg); again == started {
				t.Fatalf("postgres StartedAt still %s after docker-compose restart", started)
			}
			for _, s := range []string{"server-a", "server-b"} {
				took := tp.waitFor(s+" writes to the store again", 90*time.Second, func() bool {
					_, err := tp.api(s, "POST", "/tokens", map[string]any{"name": "e2e-after-" + s, "hostnames": []string{"after.e2e.test"}}, nil)
					return err == nil
				})
				var tokens []struct {
					ID   string `json:"id"`
					Name string `json:"name"`
				}
				if _, err := tp.api(s, "GET", "/tokens", nil, &tokens); err != nil {
					t.Fatal(err)
				}
				found := false
				for _, tok := range tokens {
					found = found || tok.ID == created.ID
				}
				if !found {
					t.Errorf("%s lists %d tokens after the restart, without %s made before it", s, len(tokens), created.ID)
				}
				if r := tp.records(s); len(r) != 1 {
					t.Errorf("%s scaling records for %s after the restart = %d, want 1", s, appHost, len(r))
				}
				figs.add(t, "PostgreSQL restarted: %s writing again %v after the restart command returned", s, took.Round(100*time.Millisecond))
			}
			// The servers' change feed recovered too: maintenance set
			// through server-b reaches server-a (a hostname nobody serves
			// answers 502, in maintenance 503), and so does clearing it.
			const other = "maintenance.e2e.test"
			hostStatus := func() int {
				req, err := http.NewRequest("GET", "http://"+tp.port("server-a", 8080)+"/", nil)
				if err != nil {
					t.Fatal(err)
				}
				req.Host = other
				resp, err := tp.http.Do(req)
				if err != nil {
					return 0
				}
				resp.Body.Close()
				return resp.StatusCode
			}
			if got := hostStatus(); got != http.StatusBadGateway {
				t.Fatalf("GET %s via server-a = %d, want 502 (nobody serves it)", other, got)
			}
			if _, err := tp.api("server-b", "PUT", "/maintenance/"+other, nil, nil); err != nil {
				t.Fatal(err)
			}
			feed := tp.waitFor("server-a learns of maintenance set through server-b", 30*time.Second, func() bool {
				return hostStatus() == http.StatusServiceUnavailable
			})
			if _, err := tp.api("server-b", "DELETE", "/maintenance/"+other, nil, nil); err != nil {
				t.Fatal(err)
			}
			tp.waitFor("server-a learns maintenance was cleared", 30*time.Second, func() bool {
				return hostStatus() == http.StatusBadGateway
			})
			figs.add(t, "PostgreSQL restart: change feed between servers working again (maintenance via server-b seen by server-a after %v)", feed.Round(100*time.Millisecond))
			ok, failed := load.counts()
			lost += failed - failed0
			if failed != failed0 {
				t.Errorf("requests lost while PostgreSQL restarted = %d, want 0: %v", failed-failed0, load.failures())
			}
			figs.add(t, "PostgreSQL restart: %d requests served meanwhile, lost %d", ok-ok0, failed-failed0)
		}},

		{"idle_retire_back_to_zero", func(t *testing.T) {
			tp.t = t
			load.close()
			before := len(tp.apps(false))
			took := tp.waitFor("every app container retires", idleTimeout+60*time.Second, func() bool {
				return len(tp.apps(false)) == 0
			})
			for _, s := range []string{"server-a", "server-b"} {
				tp.waitFor(s+" lists no client", 30*time.Second, func() bool { return len(tp.clients(s)) == 0 })
			}
			var codes []string
			for _, id := range tp.apps(true) {
				codes = append(codes, docker(t, "inspect", "-f", "{{.State.ExitCode}}", id))
			}
			sort.Strings(codes)
			figs.add(t, "idle retire: %d running containers down to 0 %v after the load stopped (idle_timeout %v); exit codes %v",
				before, took.Round(100*time.Millisecond), idleTimeout, codes)
			figs.add(t, "requests lost in total: %d", lost)
		}},

		{"cold_start_new_container", func(t *testing.T) {
			tp.t = t
			// With no stopped container left to restart, the provider
			// creates one from its template: the slowest cold start.
			if ids := tp.apps(true); len(ids) > 0 {
				docker(t, append([]string{"rm"}, ids...)...)
			}
			ttfbs, perServer := tp.coldStart(20)
			figs.add(t, "cold start from zero, docker create + start of a new container: time to first byte %v (first) / %v (median) / %v (last) for a burst of %d held requests, all served, cold_start calls per server %v",
				ttfbs[0].Round(time.Millisecond), ttfbs[len(ttfbs)/2].Round(time.Millisecond), ttfbs[len(ttfbs)-1].Round(time.Millisecond), len(ttfbs), perServer)
		}},

		{"restart_server_right_after_cold_start_call", func(t *testing.T) {
			tp.t = t
			// Back to zero, and no stopped container: the next start
			// creates one, which leaves time to restart a server while
			// the instance is on its way.
			tp.waitFor("every app container retires", idleTimeout+60*time.Second, func() bool {
				return len(tp.apps(false)) == 0
			})
			for _, s := range []string{"server-a", "server-b"} {
				tp.waitFor(s+" lists no client", 30*time.Second, func() bool { return len(tp.clients(s)) == 0 })
			}
			if ids := tp.apps(true); len(ids) > 0 {
				docker(t, append([]string{"rm"}, ids...)...)
			}
			tp.waitArmed()
			before := len(tp.providerCalls())
			type result struct {
				status int
				body   string
				ttfb   time.Duration
				err    error
			}
			burst := func(base string, n int) []result {
				rs := make([]result, n)
				var wg sync.WaitGroup
				for i := range rs {
					wg.Go(func() { rs[i].status, rs[i].body, rs[i].ttfb, rs[i].err = tp.visit(base, "/") })
				}
				wg.Wait()
				return rs
			}
			viaB := make(chan []result, 1)
			go func() { viaB <- burst(tp.port("server-b", 8080), 10) }()
			tp.waitFor("the cold start call reaches the provider", 30*time.Second, func() bool {
				return len(tp.providerCalls()) > before
			})
			// A trickle through server-b keeps the instance from retiring
			// (idle_timeout) while server-a restarts: a second call is
			// then never legitimate, the instance the first asked for
			// being up all along.
			trickle := tp.startLoad(1, "/", tp.port("server-b", 8080))
			defer trickle.close()
			// Restart server-a at once: it must learn of the call from the
			// store, not make its own.
			tp.mustCompose("kill", "-s", "SIGKILL", "server-a")
			tp.mustCompose("start", "server-a")
			tp.forgetPorts("server-a")
			a := tp.port("server-a", 8080)
			tp.waitFor("server-a is ready again", 60*time.Second, func() bool {
				return tp.statusOf("GET", "http://"+a+"/aperio/readyz") == http.StatusOK
			})
			restarted := time.Now()
			viaA := burst(a, 10)
			all := append(viaA, <-viaB...)
			var held time.Duration
			for i, r := range all {
				if r.err != nil || r.status != http.StatusOK || !strings.HasPrefix(r.body, "hello from ") {
					t.Errorf("request %d = %d %q %v, want 200 from the app", i, r.status, r.body, r.err)
				}
				if i < len(viaA) {
					held = max(held, r.ttfb)
				}
			}
			var coldStarts []providerCall
			for _, c := range tp.providerCalls()[before:] {
				if c.Reason == "cold_start" {
					coldStarts = append(coldStarts, c)
				}
			}
			if len(coldStarts) != 1 {
				t.Errorf("cold_start calls = %+v, want exactly 1: server-a, restarted right after it, must not call again", coldStarts)
			}
			if len(coldStarts) > 0 {
				figs.add(t, "server-a restarted right after a cold_start call: %d cold_start call(s) in all; its requests' longest wait %v (a wait of about the instance's start means they found its pool empty and joined the recorded call; a few ms, that the instance had reconnected first), ready %v after the call, all served",
					len(coldStarts), held.Round(time.Millisecond), restarted.Sub(coldStarts[0].At).Round(100*time.Millisecond))
			}
		}},
	}
	for _, s := range steps {
		if !t.Run(s.name, s.run) {
			tp.t = t
			t.FailNow()
		}
	}
	tp.t = t
}

// coldStart waits until both servers armed the app, sends a burst of GETs
// split across them while nothing runs, and checks that every request is
// answered by the app, that the servers called the provider once between
// them (the record's lease makes the call single-flight across servers;
// reason cold_start, desired 1), and that one container runs. It returns
// the sorted times to first byte and the calls per server.
func (tp *topology) coldStart(burst int) ([]time.Duration, map[string]int) {
	t := tp.t
	t.Helper()
	if n := len(tp.apps(false)); n != 0 {
		t.Fatalf("running app containers before the cold start = %d, want 0", n)
	}
	tp.waitArmed()
	before := len(tp.providerCalls())
	bases := []string{tp.port("server-a", 8080), tp.port("server-b", 8080)}
	// Resolved before the burst: docker commands are slow on a loaded
	// host, and the instance retires idle_timeout after the burst, before
	// the next step's load could reach it.
	serverIPs := map[string]string{
		tp.ip(tp.containerID("server-a")): "server-a",
		tp.ip(tp.containerID("server-b")): "server-b",
	}
	type result struct {
		status int
		body   string
		ttfb   time.Duration
		err    error
	}
	results := make([]result, burst)
	var wg sync.WaitGroup
	for i := range burst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &results[i]
			r.status, r.body, r.ttfb, r.err = tp.visit(bases[i%2], "/")
		}()
	}
	wg.Wait()
	var ttfbs []time.Duration
	for i, r := range results {
		if r.err != nil || r.status != http.StatusOK || !strings.HasPrefix(r.body, "hello from ") {
			t.Errorf("held request %d via %s = %d %q %v, want 200 from the app", i, bases[i%2], r.status, r.body, r.err)
		}
		ttfbs = append(ttfbs, r.ttfb)
	}
	slices.Sort(ttfbs)
	perServer := map[string]int{}
	calls := tp.providerCalls()[before:]
	for _, c := range calls {
		host, _, err := net.SplitHostPort(c.RemoteAddr)
		if err != nil {
			t.Fatalf("provider call from %q: %v", c.RemoteAddr, err)
		}
		s, ok := serverIPs[host]
		if !ok {
			t.Errorf("provider call from %s, which is neither server (%v)", host, serverIPs)
		}
		if c.Reason != "cold_start" {
			// A burst long enough may also fill a window: a scale_out is
			// legitimate then, and not what this counts.
			t.Logf("provider call from %s during the cold start: %s desired %d", s, c.Reason, c.Desired)
			continue
		}
		if c.Desired != 1 {
			t.Errorf("cold_start call from %s: desired %d, want 1", s, c.Desired)
		}
		perServer[s]++
	}
	if len(perServer) == 0 {
		t.Fatalf("provider calls after the burst = %+v, want a cold_start", calls)
	}
	total := 0
	for _, n := range perServer {
		total += n
	}
	if total != 1 {
		t.Errorf("cold_start calls per server %v for a burst of %d split over both, want 1 in all", perServer, burst)
	}
	if got := tp.apps(false); len(got) < 1 {
		t.Errorf("running app containers after the cold start = %d, want at least 1", len(got))
	}
	return ttfbs, perServer
}
