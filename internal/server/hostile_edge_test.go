package server_test

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/pires/go-proxyproto"

	"github.com/aperio-dev/aperio/internal/server"
)

func wantSeen(t testing.TB, seen http.Header, key, want string) {
	t.Helper()
	if seen == nil {
		t.Fatalf("the backend did not answer; want it to see %s = %q", key, want)
	}
	if got := strings.Join(seen[http.CanonicalHeaderKey(key)], ","); got != want {
		t.Errorf("backend saw %s = %q, want %q", key, got, want)
	}
}

// trustLoopback makes the harness's own connections (127.0.0.1) a
// trusted proxy, so a test can speak as one with X-Forwarded-For.
func trustLoopback(c *server.Config) { c.TrustedProxies = []string{"127.0.0.1/32"} }

// trustOthers trusts a range the harness never connects from.
func trustOthers(c *server.Config) { c.TrustedProxies = []string{"10.0.0.0/8"} }

// rawExchange dials s, writes pre and then a GET for appHost, and returns
// the response, or the error reading it. The read is bounded by within.
func rawExchange(t testing.TB, s *testServer, pre []byte, within time.Duration) (*http.Response, error) {
	t.Helper()
	conn, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatalf("dial %s: %v", s.addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.SetDeadline(time.Now().Add(within)); err != nil {
		t.Fatal(err)
	}
	msg := append(append([]byte(nil), pre...), "GET /who HTTP/1.1\r\nHost: "+appHost+"\r\nConnection: close\r\n\r\n"...)
	if _, err := conn.Write(msg); err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp, nil
}

func proxyV2(t testing.TB, src string) []byte {
	t.Helper()
	h := &proxyproto.Header{
		Version: 2, Command: proxyproto.PROXY, TransportProtocol: proxyproto.TCPv4,
		SourceAddr:      net.TCPAddrFromAddrPort(netip.MustParseAddrPort(src)),
		DestinationAddr: net.TCPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:8080")),
	}
	b, err := h.Format()
	if err != nil {
		t.Fatalf("format PROXY v2 header: %v", err)
	}
	return b
}

// withProxyProtocol turns proxy_protocol on after trust.
func withProxyProtocol(trust func(*server.Config)) func(*server.Config) {
	return func(c *server.Config) {
		trust(c)
		c.ProxyProtocol = true
	}
}

// wantProxiedAs sends a request after pre (a PROXY header, or nothing)
// and checks that the backend saw X-Forwarded-For want.
func wantProxiedAs(t testing.TB, st *stack, pre []byte, want string) {
	t.Helper()
	resp, err := rawExchange(t, st.server, pre, waitFor)
	if err != nil {
		t.Fatalf("request after %q: %v", pre, err)
	}
	var seen http.Header
	if err := json.NewDecoder(resp.Body).Decode(&seen); err != nil {
		t.Fatalf("decode echoed headers (status %d): %v", resp.StatusCode, err)
	}
	if got := seen.Get("X-Forwarded-For"); got != want {
		t.Errorf("request after %q: backend saw X-Forwarded-For %q, want %q", pre, got, want)
	}
}

// wantRefused checks that a connection was refused: closed without an
// answer, or answered 400 (a PROXY header read as a malformed request),
// and not left hanging until the client gave up.
func wantRefused(t testing.TB, resp *http.Response, err error) {
	t.Helper()
	var ne net.Error
	switch {
	case err == nil && resp.StatusCode != http.StatusBadRequest:
		t.Fatalf("connection answered %d, want it refused (400 or closed)", resp.StatusCode)
	case errors.As(err, &ne) && ne.Timeout():
		t.Fatalf("connection hung until the client's deadline (%v), want it refused at once", err)
	}
}

func TestHostileEdge(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  func(*server.Config)
		run  func(t *testing.T, st *stack)
	}{
		// identity: who the visitor is.
		{"identity/trusted-proxy-visitors-get-own-buckets", trustLoopback, func(t *testing.T, st *stack) {
			// Default ip_limit_max 100: behind one proxy, 130 visitors
			// would share its bucket if the proxy's address were the key.
			limited := 0
			for i := range 130 {
				resp, _ := edgeVisit(t, st.visitor, st.server, appHost, "/", http.Header{"X-Forwarded-For": {fmt.Sprintf("198.51.%d.%d", 100+i/200, 1+i%200)}})
				if resp.StatusCode == http.StatusTooManyRequests {
					limited++
				}
			}
			if limited != 0 {
				t.Errorf("%d of 130 distinct visitors behind a trusted proxy got 429, want 0", limited)
			}
		}},
		{"identity/untrusted-forwarded-for-ignored", trustOthers, func(t *testing.T, st *stack) {
			_, seen := edgeVisit(t, st.visitor, st.server, appHost, "/", http.Header{"X-Forwarded-For": {"198.51.100.1"}, "X-Real-Ip": {"198.51.100.2"}, "Forwarded": {"for=198.51.100.3"}})
			wantSeen(t, seen, "X-Forwarded-For", "127.0.0.1")
			wantSeen(t, seen, "X-Real-Ip", "")
			wantSeen(t, seen, "Forwarded", "")
		}},
		{"identity/untrusted-forwarded-for-shares-one-bucket", func(c *server.Config) {
			trustOthers(c)
			c.Router.IPLimitMax, c.Router.IPLimitRefill = 5, 0.0001
		}, func(t *testing.T, st *stack) {
			limited := 0
			for i := range 10 {
				resp, _ := edgeVisit(t, st.visitor, st.server, appHost, "/", http.Header{"X-Forwarded-For": {fmt.Sprintf("198.51.100.%d", i+1)}})
				if resp.StatusCode == http.StatusTooManyRequests {
					limited++
				}
			}
			// One token went to the client's tunnel handshake.
			if limited != 6 {
				t.Errorf("%d of 10 spoofed requests got 429, want 6: an untrusted peer must not pick its bucket", limited)
			}
		}},
		{"identity/trusted-proxy-chain-and-proto", trustLoopback, func(t *testing.T, st *stack) {
			_, seen := edgeVisit(t, st.visitor, st.server, appHost, "/", http.Header{"X-Forwarded-For": {"1.1.1.1, 198.51.100.1"}, "X-Forwarded-Proto": {"https"}})
			wantSeen(t, seen, "X-Forwarded-For", "198.51.100.1, 127.0.0.1")
			wantSeen(t, seen, "X-Forwarded-Proto", "https")
			wantSeen(t, seen, "X-Forwarded-Host", appHost)
		}},
		{"identity/untrusted-proto-ignored", trustOthers, func(t *testing.T, st *stack) {
			_, seen := edgeVisit(t, st.visitor, st.server, appHost, "/", http.Header{"X-Forwarded-Proto": {"https"}})
			wantSeen(t, seen, "X-Forwarded-Proto", "http")
		}},
		{"identity/real-ip-header", func(c *server.Config) {
			trustLoopback(c)
			c.RealIPHeader = "CF-Connecting-IP"
		}, func(t *testing.T, st *stack) {
			_, seen := edgeVisit(t, st.visitor, st.server, appHost, "/", http.Header{"Cf-Connecting-Ip": {"198.51.100.9"}, "X-Forwarded-For": {"1.1.1.1"}})
			wantSeen(t, seen, "X-Forwarded-For", "198.51.100.9, 127.0.0.1")
		}},
		{"identity/proxy-protocol-v1-trusted", withProxyProtocol(trustLoopback), func(t *testing.T, st *stack) {
			wantProxiedAs(t, st, []byte("PROXY TCP4 198.51.100.7 127.0.0.1 40000 8080\r\n"), "198.51.100.7")
		}},
		{"identity/proxy-protocol-v2-trusted", withProxyProtocol(trustLoopback), func(t *testing.T, st *stack) {
			wantProxiedAs(t, st, proxyV2(t, "198.51.100.8:40000"), "198.51.100.8")
		}},
		{"identity/proxy-protocol-untrusted-refused", withProxyProtocol(trustOthers), func(t *testing.T, st *stack) {
			resp, err := rawExchange(t, st.server, []byte("PROXY TCP4 198.51.100.7 127.0.0.1 40000 8080\r\n"), waitFor)
			wantRefused(t, resp, err)
			resp, err = rawExchange(t, st.server, proxyV2(t, "198.51.100.8:40000"), waitFor)
			wantRefused(t, resp, err)
			// Without a header the untrusted peer is served as it came.
			wantProxiedAs(t, st, nil, "127.0.0.1")
		}},
		{"identity/proxy-protocol-malformed-refused", withProxyProtocol(trustLoopback), func(t *testing.T, st *stack) {
			// Well inside the header timeout: a malformed header is refused
			// at once, not after a wait.
			resp, err := rawExchange(t, st.server, []byte("PROXY TCP4 not-an-address 127.0.0.1 1 2\r\n"), 3*time.Second)
			wantRefused(t, resp, err)
			resp, err = rawExchange(t, st.server, []byte("PROXY UNKNOWN-GARBAGE\x00\x01\r\n"), 3*time.Second)
			wantRefused(t, resp, err)
		}},
		{"identity/proxy-protocol-partial-header-refused", withProxyProtocol(trustLoopback), func(t *testing.T, st *stack) {
			conn, err := net.Dial("tcp", st.server.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// A header must arrive in one piece: a slow or stalled one is
			// dropped at once, well before the header timeout.
			if _, err := conn.Write([]byte("PROXY TCP4 198.51.100.7")); err != nil {
				t.Fatal(err)
			}
			if err := conn.SetReadDeadline(time.Now().Add(3 * time.Second)); err != nil {
				t.Fatal(err)
			}
			_, err = conn.Read(make([]byte, 1))
			var ne net.Error
			if err == nil || errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("partial PROXY header: read = %v, want the server to close the connection", err)
			}
		}},

		// deny: denied_ips and admin_allowed_ips.
		{"deny/denied-ips-403-before-any-handler", func(c *server.Config) {
			trustLoopback(c)
			c.DeniedIPs = []string{"198.51.100.0/24"}
		}, func(t *testing.T, st *stack) {
			for _, path := range []string{"/", "/aperio/health", "/aperio/api/orgs", "/aperio/tunnel"} {
				resp, seen := edgeVisit(t, st.visitor, st.server, appHost, path, http.Header{"X-Forwarded-For": {"198.51.100.7"}})
				if resp.StatusCode != http.StatusForbidden || seen != nil {
					t.Errorf("GET %s from a denied visitor = %d, want 403", path, resp.StatusCode)
				}
			}
			if resp, _ := edgeVisit(t, st.visitor, st.server, appHost, "/", http.Header{"X-Forwarded-For": {"203.0.113.7"}}); resp.StatusCode != http.StatusOK {
				t.Errorf("GET / from a visitor outside denied_ips = %d, want 200", resp.StatusCode)
			}
		}},
		{"deny/admin-allowed-ips", func(c *server.Config) {
			trustLoopback(c)
			c.AdminAllowedIPs = []string{"10.0.0.0/8"}
			c.MetricsToken = "m-token-0123456789"
		}, func(t *testing.T, st *stack) {
			auth := func(xff, token string) http.Header {
				return http.Header{"X-Forwarded-For": {xff}, "Authorization": {"Bearer " + token}}
			}
			checks := []struct {
				path, xff, token string
				want             int
			}{
				{"/aperio/api/orgs", "198.51.100.7", testToken, http.StatusForbidden},
				{"/aperio/metrics", "198.51.100.7", "m-token-0123456789", http.StatusForbidden},
				{"/aperio/", "198.51.100.7", testToken, http.StatusForbidden},
				{"/aperio/health", "198.51.100.7", "", http.StatusOK},
				{"/aperio/api/orgs", "10.1.2.3", testToken, http.StatusOK},
				{"/aperio/metrics", "10.1.2.3", "m-token-0123456789", http.StatusOK},
			}
			for _, ck := range checks {
				resp, _ := edgeVisit(t, st.visitor, st.server, "ops.localhost", ck.path, auth(ck.xff, ck.token))
				if resp.StatusCode != ck.want {
					t.Errorf("GET %s from %s = %d, want %d", ck.path, ck.xff, resp.StatusCode, ck.want)
				}
			}
			// The app's own paths are no admin surface.
			if resp, _ := edgeVisit(t, st.visitor, st.server, appHost, "/admin", http.Header{"X-Forwarded-For": {"198.51.100.7"}}); resp.StatusCode != http.StatusOK {
				t.Errorf("GET /admin (the app's) from outside admin_allowed_ips = %d, want 200", resp.StatusCode)
			}
		}},
		{"deny/admin-allowed-ips-empty-allows-all", nil, func(t *testing.T, st *stack) {
			resp, _ := edgeVisit(t, st.visitor, st.server, "ops.localhost", "/aperio/api/orgs", http.Header{"Authorization": {"Bearer " + testToken}})
			if resp.StatusCode != http.StatusOK {
				t.Errorf("GET /aperio/api/orgs with admin_allowed_ips empty = %d, want 200", resp.StatusCode)
			}
		}},

		// headers: what the backend and the visitor see.
		{"headers/x-aperio-from-visitors-removed", nil, func(t *testing.T, st *stack) {
			_, seen := edgeVisit(t, st.visitor, st.server, appHost, "/", http.Header{
				"X-Aperio-User": {"admin"}, "X-Aperio-Auth": {"ok"}, "X-Aperio-Service": {"other"}, "X-Aperio-Anything": {"x"},
			})
			for k := range seen {
				if strings.HasPrefix(strings.ToLower(k), "x-aperio-") {
					t.Errorf("backend saw visitor header %s = %q, want every X-Aperio-* removed", k, seen[k])
				}
			}
		}},
		{"headers/underscore-spellings-removed", trustLoopback, func(t *testing.T, st *stack) {
			// #38 item 4: PHP, WSGI and Rack read X_Aperio_User as
			// X-Aperio-User; even a trusted proxy's are removed.
			for proto, c := range visitorsH1H2(t, st) {
				_, seen := edgeVisit(t, c, st.server, appHost, "/", http.Header{
					"X_Aperio_User": {"root"}, "X-Aperio_Auth": {"oidc"}, "x_aperio_identity": {"forged"},
					"X_Forwarded_For": {"198.51.100.1"}, "X_Forwarded_Host": {"evil.test"}, "X_Real_Ip": {"198.51.100.2"},
					"X_Request_Id": {"chosen"}, "True_Client_Ip": {"198.51.100.3"}, "My_Header": {"kept"},
				})
				for k, vv := range seen {
					if strings.Contains(k, "_") && k != "My_header" {
						t.Errorf("%s: backend saw %s = %q, want every underscore spelling of a server-owned name removed", proto, k, vv)
					}
				}
				wantSeen(t, seen, "My_header", "kept")
				wantSeen(t, seen, "X-Forwarded-For", "127.0.0.1")
			}
		}},
		{"headers/underscore-headers-drop", func(c *server.Config) { c.Router.UnderscoreHeaders = "drop" }, func(t *testing.T, st *stack) {
			for proto, c := range visitorsH1H2(t, st) {
				_, seen := edgeVisit(t, c, st.server, appHost, "/", http.Header{"My_Header": {"x"}, "My-Header": {"y"}})
				if vv, ok := seen["My_header"]; ok {
					t.Errorf("%s: backend saw My_header = %q under underscore_headers drop", proto, vv)
				}
				wantSeen(t, seen, "My-Header", "y")
			}
		}},
		{"headers/underscore-headers-refuse", func(c *server.Config) { c.Router.UnderscoreHeaders = "refuse" }, func(t *testing.T, st *stack) {
			for proto, c := range visitorsH1H2(t, st) {
				resp, seen := edgeVisit(t, c, st.server, appHost, "/", http.Header{"My_Header": {"x"}})
				if resp.StatusCode != http.StatusBadRequest || seen != nil {
					t.Errorf("%s: a header name with an underscore under underscore_headers refuse = %d (backend answered: %v), want 400", proto, resp.StatusCode, seen != nil)
				}
				if resp, seen := edgeVisit(t, c, st.server, appHost, "/", http.Header{"My-Header": {"x"}}); resp.StatusCode != http.StatusOK || seen == nil {
					t.Errorf("%s: no underscore under refuse = %d, want 200 from the backend", proto, resp.StatusCode)
				}
			}
		}},
		{"headers/request-id-generated-sent-echoed", nil, func(t *testing.T, st *stack) {
			resp, seen := edgeVisit(t, st.visitor, st.server, appHost, "/", nil)
			id := resp.Header.Get("X-Request-Id")
			if id == "" {
				t.Fatal("response has no X-Request-Id")
			}
			wantSeen(t, seen, "X-Request-Id", id)
			resp2, _ := edgeVisit(t, st.visitor, st.server, appHost, "/", nil)
			if resp2.Header.Get("X-Request-Id") == id {
				t.Errorf("two requests got the same X-Request-Id %q", id)
			}
			resp3, _ := edgeVisit(t, st.visitor, st.server, appHost, "/aperio/healthz", nil)
			if resp3.Header.Get("X-Request-Id") == "" {
				t.Error("/aperio/healthz answer has no X-Request-Id")
			}
		}},
		{"headers/request-id-from-untrusted-replaced", trustOthers, func(t *testing.T, st *stack) {
			resp, seen := edgeVisit(t, st.visitor, st.server, appHost, "/", http.Header{"X-Request-Id": {"chosen-by-visitor"}})
			id := resp.Header.Get("X-Request-Id")
			if id == "chosen-by-visitor" || id == "" {
				t.Errorf("X-Request-Id from an untrusted visitor: answered %q, want a fresh one", id)
			}
			wantSeen(t, seen, "X-Request-Id", id)
		}},
		{"headers/request-id-from-trusted-validated", trustLoopback, func(t *testing.T, st *stack) {
			resp, seen := edgeVisit(t, st.visitor, st.server, appHost, "/", http.Header{"X-Request-Id": {"lb-7f3a:1"}})
			if got := resp.Header.Get("X-Request-Id"); got != "lb-7f3a:1" {
				t.Errorf("valid X-Request-Id from a trusted proxy: answered %q, want it kept", got)
			}
			wantSeen(t, seen, "X-Request-Id", "lb-7f3a:1")
			for _, bad := range []string{strings.Repeat("a", 129), "a b", "<script>", "id;drop"} {
				resp, _ := edgeVisit(t, st.visitor, st.server, appHost, "/", http.Header{"X-Request-Id": {bad}})
				if got := resp.Header.Get("X-Request-Id"); got == bad || got == "" {
					t.Errorf("invalid X-Request-Id %q from a trusted proxy: answered %q, want a fresh one", bad, got)
				}
			}
		}},

		// metrics: where they are and who may read them.
		{"metrics/slash-metrics-reaches-the-app", func(c *server.Config) { c.MetricsToken = "m-token-0123456789" }, func(t *testing.T, st *stack) {
			resp, seen := edgeVisit(t, st.visitor, st.server, appHost, "/metrics", http.Header{"Authorization": {"Bearer m-token-0123456789"}})
			if resp.StatusCode != http.StatusOK || seen == nil {
				t.Errorf("GET /metrics on a tunneled hostname = %d (backend answered: %v), want the app's answer", resp.StatusCode, seen != nil)
			}
		}},
		{"metrics/aperio-metrics-needs-the-token", func(c *server.Config) { c.MetricsToken = "m-token-0123456789" }, func(t *testing.T, st *stack) {
			for _, tok := range []string{"", "m-token", "m-token-0123456789x", "m-token-0123456780"} {
				h := http.Header{}
				if tok != "" {
					h.Set("Authorization", "Bearer "+tok)
				}
				if resp, _ := edgeVisit(t, st.visitor, st.server, appHost, "/aperio/metrics", h); resp.StatusCode != http.StatusUnauthorized {
					t.Errorf("GET /aperio/metrics with token %q = %d, want 401", tok, resp.StatusCode)
				}
			}
			if resp, _ := edgeVisit(t, st.visitor, st.server, appHost, "/aperio/metrics", http.Header{"Authorization": {"Bearer m-token-0123456789"}}); resp.StatusCode != http.StatusOK {
				t.Errorf("GET /aperio/metrics with the token = %d, want 200", resp.StatusCode)
			}
		}},
		{"metrics/metrics-listen-moves-them", func(c *server.Config) {
			c.MetricsToken = "m-token-0123456789"
			c.MetricsListen = "127.0.0.1:0"
		}, func(t *testing.T, st *stack) {
			if resp, _ := edgeVisit(t, st.visitor, st.server, appHost, "/aperio/metrics", http.Header{"Authorization": {"Bearer m-token-0123456789"}}); resp.StatusCode != http.StatusNotFound {
				t.Errorf("GET /aperio/metrics on the public port with metrics_listen set = %d, want 404", resp.StatusCode)
			}
			for _, path := range []string{"/metrics", "/aperio/metrics"} {
				status, body := scrapeListener(t, st, path, "m-token-0123456789")
				if status != http.StatusOK || !strings.Contains(body, "aperio_connected_clients 1") {
					t.Errorf("GET %s on metrics_listen = %d, want 200 with aperio_connected_clients 1", path, status)
				}
			}
			if status, _ := scrapeListener(t, st, "/metrics", "wrong"); status != http.StatusUnauthorized {
				t.Errorf("GET /metrics on metrics_listen with a wrong token = %d, want 401", status)
			}
		}},
		{"metrics/metrics-listen-guarded-by-admin-allowed-ips", func(c *server.Config) {
			c.MetricsListen = "127.0.0.1:0" // no metrics_token: open to admin_allowed_ips
			c.AdminAllowedIPs = []string{"10.0.0.0/8"}
		}, func(t *testing.T, st *stack) {
			if got, _ := scrapeListener(t, st, "/metrics", ""); got != http.StatusForbidden {
				t.Errorf("GET /metrics on metrics_listen from outside admin_allowed_ips = %d, want 403", got)
			}
		}},
		{"metrics/metrics-listen-without-token-is-open", func(c *server.Config) { c.MetricsListen = "127.0.0.1:0" }, func(t *testing.T, st *stack) {
			if got, _ := scrapeListener(t, st, "/metrics", ""); got != http.StatusOK {
				t.Errorf("GET /metrics on metrics_listen, no metrics_token = %d, want 200", got)
			}
		}},

		// ratelimit: /aperio/ costs tokens where it costs the server work.
		{"ratelimit/admin-logins-charged", func(c *server.Config) {
			c.Router.IPLimitMax, c.Router.IPLimitRefill = 4, 0.0001
		}, func(t *testing.T, st *stack) {
			// The handshake took one token; three wrong logins take the rest.
			wantIPLimited(t, st, "/aperio/api/orgs", 4)
		}},
		{"ratelimit/tunnel-handshakes-charged", func(c *server.Config) {
			c.Router.IPLimitMax, c.Router.IPLimitRefill = 3, 0.0001
		}, func(t *testing.T, st *stack) {
			wantIPLimited(t, st, "/aperio/tunnel", 3)
		}},
		{"ratelimit/health-and-anonymous-free", func(c *server.Config) {
			c.Router.IPLimitMax, c.Router.IPLimitRefill = 2, 0.0001
		}, func(t *testing.T, st *stack) {
			for _, path := range []string{"/aperio/health", "/aperio/healthz", "/aperio/readyz"} {
				for range 5 {
					if resp, _ := edgeVisit(t, st.visitor, st.server, appHost, path, nil); resp.StatusCode != http.StatusOK {
						t.Fatalf("GET %s with an empty bucket = %d, want 200", path, resp.StatusCode)
					}
				}
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := startStack(t, headerEcho(), tc.cfg)
			tc.run(t, st)
		})
	}
	t.Run("tls", testHostileTLS)
	t.Run("identity/access-log-resolved-ip-and-request-id", testAccessLogIdentity)
	t.Run("identity/token-allowed-ips-use-resolved-visitor", testAllowedIPsIdentity)
}

// testAllowedIPsIdentity checks that a client token's allowed_ips judge
// the visitor a trusted proxy names, not the proxy.
func testAllowedIPsIdentity(t *testing.T) {
	cfg := serverConfig(t)
	trustLoopback(&cfg)
	srv := startServer(t, cfg, nil, nil)
	visitor := newVisitor(t, srv)
	status, body := adminCall(t, visitor, srv, "POST", "/tokens", map[string]any{
		"name": "office-only", "hostnames": []string{appHost}, "allowed_ips": []string{"198.51.100.0/24"},
	})
	if status != http.StatusCreated {
		t.Fatalf("POST /tokens = %d %s, want 201", status, body)
	}
	var tok struct{ Token string }
	if err := json.Unmarshal([]byte(body), &tok); err != nil {
		t.Fatal(err)
	}
	ac := agentConfig(srv, service(startBackend(t, headerEcho()).URL))
	ac.Token = tok.Token
	startAgent(t, srv, ac)
	waitClients(t, visitor, srv, 1)
	if resp, seen := edgeVisit(t, visitor, srv, appHost, "/", http.Header{"X-Forwarded-For": {"198.51.100.7"}}); seen == nil {
		t.Errorf("visitor 198.51.100.7 named by a trusted proxy = %d, want the backend (inside allowed_ips)", resp.StatusCode)
	}
	if resp, seen := edgeVisit(t, visitor, srv, appHost, "/", http.Header{"X-Forwarded-For": {"203.0.113.7"}}); seen != nil || resp.StatusCode != http.StatusBadGateway {
		t.Errorf("visitor 203.0.113.7 named by a trusted proxy = %d, want 502 (outside allowed_ips)", resp.StatusCode)
	}
}

// scrapeListener fetches path from the metrics listener, with token when
// not empty, and returns the status and body.
func scrapeListener(t testing.TB, st *stack, path, token string) (int, string) {
	t.Helper()
	addr := st.server.gw.MetricsAddrForTest()
	if addr == "" {
		t.Fatal("no metrics listener")
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, body := do(t, st.visitor, req)
	return resp.StatusCode, body
}

// wantIPLimited sends n requests with made-up credentials for path and
// checks that the last is refused by the visitor's ip bucket.
func wantIPLimited(t *testing.T, st *stack, path string, n int) {
	t.Helper()
	var last *http.Response
	for range n {
		last, _ = edgeVisit(t, st.visitor, st.server, "ops.localhost", path, http.Header{"Authorization": {"Bearer apk_wrong"}})
	}
	if last.StatusCode != http.StatusTooManyRequests || !strings.HasPrefix(last.Header.Get("X-Aperio-Limit"), "ip;") {
		t.Errorf("GET %s #%d = %d (x-aperio-limit %q), want 429 ip", path, n, last.StatusCode, last.Header.Get("X-Aperio-Limit"))
	}
}

// testHostileTLS checks the public port's TLS offer: TLS 1.2 at least,
// and in TLS 1.2 only AEAD suites.
func testHostileTLS(t *testing.T) {
	st := startStackFor(t, service(startBackend(t, headerEcho()).URL), nil, true)
	dial := func(cfg *tls.Config) (*tls.ConnectionState, error) {
		cfg.RootCAs, cfg.ServerName = st.server.roots, "localhost"
		d := &net.Dialer{Timeout: waitFor}
		conn, err := tls.DialWithDialer(d, "tcp", st.server.addr, cfg)
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		cs := conn.ConnectionState()
		return &cs, nil
	}
	cases := []struct {
		name string
		cfg  *tls.Config
		ok   bool
	}{
		{"tls/tls12-cbc-sha-only-refused", &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{
			tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA,
			tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA,
			tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256, tls.TLS_RSA_WITH_AES_128_CBC_SHA,
		}}, false},
		{"tls/tls11-refused", &tls.Config{MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}, false},
		{"tls/tls12-aead-accepted", &tls.Config{MaxVersion: tls.VersionTLS12}, true},
		{"tls/tls13-accepted", &tls.Config{MinVersion: tls.VersionTLS13}, true},
	}
	for _, tc := range cases {
		t.Run(strings.TrimPrefix(tc.name, "tls/"), func(t *testing.T) {
			cs, err := dial(tc.cfg)
			switch {
			case tc.ok && err != nil:
				t.Fatalf("handshake = %v, want success", err)
			case !tc.ok && err == nil:
				t.Fatalf("handshake succeeded with %s, want it refused", tls.CipherSuiteName(cs.CipherSuite))
			case tc.ok && cs.Version == tls.VersionTLS12 && !strings.Contains(tls.CipherSuiteName(cs.CipherSuite), "GCM") && !strings.Contains(tls.CipherSuiteName(cs.CipherSuite), "CHACHA20"):
				t.Errorf("TLS 1.2 negotiated %s, want an AEAD suite", tls.CipherSuiteName(cs.CipherSuite))
			}
		})
	}
}

// testAccessLogIdentity checks that the access log names the resolved
// visitor and the request id.
func testAccessLogIdentity(t *testing.T) {
	cfg := serverConfig(t)
	trustLoopback(&cfg)
	cfg.AccessLogIPs = true
	access := &syncBuffer{}
	srv := startServerWith(t, cfg, nil, nil, server.Options{Logger: testLogger(), AccessLog: slog.New(slog.NewJSONHandler(access, nil))})
	startAgent(t, srv, agentConfig(srv, service(startBackend(t, headerEcho()).URL)))
	visitor := newVisitor(t, srv)
	waitClients(t, visitor, srv, 1)
	resp, _ := edgeVisit(t, visitor, srv, appHost, "/logged", http.Header{"X-Forwarded-For": {"198.51.100.44"}})
	id := resp.Header.Get("X-Request-Id")
	var line map[string]any
	poll(t, waitFor, func() (bool, string) {
		for _, l := range access.lines(t) {
			if l["path"] == "/logged" {
				line = l
				return true, ""
			}
		}
		return false, "no access log line for /logged"
	})
	if line["ip"] != "198.51.100.44" || line["request_id"] != id || id == "" {
		t.Errorf("access log line = %v, want ip 198.51.100.44 and request_id %q", line, id)
	}
}

// visitorsH1H2 returns st's HTTP/1.1 visitor and an h2c one, by protocol
// name, for cases that must hold over both.
func visitorsH1H2(t testing.TB, st *stack) map[string]*http.Client {
	return map[string]*http.Client{"h1": st.visitor, "h2c": {Transport: h2cTransport(t)}}
}
