package acme

import (
	"context"
	"crypto/tls"
	"fmt"
	"slices"
	"time"

	"github.com/caddyserver/certmagic"
)

// Names no client binds on this server, whose certificate another server
// (the one its client is connected to) obtained into the shared store,
// are served from the store by the manager itself, outside certmagic:
// certmagic would also try to renew them at handshakes once they are due,
// which this server must not do (no order for a name nobody serves here)
// and which, refused, would leave the handshake of an expired copy
// failing instead of picking up the binding server's renewal.

// storeRefresh bounds how long a certificate served from the store is
// kept in memory before the store is read again: a tenth of its life,
// at most storeRefreshMax, so that a renewal by the binding server is
// served here well before the old certificate expires.
const storeRefreshMax = time.Minute

// fromStore is one certificate served from the store: the pair, and when
// to read the store again.
type fromStore struct {
	cert     *tls.Certificate
	reloadAt time.Time
}

// loadOnlyTTL is how long a verdict "not bound here, stored" is kept
// (or until the binds change, see Options.Generation).
const loadOnlyTTL = time.Minute

// servedFromStore returns the certificate of a name that no client binds
// here but whose certificate the store holds, or ok false when the name
// is not such a name (certmagic then serves, orders or refuses it).
func (m *Manager) servedFromStore(ctx context.Context, name string) (*tls.Certificate, bool, error) {
	if slices.Contains(m.c.Hostnames, name) {
		return nil, false, nil
	}
	now := m.o.Now()
	var gen uint64
	if m.o.Generation != nil {
		gen = m.o.Generation()
	}
	if g, ok := m.refused.get(name, now); ok && g == gen {
		return nil, false, nil // refused a moment ago: decide answers from its cache
	}
	if g, ok := m.loadOnly.get(name, now); !ok || g != gen {
		if _, err := m.o.Allowed(ctx, name); err == nil {
			m.loadOnly.forget(name)
			return nil, false, nil
		}
		if !m.stored(ctx, name) {
			return nil, false, nil
		}
		m.loadOnly.put(name, gen, now)
	}
	if s, ok := m.storeCerts.get(name, now); ok && now.Before(s.reloadAt) {
		return s.cert, true, nil
	}
	cert, err := m.loadStored(ctx, name)
	if err != nil {
		if s, ok := m.storeCerts.get(name, now); ok && now.Before(s.cert.Leaf.NotAfter) {
			return s.cert, true, nil // the store is unreachable a moment: keep serving the copy
		}
		return nil, true, err
	}
	refresh := cert.Leaf.NotAfter.Sub(cert.Leaf.NotBefore) / 10
	refresh = min(max(refresh, time.Second), storeRefreshMax)
	m.storeCerts.put(name, fromStore{cert: cert, reloadAt: now.Add(refresh)}, now)
	return cert, true, nil
}

// loadStored reads name's certificate and key from the store.
func (m *Manager) loadStored(ctx context.Context, name string) (*tls.Certificate, error) {
	ik := m.issuer.IssuerKey()
	certPEM, err := m.o.Storage.Load(ctx, certmagic.StorageKeys.SiteCert(ik, name))
	if err != nil {
		return nil, fmt.Errorf("acme: the stored certificate of %s: %w", name, err)
	}
	keyPEM, err := m.o.Storage.Load(ctx, certmagic.StorageKeys.SitePrivateKey(ik, name))
	if err != nil {
		return nil, fmt.Errorf("acme: the stored key of %s: %w", name, err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("acme: the stored certificate of %s: %w", name, err)
	}
	if err := cert.Leaf.VerifyHostname(name); err != nil {
		return nil, fmt.Errorf("acme: the stored certificate of %s: %w", name, err)
	}
	return &cert, nil
}
