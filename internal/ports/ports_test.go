package ports

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/aperio-dev/aperio/internal/edge/acme/acmetest"
	"github.com/aperio-dev/aperio/internal/portspec"
	"github.com/aperio-dev/aperio/internal/testkit/echotest"
	"github.com/aperio-dev/aperio/internal/testkit/poll"
	"github.com/aperio-dev/aperio/tunnel"
)

// fakeSession serves raw streams: TCP by dialing echo, UDP by echoing
// framed datagrams on a pipe.
type fakeSession struct {
	id   tunnel.Identity
	ann  tunnel.Announcement
	echo string
}

func (f *fakeSession) Identity() tunnel.Identity          { return f.id }
func (f *fakeSession) Announcement() *tunnel.Announcement { return &f.ann }
func (f *fakeSession) OpenRaw(ctx context.Context, h tunnel.RawHeader) (net.Conn, error) {
	if h.Kind == tunnel.RawTCP {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", f.echo)
	}
	a, b := net.Pipe()
	go func() {
		defer b.Close()
		buf := make([]byte, tunnel.MaxDatagram)
		for {
			n, err := tunnel.ReadDatagram(b, buf)
			if err != nil {
				return
			}
			if tunnel.WriteDatagram(b, buf[:n]) != nil {
				return
			}
		}
	}()
	return a, nil
}

func newManager(t testing.TB, cfg Config) *Manager {
	t.Helper()
	cfg.ListenHost = "127.0.0.1"
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func TestAdmission(t *testing.T) {
	defer goleak.VerifyNone(t)
	p := acmetest.FreePort(t)
	rng := []portspec.Range{{Lo: p, Hi: p}}
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	busy := held.Addr().(*net.TCPAddr).Port
	tests := []struct {
		name  string
		rng   []portspec.Range
		ident tunnel.Identity
		port  int
		want  string // substring of the error, "" for open
	}{
		{"off", nil, tunnel.Identity{AnyTCPPort: true}, p, "disabled"},
		{"outside range", rng, tunnel.Identity{AnyTCPPort: true}, p + 1, "outside"},
		{"privileged", rng, tunnel.Identity{AnyTCPPort: true}, 22, "privileged"},
		{"token not allowed", rng, tunnel.Identity{AllowTCPPorts: []portspec.Range{{Lo: p + 1, Hi: p + 1}}}, p, "token does not allow"},
		{"allowed", rng, tunnel.Identity{AllowTCPPorts: rng}, p, ""},
		{"allocate", rng, tunnel.Identity{AnyTCPPort: true}, 0, ""},
		{"bind failure", []portspec.Range{{Lo: busy, Hi: busy}}, tunnel.Identity{AnyTCPPort: true}, busy, "bind"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newManager(t, Config{Range: tt.rng})
			s := &fakeSession{id: tt.ident, ann: tunnel.Announcement{Expose: []tunnel.Expose{{Name: "e", Protocol: "tcp", RemotePort: tt.port}}}}
			st, notices := m.Apply(context.Background(), "s1", s)
			if len(st) != 1 {
				t.Fatalf("Apply = %v, want one status", st)
			}
			if tt.want == "" {
				if st[0].Error != "" || st[0].Port != p {
					t.Fatalf("Apply = %+v, want open on %d", st[0], p)
				}
				return
			}
			if !strings.Contains(st[0].Error, tt.want) || st[0].Port != 0 || len(notices) != 1 {
				t.Fatalf("Apply = %+v %v, want refusal %q and one notice", st[0], notices, tt.want)
			}
		})
	}
}

func TestPoolAndOtherOrg(t *testing.T) {
	defer goleak.VerifyNone(t)
	p := acmetest.FreePort(t)
	m := newManager(t, Config{Range: []portspec.Range{{Lo: p, Hi: p}}})
	ann := tunnel.Announcement{Expose: []tunnel.Expose{{Name: "e", Protocol: "tcp", RemotePort: p}}}
	a := &fakeSession{id: tunnel.Identity{OrgID: "o1", AnyTCPPort: true}, ann: ann}
	b := &fakeSession{id: tunnel.Identity{OrgID: "o1", AnyTCPPort: true}, ann: ann}
	c := &fakeSession{id: tunnel.Identity{OrgID: "o2", AnyTCPPort: true}, ann: ann}
	ctx := context.Background()
	for _, x := range []struct {
		id string
		s  *fakeSession
		ok bool
	}{{"a", a, true}, {"b", b, true}, {"c", c, false}} {
		st, _ := m.Apply(ctx, x.id, x.s)
		if (st[0].Error == "") != x.ok {
			t.Fatalf("Apply(%s) = %+v, want ok %v", x.id, st[0], x.ok)
		}
	}
	snap := m.Snapshot()
	if len(snap) != 1 || len(snap[0].Sessions) != 2 {
		t.Fatalf("Snapshot = %+v, want one port with two sessions", snap)
	}
	m.Release(ctx, "a", a.id)
	if s := m.Snapshot(); len(s) != 1 {
		t.Fatalf("Snapshot after one release = %+v", s)
	}
	m.Release(ctx, "b", b.id)
	if s := m.Snapshot(); len(s) != 0 {
		t.Fatalf("Snapshot after both releases = %+v, want none", s)
	}
	if _, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", fmtInt(p))); err == nil {
		t.Fatal("port still listening after the last release")
	}
}

func fmtInt(n int) string { return (&net.TCPAddr{Port: n}).String()[1:] }

func TestTCPEchoHalfClose(t *testing.T) {
	echo := echotest.TCP(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p := acmetest.FreePort(t)
	m := newManager(t, Config{Range: []portspec.Range{{Lo: p, Hi: p}}})
	defer m.Close()
	s := &fakeSession{id: tunnel.Identity{AnyTCPPort: true}, echo: echo, ann: tunnel.Announcement{Expose: []tunnel.Expose{{Name: "e", Protocol: "tcp", RemotePort: p}}}}
	if st, _ := m.Apply(context.Background(), "s", s); st[0].Error != "" {
		t.Fatal(st[0].Error)
	}
	c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", fmtInt(p)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "hello" {
		t.Fatalf("echo = %q, %v, want hello", got, err)
	}
}

// openUDPEcho starts a manager with cfg on a free port whose UDP entry a
// fake session echoes, and a visitor socket (with a 10 s deadline) to
// send to it at dst. The caller closes both.
func openUDPEcho(t *testing.T, cfg Config) (*Manager, *net.UDPConn, *net.UDPAddr) {
	t.Helper()
	p := acmetest.FreePort(t)
	cfg.Range = []portspec.Range{{Lo: p, Hi: p}}
	m := newManager(t, cfg)
	s := &fakeSession{id: tunnel.Identity{AnyTCPPort: true}, ann: tunnel.Announcement{Expose: []tunnel.Expose{{Name: "u", Protocol: "udp", RemotePort: p}}}}
	if st, _ := m.Apply(context.Background(), "s", s); st[0].Error != "" {
		t.Fatal(st[0].Error)
	}
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return m, c, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: p}
}

func TestUDPEchoFlows(t *testing.T) {
	defer goleak.VerifyNone(t)
	m, c, dst := openUDPEcho(t, Config{UDPIdle: 200 * time.Millisecond, MaxDatagram: 512})
	defer m.Close()
	defer c.Close()
	if _, err := c.WriteToUDP(make([]byte, 600), dst); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteToUDP([]byte("ping"), dst); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1024)
	n, _, err := c.ReadFromUDP(buf)
	if err != nil || string(buf[:n]) != "ping" {
		t.Fatalf("udp echo = %q, %v, want ping", buf[:n], err)
	}
	poll.Until(t, 5*time.Second, "the snapshot shows one drop and the flow expired", func() bool {
		snap := m.Snapshot()
		return snap[0].Dropped == 1 && snap[0].Open == 0
	})
}

func TestTCPLimits(t *testing.T) {
	echo := echotest.TCP(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	tests := []struct {
		name    string
		max     int
		allowed []string
	}{
		{"max_tcp_connections", 1, nil},
		{"allowed_ips", 10, []string{"10.0.0.0/8"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := acmetest.FreePort(t)
			m := newManager(t, Config{Range: []portspec.Range{{Lo: p, Hi: p}}, MaxTCPConnections: tt.max})
			defer m.Close()
			s := &fakeSession{id: tunnel.Identity{AnyTCPPort: true}, echo: echo, ann: tunnel.Announcement{Expose: []tunnel.Expose{{Name: "e", Protocol: "tcp", RemotePort: p, AllowedIPs: tt.allowed}}}}
			if st, _ := m.Apply(context.Background(), "s", s); st[0].Error != "" {
				t.Fatal(st[0].Error)
			}
			addr := net.JoinHostPort("127.0.0.1", fmtInt(p))
			var first net.Conn
			if tt.allowed == nil {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				c.Write([]byte("x"))
				if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
					t.Fatalf("first connection: %v", err)
				}
				first = c
			}
			expectRefused(t, m, addr)
			if first != nil {
				first.Close()
			}
		})
	}
}

// TestAdmitting: the entries of a pooled port that admit a visitor are
// those whose allowed_ips and token allowed_ips both do; every entry
// without an address; a port not open is not found.
func TestAdmitting(t *testing.T) {
	defer goleak.VerifyNone(t)
	p := acmetest.FreePort(t)
	m := newManager(t, Config{Range: []portspec.Range{{Lo: p, Hi: p}}})
	defer m.Close()
	ctx := context.Background()
	office := &fakeSession{id: tunnel.Identity{OrgID: "o1", AnyTCPPort: true}, ann: tunnel.Announcement{Expose: []tunnel.Expose{{Name: "office", Protocol: "tcp", RemotePort: p, AllowedIPs: []string{"10.0.0.0/8"}}}}}
	fenced := &fakeSession{id: tunnel.Identity{OrgID: "o1", AnyTCPPort: true, AllowedIPs: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}}, ann: tunnel.Announcement{Expose: []tunnel.Expose{{Name: "any", Protocol: "tcp", RemotePort: p}}}}
	for id, s := range map[string]*fakeSession{"a": office, "b": fenced} {
		if st, _ := m.Apply(ctx, id, s); st[0].Error != "" {
			t.Fatal(st[0].Error)
		}
	}
	for _, tc := range []struct {
		ip   string
		want []string
	}{
		{"10.1.2.3", []string{"office"}},
		{"192.0.2.7", []string{"any"}},
		{"203.0.113.1", nil},
		{"", []string{"office", "any"}},
	} {
		var ip netip.Addr
		if tc.ip != "" {
			ip = netip.MustParseAddr(tc.ip)
		}
		info, got, ok := m.Admitting(p, "tcp", ip)
		slices.Sort(got)
		want := slices.Clone(tc.want)
		slices.Sort(want)
		if !ok || info.Port != p || !slices.Equal(got, want) {
			t.Errorf("Admitting(%s) = %v %v, want %v", tc.ip, got, ok, tc.want)
		}
	}
	if _, _, ok := m.Admitting(p, "udp", netip.Addr{}); ok {
		t.Error("Admitting found a udp port nobody opened")
	}
	m.Release(ctx, "a", office.id)
	m.Release(ctx, "b", fenced.id)
}

// openEcho starts a manager with cfg on a free port and a session of
// ident whose TCP entry there relays to echo; it returns the manager, the
// port's address and its number. t.Cleanup closes the manager.
func openEcho(t *testing.T, cfg Config, ident tunnel.Identity, echo string) (*Manager, string, int) {
	t.Helper()
	p := acmetest.FreePort(t)
	cfg.Range = []portspec.Range{{Lo: p, Hi: p}}
	m := newManager(t, cfg)
	s := &fakeSession{id: ident, echo: echo, ann: tunnel.Announcement{Expose: []tunnel.Expose{{Name: "e", Protocol: "tcp", RemotePort: p}}}}
	if st, _ := m.Apply(context.Background(), "s", s); st[0].Error != "" {
		t.Fatal(st[0].Error)
	}
	return m, net.JoinHostPort("127.0.0.1", fmtInt(p)), p
}

// TestTCPResetAndSilentVisitor: a visitor that resets its connection
// mid-exchange and one that connects and never sends a byte both leave
// nothing behind: the silent one is closed after tcp idle, the port's
// open count returns to zero and no goroutine is left.
func TestTCPResetAndSilentVisitor(t *testing.T) {
	echo := echotest.TCP(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	m, addr, _ := openEcho(t, Config{TCPIdle: 300 * time.Millisecond}, tunnel.Identity{AnyTCPPort: true}, echo)
	defer m.Close()

	reset, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	reset.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := reset.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(reset, make([]byte, 3)); err != nil {
		t.Fatalf("echo before the reset: %v", err)
	}
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	poll.Until(t, 5*time.Second, "both connections open", func() bool { return m.Snapshot()[0].Open == 2 })

	reset.(*net.TCPConn).SetLinger(0) // Close sends RST
	reset.Close()
	silent.SetDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	if n, err := silent.Read(make([]byte, 1)); err == nil {
		t.Fatalf("the silent visitor read %d bytes, want its connection closed", n)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the silent visitor was closed after %v, want about the 300ms tcp idle", d)
	}
	poll.Until(t, 5*time.Second, "no connection open after the reset and the idle close", func() bool { return m.Snapshot()[0].Open == 0 })
}

// countingUsage is a Counter that records what it was given and admits
// until refuse is set, or until budget bytes (when set) were charged.
type countingUsage struct {
	refuse      atomic.Bool
	budget      int64
	in, out     atomic.Int64
	conns, cuts atomic.Int64
	names       chan string
}

func (c *countingUsage) counter(tokenID, orgID, name string) Counter {
	c.names <- tokenID + "/" + orgID + "/" + name
	return c
}
func (c *countingUsage) Allow() bool { return !c.refuse.Load() && !c.spent() }
func (c *countingUsage) spent() bool {
	return c.budget > 0 && c.in.Load()+c.out.Load() >= c.budget
}
func (c *countingUsage) Charge(in, out int64) bool {
	if c.spent() {
		return false
	}
	c.in.Add(in)
	c.out.Add(out)
	return true
}
func (c *countingUsage) Cut() { c.cuts.Add(1) }
func (c *countingUsage) Record(in, out int64) {
	c.in.Add(in)
	c.out.Add(out)
	c.conns.Add(1)
}

// TestUDPQuotaCut: a UDP flow is charged per datagram and ended once
// the quota is reached; the visitor's next datagram opens no flow.
func TestUDPQuotaCut(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const budget, size = 4000, 1000
	u := &countingUsage{names: make(chan string, 8), budget: budget}
	m, c, dst := openUDPEcho(t, Config{Usage: u.counter})
	defer m.Close()
	defer c.Close()
	buf := make([]byte, 2*size)
	// Each echoed datagram charges its size twice: two fit the quota.
	for i := range 2 {
		if _, err := c.WriteToUDP(make([]byte, size), dst); err != nil {
			t.Fatal(err)
		}
		if n, _, err := c.ReadFromUDP(buf); err != nil || n != size {
			t.Fatalf("echo %d = %d bytes, %v; want %d", i, n, err, size)
		}
	}
	if _, err := c.WriteToUDP(make([]byte, size), dst); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 5*time.Second, "the flow cut at the quota and recorded", func() bool {
		return u.cuts.Load() == 1 && u.conns.Load() == 1 && m.Snapshot()[0].Open == 0
	})
	if got := u.in.Load() + u.out.Load(); got != budget {
		t.Errorf("%d bytes charged, want the %d quota", got, budget)
	}
}

// TestTCPQuotaCut: a connection opened under a byte quota is charged as
// its bytes flow and closed once the quota is reached, within a copy
// chunk, its cut counted (#38 item 13, P4-4).
func TestTCPQuotaCut(t *testing.T) {
	echo := echotest.TCP(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const budget, chunk = 256 << 10, 32 << 10
	u := &countingUsage{names: make(chan string, 8), budget: budget}
	m, addr, _ := openEcho(t, Config{Usage: u.counter}, tunnel.Identity{OrgID: "o1", TokenID: "tok1", AnyTCPPort: true}, echo)
	defer m.Close()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	go func() {
		// Far more than the quota; the writes fail once the port closes
		// the connection.
		for range 64 {
			if _, err := c.Write(make([]byte, chunk)); err != nil {
				return
			}
		}
	}()
	n, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the connection was not closed at the quota: %d bytes echoed until the deadline", n)
	}
	if n > budget {
		t.Errorf("%d bytes echoed, want at most the %d quota (both ways count)", n, budget)
	}
	poll.Until(t, 5*time.Second, "the cut counted and the connection recorded", func() bool {
		return u.cuts.Load() == 1 && u.conns.Load() == 1
	})
	// Each direction may have a few chunks read before the cut is seen
	// (one CI run charged the quota plus 3.8 chunks); the bound is what a
	// cut at the quota guarantees against the 4 MiB an uncut connection
	// carries here.
	if got := u.in.Load() + u.out.Load(); got < budget || got > budget+8*chunk {
		t.Errorf("%d bytes charged, want the %d quota within four chunks each way", got, budget)
	}
}

// TestTCPUsage: a TCP connection's bytes are recorded against its
// token, organization and port once it ends; a counter that refuses (a
// quota spent) closes the connection without a byte relayed.
func TestTCPUsage(t *testing.T) {
	echo := echotest.TCP(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	u := &countingUsage{names: make(chan string, 8)}
	m, addr, p := openEcho(t, Config{Usage: u.counter}, tunnel.Identity{OrgID: "o1", TokenID: "tok1", AnyTCPPort: true}, echo)
	defer m.Close()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	msg := strings.Repeat("x", 10_000)
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	if got, err := io.ReadAll(c); err != nil || len(got) != len(msg) {
		t.Fatalf("echo = %d bytes, %v; want %d", len(got), err, len(msg))
	}
	c.Close()
	if got, want := <-u.names, "tok1/o1/tcp:"+fmtInt(p); got != want {
		t.Errorf("usage counted as %q, want %q", got, want)
	}
	poll.Until(t, 5*time.Second, "the connection's bytes recorded", func() bool {
		return u.in.Load() == int64(len(msg)) && u.out.Load() == int64(len(msg))
	})

	u.refuse.Store(true)
	expectRefused(t, m, addr)
}

// expectRefused dials addr, sends a byte, and fails t unless the
// connection is closed without an answer and m counts one refusal.
func expectRefused(t *testing.T, m *Manager, addr string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write([]byte("x"))
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("refused connection read %d bytes, want closed", n)
	}
	if got := m.Snapshot()[0].Refused; got != 1 {
		t.Fatalf("Refused = %d, want 1", got)
	}
}

// TestUDPFlowBounds: a UDP port holds at most MaxUDPFlowsPerIP flows of
// one visitor address and MaxUDPFlows in all; a datagram past either
// bound is dropped and counted as a refusal while admitted flows keep
// being answered.
func TestUDPFlowBounds(t *testing.T) {
	defer goleak.VerifyNone(t)
	p := acmetest.FreePort(t)
	m := newManager(t, Config{Range: []portspec.Range{{Lo: p, Hi: p}}, MaxUDPFlows: 2, MaxUDPFlowsPerIP: 1, UDPIdle: time.Minute})
	defer m.Close()
	s := &fakeSession{id: tunnel.Identity{AnyTCPPort: true}, ann: tunnel.Announcement{Expose: []tunnel.Expose{{Name: "u", Protocol: "udp", RemotePort: p}}}}
	if st, _ := m.Apply(context.Background(), "s", s); st[0].Error != "" {
		t.Fatal(st[0].Error)
	}
	dst := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: p}
	// exchange sends ping from a fresh socket on ip and reports whether
	// the echo came back.
	exchange := func(ip net.IP, wait time.Duration) bool {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: ip})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := c.WriteToUDP([]byte("ping"), dst); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(wait))
		buf := make([]byte, 64)
		n, _, err := c.ReadFromUDP(buf)
		return err == nil && string(buf[:n]) == "ping"
	}
	steps := []struct {
		name string
		ip   net.IP
		ok   bool
	}{
		{"first flow of 127.0.0.1", net.IPv4(127, 0, 0, 1), true},
		{"second flow of 127.0.0.1 (per ip bound)", net.IPv4(127, 0, 0, 1), false},
		{"first flow of 127.0.0.2", net.IPv4(127, 0, 0, 2), true},
		{"first flow of 127.0.0.3 (port bound)", net.IPv4(127, 0, 0, 3), false},
	}
	admitted, refused := 0, 0
	for _, st := range steps {
		wait := 5 * time.Second
		if !st.ok {
			wait = 300 * time.Millisecond
		}
		if got := exchange(st.ip, wait); got != st.ok {
			t.Fatalf("%s: answered %v, want %v", st.name, got, st.ok)
		}
		if st.ok {
			admitted++
		} else {
			refused++
		}
		if snap := m.Snapshot()[0]; snap.Open != int64(admitted) || snap.Refused != int64(refused) {
			t.Fatalf("%s: snapshot open %d refused %d, want %d and %d", st.name, snap.Open, snap.Refused, admitted, refused)
		}
	}
}

// TestAllocateRangeExhausted: an entry asking for any port (remote_port
// 0) is refused with a reason once every port of the range is taken, and
// gets the port once it is free again.
func TestAllocateRangeExhausted(t *testing.T) {
	defer goleak.VerifyNone(t)
	p := acmetest.FreePort(t)
	m := newManager(t, Config{Range: []portspec.Range{{Lo: p, Hi: p}}})
	defer m.Close()
	ctx := context.Background()
	ann := tunnel.Announcement{Expose: []tunnel.Expose{{Name: "e", Protocol: "tcp"}}}
	a := &fakeSession{id: tunnel.Identity{OrgID: "o1", AnyTCPPort: true}, ann: ann}
	b := &fakeSession{id: tunnel.Identity{OrgID: "o2", AnyTCPPort: true}, ann: ann}
	if st, _ := m.Apply(ctx, "a", a); st[0].Error != "" || st[0].Port != p {
		t.Fatalf("Apply(a) = %+v, want port %d", st[0], p)
	}
	st, notices := m.Apply(ctx, "b", b)
	if st[0].Port != 0 || !strings.Contains(st[0].Error, "no free port") || len(notices) != 1 {
		t.Fatalf("Apply(b) with the range taken = %+v %q, want refused: no free port, one notice", st[0], notices)
	}
	m.Release(ctx, "a", a.id)
	if st, notices := m.Apply(ctx, "b", b); st[0].Error != "" || st[0].Port != p || len(notices) != 0 {
		t.Fatalf("Apply(b) once the port is free = %+v %q, want port %d", st[0], notices, p)
	}
}

// TestTCPBackendReset: a backend that resets the connection as soon as
// it is reached closes the visitor's connection, and nothing is left
// open behind it.
func TestTCPBackendReset(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.(*net.TCPConn).SetLinger(0)
			c.Close()
		}
	}()
	defer func() { ln.Close(); <-accepted }()
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	m, addr, _ := openEcho(t, Config{}, tunnel.Identity{AnyTCPPort: true}, ln.Addr().String())
	defer m.Close()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write([]byte("hello"))
	if n, err := io.Copy(io.Discard, c); n != 0 || isTimeout(err) {
		t.Fatalf("visitor of a resetting backend read %d bytes, %v; want its connection closed", n, err)
	}
	poll.Until(t, 5*time.Second, "no connection open after the backend's reset", func() bool { return m.Snapshot()[0].Open == 0 })
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// dialFrom connects to addr from the loopback address src (any of
// 127.0.0.0/8 on Linux), so a test can be two visitors.
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, src, err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	return c
}

// echoes reports whether c is relayed: a byte written comes back.
func echoes(c net.Conn) bool {
	if _, err := c.Write([]byte("x")); err != nil {
		return false
	}
	_, err := io.ReadFull(c, make([]byte, 1))
	return err == nil
}

// TestTCPPerAddressCap (#38, F7): one visitor address holds at most
// port_max_connections_per_ip connections of a TCP port, a quarter of
// max_tcp_connections unless set, so the probe's flood (as many idle
// connections from one address as the port holds) no longer closes the
// port: the rest are closed at accept, and another address still
// connects and is served.
func TestTCPPerAddressCap(t *testing.T) {
	echo := echotest.TCP(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	tests := []struct {
		name    string
		cfg     Config
		perAddr int
	}{
		{"default a quarter", Config{MaxTCPConnections: 8}, 2},
		{"set", Config{MaxTCPConnections: 8, MaxTCPConnectionsPerIP: 3}, 3},
		{"small port", Config{MaxTCPConnections: 3}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, addr, _ := openEcho(t, tt.cfg, tunnel.Identity{AnyTCPPort: true}, echo)
			defer m.Close()
			flood := make([]net.Conn, tt.cfg.MaxTCPConnections)
			for i := range flood {
				flood[i] = dialFrom(t, "127.0.0.1", addr)
			}
			refused := int64(len(flood) - tt.perAddr)
			poll.Until(t, 5*time.Second, "the flood settled", func() bool {
				s := m.Snapshot()[0]
				return s.Open == int64(tt.perAddr) && s.Refused == refused
			})
			served := 0
			for _, c := range flood {
				if echoes(c) {
					served++
				}
			}
			if served != tt.perAddr {
				t.Errorf("%d connections from one address served, want %d", served, tt.perAddr)
			}
			other := dialFrom(t, "127.0.0.2", addr)
			if !echoes(other) {
				t.Fatalf("another address was not served while the first held its share")
			}
			if s := m.Snapshot()[0]; s.Open != int64(tt.perAddr)+1 || s.Refused != refused {
				t.Errorf("snapshot %+v, want %d open and %d refused", s, tt.perAddr+1, refused)
			}
		})
	}
}

func TestVisitorKey(t *testing.T) {
	for _, tc := range []struct{ a, b string }{
		{"2001:db8::1", "2001:db8::ffff:1"},
		{"2001:db8:0:0:1::", "2001:db8::2"},
		{"::ffff:192.0.2.1", "192.0.2.1"},
	} {
		if ka, kb := visitorKey(netip.MustParseAddr(tc.a)), visitorKey(netip.MustParseAddr(tc.b)); ka != kb {
			t.Errorf("visitorKey(%s) = %s, visitorKey(%s) = %s, want the same visitor", tc.a, ka, tc.b, kb)
		}
	}
	for _, tc := range []struct{ a, b string }{
		{"2001:db8::1", "2001:db8:0:1::1"},
		{"192.0.2.1", "192.0.2.2"},
	} {
		if ka, kb := visitorKey(netip.MustParseAddr(tc.a)), visitorKey(netip.MustParseAddr(tc.b)); ka == kb {
			t.Errorf("visitorKey(%s) = visitorKey(%s) = %s, want two visitors", tc.a, tc.b, ka)
		}
	}
}

// TestTCPFirstByte (#38, F7): a visitor that connects and sends nothing
// is closed after port_first_byte_timeout, long before the idle timeout,
// while one that has spoken keeps its connection past that time.
func TestTCPFirstByte(t *testing.T) {
	echo := echotest.TCP(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	m, addr, _ := openEcho(t, Config{TCPIdle: time.Hour, TCPFirstByte: 300 * time.Millisecond}, tunnel.Identity{AnyTCPPort: true}, echo)
	defer m.Close()
	talker := dialFrom(t, "127.0.0.1", addr)
	if !echoes(talker) {
		t.Fatal("the talking visitor was not served")
	}
	silent := dialFrom(t, "127.0.0.2", addr)
	start := time.Now()
	if n, err := silent.Read(make([]byte, 1)); err == nil {
		t.Fatalf("the silent visitor read %d bytes, want its connection closed", n)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the silent visitor was closed after %v, want about the 300ms first-byte timeout", d)
	}
	// The silent one opened after the talker's first byte, so the talker
	// has now outlived the first-byte timeout: it is still served.
	if !echoes(talker) {
		t.Fatal("a visitor that had spoken was closed by the first-byte timeout")
	}
	poll.Until(t, 5*time.Second, "the silent connection released", func() bool { return m.Snapshot()[0].Open == 1 })
}

// TestPortOwnership (#38, F1): ports have owners as hostnames do. An
// organization with ports opens only its own, and another organization's
// port is refused even while nobody holds it, so the probe's takeover (a
// second organization's client taking the port while the owner
// reconnects) no longer happens; allocation draws only from the caller's
// own ranges; the default organization without ports keeps first come on
// the ports nobody owns; any other organization without ports opens
// none.
func TestPortOwnership(t *testing.T) {
	defer goleak.VerifyNone(t)
	pa, pb, free := acmetest.FreePort(t), acmetest.FreePort(t), acmetest.FreePort(t)
	rng := []portspec.Range{{Lo: pa, Hi: pa}, {Lo: pb, Hi: pb}, {Lo: free, Hi: free}}
	m := newManager(t, Config{Range: rng})
	defer m.Close()
	m.SetOwnership(t.Context(), Ownership{DefaultOrg: "org_def", Ranges: map[string][]portspec.Range{
		"org_a": {{Lo: pa, Hi: pa}},
		"org_b": {{Lo: pb, Hi: pb}},
	}})
	ctx := t.Context()
	// Every token allows every port of the range: ownership alone decides.
	session := func(org string, port int) *fakeSession {
		return &fakeSession{id: tunnel.Identity{OrgID: org, AllowTCPPorts: rng}, ann: tunnel.Announcement{Expose: []tunnel.Expose{{Name: "e", Protocol: "tcp", RemotePort: port}}}}
	}
	apply := func(id string, s *fakeSession) tunnel.ExposeStatus {
		t.Helper()
		st, _ := m.Apply(ctx, id, s)
		if len(st) != 1 {
			t.Fatalf("Apply(%s) = %v, want one status", id, st)
		}
		return st[0]
	}
	tests := []struct {
		name, org string
		port      int
		want      string // substring of the refusal; "" opens
	}{
		{"owner", "org_a", pa, ""},
		{"other org, held", "org_b", pa, "owned by another organization"},
		{"other org's own", "org_b", pb, ""},
		{"org with ports, unowned port", "org_b", free, "not among the ports of this client's organization"},
		{"org without ports", "org_c", free, "owns no ports"},
		{"org without ports, owned port", "org_c", pa, "owned by another organization"},
		{"default org, owned port", "org_def", pb, "owned by another organization"},
		{"default org, unowned port", "org_def", free, ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := apply(fmt.Sprint("s", i), session(tt.org, tt.port))
			if tt.want == "" && (st.Error != "" || st.Port != tt.port) || tt.want != "" && !strings.Contains(st.Error, tt.want) {
				t.Errorf("Apply(%s asks %d) = %+v, want %q", tt.org, tt.port, st, tt.want)
			}
		})
	}
	for i := range tests {
		m.Release(ctx, fmt.Sprint("s", i), tunnel.Identity{})
	}

	// The probe: org_a's client goes away (a deploy, a blip); org_b's
	// client with a token for org_a's port asks for it while it is free,
	// and is refused; org_a's client comes back and gets it.
	if st := apply("a1", session("org_a", pa)); st.Error != "" {
		t.Fatalf("org_a opens its port: %+v", st)
	}
	m.Release(ctx, "a1", tunnel.Identity{OrgID: "org_a"})
	if st := apply("b1", session("org_b", pa)); !strings.Contains(st.Error, "owned by another organization") {
		t.Fatalf("org_b asks org_a's free port = %+v, want refused", st)
	}
	if st := apply("a2", session("org_a", pa)); st.Error != "" || st.Port != pa {
		t.Fatalf("org_a's client back = %+v, want its port", st)
	}
	snap := m.Snapshot()
	if len(snap) != 1 || snap[0].OrgID != "org_a" || snap[0].OwnerOrgID != "org_a" {
		t.Errorf("Snapshot = %+v, want org_a's port owned by org_a", snap)
	}

	// Allocation draws only from the caller's own ranges.
	if st := apply("b2", session("org_b", 0)); st.Error != "" || st.Port != pb {
		t.Errorf("org_b allocates = %+v, want its port %d", st, pb)
	}
	if st := apply("a3", session("org_a", 0)); !strings.Contains(st.Error, "no free port") {
		t.Errorf("org_a allocates with its one port held = %+v, want no free port", st)
	}
	if st := apply("c1", session("org_c", 0)); !strings.Contains(st.Error, "no free port") {
		t.Errorf("org_c (no ports) allocates = %+v, want no free port", st)
	}

	// The default organization holds the free port; it is then assigned
	// to org_b: the port closes at once, and the default organization's
	// next announcement is refused it while org_b's gets it.
	def := session("org_def", free)
	if st := apply("d1", def); st.Error != "" {
		t.Fatalf("default org opens the free port: %+v", st)
	}
	m.SetOwnership(ctx, Ownership{DefaultOrg: "org_def", Ranges: map[string][]portspec.Range{
		"org_a": {{Lo: pa, Hi: pa}},
		"org_b": {{Lo: pb, Hi: pb}, {Lo: free, Hi: free}},
	}})
	if _, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", fmtInt(free))); err == nil {
		t.Error("the port still listens after its ownership moved to another organization")
	}
	if st := apply("d1", def); !strings.Contains(st.Error, "owned by another organization") {
		t.Errorf("default org's next announcement = %+v, want refused", st)
	}
	if st := apply("b3", session("org_b", free)); st.Error != "" {
		t.Errorf("org_b asks its new port = %+v, want it", st)
	}
	for _, id := range []string{"a2", "b1", "b2", "a3", "c1", "d1", "b3"} {
		m.Release(ctx, id, tunnel.Identity{})
	}
}
