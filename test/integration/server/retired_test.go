package server_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/aperio-dev/aperio/internal/server/servertest"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/agent"
	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/control/webhook"
	"github.com/aperio-dev/aperio/tunnel"
)

// retiredPayload is the part of an instance_retired delivery the tests
// read.
type retiredPayload struct {
	Event    string `json:"event"`
	Hostname string `json:"hostname"`
	Path     string `json:"path"`
	Detail   struct {
		Actor      string `json:"actor"`
		ClientID   string `json:"client_id"`
		InstanceID string `json:"instance_id"`
		Name       string `json:"name"`
		Reason     string `json:"reason"`
		IdleAction string `json:"idle_action"`
		Min        *int   `json:"min"`
		Binds      []struct {
			Hostname string `json:"hostname"`
			Path     string `json:"path"`
		} `json:"binds"`
	} `json:"detail"`
}

// retiredStack starts a server whose webhook subscription receives
// instance_retired and client_disconnected, verified, in rcv.
func retiredStack(t *testing.T) (*servertest.VerifiedReceiver, *servertest.Server, *http.Client) {
	t.Helper()
	secret := webhook.SecretPrefix + base64.StdEncoding.EncodeToString([]byte("thirty-two bytes of a signing key"))
	rcv := &servertest.VerifiedReceiver{Secret: secret}
	hooks := httptest.NewServer(rcv)
	t.Cleanup(hooks.Close)
	cfg := servertest.Config(t)
	cfg.Outbound.AllowHTTP, cfg.Outbound.AllowPrivate = true, true // loopback receiver and provider
	srv := servertest.Start(t, cfg, nil, nil)
	visitor := servertest.NewVisitor(t, srv)
	if status, body := servertest.AdminCall(t, visitor, srv, "POST", "/webhooks", map[string]any{
		"url": hooks.URL, "secret": secret, "events": []string{apitype.EventInstanceRetired, apitype.EventClientDisconnected},
	}); status != http.StatusCreated {
		t.Fatalf("POST /webhooks = %d %s, want 201", status, body)
	}
	return rcv, srv, visitor
}

// waitDisconnected waits for n verified client_disconnected deliveries:
// the events of a session are queued in order, so an instance_retired
// offered before its session ended has been delivered by then.
func waitDisconnected(t *testing.T, rcv *servertest.VerifiedReceiver, n int) {
	t.Helper()
	servertest.Poll(t, servertest.WaitFor, func() (bool, string) {
		got := rcv.Count(apitype.EventClientDisconnected)
		return got >= n, fmt.Sprintf("%d client_disconnected deliveries, want %d", got, n)
	})
}

// TestInstanceRetired: a client that idle_timeout retires announces why
// in its drain, and the server delivers one instance_retired naming the
// instance, its binds, the scaling block's min and its idle_action. With
// idle_action wait the process stays, drained and disconnected, its
// status saying retired, until its signal; with exit it ends by itself.
func TestInstanceRetired(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, action string
		// retiredWait shortens the wait for the signal: nobody sends it,
		// so the process exits by itself once it passed.
		retiredWait time.Duration
	}{
		{"exit", config.IdleActionExit, 0},
		{"wait", config.IdleActionWait, 0},
		{"wait bounded", config.IdleActionWait, 300 * time.Millisecond},
	} {
		action := tt.action
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rcv, srv, visitor := retiredStack(t)
			cfg := servertest.AgentConfig(srv, servertest.Service(servertest.Backend(t, servertest.IdentityEcho()).URL))
			cfg.Name = "web-7d9f8-" + strings.ReplaceAll(tt.name, " ", "-")
			cfg.IdleTimeout, cfg.IdleAction, cfg.DrainTimeout = 300*time.Millisecond, action, 2*time.Second
			sc := tunnel.DefaultScaling()
			// Port 9 (discard) answers nothing: a call below min fails
			// fast, which this test does not look at.
			sc.URL, sc.Min, sc.Max = "http://127.0.0.1:9/scale", 1, 2
			cfg.Scaling = &sc
			a, err := agent.New(cfg, agent.Options{Logger: servertest.Logger(), TLSConfig: srv.TLSClientConfig(), StatusSocket: config.StatusSocketOff,
				RetiredWait: tt.retiredWait})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- a.Run(ctx) }()

			waitDisconnected(t, rcv, 1)
			bodies := rcv.BodiesOf(apitype.EventInstanceRetired)
			if len(bodies) != 1 {
				t.Fatalf("instance_retired deliveries = %d, want 1: %q", len(bodies), bodies)
			}
			var p retiredPayload
			if err := json.Unmarshal([]byte(bodies[0]), &p); err != nil {
				t.Fatal(err)
			}
			d := p.Detail
			if p.Event != apitype.EventInstanceRetired || p.Hostname != servertest.AppHost || d.Reason != "idle" || d.IdleAction != action ||
				d.Name != cfg.Name || d.InstanceID == "" || d.ClientID == "" || d.Min == nil || *d.Min != 1 ||
				len(d.Binds) != 1 || d.Binds[0].Hostname != servertest.AppHost {
				t.Fatalf("instance_retired = %s\nwant hostname %s, reason idle, idle_action %s, name %s, an instance and client id, min 1, binds [%s]",
					bodies[0], servertest.AppHost, action, cfg.Name, servertest.AppHost)
			}
			servertest.WaitClients(t, visitor, srv, 0)

			if action == config.IdleActionExit || tt.retiredWait > 0 {
				if err := servertest.Wait(t, done, servertest.WaitFor, "Run to end after the retirement"); !errors.Is(err, agent.ErrIdle) {
					t.Fatalf("Run() = %v, want ErrIdle", err)
				}
				return
			}
			servertest.Poll(t, servertest.WaitFor, func() (bool, string) {
				st := a.Status()
				return st.Retired == "idle" && st.Connected() == 0, fmt.Sprintf("status retired %q, %d tunnels up; want idle, 0", st.Retired, st.Connected())
			})
			select {
			case err := <-done:
				t.Fatalf("Run() = %v before its signal; idle_action wait keeps the retired process until then", err)
			default:
			}
			cancel() // SIGTERM
			if err := servertest.Wait(t, done, servertest.WaitFor, "Run to end after its signal"); !errors.Is(err, agent.ErrIdle) {
				t.Fatalf("Run() after the signal = %v, want ErrIdle", err)
			}
			if n := len(rcv.BodiesOf(apitype.EventInstanceRetired)); n != 1 {
				t.Errorf("instance_retired deliveries = %d, want 1", n)
			}
		})
	}
}

// TestInstanceRetiredHostile: a client's announcement cannot make the
// server report a retirement it did not announce as one, report it twice,
// or name a bind the session does not hold: Retiring without Draining,
// or with another reason, is no retirement; heartbeats repeating it are
// one; a hostname outside the token's scope is left out of binds.
func TestInstanceRetiredHostile(t *testing.T) {
	t.Parallel()
	rcv, srv, visitor := retiredStack(t)
	status, body := servertest.AdminCall(t, visitor, srv, "POST", "/tokens", map[string]any{"name": "retire", "hostnames": []string{"mine.test"}})
	if status != http.StatusCreated {
		t.Fatalf("POST /tokens = %d %s, want 201", status, body)
	}
	var tok struct{ Token string }
	if err := json.Unmarshal([]byte(body), &tok); err != nil {
		t.Fatal(err)
	}
	announce := func(draining bool, retiring string) func() tunnel.Announcement {
		return func() tunnel.Announcement {
			return tunnel.Announcement{Name: "liar", InstanceID: "i-hostile", Draining: draining, Retiring: retiring, IdleAction: "exit; rm -rf /",
				Services: []tunnel.Service{{ID: "0", Hostnames: []string{"mine.test", "theirs.test"}, Healthy: true}}}
		}
	}
	for i, c := range []struct {
		draining bool
		retiring string
		sends    int
	}{
		{false, tunnel.RetiringIdle, 3},
		{true, "crash", 3},
		{true, tunnel.RetiringIdle, 5},
	} {
		session(t, srv, tok.Token, announce(c.draining, c.retiring), c.sends)
		waitDisconnected(t, rcv, i+1)
	}
	bodies := rcv.BodiesOf(apitype.EventInstanceRetired)
	if len(bodies) != 1 {
		t.Fatalf("instance_retired deliveries = %d, want 1 (the draining idle session's, once): %q", len(bodies), bodies)
	}
	var p retiredPayload
	if err := json.Unmarshal([]byte(bodies[0]), &p); err != nil {
		t.Fatal(err)
	}
	if len(p.Detail.Binds) != 1 || p.Detail.Binds[0].Hostname != "mine.test" || p.Hostname != "mine.test" || p.Detail.IdleAction != "exit" {
		t.Errorf("instance_retired = %s\nwant binds [mine.test] only (theirs.test is outside the token) and idle_action exit", bodies[0])
	}
}

// session holds one tunnel session to s with token and announce, sends
// the announcement sends times (each waits for its ack), and ends it.
func session(t *testing.T, s *servertest.Server, token string, announce func() tunnel.Announcement, sends int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), servertest.WaitFor)
	defer cancel()
	up := make(chan struct{})
	var once sync.Once
	c, err := tunnel.NewClient(tunnel.ClientConfig{
		URL: s.URL, Token: token, Announce: announce, Forwarder: servertest.NopForwarder{}, Logger: servertest.Logger(),
		OnConnect: func(string) { once.Do(func() { close(up) }) },
	})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- c.Run(ctx) }()
	servertest.Wait(t, up, servertest.WaitFor, "the session to connect")
	for range sends {
		if err := c.AnnounceNow(ctx); err != nil {
			t.Fatalf("AnnounceNow() = %v", err)
		}
	}
	cancel()
	servertest.Wait(t, ran, servertest.WaitFor, "the session to end")
}
