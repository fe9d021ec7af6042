//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/testcert"
)

// The ACME side of the topology (test/docker-compose.yml): the names the
// ACME servers answer for, and what Pebble logs once per order it accepts
// (pebble's wfe, "Added order %q to the db").
const (
	acmeAppHost    = "app.test"
	acmeOtherHost  = "other.test" // no token covers it
	pebbleOrderLog = "Added order "
)

var acmeServers = map[string]string{"acme-a": "a.tunnel.test", "acme-b": "b.tunnel.test"}

// pebbleCerts makes the directory E2E_ACME_DIR: a CA (ca.pem, the ACME
// servers' acme.ca_root) and the certificate it signs for Pebble's own
// HTTPS API (cert.pem, key.pem), valid for "pebble", the name the servers
// dial, and 127.0.0.1, where the suite reads the management API, for an
// hour (the suite's timeout is 15 minutes). They are made here, at each
// run, so that the e2e-pebble image carries no key. Pebble runs as the images' unprivileged user: the files are world
// readable, in a test's temporary directory.
func pebbleCerts(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ca := testcert.NewCA(t, "aperio e2e pebble API CA")
	api := ca.Issue(t, testcert.Leaf{CommonName: "pebble", DNSNames: []string{"pebble", "localhost"},
		IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Usage: x509.ExtKeyUsageServerAuth})
	for name, b := range map[string][]byte{"ca.pem": ca.CertPEM, "cert.pem": api.CertPEM, "key.pem": api.KeyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// pebbleRoot fetches the root Pebble's issued certificates chain to (made
// at its start) from its management API, polling until Pebble answers,
// and writes it to roots.pem in the ACME directory, the only root
// acme-app trusts (SSL_CERT_FILE).
func (tp *topology) pebbleRoot() *x509.CertPool {
	t := tp.t
	t.Helper()
	api := x509.NewCertPool()
	caPEM, err := os.ReadFile(filepath.Join(tp.acmeDir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	api.AppendCertsFromPEM(caPEM)
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: api}}}
	url := "https://" + tp.port("pebble", 15000) + "/roots/0"
	var rootPEM []byte
	var last string
	tp.waitFor("pebble serves its root at "+url, 30*time.Second, func() bool {
		resp, err := c.Get(url)
		if err != nil {
			last = err.Error()
			return false
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			last = fmt.Sprintf("%d %v", resp.StatusCode, err)
			return false
		}
		rootPEM = b
		return true
	})
	if last != "" {
		t.Logf("pebble answered after: %s", last)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(rootPEM) {
		t.Fatalf("pebble's /roots/0 is not PEM: %q", rootPEM)
	}
	if err := os.WriteFile(filepath.Join(tp.acmeDir, "roots.pem"), rootPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return roots
}

// pebbleOrders counts the orders Pebble accepted so far: the lines of its
// log that say it added one (a new-order request the ask check let
// through; the ACME servers' own names at start count too). Pebble has no
// management endpoint that lists orders.
func (tp *topology) pebbleOrders() int {
	tp.t.Helper()
	out := docker(tp.t, "logs", tp.containerID("pebble"))
	n := 0
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), pebbleOrderLog) {
			n++
		}
	}
	return n
}

// handshake makes a TLS handshake with a server's published port for
// name, verifying the chain against roots, within 60 s (an on-demand
// order happens inside it). It returns the open connection.
func handshake(addr, name string, roots *x509.CertPool) (*tls.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second},
		Config: &tls.Config{ServerName: name, RootCAs: roots, NextProtos: []string{"http/1.1"}}}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return c.(*tls.Conn), nil
}

// getOver sends GET / for host over an open TLS connection and returns
// the status and body; it closes the connection.
func getOver(c *tls.Conn, host string) (int, string, error) {
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		return 0, "", err
	}
	if _, err := fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host); err != nil {
		return 0, "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// acmeOnDemand is the step acme_on_demand: automatic TLS against Pebble
// with two servers on one store.
func (tp *topology) acmeOnDemand(t *testing.T, figs *figures) {
	for s := range acmeServers {
		tp.waitHealthy(s, tp.containerID(s), 60*time.Second)
	}
	roots := tp.pebbleRoot()
	// Each server obtains its own name at start: wait until both serve it
	// (chained to Pebble's root), so that the orders counted below are
	// the visitors' alone.
	for s, own := range acmeServers {
		addr := tp.port(s, 8443)
		var last error
		tp.waitFor(s+" serves its own name "+own+" with Pebble's certificate", 90*time.Second, func() bool {
			c, err := handshake(addr, own, roots)
			if err != nil {
				last = err
				return false
			}
			c.Close()
			return true
		})
		if last != nil {
			t.Logf("%s before its own certificate: %v", s, last)
		}
	}
	// One order each for the two names obtained at start: the count does
	// see orders.
	orders0 := tp.pebbleOrders()
	if orders0 < len(acmeServers) {
		t.Fatalf("pebble orders once both servers serve their own names = %d, want at least %d", orders0, len(acmeServers))
	}

	// (a) A token for app.test alone (minted with the master token; the
	// client never sees that one), and the client on acme-a with it.
	var tok struct {
		ID     string `json:"id"`
		Secret string `json:"token"`
	}
	if _, err := tp.api("server-a", "POST", "/tokens", map[string]any{"name": "e2e-acme-app", "hostnames": []string{acmeAppHost}}, &tok); err != nil {
		t.Fatal(err)
	}
	if tok.Secret == "" || tok.Secret == tp.token {
		t.Fatalf("minted token %q: want a fresh secret", tok.ID)
	}
	tp.setEnv("E2E_ACME_APP_TOKEN", tok.Secret)
	tp.mustCompose("--profile", "acme", "up", "-d", "--no-recreate", "acme-app")
	tp.waitHealthy("acme-app (its tunnel to acme-a is up)", tp.containerID("acme-app"), 60*time.Second)
	if n := tp.pebbleOrders(); n != orders0 {
		t.Fatalf("pebble orders after the client connected = %d, want %d (only a visitor's handshake orders)", n, orders0)
	}
	start := time.Now()
	c, err := handshake(tp.port("acme-a", 8443), acmeAppHost, roots)
	if err != nil {
		t.Fatalf("first handshake for %s at acme-a: %v, want a certificate chained to Pebble's root", acmeAppHost, err)
	}
	issued := time.Since(start)
	state := c.ConnectionState()
	leaf := state.PeerCertificates[0]
	if err := leaf.VerifyHostname(acmeAppHost); err != nil {
		t.Errorf("acme-a's certificate for %s: %v", acmeAppHost, err)
	}
	status, body, err := getOver(c, acmeAppHost)
	if err != nil || status != http.StatusOK || !strings.HasPrefix(body, "hello from ") {
		t.Fatalf("GET https://%s/ via acme-a = %d %q %v, want 200 from the app", acmeAppHost, status, body, err)
	}
	if n := tp.pebbleOrders(); n != orders0+1 {
		t.Errorf("pebble orders after the first visit = %d, want %d (one for %s)", n, orders0+1, acmeAppHost)
	}
	figs.add(t, "acme: first HTTPS request for %s via acme-a obtained its certificate in its handshake (%v; serial %x, chained to Pebble's root) and was served",
		acmeAppHost, issued.Round(time.Millisecond), leaf.SerialNumber)

	// (b) other.test: no token covers it, so the ask check refuses it at
	// both servers, before any order.
	for _, s := range []string{"acme-a", "acme-b"} {
		c, err := handshake(tp.port(s, 8443), acmeOtherHost, roots)
		if err == nil {
			names := c.ConnectionState().PeerCertificates[0].DNSNames
			c.Close()
			t.Errorf("handshake for %s at %s succeeded (certificate for %v), want it refused", acmeOtherHost, s, names)
		}
	}
	if n := tp.pebbleOrders(); n != orders0+1 {
		t.Errorf("pebble orders after the handshakes for %s = %d, want still %d", acmeOtherHost, n, orders0+1)
	}

	// (c) acme-b finds app.test's certificate in the shared store and
	// serves the same one, with no order of its own.
	c, err = handshake(tp.port("acme-b", 8443), acmeAppHost, roots)
	if err != nil {
		t.Fatalf("handshake for %s at acme-b: %v", acmeAppHost, err)
	}
	other := c.ConnectionState().PeerCertificates[0]
	c.Close()
	if other.SerialNumber.Cmp(leaf.SerialNumber) != 0 {
		t.Errorf("acme-b serves %s with serial %x, want acme-a's %x (one certificate in the shared store)", acmeAppHost, other.SerialNumber, leaf.SerialNumber)
	}
	if n := tp.pebbleOrders(); n != orders0+1 {
		t.Errorf("pebble orders after acme-b's handshake = %d, want still %d", n, orders0+1)
	}
	figs.add(t, "acme: acme-b served the same certificate for %s from the shared store; %s refused at both servers; %d order(s) for the visitors' names in all",
		acmeAppHost, acmeOtherHost, tp.pebbleOrders()-orders0)
}
