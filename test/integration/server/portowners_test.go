package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/aperio-dev/aperio/internal/server/servertest"
	"github.com/aperio-dev/aperio/store"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/edge/acme/acmetest"
	"github.com/aperio-dev/aperio/internal/testkit/echotest"
	"github.com/aperio-dev/aperio/store/storetest"
	"github.com/aperio-dev/aperio/tunnel"
)

// apiOK calls the admin API with the master token and decodes a 2xx
// answer into out (when not nil).
func apiOK(t *testing.T, visitor *http.Client, s *servertest.Server, method, path string, body, out any) {
	t.Helper()
	status, b := servertest.AdminCall(t, visitor, s, method, path, body)
	if status/100 != 2 {
		t.Fatalf("%s %s = %d %s, want 2xx", method, path, status, b)
	}
	if out != nil {
		if err := json.Unmarshal([]byte(b), out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, b)
		}
	}
}

// portClient is a tunnel client exposing one TCP entry "db" on port,
// relayed to its own echo backend that first writes label. Its
// announcement also carries an entry named after marker (on a port the
// server refuses), so that a test bumping marker learns, from the next
// statuses, the answer to an announcement made after that point.
type portClient struct {
	statuses chan []tunnel.ExposeStatus
	marker   atomic.Int64
	stop     func()
}

func startPortClient(t *testing.T, s *servertest.Server, token, label string, port int) *portClient {
	t.Helper()
	backend := echotest.TCP(t)
	pc := &portClient{statuses: make(chan []tunnel.ExposeStatus, 64)}
	c, err := tunnel.NewClient(tunnel.ClientConfig{
		URL: s.URL, Token: token, Forwarder: servertest.OKForwarder{}, RawForwarder: labelForwarder{label: label, addr: backend},
		Announce: func() tunnel.Announcement {
			return tunnel.Announcement{Name: label, InstanceID: "i-" + label, Expose: []tunnel.Expose{
				{Name: "db", Protocol: tunnel.ExposeTCP, RemotePort: port},
				{Name: fmt.Sprint("m", pc.marker.Load()), Protocol: tunnel.ExposeTCP, RemotePort: 1},
			}}
		},
		Logger: servertest.Logger(),
		Jitter: func() float64 { return 0 },
		OnExposed: func(st []tunnel.ExposeStatus) {
			select {
			case pc.statuses <- st:
			default: // the test reads the latest it needs
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	pc.stop = sync.OnceFunc(func() { cancel(); <-done })
	t.Cleanup(pc.stop)
	return pc
}

// waitStatus waits for statuses whose "db" entry satisfies ok, and
// returns that entry.
func (pc *portClient) waitStatus(t *testing.T, what string, ok func(tunnel.ExposeStatus) bool) tunnel.ExposeStatus {
	t.Helper()
	return pc.waitMarked(t, what, "", ok)
}

// waitMarked is waitStatus for statuses that also answer the marker
// entry named marker ("" for any).
func (pc *portClient) waitMarked(t *testing.T, what, marker string, ok func(tunnel.ExposeStatus) bool) tunnel.ExposeStatus {
	t.Helper()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	var last []tunnel.ExposeStatus
	for {
		select {
		case st := <-pc.statuses:
			last = st
			if len(st) == 2 && st[0].Name == "db" && (marker == "" || st[1].Name == marker) && ok(st[0]) {
				return st[0]
			}
		case <-timer.C:
			t.Fatalf("no expose status %s within 10s; last %+v", what, last)
		}
	}
}

// labelForwarder relays a raw TCP stream to addr after writing label, so
// a visitor learns whose backend it reached.
type labelForwarder struct{ label, addr string }

func (f labelForwarder) ForwardRaw(ctx context.Context, h tunnel.RawHeader) (io.ReadWriteCloser, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", f.addr)
	if err != nil {
		return nil, err
	}
	return labelConn{Conn: c, label: []byte(f.label + "\n")}, nil
}

// labelConn reads label first, then the backend.
type labelConn struct {
	net.Conn
	label []byte
}

func (c labelConn) Read(p []byte) (int, error) {
	return io.MultiReader(strings.NewReader(string(c.label)), c.Conn).Read(p)
}

// waitPortClosed waits until nothing accepts on port.
func waitPortClosed(t *testing.T, port int, when string) {
	t.Helper()
	servertest.Poll(t, 10*time.Second, func() (bool, string) {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err != nil {
			return true, ""
		}
		c.Close()
		return false, fmt.Sprintf("port %d still accepts %s", port, when)
	})
}

// whoAnswers connects to port and returns the first line: the label of
// the backend a visitor reaches.
func whoAnswers(t *testing.T, port int) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 5*time.Second)
	if err != nil {
		return "dial: " + err.Error()
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "hello\n"); err != nil {
		return "write: " + err.Error()
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if n == 0 {
		return fmt.Sprintf("read: %v", err)
	}
	line, _, _ := strings.Cut(string(buf[:n]), "\n")
	return line
}

// TestPortTakeoverRefused (#38, F1) replays the probe through a real
// server and real tunnel clients. Organization b holds a token naming a
// port that then became organization a's (b's ports were cleared and a
// was given the port). While a's client is connected, b's client is
// refused the port; when a's client goes away (a deploy, a blip), b's
// client, asking at every heartbeat, is still refused although the port
// is free; when a's client comes back it gets its port, and visitors
// reach a's backend, never b's.
func TestPortTakeoverRefused(t *testing.T) {
	t.Parallel()
	port := acmetest.FreePort(t)
	cfg := servertest.Config(t)
	cfg.Host = "127.0.0.1"
	cfg.TCPPortRange = []string{fmt.Sprint(port)}
	cfg.Tunnel.DownThreshold = 600 * time.Millisecond // a heartbeat every 200 ms
	s := servertest.Start(t, cfg, nil, nil)
	visitor := servertest.NewVisitor(t, s)
	var a, b apitype.Org
	apiOK(t, visitor, s, "POST", "/orgs", map[string]any{"name": "a"}, &a)
	apiOK(t, visitor, s, "POST", "/orgs", map[string]any{"name": "b"}, &b)
	spec := []string{fmt.Sprint(port)}
	// b's token for the port, minted while b owned it.
	apiOK(t, visitor, s, "PUT", "/orgs/"+b.ID+"/ports", map[string]any{"ports": spec}, nil)
	var tb, ta struct{ Token string }
	apiOK(t, visitor, s, "POST", "/tokens", map[string]any{"name": "b-ports", "org_id": b.ID, "allow_tcp_ports": spec}, &tb)
	apiOK(t, visitor, s, "PUT", "/orgs/"+b.ID+"/ports", map[string]any{"ports": []string{}}, nil)
	apiOK(t, visitor, s, "PUT", "/orgs/"+a.ID+"/ports", map[string]any{"ports": spec}, nil)
	apiOK(t, visitor, s, "POST", "/tokens", map[string]any{"name": "a-ports", "org_id": a.ID, "allow_tcp_ports": spec}, &ta)
	// b may not mint one now.
	if status, body := servertest.AdminCall(t, visitor, s, "POST", "/tokens", map[string]any{"name": "b2", "org_id": b.ID, "allow_tcp_ports": spec}); status != http.StatusForbidden {
		t.Errorf("minting b a token for a's port = %d %s, want 403", status, body)
	}

	ca := startPortClient(t, s, ta.Token, "A", port)
	ca.waitStatus(t, "a open", func(st tunnel.ExposeStatus) bool { return st.Port == port && st.Error == "" })
	if who := whoAnswers(t, port); who != "A" {
		t.Fatalf("a visitor of port %d reaches %q, want A", port, who)
	}
	cb := startPortClient(t, s, tb.Token, "B", port)
	cb.waitStatus(t, "b refused", func(st tunnel.ExposeStatus) bool { return st.Error != "" && st.Port == 0 })

	// a's client goes away; b's keeps asking and is refused while the
	// port is free.
	ca.stop()
	waitPortClosed(t, port, "after a's client left")
	for range 3 { // three more announcements of b, made after a left
		m := cb.marker.Add(1)
		st := cb.waitMarked(t, "of b after a left", fmt.Sprint("m", m), func(tunnel.ExposeStatus) bool { return true })
		if !strings.Contains(st.Error, "owned by another organization") || st.Port != 0 {
			t.Fatalf("b's client asking for a's free port = %+v, want refused as another organization's", st)
		}
	}
	var listed []apitype.PortInfo
	servertest.NewAdminClient(t, s).GetJSON(t, "/ports", &listed)
	if len(listed) != 0 {
		t.Fatalf("GET /ports while a is away = %+v, want none open", listed)
	}

	ca = startPortClient(t, s, ta.Token, "A", port)
	ca.waitStatus(t, "a open again", func(st tunnel.ExposeStatus) bool { return st.Port == port && st.Error == "" })
	for range 3 {
		if who := whoAnswers(t, port); who != "A" {
			t.Fatalf("a visitor of port %d reaches %q after a came back, want A", port, who)
		}
	}
	servertest.NewAdminClient(t, s).GetJSON(t, "/ports", &listed)
	if len(listed) != 1 || listed[0].OrgID != a.ID || listed[0].OwnerOrgID != a.ID {
		t.Errorf("GET /ports = %+v, want the port held and owned by a", listed)
	}
}

// TestPortOwnershipAcrossServers (#38, F1): two servers on one
// PostgreSQL database. The default organization's client holds a port
// nobody owns on server B; the master token gives that port to another
// organization through server A's API; B learns it through the change
// feed, closes the port at once and refuses it to the client from then
// on.
func TestPortOwnershipAcrossServers(t *testing.T) {
	t.Parallel()
	dsn := storetest.PostgresDSN(t) // skips, naming the variable, without PostgreSQL
	port := acmetest.FreePort(t)
	cfg := servertest.Config(t)
	cfg.Host = "127.0.0.1"
	cfg.Store.DatabaseURL = dsn
	cfg.TCPPortRange = []string{fmt.Sprint(port)}
	a := servertest.StartOn(t, cfg, servertest.OpenStore(t, store.Config{DatabaseURL: dsn}))
	sb := servertest.Start(t, cfg, nil, nil)

	c := startPortClient(t, sb, servertest.Token, "DEFAULT", port)
	c.waitStatus(t, "open on B", func(st tunnel.ExposeStatus) bool { return st.Port == port && st.Error == "" })
	if who := whoAnswers(t, port); who != "DEFAULT" {
		t.Fatalf("a visitor reaches %q, want DEFAULT", who)
	}

	visitor := servertest.NewVisitor(t, a)
	var other apitype.Org
	apiOK(t, visitor, a, "POST", "/orgs", map[string]any{"name": "owner"}, &other)
	start := time.Now()
	apiOK(t, visitor, a, "PUT", "/orgs/"+other.ID+"/ports", map[string]any{"ports": []string{fmt.Sprint(port)}}, nil)
	waitPortClosed(t, port, "on server B after A's PUT")
	t.Logf("PUT on A closed the port on B within %v", time.Since(start).Round(time.Millisecond))
	c.waitStatus(t, "refused on B", func(st tunnel.ExposeStatus) bool { return strings.Contains(st.Error, "owned by another organization") })
	var listed []apitype.PortInfo
	servertest.NewAdminClient(t, sb).GetJSON(t, "/ports", &listed)
	if len(listed) != 0 {
		t.Errorf("server B's GET /ports = %+v, want none", listed)
	}
}
