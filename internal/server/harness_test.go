package server_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/agent"
	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/server"
	"github.com/aperio-dev/aperio/internal/server/servertest"
	"github.com/aperio-dev/aperio/tunnel"
	"github.com/gorilla/websocket"
)

// The harness runs the whole data path in one process (package
// servertest): a gateway serving real TCP on 127.0.0.1:0 (the visitor
// path is what these tests are about), agents holding tunnels to it, and
// httptest backends behind the agents. The names below are this package's
// spelling of servertest's, kept so that its tests read as they did.
//
// Whole-stack tests call t.Parallel(): each starts its own servers, agents,
// backends and store (its own SQLite file or PostgreSQL database) on
// ports of 127.0.0.1:0, and spends most of its time waiting on the
// network, so running them side by side halves the package's time (376 s
// to about 200 s with -race). A test that calls t.Setenv or changes
// something process-wide does not call it; synctest tests need not.

// TestMain ends the run with servertest's goroutine leak check.
func TestMain(m *testing.M) { servertest.Main(m, nil) }

const (
	testToken    = servertest.Token
	appHost      = servertest.AppHost
	waitFor      = servertest.WaitFor
	metricsToken = servertest.MetricsToken
)

// testLogger shows every component's logs under -v and discards them
// otherwise.
func testLogger() *slog.Logger { return servertest.Logger() }

// serverConfig returns a server configuration for tests: the contract's
// defaults, the test token, a port the kernel picks.
func serverConfig(t testing.TB) server.Config {
	t.Helper()
	return servertest.Config(t)
}

// testServer is a running gateway.
type testServer struct {
	gw   *server.Gateway
	addr string // host:port of the listener
	url  string // http:// or https:// and addr
	// roots trusts the server's certificate; nil for plain HTTP.
	roots *x509.CertPool
	// stop cancels Serve and returns its result. It is idempotent.
	stop func() error
}

// fromKit returns s as this package's testServer.
func fromKit(s *servertest.Server) *testServer {
	return &testServer{gw: s.Gateway, addr: s.Addr, url: s.URL, roots: s.Roots, stop: s.Stop}
}

// kit returns s as servertest's Server, for its helpers (which do not
// stop it).
func (s *testServer) kit() *servertest.Server {
	return &servertest.Server{Gateway: s.gw, Addr: s.addr, URL: s.url, Roots: s.roots}
}

// startServer serves cfg on ln, or on a fresh 127.0.0.1:0 listener when ln
// is nil. roots is the pool trusting cfg's certificate when TLS is on.
func startServer(t testing.TB, cfg server.Config, ln net.Listener, roots *x509.CertPool) *testServer {
	t.Helper()
	return fromKit(servertest.Start(t, cfg, ln, roots))
}

// startServerWith is startServer with the gateway's options given.
func startServerWith(t testing.TB, cfg server.Config, ln net.Listener, roots *x509.CertPool, opts server.Options) *testServer {
	t.Helper()
	return fromKit(servertest.StartWith(t, cfg, ln, roots, opts))
}

// tlsClientConfig returns a client configuration trusting s, or nil for a
// plain server.
func (s *testServer) tlsClientConfig() *tls.Config { return s.kit().TLSClientConfig() }

// testAgent is a running aperio-client.
type testAgent struct {
	kit *servertest.Agent
	// stop cancels Run (the SIGTERM path) and returns its result. It is
	// idempotent.
	stop func() error
	// exited is closed once Run returned, on its own or after stop; then
	// kit.Err() is its result.
	exited <-chan struct{}
	// agent is the client itself, for its Status.
	agent *agent.Agent
}

// agentConfig returns a client configuration holding one tunnel to s and
// publishing services.
func agentConfig(s *testServer, services ...config.Service) config.Client {
	return servertest.AgentConfig(s.kit(), services...)
}

// service publishes target under appHost.
func service(target string) config.Service { return servertest.Service(target) }

// startAgent runs an agent with cfg, trusting s's certificate.
func startAgent(t testing.TB, s *testServer, cfg config.Client) *testAgent {
	t.Helper()
	a := servertest.StartAgent(t, s.kit(), cfg)
	return &testAgent{kit: a, stop: a.Stop, exited: a.Exited(), agent: a.Agent}
}

// startBackend serves h on an httptest server closed at cleanup.
func startBackend(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	return servertest.Backend(t, h)
}

// stack is one gateway and one agent publishing a service as appHost.
type stack struct {
	server  *testServer
	agent   *testAgent
	visitor *http.Client // HTTP/1.1
}

// startStack starts a backend serving h, a gateway (with cfg, if not nil,
// applied to its configuration) and an agent publishing the backend as
// appHost, and waits until appHost is routed.
func startStack(t testing.TB, h http.Handler, cfg func(*server.Config)) *stack {
	t.Helper()
	return startStackFor(t, service(startBackend(t, h).URL), cfg, false)
}

// startStackFor starts a gateway (HTTPS with a fresh self-signed
// certificate when tlsOn is set) and an agent publishing svc, and waits
// until svc's hostnames are routed.
func startStackFor(t testing.TB, svc config.Service, cfg func(*server.Config), tlsOn bool) *stack {
	t.Helper()
	return startStackWith(t, svc, cfg, tlsOn, nil)
}

// kit returns st as servertest's Stack, for its helpers; st.agent may be
// nil (a stack a test assembled from a server and a visitor).
func (st *stack) kit() *servertest.Stack {
	k := &servertest.Stack{Server: st.server.kit(), Visitor: st.visitor}
	if st.agent != nil {
		k.Agent = st.agent.kit
	}
	return k
}

// startStackWith is startStackFor with agentCfg, if not nil, applied to
// the agent's configuration.
func startStackWith(t testing.TB, svc config.Service, cfg func(*server.Config), tlsOn bool, agentCfg func(*config.Client)) *stack {
	t.Helper()
	st := servertest.StartStackWith(t, svc, cfg, tlsOn, agentCfg)
	a := st.Agent
	return &stack{
		server:  fromKit(st.Server),
		agent:   &testAgent{kit: a, stop: a.Stop, exited: a.Exited(), agent: a.Agent},
		visitor: st.Visitor,
	}
}

// newVisitor returns an HTTP/1.1 client for s whose idle connections are
// closed at cleanup.
func newVisitor(t testing.TB, s *testServer) *http.Client {
	t.Helper()
	return servertest.NewVisitor(t, s.kit())
}

// newRequest builds a visitor request for path on s with the given Host.
func newRequest(t testing.TB, ctx context.Context, s *testServer, method, host, path string, body io.Reader) *http.Request {
	t.Helper()
	return servertest.NewRequest(t, ctx, s.kit(), method, host, path, body)
}

// do sends req and returns the response with its body read.
func do(t testing.TB, c *http.Client, req *http.Request) (*http.Response, string) {
	t.Helper()
	return servertest.Do(t, c, req)
}

// fetch sends req and returns the status and body; unlike do it may be
// called from any goroutine.
func fetch(c *http.Client, req *http.Request) (int, string, error) { return servertest.Fetch(c, req) }

// get sends GET path with Host host and returns status and body.
func get(t testing.TB, c *http.Client, s *testServer, host, path string) (int, string) {
	t.Helper()
	return servertest.Get(t, c, s.kit(), host, path)
}

// adminCall sends an admin API request with the master token and returns
// the status and body.
func adminCall(t testing.TB, visitor *http.Client, s *testServer, method, path string, body any) (int, string) {
	t.Helper()
	return servertest.AdminCall(t, visitor, s.kit(), method, path, body)
}

// healthReport is the body of /aperio/health.
type healthReport = servertest.HealthReport

// health fetches /aperio/health.
func health(t testing.TB, c *http.Client, s *testServer) healthReport {
	t.Helper()
	return servertest.Health(t, c, s.kit())
}

// waitClients polls /aperio/health until exactly n clients are connected.
func waitClients(t testing.TB, c *http.Client, s *testServer, n int) {
	t.Helper()
	servertest.WaitClients(t, c, s.kit(), n)
}

// poll calls cond every 20 ms until it reports true or timeout passes, and
// then fails the test with cond's last description.
func poll(t testing.TB, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	servertest.Poll(t, timeout, cond)
}

// wait receives from ch or fails the test after timeout.
func wait[T any](t testing.TB, ch <-chan T, timeout time.Duration, what string) T {
	t.Helper()
	return servertest.Wait(t, ch, timeout, what)
}

// identityEcho is a backend that answers with what it was told about the
// visitor: the identity headers and whether Authorization reached it.
func identityEcho() http.Handler { return servertest.IdentityEcho() }

// headerEcho answers with the request headers it received as JSON, so a
// test sees exactly what reached the backend.
func headerEcho() http.Handler { return servertest.HeaderEcho() }

// wsEcho is a backend that answers a WebSocket by echoing every message
// with prefix, and sends the error that ended the connection to done
// (nil: none is sent).
func wsEcho(prefix string, done chan<- error) http.HandlerFunc {
	return servertest.WSEcho(prefix, done)
}

// getWith sends GET / to host with headers and returns the response and
// its body.
func getWith(t testing.TB, st *stack, host string, header http.Header) (*http.Response, string) {
	t.Helper()
	return servertest.GetWith(t, st.kit(), host, header)
}

// basicHeader returns a header carrying user and password as basic
// credentials.
func basicHeader(user, password string) http.Header { return servertest.BasicAuth(user, password) }

// edgeVisit sends GET path with Host host and the given headers to s and
// returns the response and, when the echo backend answered, the headers it
// saw.
func edgeVisit(t testing.TB, c *http.Client, s *testServer, host, path string, h http.Header) (*http.Response, http.Header) {
	t.Helper()
	return servertest.EdgeVisit(t, c, s.kit(), host, path, h)
}

// wsDial opens a WebSocket to path at st's server for hostname appHost,
// with ctx's deadline on the handshake and on every read and write after
// it.
func wsDial(t testing.TB, ctx context.Context, st *stack, path string) (*websocket.Conn, *http.Response) {
	t.Helper()
	return servertest.WSDial(t, ctx, st.kit(), path)
}

// wsClose sends a close frame with code and waits (up to 10 s) for the
// peer's answer; it returns the error of the final read.
func wsClose(c *websocket.Conn, code int, reason string) error {
	return servertest.WSClose(c, code, reason)
}

// auditEvents lists the audit log's entries of kind event (newest first,
// from the latest 1000) through the admin API.
func auditEvents(t testing.TB, s *testServer, event string) []map[string]any {
	t.Helper()
	return servertest.AuditEvents(t, s.kit(), event)
}

// rotate rotates the share links' signing key through the admin API,
// revoking the previous one if revoke is set.
func rotate(t testing.TB, s *testServer, revoke bool) {
	t.Helper()
	servertest.RotateShareKeys(t, s.kit(), revoke)
}

// queued returns the requests waiting in the router's queues, as /metrics
// reports them (aperio_requests_queued); s's MetricsToken must be
// metricsToken.
func queued(t testing.TB, c *http.Client, s *testServer) int {
	t.Helper()
	return servertest.Queued(t, c, s.kit())
}

// nopForwarder answers nothing: the hostile tunnels never get a request.
type nopForwarder = servertest.NopForwarder

// announcing returns an announcement of one service on hostname, from a
// client called name.
func announcing(name, hostname string) func() tunnel.Announcement {
	return servertest.Announcing(name, hostname)
}

// hellos dials s with token and announce, reconnecting at once after each
// refusal, until n sessions ended; it returns how many connected and the
// last error a session ended with.
func hellos(t testing.TB, s *testServer, token string, announce func() tunnel.Announcement, n int64) (connected int64, last error) {
	t.Helper()
	return servertest.Hellos(t, s.kit(), token, announce, n)
}

// h2cTransport returns a transport speaking HTTP/2 with prior knowledge
// over plain TCP, closed at cleanup.
func h2cTransport(t testing.TB) *http.Transport { return servertest.H2CTransport(t) }

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a logger.
type syncBuffer struct{ servertest.SyncBuffer }

// lines decodes the JSON lines written so far.
func (s *syncBuffer) lines(t testing.TB) []map[string]any {
	t.Helper()
	return s.Lines(t)
}

// scrapeMetrics fetches /metrics with token.
func scrapeMetrics(t testing.TB, c *http.Client, s *testServer, token string) string {
	t.Helper()
	return servertest.ScrapeMetrics(t, c, s.kit(), token)
}

// okForwarder answers every forwarded request 200 "http up".
type okForwarder = servertest.OKForwarder

// adminClient calls the admin API of a test server with the master token.
type adminClient struct{ servertest.AdminClient }

func newAdminClient(t testing.TB, srv *testServer) adminClient {
	return adminClient{servertest.NewAdminClient(t, srv.kit())}
}

func (a adminClient) get(t testing.TB, path string) (int, string) {
	t.Helper()
	return a.Get(t, path)
}

func (a adminClient) getJSON(t testing.TB, path string, out any) {
	t.Helper()
	a.GetJSON(t, path, out)
}
