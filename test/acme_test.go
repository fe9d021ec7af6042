//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/testkit/testcert"
)

// The ACME side of the topology (test/docker-compose.yml): the names the
// ACME servers answer for; what Pebble logs once per challenge it
// validates, naming the identifier (its VA, "Pulled a task from the Tasks
// queue: %#v" of a task whose Identifier holds the name); what a server
// logs per certificate it obtains (acme.Manager's onEvent); and the
// lifetime of the certificates Pebble issues (certificateValidityPeriod
// in the e2e-pebble image's config, deploy/images/build.sh).
//
// With the servers' default renewal check (certmagic's, every 10
// minutes), certmagic counts a certificate with less than five checks
// (50 minutes) left as expiring imminently: a 90-second one is due for
// renewal from its issuance on, not from its last third, and each
// handshake that finds it in a server's cache (none renewing it yet)
// starts a renewal in the background while being served it. Only the
// in-process test (acme.TestPebbleRenewsWithoutDropping, a 1 s check)
// sees the last-third window.
const (
	acmeAppHost     = "app.test"
	acmeOtherHost   = "other.test" // no token covers it
	pebbleTaskLog   = "Pulled a task from the Tasks queue"
	obtainedLog     = `msg="certificate obtained"`
	pebbleValidity  = 90 * time.Second
	renewalVisitGap = 500 * time.Millisecond // between fresh handshakes while waiting for a renewal
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

// pebbleOrders counts the orders Pebble accepted so far for name: the
// challenges it pulled to validate for that identifier. The image turns
// authorization reuse off (PEBBLE_AUTHZREUSE=0), so every order for name
// brings a fresh authorization and one validation of it. Pebble's
// "Added order" line names no identifier, and Pebble has no management
// endpoint that lists orders; counting per name keeps the count free of
// the renewals of the servers' own names, which, with certificates of
// pebbleValidity, follow most handshakes for them.
func (tp *topology) pebbleOrders(name string) int {
	tp.t.Helper()
	out := docker(tp.t, "logs", tp.containerID("pebble"))
	ident := fmt.Sprintf("Value:%q", name)
	n := 0
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if line := sc.Text(); strings.Contains(line, pebbleTaskLog) && strings.Contains(line, ident) {
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

// keptConn is one HTTP/1.1 connection to a server's TLS port, held open
// across requests (keep-alive), the way a browser keeps one.
type keptConn struct {
	c  *tls.Conn
	br *bufio.Reader
}

// get sends GET / for host on the connection and reads the whole
// response within 30 s. A response that closes the connection is an
// error: the connection is meant to outlive the request.
func (k *keptConn) get(host string) (int, string, error) {
	if err := k.c.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		return 0, "", err
	}
	if _, err := fmt.Fprintf(k.c, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", host); err != nil {
		return 0, "", err
	}
	resp, err := http.ReadResponse(k.br, nil)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.Close {
		err = errors.New("the server closed the connection after the response")
	}
	return resp.StatusCode, string(b), err
}

// acmeIssued is what acme_on_demand leaves for acme_renewal: Pebble's
// issuing root and the first certificate acme-a obtained for app.test.
type acmeIssued struct {
	roots *x509.CertPool
	leaf  *x509.Certificate
}

// obtained counts the certificates for name that server logged as
// obtained: fresh (renewal=false) and renewals.
func (tp *topology) obtained(server, name string) (fresh, renewals int) {
	tp.t.Helper()
	out := docker(tp.t, "logs", tp.containerID(server))
	host := " hostname=" + name + " "
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, obtainedLog) || !strings.Contains(line, host) {
			continue
		}
		if strings.Contains(line, " renewal=true") {
			renewals++
		} else {
			fresh++
		}
	}
	return fresh, renewals
}

// acmeOnDemand is the step acme_on_demand: automatic TLS against Pebble
// with two servers on one store. It returns the root and the certificate
// for acme_renewal.
func (tp *topology) acmeOnDemand(t *testing.T, figs *figures) acmeIssued {
	for s := range acmeServers {
		tp.waitHealthy(s, tp.containerID(s), 60*time.Second)
	}
	roots := tp.pebbleRoot()
	// Each server obtains its own name at start: wait until both serve it
	// (chained to Pebble's root). With short-lived certificates these
	// handshakes may also renew them; orders are counted per name.
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
		// The count does see orders: at least one for each own name.
		if n := tp.pebbleOrders(own); n < 1 {
			t.Fatalf("pebble orders for %s once %s serves it = %d, want at least 1", own, s, n)
		}
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
	if n := tp.pebbleOrders(acmeAppHost); n != 0 {
		t.Fatalf("pebble orders for %s after the client connected = %d, want 0 (only a visitor's handshake orders)", acmeAppHost, n)
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
	// Pebble makes NotAfter NotBefore + period - 1 s.
	if life := leaf.NotAfter.Sub(leaf.NotBefore); life > pebbleValidity || life < pebbleValidity-2*time.Second {
		t.Fatalf("the certificate for %s lives %v, want about %v (certificateValidityPeriod of the e2e-pebble image)", acmeAppHost, life, pebbleValidity)
	}
	status, body, err := getOver(c, acmeAppHost)
	if err != nil || status != http.StatusOK || !strings.HasPrefix(body, "hello from ") {
		t.Fatalf("GET https://%s/ via acme-a = %d %q %v, want 200 from the app", acmeAppHost, status, body, err)
	}
	if n := tp.pebbleOrders(acmeAppHost); n != 1 {
		t.Errorf("pebble orders for %s after the first visit = %d, want 1", acmeAppHost, n)
	}
	figs.add(t, "acme: first HTTPS request for %s via acme-a obtained its certificate in its handshake (%v; serial %x, chained to Pebble's root, valid %v) and was served",
		acmeAppHost, issued.Round(time.Millisecond), leaf.SerialNumber, leaf.NotAfter.Sub(leaf.NotBefore).Round(time.Second))

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
	if n := tp.pebbleOrders(acmeOtherHost); n != 0 {
		t.Errorf("pebble orders for %s after its handshakes = %d, want 0", acmeOtherHost, n)
	}

	// (c) acme-b finds app.test's certificate in the shared store and
	// serves the same one; it never obtains the name afresh. No client
	// binds app.test on acme-b, so it places no order for it, renewals
	// included (#38 item 5): the renewal the handshake would start there
	// (the certificate is due at once, see the constants) is refused, and
	// acme-b serves what acme-a stores.
	c, err = handshake(tp.port("acme-b", 8443), acmeAppHost, roots)
	if err != nil {
		t.Fatalf("handshake for %s at acme-b: %v", acmeAppHost, err)
	}
	other := c.ConnectionState().PeerCertificates[0]
	c.Close()
	if other.SerialNumber.Cmp(leaf.SerialNumber) != 0 {
		t.Errorf("acme-b serves %s with serial %x, want acme-a's %x (one certificate in the shared store)", acmeAppHost, other.SerialNumber, leaf.SerialNumber)
	}
	if fresh, _ := tp.obtained("acme-b", acmeAppHost); fresh != 0 {
		t.Errorf("acme-b logged %d fresh certificate(s) for %s, want 0 (it loads the store's)", fresh, acmeAppHost)
	}
	if fresh, _ := tp.obtained("acme-a", acmeAppHost); fresh != 1 {
		t.Errorf("acme-a logged %d fresh certificate(s) for %s, want 1", fresh, acmeAppHost)
	}
	figs.add(t, "acme: acme-b served the same certificate for %s from the shared store; %s refused at both servers; %d order(s) for %s so far",
		acmeAppHost, acmeOtherHost, tp.pebbleOrders(acmeAppHost), acmeAppHost)
	return acmeIssued{roots: roots, leaf: leaf}
}

// acmeRenewal is the step acme_renewal: with Pebble's short-lived
// certificates, acme-a renews app.test's before it expires while
// visitors keep coming, without failing a handshake or dropping a
// connection opened on the old certificate, and acme-b, which holds the
// old one too, moves on to a renewed one.
func (tp *topology) acmeRenewal(t *testing.T, figs *figures, first acmeIssued) {
	addr := tp.port("acme-a", 8443)
	_, renewals0 := tp.obtained("acme-a", acmeAppHost)
	// This handshake finds the certificate due (see the constants): it is
	// served the old one and starts the renewal.
	c, err := handshake(addr, acmeAppHost, first.roots)
	if err != nil {
		t.Fatalf("handshake for %s at acme-a for the kept connection: %v", acmeAppHost, err)
	}
	held := &keptConn{c: c, br: bufio.NewReader(c)}
	defer c.Close()
	old := c.ConnectionState().PeerCertificates[0]
	if old.SerialNumber.Cmp(first.leaf.SerialNumber) != 0 {
		t.Fatalf("the kept connection got serial %x, want the first certificate's %x (acme-a replaced it before the step began)",
			old.SerialNumber, first.leaf.SerialNumber)
	}
	heldGet := func(when string) {
		t.Helper()
		status, body, err := held.get(acmeAppHost)
		if err != nil || status != http.StatusOK || !strings.HasPrefix(body, "hello from ") {
			t.Fatalf("GET on the connection kept since serial %x was served, %s = %d %q %v, want 200 from the app", old.SerialNumber, when, status, body, err)
		}
	}
	heldGet("at its start")
	heldRequests := 1

	// A fresh visitor every renewalVisitGap, each served; a request on
	// the kept connection every second. Twice the old certificate's
	// life bounds the wait.
	start := time.Now()
	deadline := start.Add(2 * pebbleValidity)
	tick := time.NewTicker(renewalVisitGap)
	defer tick.Stop()
	var renewed *x509.Certificate
	handshakes := 0
	for renewed == nil {
		if time.Now().After(deadline) {
			t.Fatalf("no new certificate for %s at acme-a within %v (%d handshakes; old serial %x expires %v)",
				acmeAppHost, 2*pebbleValidity, handshakes, old.SerialNumber, old.NotAfter.Format(time.RFC3339))
		}
		<-tick.C
		c, err := handshake(addr, acmeAppHost, first.roots)
		if err != nil {
			t.Fatalf("handshake %d for %s at acme-a, %v into the step (old certificate expires %v): %v, want every one to succeed",
				handshakes+1, acmeAppHost, time.Since(start).Round(time.Millisecond), old.NotAfter.Format(time.RFC3339), err)
		}
		handshakes++
		leaf := c.ConnectionState().PeerCertificates[0]
		status, body, err := getOver(c, acmeAppHost)
		if err != nil || status != http.StatusOK || !strings.HasPrefix(body, "hello from ") {
			t.Fatalf("GET https://%s/ via acme-a on handshake %d = %d %q %v, want 200 from the app", acmeAppHost, handshakes, status, body, err)
		}
		if leaf.SerialNumber.Cmp(old.SerialNumber) != 0 {
			renewed = leaf
		}
		if handshakes%2 == 0 {
			heldGet(fmt.Sprintf("after %d fresh handshakes", handshakes))
			heldRequests++
		}
	}
	took := time.Since(start)
	// The handshake verified the chain against Pebble's root alone.
	if err := renewed.VerifyHostname(acmeAppHost); err != nil {
		t.Errorf("the renewed certificate: %v", err)
	}
	if !renewed.NotAfter.After(old.NotAfter) {
		t.Errorf("the renewed certificate expires %v, want later than the old one's %v", renewed.NotAfter, old.NotAfter)
	}
	if !renewed.NotBefore.Before(old.NotAfter) {
		t.Errorf("the renewed certificate was issued at %v, after the old one expired (%v): want renewal before expiry", renewed.NotBefore, old.NotAfter)
	}
	heldGet("after the renewal")
	heldRequests++
	if _, n := tp.obtained("acme-a", acmeAppHost); n <= renewals0 {
		t.Errorf("acme-a logged %d renewal(s) of %s, want more than the %d before the step", n, acmeAppHost, renewals0)
	}
	figs.add(t, "acme: acme-a renewed %s, served %v into the step, issued %v before the old certificate's expiry (serial %x -> %x); %d fresh handshakes and %d requests on a connection opened before it, none failed",
		acmeAppHost, took.Round(time.Millisecond), old.NotAfter.Sub(renewed.NotBefore).Round(time.Second), old.SerialNumber, renewed.SerialNumber, handshakes, heldRequests)

	// acme-b: no client binds app.test there, so it serves the store's
	// certificate (acme_on_demand saw the first one), never orders or
	// renews it, and re-reads the store every tenth of the certificate's
	// life (9 s here). Wait until it serves something newer than the
	// first certificate. acme-a may have renewed again meanwhile (a
	// 90-second certificate is due from its issuance on, see the
	// constants), so the serial is acme-a's latest, not always the one
	// served above.
	bAddr := tp.port("acme-b", 8443)
	var got *x509.Certificate
	bStart := time.Now()
	tp.waitFor("acme-b serves a certificate for "+acmeAppHost+" newer than the first", pebbleValidity, func() bool {
		c, err := handshake(bAddr, acmeAppHost, first.roots)
		if err != nil {
			t.Fatalf("handshake for %s at acme-b after acme-a's renewal: %v, want it to succeed", acmeAppHost, err)
		}
		got = c.ConnectionState().PeerCertificates[0]
		c.Close()
		return got.NotAfter.After(old.NotAfter)
	})
	whose := "a later renewal by acme-a, from the store"
	if got.SerialNumber.Cmp(renewed.SerialNumber) == 0 {
		whose = "the renewal acme-a served above, from the store"
	}
	bFresh, bRenewals := tp.obtained("acme-b", acmeAppHost)
	if bFresh != 0 || bRenewals != 0 {
		t.Errorf("acme-b logged %d new and %d renewed certificate(s) for %s, want none: no client binds it there", bFresh, bRenewals, acmeAppHost)
	}
	figs.add(t, "acme: acme-b served a renewed certificate for %s %v after acme-a's (serial %x, %s); %d order(s) for %s in all, none by acme-b",
		acmeAppHost, time.Since(bStart).Round(time.Millisecond), got.SerialNumber, whose, tp.pebbleOrders(acmeAppHost), acmeAppHost)
}
