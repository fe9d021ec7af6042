package testcert

import (
	"crypto/x509"
	"net"
	"testing"
)

// TestIssueVerifies: a server certificate verifies against its CA's pool
// for its names and usage, not for another name, not against another CA;
// a client certificate verifies for client auth only.
func TestIssueVerifies(t *testing.T) {
	ca, other := NewCA(t, "test CA"), NewCA(t, "other CA")
	srv := ca.Issue(t, Leaf{CommonName: "backend.internal", DNSNames: []string{"backend.internal"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Usage: x509.ExtKeyUsageServerAuth})
	cli := ca.Issue(t, Leaf{CommonName: "client", Usage: x509.ExtKeyUsageClientAuth})
	tests := []struct {
		name  string
		cert  Cert
		opts  x509.VerifyOptions
		valid bool
	}{
		{"server by name", srv, x509.VerifyOptions{Roots: ca.Pool(), DNSName: "backend.internal"}, true},
		{"server by IP", srv, x509.VerifyOptions{Roots: ca.Pool(), DNSName: "127.0.0.1"}, true},
		{"server, other name", srv, x509.VerifyOptions{Roots: ca.Pool(), DNSName: "other.internal"}, false},
		{"server, other CA", srv, x509.VerifyOptions{Roots: other.Pool(), DNSName: "backend.internal"}, false},
		{"client for client auth", cli, x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, true},
		{"client for server auth", cli, x509.VerifyOptions{Roots: ca.Pool()}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.cert.Cert.Verify(tc.opts)
			if got := err == nil; got != tc.valid {
				t.Errorf("Verify() = %v, want valid %v", err, tc.valid)
			}
		})
	}
	if pair := srv.Pair(t); len(pair.Certificate) != 1 || pair.PrivateKey == nil {
		t.Errorf("Pair() = %d certificates, key %v; want 1 and a key", len(pair.Certificate), pair.PrivateKey != nil)
	}
}
