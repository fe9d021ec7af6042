package server_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/agent"
	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/edge/acme"
	"github.com/aperio-dev/aperio/internal/edge/acme/acmetest"
	"github.com/aperio-dev/aperio/internal/server/servertest"
)

// TestAutomaticTLSEndToEnd runs the server with acme: against Pebble on
// its real public port. The server's own name (acme.hostnames) carries
// the tunnel; a master-token client publishes app.test; the visitor's
// first HTTPS request for app.test obtains its certificate, chained to
// Pebble's root, and is served through the tunnel. A name only a minted
// token covers gets a certificate too; a name nobody may serve gets a
// failed handshake. The HTTP port redirects to HTTPS, and the loopback
// healthcheck (no SNI) is answered.
func TestAutomaticTLSEndToEnd(t *testing.T) {
	t.Parallel()
	tlsPort, httpPort := acmetest.FreePort(t), acmetest.FreePort(t)
	p := acmetest.Start(t, httpPort, tlsPort, time.Hour)
	cfg := servertest.Config(t)
	cfg.Port = tlsPort
	cfg.ACME = acme.DefaultConfig()
	cfg.ACME.Email = "ops@example.com"
	cfg.ACME.CA, cfg.ACME.CARoot, cfg.ACME.HTTPPort = p.Dir, p.APIRoot, httpPort
	cfg.ACME.Hostnames = []string{"tunnel.test"}
	cfg.AdminHosts = []string{"tunnel.test"}
	cfg.MetricsToken = "m-token"
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(tlsPort))
	if err != nil {
		t.Fatal(err)
	}
	srv := servertest.Start(t, cfg, ln, p.Roots)
	port := strconv.Itoa(tlsPort)
	// Every name resolves to the server, as DNS would send it there.
	toServer := func(ctx context.Context, network, addr string) (net.Conn, error) {
		_, p, _ := net.SplitHostPort(addr)
		return (&net.Dialer{}).DialContext(ctx, network, "127.0.0.1:"+p)
	}

	backend := servertest.Backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "app says hi")
	}))
	a, err := agent.New(config.Client{
		ServerURL: "https://tunnel.test:" + port, Token: servertest.Token, Name: "acme", DrainTimeout: 5 * time.Second,
		Services: []config.Service{{Target: backend.URL, Hostnames: []string{servertest.AppHost}}},
	}, agent.Options{Logger: servertest.Logger(), DialServer: toServer, TLSConfig: &tls.Config{RootCAs: p.Roots}, StatusSocket: config.StatusSocketOff})
	if err != nil {
		t.Fatal(err)
	}
	actx, stopAgent := context.WithCancel(context.Background())
	agentDone := make(chan error, 1)
	go func() { agentDone <- a.Run(actx) }()
	t.Cleanup(func() { stopAgent(); <-agentDone })

	tr := &http.Transport{DialContext: toServer, TLSClientConfig: &tls.Config{RootCAs: p.Roots}}
	t.Cleanup(tr.CloseIdleConnections)
	visitor := &http.Client{Transport: tr, Timeout: 60 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	// The tunnel is up once the client is listed; its TLS handshake
	// for tunnel.test verified against Pebble's root.
	servertest.Poll(t, 60*time.Second, func() (bool, string) {
		req, _ := http.NewRequest(http.MethodGet, "https://tunnel.test:"+port+"/aperio/api/clients", nil)
		req.Header.Set("Authorization", "Bearer "+servertest.Token)
		resp, err := visitor.Do(req)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		var list []map[string]any
		json.NewDecoder(resp.Body).Decode(&list)
		return len(list) == 1, "clients " + strconv.Itoa(len(list))
	})

	resp, err := visitor.Get("https://" + servertest.AppHost + ":" + port + "/")
	if err != nil {
		t.Fatalf("first HTTPS request for app.test: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "app says hi" {
		t.Fatalf("app.test over automatic TLS: %d %q", resp.StatusCode, body)
	}
	if leaf := resp.TLS.PeerCertificates[0]; len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != servertest.AppHost {
		t.Errorf("app.test served a certificate for %v", leaf.DNSNames)
	}

	// Security probe F4: a token for *.w.test, and no client of it. A
	// visitor's handshakes for random names under it order nothing (on
	// demand, only names a connected client binds, or bound within
	// acme.on_demand_grace, get a certificate).
	mint, _ := json.Marshal(map[string]any{"name": "wild", "hostnames": []string{"*.w.test"}})
	req, _ := http.NewRequest(http.MethodPost, "https://tunnel.test:"+port+"/aperio/api/tokens", bytes.NewReader(mint))
	req.Header.Set("Authorization", "Bearer "+servertest.Token)
	req.Header.Set("Content-Type", "application/json")
	var minted struct {
		Token string `json:"token"`
	}
	if resp, err := visitor.Do(req); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("minting a token: %v %v", resp, err)
	} else {
		json.NewDecoder(resp.Body).Decode(&minted)
		resp.Body.Close()
	}
	for i := range 20 {
		name := "z" + strconv.Itoa(i) + ".w.test"
		if c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", "127.0.0.1:"+port, &tls.Config{ServerName: name, RootCAs: p.Roots}); err == nil {
			c.Close()
			t.Errorf("a handshake for %s, which no client binds, got a certificate", name)
		}
	}
	if got := acmeCounter(t, visitor, port, `aperio_acme_orders_total{kind="new"`); got != 2 {
		t.Errorf("new orders after 20 unbound names = %v, want 2 (tunnel.test's and app.test's)", got)
	}
	if got := acmeCounter(t, visitor, port, `aperio_acme_refusals_total{reason="not_bound"`); got != 20 {
		t.Errorf("not_bound refusals = %v, want 20", got)
	}
	// Once a client of the token binds z1.w.test, its visitors get a
	// certificate (the refusal a moment ago is forgotten with the bind).
	wild, err := agent.New(config.Client{
		ServerURL: "https://tunnel.test:" + port, Token: minted.Token, Name: "wild", DrainTimeout: 5 * time.Second,
		Services: []config.Service{{Target: backend.URL, Hostnames: []string{"z1.w.test"}}},
	}, agent.Options{Logger: servertest.Logger(), DialServer: toServer, TLSConfig: &tls.Config{RootCAs: p.Roots}, StatusSocket: config.StatusSocketOff})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stopWild := context.WithCancel(context.Background())
	wildDone := make(chan error, 1)
	go func() { wildDone <- wild.Run(wctx) }()
	t.Cleanup(func() { stopWild(); <-wildDone })
	servertest.Poll(t, 30*time.Second, func() (bool, string) {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", "127.0.0.1:"+port, &tls.Config{ServerName: "z1.w.test", RootCAs: p.Roots})
		if err != nil {
			return false, err.Error()
		}
		c.Close()
		return true, ""
	})

	// Nobody may serve evil.test: no certificate.
	if c, err := tls.Dial("tcp", "127.0.0.1:"+port, &tls.Config{ServerName: "evil.test", RootCAs: p.Roots}); err == nil {
		c.Close()
		t.Error("a handshake for evil.test succeeded")
	}

	// The HTTP port redirects to HTTPS on the public port.
	hresp, err := visitor.Get("http://" + servertest.AppHost + ":" + strconv.Itoa(httpPort) + "/a?b=c")
	if err != nil {
		t.Fatal(err)
	}
	hresp.Body.Close()
	if want := "https://app.test:" + port + "/a?b=c"; hresp.StatusCode != http.StatusPermanentRedirect || hresp.Header.Get("Location") != want {
		t.Errorf("HTTP port: %d %q, want 308 %q", hresp.StatusCode, hresp.Header.Get("Location"), want)
	}

	// The healthcheck dials 127.0.0.1 with no name: a self-signed answer.
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	if r, err := hc.Get("https://127.0.0.1:" + port + "/aperio/readyz"); err != nil || r.StatusCode != 200 {
		t.Errorf("loopback readyz over TLS: %v %v", r, err)
	} else {
		r.Body.Close()
	}
	_ = srv
}

// acmeCounter returns the value of the first metric line starting with
// prefix on the server's /aperio/metrics, 0 when there is none.
func acmeCounter(t *testing.T, c *http.Client, port, prefix string) float64 {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "https://tunnel.test:"+port+"/aperio/metrics", nil)
	req.Header.Set("Authorization", "Bearer m-token")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, prefix) {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			return v
		}
	}
	return 0
}
