package acme

import (
	"github.com/caddyserver/certmagic"
	"golang.org/x/time/rate"
)

// SetServerBucketForTest replaces the server-wide bucket, so that a test
// of the other budgets is not cut short by it.
func (m *Manager) SetServerBucketForTest(burst int) {
	m.limit = rate.NewLimiter(rate.Inf, burst)
}

// certmagicSiteCert is where the store holds m's certificate for name.
func certmagicSiteCert(m *Manager, name string) string {
	return certmagic.StorageKeys.SiteCert(m.issuer.IssuerKey(), name)
}

// certmagicSiteKey is where the store holds m's private key for name.
func certmagicSiteKey(m *Manager, name string) string {
	return certmagic.StorageKeys.SitePrivateKey(m.issuer.IssuerKey(), name)
}
