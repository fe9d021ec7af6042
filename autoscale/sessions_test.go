package autoscale

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aperio-dev/aperio/internal/control/events"
	"github.com/aperio-dev/aperio/tunnel"
)

// fakeSession is a tunnel session announcing one service for hosts with
// block, whose binds the router accepted when bound says so.
type fakeSession struct {
	id    string
	ident tunnel.Identity
	ann   *tunnel.Announcement
	bound func(hostname string) bool
}

func (s *fakeSession) ID() string                         { return s.id }
func (s *fakeSession) Identity() tunnel.Identity          { return s.ident }
func (s *fakeSession) Announcement() *tunnel.Announcement { return s.ann }
func (s *fakeSession) Bound(hostname, _ string) bool      { return s.bound(hostname) }

// newFakeSession is session id of a token of testOrg announcing block for
// hosts, every bind accepted by the router.
func newFakeSession(id string, block *Declaration, hosts ...string) *fakeSession {
	return &fakeSession{id: id, ident: tunnel.Identity{OrgID: testOrg, TokenID: "tok_" + id},
		ann:   &tunnel.Announcement{Scaling: block, Services: []tunnel.Service{{ID: "0", Hostnames: hosts}}},
		bound: func(string) bool { return true }}
}

// fakeArmed holds the binds named armed; every other bind is not.
type fakeArmed map[string]bool

func (a fakeArmed) ArmedBy(_, hostname, _ string) bool { return a[hostname] }

// fakeAudit records the audit entries offered. It is safe for concurrent
// use.
type fakeAudit struct {
	mu  sync.Mutex // guards got
	got []events.Event
}

func (a *fakeAudit) Offer(ev events.Event) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.got = append(a.got, ev)
	return true
}

func (a *fakeAudit) offered() []events.Event {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.got)
}

// newTestSessions is the declaration protocol of ctl over armed, auditing
// to audit, its Arm a no-op, with the tunnel's default down threshold.
func newTestSessions(t testing.TB, ctl *Controller, armed ArmedBinds, audit AuditQueue) *Sessions {
	t.Helper()
	ss, err := NewSessions(SessionsConfig{Controller: ctl, Armed: armed, Audit: audit,
		Arm: func(context.Context) error { return nil }})
	if err != nil {
		t.Fatalf("NewSessions() = %v", err)
	}
	return ss
}

// TestNewSessionsValidates: a missing controller, missing armed binds or
// a negative down threshold is refused at construction; zero means the
// tunnel server's default.
func TestNewSessionsValidates(t *testing.T) {
	arm := func(context.Context) error { return nil }
	ctl := &Controller{}
	for _, tt := range []struct {
		name string
		cfg  SessionsConfig
		want string
	}{
		{"no controller", SessionsConfig{Armed: fakeArmed{}, Arm: arm}, "no controller"},
		{"no armed binds", SessionsConfig{Controller: ctl, Arm: arm}, "no armed binds"},
		{"no arm", SessionsConfig{Controller: ctl, Armed: fakeArmed{}}, "no armed binds"},
		{"negative threshold", SessionsConfig{Controller: ctl, Armed: fakeArmed{}, Arm: arm, DownThreshold: -time.Second}, "negative"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewSessions(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewSessions() = %v, want an error saying %q", err, tt.want)
			}
		})
	}
	ss, err := NewSessions(SessionsConfig{Controller: ctl, Armed: fakeArmed{}, Arm: arm})
	if err != nil {
		t.Fatalf("NewSessions(zero threshold) = %v", err)
	}
	if want := tunnel.DefaultServerConfig().DownThreshold / 6; ss.wait != want {
		t.Errorf("wait with a zero down threshold = %v, want %v (a sixth of the tunnel's default)", ss.wait, want)
	}
}

// TestSessionsRefusalNoticesCapped: binds the router refused are never
// declared; a client announcing many of them gets maxScalingNotices
// notices and a count, one log line, and one audit entry per bind within
// the token's budget, while its bound bind is declared.
func TestSessionsRefusalNoticesCapped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		audit := &fakeAudit{}
		ss := newTestSessions(t, h.c, fakeArmed{}, audit)
		var logged bytes.Buffer
		ss.log = slog.New(slog.NewTextHandler(&logged, nil))
		hosts := []string{"ok.test"}
		for i := range 100 {
			hosts = append(hosts, fmt.Sprintf("h%d.flood.test", i))
		}
		b := block("ok.test")
		s := newFakeSession("s1", &b, hosts...)
		s.bound = func(host string) bool { return host == "ok.test" }
		notices := ss.Update(t.Context(), s)
		if len(notices) != maxScalingNotices+1 {
			t.Fatalf("Update() = %d notices, want %d (the cap, then a count)", len(notices), maxScalingNotices+1)
		}
		if want := "scaling declaration for h0.flood.test refused: " + errNotBound.Error(); notices[0] != want {
			t.Errorf("first notice = %q, want %q", notices[0], want)
		}
		if want := "92 more scaling declarations refused"; notices[maxScalingNotices] != want {
			t.Errorf("last notice = %q, want %q", notices[maxScalingNotices], want)
		}
		if _, ok := h.store.get("ok.test"); !ok {
			t.Errorf("ok.test, bound, has no record")
		}
		if _, ok := h.store.get("h0.flood.test"); ok {
			t.Errorf("h0.flood.test, refused by the router, has a record")
		}
		if n := strings.Count(logged.String(), "scaling declarations refused"); n != 1 {
			t.Errorf("log lines of refusals = %d, want 1:\n%s", n, logged.String())
		}
		got := audit.offered()
		if len(got) != events.MaxRefusalAudits {
			t.Errorf("audit entries offered = %d, want %d (the token's budget)", len(got), events.MaxRefusalAudits)
		}
		if len(got) > 0 && (got[0].Kind != eventScalingRefused || got[0].Hostname != "h0.flood.test" || got[0].OrgID != testOrg) {
			t.Errorf("first audit entry = %+v, want %s of %s for h0.flood.test", got[0], eventScalingRefused, testOrg)
		}
		// A heartbeat repeating the announcement audits nothing again.
		ss.Update(t.Context(), s)
		if n := len(audit.offered()); n != len(got) {
			t.Errorf("audit entries after a repeated announcement = %d, want %d", n, len(got))
		}
		ss.Leave(s.ID())
	})
}

// TestSessionsAuditsBoundedPerSession: a session refused for a new reason
// on every heartbeat has at most maxRefusalAuditsPerSession refusals
// audited, however many its token's budget would admit.
func TestSessionsAuditsBoundedPerSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		audit := &fakeAudit{}
		ss := newTestSessions(t, h.c, fakeArmed{}, audit)
		s := newFakeSession("s1", nil, "a.test")
		for i := range 3 * maxRefusalAuditsPerSession {
			// An invalid block (min above max), each time a new one.
			b := Declaration{URL: "https://hooks.example/a", Min: i + 2, Max: 1}
			s.ann = &tunnel.Announcement{Scaling: &b, Services: s.ann.Services}
			// Its token rotated each time: the per-token budget never
			// runs out.
			s.ident.TokenID = fmt.Sprint("tok_", i)
			ss.Update(t.Context(), s)
		}
		if n := len(audit.offered()); n != maxRefusalAuditsPerSession {
			t.Errorf("audit entries of %d refusals = %d, want %d", 3*maxRefusalAuditsPerSession, n, maxRefusalAuditsPerSession)
		}
		ss.Leave(s.ID())
	})
}

// TestSessionsArmsNewBindsOnce: an announcement that declares binds new to
// its session and not armed reloads the armed binds once, whatever their
// number; a heartbeat repeating them, or a new bind already armed,
// reloads nothing; after Leave the session's binds are new again.
func TestSessionsArmsNewBindsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		var reloads atomic.Int64
		armed := fakeArmed{"armed.test": true}
		ss, err := NewSessions(SessionsConfig{Controller: h.c, Armed: armed,
			Arm: func(context.Context) error { reloads.Add(1); return nil }})
		if err != nil {
			t.Fatal(err)
		}
		b := block("a.test")
		s := newFakeSession("s1", &b, "a.test", "b.test")
		for _, step := range []struct {
			name  string
			hosts []string
			want  int64
		}{
			{"two new binds", []string{"a.test", "b.test"}, 1},
			{"a heartbeat repeating them", []string{"a.test", "b.test"}, 1},
			{"a new bind armed already", []string{"a.test", "b.test", "armed.test"}, 1},
			{"a new bind not armed", []string{"a.test", "b.test", "armed.test", "c.test"}, 2},
		} {
			s.ann = &tunnel.Announcement{Scaling: &b, Services: []tunnel.Service{{ID: "0", Hostnames: step.hosts}}}
			if notices := ss.Update(t.Context(), s); len(notices) != 0 {
				t.Errorf("%s: notices %q, want none", step.name, notices)
			}
			if got := reloads.Load(); got != step.want {
				t.Errorf("%s: reloads = %d, want %d", step.name, got, step.want)
			}
		}
		ss.Leave(s.ID())
		ss.Update(t.Context(), s)
		if got := reloads.Load(); got != 3 {
			t.Errorf("reloads after the session left and announced again = %d, want 3", got)
		}
		ss.Leave(s.ID())
	})
}

// TestSessionsAckWaitsAtMostASixth: while the store is slow, Update
// returns after a sixth of the down threshold, counted late, with the
// notices of the last declarations that ran; Leave waits for the
// declarations still running before the session leaves the controller.
func TestSessionsAckWaitsAtMostASixth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		release := make(chan struct{})
		ss, err := NewSessions(SessionsConfig{Controller: h.c, Armed: fakeArmed{}, DownThreshold: 12 * time.Second,
			Arm: func(ctx context.Context) error {
				select {
				case <-release:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		b := block("a.test")
		s := newFakeSession("s1", &b, "a.test", "bad.test")
		s.bound = func(host string) bool { return host == "a.test" }
		start := time.Now()
		if notices := ss.Update(t.Context(), s); len(notices) != 0 {
			t.Errorf("Update() while the store is slow = %q, want no notices yet", notices)
		}
		if took, want := time.Since(start), 2*time.Second; took != want {
			t.Errorf("Update() took %v while the store was slow, want %v (a sixth of the down threshold)", took, want)
		}
		if st := ss.Stats(); st.Late != 1 {
			t.Errorf("Stats().Late = %d, want 1", st.Late)
		}
		left := make(chan struct{})
		go func() {
			ss.Leave(s.ID())
			close(left)
		}()
		synctest.Wait()
		select {
		case <-left:
			t.Fatal("Leave returned while the session's declarations were running")
		default:
		}
		close(release)
		<-left
		if _, ok := h.store.get("a.test"); !ok {
			t.Errorf("a.test has no record after Leave waited for its declaration")
		}
	})
}
