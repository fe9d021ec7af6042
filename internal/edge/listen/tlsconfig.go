package listen

import "crypto/tls"

// aeadSuites are the TLS 1.2 cipher suites offered: ECDHE key exchange
// with AES-GCM or ChaCha20-Poly1305 only, so no CBC mode and no SHA-1 MAC.
// TLS 1.3 suites are all AEAD and not configurable.
var aeadSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// TLSConfig returns a new TLS configuration for the public port (used
// only when it serves TLS: tls_cert, or the base acme builds on): TLS 1.2
// at least, AEAD suites only, the certificate from get (called per
// handshake, so that a reload replaces it; nil leaves GetCertificate
// unset).
func TLSConfig(get func(*tls.ClientHelloInfo) (*tls.Certificate, error)) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, CipherSuites: aeadSuites, GetCertificate: get}
}
