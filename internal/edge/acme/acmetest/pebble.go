// Package acmetest runs Debian's pebble, an ACME test CA that really
// validates challenges, for the tests of automatic TLS.
package acmetest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// Pebble runs with a DNS server of the test's that resolves every name
// to 127.0.0.1, so its validation connects to the listeners under test.

// Pebble is a running Pebble.
type Pebble struct {
	Dir     string         // the ACME directory URL
	APIRoot string         // PEM file of the root Pebble's API serves under (acme.ca_root)
	Roots   *x509.CertPool // the root Pebble's issued certificates chain to
}

// startDNS answers every A query with 127.0.0.1 and every other query
// with no answer; it returns its UDP address.
func startDNS(t testing.TB) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		for _, qq := range q.Question {
			if qq.Qtype == dns.TypeA {
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: qq.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5}, A: net.ParseIP("127.0.0.1")})
			}
		}
		w.WriteMsg(m)
	})}
	go srv.ActivateAndServe()
	t.Cleanup(func() { srv.Shutdown() })
	return pc.LocalAddr().String()
}

// apiCert writes a CA and a certificate for 127.0.0.1 signed by it (for
// Pebble's own HTTPS API) and returns the three PEM files.
func apiCert(t testing.TB, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "pebble api test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	caFile, certFile, keyFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for f, b := range map[string]*pem.Block{caFile: {Type: "CERTIFICATE", Bytes: caDER}, certFile: {Type: "CERTIFICATE", Bytes: der}, keyFile: {Type: "EC PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(f, pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return caFile, certFile, keyFile
}

// Start runs Pebble validating HTTP-01 on httpPort and TLS-ALPN-01 on
// tlsPort of 127.0.0.1, issuing certificates valid for validity. Without
// pebble installed the test is skipped, or fails under CI=true.
func Start(t testing.TB, httpPort, tlsPort int, validity time.Duration) Pebble {
	t.Helper()
	bin, err := exec.LookPath("pebble")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("pebble not found; .ci/run installs Debian's pebble")
		}
		t.Skip("pebble not found (apt-get install pebble); CI installs it")
	}
	dir := t.TempDir()
	caFile, certFile, keyFile := apiCert(t, dir)
	listen, mgmt := FreePort(t), FreePort(t)
	cfg := map[string]any{"pebble": map[string]any{
		"listenAddress":             "127.0.0.1:" + strconv.Itoa(listen),
		"managementListenAddress":   "127.0.0.1:" + strconv.Itoa(mgmt),
		"certificate":               certFile,
		"privateKey":                keyFile,
		"httpPort":                  httpPort,
		"tlsPort":                   tlsPort,
		"ocspResponderURL":          "",
		"certificateValidityPeriod": int(validity / time.Second),
	}}
	cfgFile := filepath.Join(dir, "pebble.json")
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(cfgFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cmd := exec.Command(bin, "-config", cfgFile, "-dnsserver", startDNS(t))
	cmd.Env = append(os.Environ(), "PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0", "PEBBLE_AUTHZREUSE=0")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("pebble's log:\n%s", logs.String())
		}
	})
	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(caFile)
	pool.AppendCertsFromPEM(caPEM)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	// Pebble's root for issued certificates is made at start and served
	// by its management API: poll until it answers.
	var rootPEM []byte
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d/roots/0", mgmt))
		if err == nil {
			rootPEM, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pebble did not start: %v\n%s", err, logs.String())
		}
		time.Sleep(100 * time.Millisecond) // pebble is another process: poll its API
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(rootPEM) {
		t.Fatalf("pebble's root is not PEM: %q", rootPEM)
	}
	return Pebble{Dir: fmt.Sprintf("https://127.0.0.1:%d/dir", listen), APIRoot: caFile, Roots: roots}
}

// Visit makes a TLS handshake with 127.0.0.1:port for name, trusting
// roots, and returns the connection (open) and the leaf certificate.
func Visit(t testing.TB, port int, name string, roots *x509.CertPool) (*tls.Conn, *x509.Certificate, error) {
	t.Helper()
	d := &net.Dialer{Timeout: 5 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	raw, err := d.DialContext(ctx, "tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return nil, nil, err
	}
	c := tls.Client(raw, &tls.Config{ServerName: name, RootCAs: roots, NextProtos: []string{"http/1.1"}})
	if err := c.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, nil, err
	}
	return c, c.ConnectionState().PeerCertificates[0], nil
}

// Get sends one HTTP/1.1 request for name on c and returns the body.
func Get(t testing.TB, c *tls.Conn, name string) string {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", name)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the response on the TLS connection: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b))
}
