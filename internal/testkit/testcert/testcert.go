// Package testcert makes the certificates of tests: a CA of the test's
// own and the server and client certificates it signs, ECDSA P-256,
// valid from an hour before now to an hour after, as parsed values and as
// PEM. Only tests import it.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"testing"
	"time"
)

// Cert is a certificate and its private key.
type Cert struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// CertPEM is Cert as one PEM CERTIFICATE block; KeyPEM is Key as one
	// PKCS #8 PRIVATE KEY block.
	CertPEM, KeyPEM []byte
}

// Pair returns c as a tls.Certificate, for a tls.Config.
func (c Cert) Pair(tb testing.TB) tls.Certificate {
	tb.Helper()
	pair, err := tls.X509KeyPair(c.CertPEM, c.KeyPEM)
	if err != nil {
		tb.Fatalf("testcert: tls.X509KeyPair: %v", err)
	}
	return pair
}

// CA is a self-signed certificate authority that signs leaves with Issue.
type CA struct {
	Cert
}

// NewCA makes a CA whose subject's common name is cn.
func NewCA(tb testing.TB, cn string) *CA {
	tb.Helper()
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: cn},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	return &CA{Cert: makeCert(tb, tmpl, nil)}
}

// Pool returns a pool holding ca alone: the RootCAs of a client that
// trusts it, or the ClientCAs of a server that admits its clients.
func (ca *CA) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert.Cert)
	return pool
}

// Leaf is what a certificate Issue makes names and may be used for.
type Leaf struct {
	// CommonName is the subject's common name.
	CommonName string
	// DNSNames and IPs are the names it is valid for; none for a client
	// certificate.
	DNSNames []string
	IPs      []net.IP
	// Usage is x509.ExtKeyUsageServerAuth or x509.ExtKeyUsageClientAuth.
	Usage x509.ExtKeyUsage
}

// Issue makes the certificate of leaf, signed by ca.
func (ca *CA) Issue(tb testing.TB, leaf Leaf) Cert {
	tb.Helper()
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: leaf.CommonName},
		DNSNames:    leaf.DNSNames,
		IPAddresses: leaf.IPs,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{leaf.Usage},
	}
	return makeCert(tb, tmpl, &ca.Cert)
}

// makeCert signs tmpl with parent, or with its own new key when parent is
// nil.
func makeCert(tb testing.TB, tmpl *x509.Certificate, parent *Cert) Cert {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatalf("testcert: generate key: %v", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		tb.Fatalf("testcert: serial number: %v", err)
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(time.Hour)
	signer, issuer := key, tmpl
	if parent != nil {
		signer, issuer = parent.Key, parent.Cert
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, issuer, &key.PublicKey, signer)
	if err != nil {
		tb.Fatalf("testcert: create certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatalf("testcert: parse certificate: %v", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatalf("testcert: marshal key: %v", err)
	}
	return Cert{
		Cert:    cert,
		Key:     key,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}
}
