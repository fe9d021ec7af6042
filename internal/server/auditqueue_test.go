package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/edge/acme/acmetest"
	"github.com/aperio-dev/aperio/tunnel"
)

// TestAckDoesNotWaitForAuditWrites: the audit entries a heartbeat causes
// (a changed set of refused binds, a public port opened) go through the
// events queue, so that while every store write blocks (another process
// holds SQLite's write lock) the heartbeats are still acked at once, and
// the entries land once the lock is released, with the actor they always
// had. Written synchronously, the bind audit held each ack up to 1 s and
// the port audit up to 5 s.
func TestAckDoesNotWaitForAuditWrites(t *testing.T) {
	t.Parallel()
	port := acmetest.FreePort(t)
	cfg := serverConfig(t)
	cfg.TCPPortRange = []string{fmt.Sprint(port)}
	cfg.Router.IPLimitMax = 0 // the polls of the audit log come from loopback
	s := startServer(t, cfg, nil, nil)
	code, body := adminCall(t, newVisitor(t, s), s, "POST", "/tokens", map[string]any{"name": "slow", "hostnames": []string{"q.test"},
		"allow_tcp_ports": []string{fmt.Sprint(port)}})
	if code != http.StatusCreated {
		t.Fatalf("POST /aperio/api/tokens = %d %s, want 201", code, body)
	}
	var minted struct{ ID, Token string }
	if err := json.Unmarshal([]byte(body), &minted); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex // guards hosts and expose
	hosts := []string{"q.test"}
	var expose []tunnel.Expose
	c, err := tunnel.NewClient(tunnel.ClientConfig{
		URL: s.url, Token: minted.Token, Forwarder: nopForwarder{}, Logger: testLogger(),
		Announce: func() tunnel.Announcement {
			mu.Lock()
			defer mu.Unlock()
			return tunnel.Announcement{Name: "slow", InstanceID: "i-slow", Expose: slices.Clone(expose),
				Services: []tunnel.Service{{ID: "0", Hostnames: slices.Clone(hosts), Healthy: true}}}
		},
	})
	if err != nil {
		t.Fatalf("tunnel.NewClient() = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		wait(t, done, waitFor, "the client's Run to return")
	})
	poll(t, waitFor, func() (bool, string) { return c.Connected(), "the client has not connected" })
	// announce sends the announcement and returns how long the ack took.
	announce := func() time.Duration {
		t.Helper()
		actx, acancel := context.WithTimeout(t.Context(), time.Minute)
		defer acancel()
		start := time.Now()
		if err := c.AnnounceNow(actx); err != nil {
			t.Fatalf("AnnounceNow() = %v, want nil", err)
		}
		return time.Since(start)
	}
	t.Logf("with the store free, an ack took %v", announce())

	unlock := lockStore(t, cfg.Store.DataDir)
	// Four changes of the refused binds: four entries, each of which held
	// its ack for up to 1 s when written before it.
	const changes = 4
	var bindAcks time.Duration
	for i := range changes {
		mu.Lock()
		hosts = []string{"q.test", fmt.Sprintf("evil%d.test", i)}
		mu.Unlock()
		bindAcks += announce()
	}
	mu.Lock()
	expose = []tunnel.Expose{{Name: "ssh", Protocol: tunnel.ExposeTCP, RemotePort: port}}
	mu.Unlock()
	portAck := announce()
	t.Logf("with the store locked: %d refused-bind changes acked in %v, the port's opening in %v", changes, bindAcks, portAck)
	// The bounds are generous for a loaded machine and still below what a
	// synchronous write costs (4 × 1 s; 5 s).
	if bindAcks > 3*time.Second {
		t.Errorf("%d heartbeats changing the refused binds took %v to be acked with the store locked, want under 3s: the ack waits for the audit write", changes, bindAcks)
	}
	if portAck > 3*time.Second {
		t.Errorf("the heartbeat opening a port took %v to be acked with the store locked, want under 3s: the ack waits for the audit write", portAck)
	}
	// The lock held: nothing is written yet (so the acks above did not
	// come quickly for want of a blocked store).
	if got := auditEvents(t, s, "port_opened"); len(got) != 0 {
		t.Fatalf("port_opened entries with the store locked = %v, want none yet", got)
	}

	unlock()
	actor := "token:" + minted.ID
	poll(t, waitFor, func() (bool, string) {
		var named []string
		for _, e := range auditEvents(t, s, "client_bind_refused") {
			if e["actor"] != actor {
				return false, fmt.Sprintf("client_bind_refused entry %v, want actor %q", e, actor)
			}
			for i := range changes {
				if d, _ := e["detail"].(string); strings.Contains(d, fmt.Sprintf("evil%d.test", i)) {
					named = append(named, fmt.Sprintf("evil%d.test", i))
				}
			}
		}
		slices.Sort(named)
		return len(slices.Compact(named)) == changes, fmt.Sprintf("client_bind_refused entries after the lock name %q, want evil0.test to evil%d.test", named, changes-1)
	})
	poll(t, waitFor, func() (bool, string) {
		got := auditEvents(t, s, "port_opened")
		for _, e := range got {
			if d, _ := e["detail"].(string); strings.Contains(d, fmt.Sprint(port)) && e["actor"] == actor {
				return true, ""
			}
		}
		return false, fmt.Sprintf("port_opened entries after the lock = %v, want one for port %d by %s", got, port, actor)
	})
}

// TestScalingRefusalAckDoesNotWaitForAudit: a refused scaling
// declaration's scaling_refused entry goes through the events queue too,
// so that while every store write blocks, the heartbeat that causes it is
// acked at once and with the refusal's notice, and the entry lands once
// the lock is released, still once per session, bind and reason. Written
// on the session's declarer, the entry held the declarations past the
// ack's wait (client_down_threshold / 6, 2.5 s here): the ack came late
// and without the notice.
func TestScalingRefusalAckDoesNotWaitForAudit(t *testing.T) {
	t.Parallel()
	h := newScalingHarness(t)
	tok := h.token(t, h.orgB, "b.example.net")
	// An invalid block is refused before the controller reads the store,
	// and a bind the token may not hold without asking it: the audit entry
	// is the declarations' only store write.
	block := &tunnel.Scaling{URL: h.hook.URL + "/hook", Min: 3, Max: 2, ColdStart: time.Second,
		TargetUtilization: 0.8, Window: time.Second, Cooldown: time.Minute}
	c := h.clientBlock(t, tok, block, true, "b.example.net")
	c.announceNow(t)
	poll(t, waitFor, func() (bool, string) {
		got := auditEvents(t, h.srv, "scaling_refused")
		return len(got) == 1, fmt.Sprintf("scaling_refused entries with the store free = %v, want 1", got)
	})

	unlock := lockStore(t, h.dataDir)
	c.setHosts("b.example.net", "x.b.example.net")
	start := time.Now()
	c.announceNow(t)
	took := time.Since(start)
	const notice = "scaling declaration for x.b.example.net refused: the hostname is not bound by this session"
	if !slices.ContainsFunc(c.notices.all(), func(n string) bool { return strings.Contains(n, notice) }) {
		t.Errorf("server notices after the ack with the store locked = %q, want %q: the ack went before the declarations, held by the audit write", c.notices.all(), notice)
	}
	// Generous for a loaded machine, and still below the ack's wait.
	if took > 2*time.Second {
		t.Errorf("the heartbeat refusing a declaration took %v to be acked with the store locked, want under 2s: the ack waits for the audit write", took)
	}
	c.announceNow(t) // a heartbeat repeats the refusal: no second entry
	// The lock held: nothing new is written yet.
	if got := auditEvents(t, h.srv, "scaling_refused"); len(got) != 1 {
		t.Fatalf("scaling_refused entries with the store locked = %v, want still 1", got)
	}

	unlock()
	var hosts []string
	for _, e := range h.auditAfterLeave(t, c, "scaling_refused") {
		if a, _ := e["actor"].(string); !strings.HasPrefix(a, "token:") {
			t.Errorf("scaling_refused entry %v, want the token as actor", e)
		}
		host, _ := e["hostname"].(string)
		hosts = append(hosts, host)
	}
	slices.Sort(hosts)
	if want := []string{"b.example.net", "x.b.example.net"}; !slices.Equal(hosts, want) {
		t.Errorf("scaling_refused entries name %q, want %q: one per bind and reason", hosts, want)
	}
}

// auditAfterLeave stops c, the harness's only client, and returns the
// audit entries of event once its client_disconnected entry is written.
// Detach waits for the session's declarations before the outermost
// registry offers client_disconnected, and the events queue writes in
// order: by then every entry the session's announcements queued is
// written too.
func (h *scalingHarness) auditAfterLeave(t *testing.T, c *rawClient, event string) []map[string]any {
	t.Helper()
	c.stop()
	poll(t, waitFor, func() (bool, string) {
		got := auditEvents(t, h.srv, "client_disconnected")
		return len(got) == 1, fmt.Sprintf("client_disconnected entries = %v, want 1", got)
	})
	return auditEvents(t, h.srv, event)
}
