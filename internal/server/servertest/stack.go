package servertest

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/control/admin"
	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/server"
)

// Stack is one gateway and one agent publishing a service as AppHost.
type Stack struct {
	Server *Server
	Agent  *Agent
	// Visitor is an HTTP/1.1 client of Server (see NewVisitor).
	Visitor *http.Client
}

// StartStack starts a backend serving h, a gateway (with cfg, if not nil,
// applied to its configuration) and an agent publishing the backend as
// AppHost, and waits until AppHost is routed.
func StartStack(t testing.TB, h http.Handler, cfg func(*server.Config)) *Stack {
	t.Helper()
	return StartStackFor(t, Service(Backend(t, h).URL), cfg, false)
}

// StartStackFor starts a gateway (HTTPS with a fresh self-signed
// certificate when tlsOn is set) and an agent publishing svc, and waits
// until svc's hostnames are routed.
func StartStackFor(t testing.TB, svc config.Service, cfg func(*server.Config), tlsOn bool) *Stack {
	t.Helper()
	return StartStackWith(t, svc, cfg, tlsOn, nil)
}

// StartStackWith is StartStackFor with agentCfg, if not nil, applied to
// the agent's configuration.
func StartStackWith(t testing.TB, svc config.Service, cfg func(*server.Config), tlsOn bool, agentCfg func(*config.Client)) *Stack {
	t.Helper()
	scfg := Config(t)
	var roots *x509.CertPool
	if tlsOn {
		scfg.TLSCert, scfg.TLSKey, roots = WriteCert(t)
	}
	if cfg != nil {
		cfg(&scfg)
	}
	srv := Start(t, scfg, nil, roots)
	ac := AgentConfig(srv, svc)
	if agentCfg != nil {
		agentCfg(&ac)
	}
	ag := StartAgent(t, srv, ac)
	visitor := NewVisitor(t, srv)
	// connected_clients counts the sessions whose first announcement the
	// registry applied (tunnel.Session.Routed), and the router publishes
	// its table within that: at 1, svc's hostnames are routed.
	WaitClients(t, visitor, srv, 1)
	return &Stack{Server: srv, Agent: ag, Visitor: visitor}
}

// NewVisitor returns an HTTP/1.1 client for s, trusting its certificate,
// whose idle connections are closed at cleanup.
func NewVisitor(t testing.TB, s *Server) *http.Client {
	t.Helper()
	tr := &http.Transport{Proxy: nil, TLSClientConfig: s.TLSClientConfig()}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// NewRequest builds a visitor request for path on s with the given Host.
func NewRequest(t testing.TB, ctx context.Context, s *Server, method, host, path string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, s.URL+path, body)
	if err != nil {
		t.Fatalf("http.NewRequest(%s %s) = %v", method, path, err)
	}
	req.Host = host
	return req
}

// Do sends req and returns the response with its body read; it fails the
// test on a transport error.
func Do(t testing.TB, c *http.Client, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s (Host %s): %v", req.Method, req.URL, req.Host, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s (Host %s): read body: %v", req.Method, req.URL, req.Host, err)
	}
	return resp, string(b)
}

// Fetch sends req and returns the status and body; unlike Do it may be
// called from any goroutine.
func Fetch(c *http.Client, req *http.Request) (int, string, error) {
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// Get sends GET path with Host host, bounded by 30 s, and returns status
// and body.
func Get(t testing.TB, c *http.Client, s *Server, host, path string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	resp, body := Do(t, c, NewRequest(t, ctx, s, http.MethodGet, host, path, nil))
	return resp.StatusCode, body
}

// AdminCall sends an admin API request (path below /aperio/api, body
// sent as JSON unless nil) with the master token Token and returns the
// status and body.
func AdminCall(t testing.TB, c *http.Client, s *Server, method, path string, body any) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req := NewRequest(t, t.Context(), s, method, "admin.localhost", "/aperio/api"+path, rd)
	req.Header.Set("Authorization", "Bearer "+Token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, b := Do(t, c, req)
	return resp.StatusCode, b
}

// AdminClient calls the admin API of a server at 127.0.0.1 (paths below
// apitype.Prefix) with the master token Token, over its own visitor. Its
// methods may be called from the test's goroutine only (they fail the
// test).
type AdminClient struct {
	c *http.Client
	s *Server
}

// NewAdminClient returns an AdminClient for s.
func NewAdminClient(t testing.TB, s *Server) AdminClient {
	return AdminClient{c: NewVisitor(t, s), s: s}
}

// Get sends GET path and returns the status and body.
func (a AdminClient) Get(t testing.TB, path string) (int, string) {
	t.Helper()
	req := NewRequest(t, t.Context(), a.s, http.MethodGet, "127.0.0.1", apitype.Prefix+path, nil)
	req.Header.Set("Authorization", "Bearer "+Token)
	resp, body := Do(t, a.c, req)
	return resp.StatusCode, body
}

// GetJSON sends GET path and decodes its body into out; it fails the test
// unless the answer is 200 with JSON that fits out.
func (a AdminClient) GetJSON(t testing.TB, path string, out any) {
	t.Helper()
	status, body := a.Get(t, path)
	if status != http.StatusOK {
		t.Fatalf("GET %s = %d %s, want 200", path, status, body)
	}
	if err := json.Unmarshal([]byte(body), out); err != nil {
		t.Fatalf("GET %s: %v in %s", path, err, body)
	}
}

// ListClients reads GET /aperio/api/clients on s with the master token,
// over a fresh visitor, and fails the test unless it answers 200 with a
// list of clients.
func ListClients(t testing.TB, s *Server) []admin.ClientInfo {
	t.Helper()
	req := NewRequest(t, t.Context(), s, "GET", "admin.localhost", "/aperio/api/clients", nil)
	req.Header.Set("Authorization", "Bearer "+Token)
	resp, body := Do(t, NewVisitor(t, s), req)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /clients = %d %s", resp.StatusCode, body)
	}
	var cs []admin.ClientInfo
	if err := json.Unmarshal([]byte(body), &cs); err != nil {
		t.Fatalf("GET /clients body %q: %v", body, err)
	}
	return cs
}

// HealthReport is the body of /aperio/health.
type HealthReport struct {
	Status  string `json:"status"`
	Version string `json:"version"`
	// ConnectedClients counts the sessions whose hostnames are routed.
	ConnectedClients int   `json:"connected_clients"`
	UptimeSeconds    int64 `json:"uptime_seconds"`
}

// Health fetches /aperio/health; it fails the test unless the answer is
// 200 and a report.
func Health(t testing.TB, c *http.Client, s *Server) HealthReport {
	t.Helper()
	status, body := Get(t, c, s, "aperio.internal", "/aperio/health")
	if status != http.StatusOK {
		t.Fatalf("GET /aperio/health = %d %q, want 200", status, body)
	}
	var h HealthReport
	if err := json.Unmarshal([]byte(body), &h); err != nil {
		t.Fatalf("GET /aperio/health body %q: %v", body, err)
	}
	return h
}

// WaitClients polls /aperio/health until exactly n clients are connected
// (their hostnames routed), up to WaitFor.
func WaitClients(t testing.TB, c *http.Client, s *Server, n int) {
	t.Helper()
	Poll(t, WaitFor, func() (bool, string) {
		got := Health(t, c, s).ConnectedClients
		return got == n, fmt.Sprintf("/aperio/health connected_clients = %d, want %d", got, n)
	})
}
