package acme

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"

	"github.com/aperio-dev/aperio/internal/testkit/testcert"

	"github.com/aperio-dev/aperio/store/storetest"
)

// fakeClock is a settable clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// budgetManager is a manager whose ask check gives every name the
// organization named by its first label's prefix ("o1-x.d.test" is o1's)
// and refuses names starting with "unbound", on a fake clock, recording
// its audited orders.
func budgetManager(t *testing.T) (*Manager, *fakeClock, *[]Order, *int) {
	t.Helper()
	clk := &fakeClock{now: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	var orders []Order
	asked := 0
	m, err := New(DefaultConfig(), Options{
		Storage: NewStorage(openStore(t, storetest.MigratedDataDir(t))),
		Allowed: func(_ context.Context, name string) (string, error) {
			asked++
			if strings.HasPrefix(name, "unbound") {
				return "", errors.New("no client binds " + name)
			}
			org, _, _ := strings.Cut(name, "-")
			return org, nil
		},
		Audit: func(o Order) { orders = append(orders, o) },
		Now:   clk.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	return m, clk, &orders, &asked
}

// obtain runs what certmagic runs before ordering name: the ask check,
// then the cert_obtaining event.
func obtain(m *Manager, name string, renewal bool) error {
	if err := m.decide(context.Background(), name); err != nil {
		return err
	}
	data := map[string]any{"identifier": name}
	if renewal {
		data["renewal"] = true
	}
	return m.onEvent(context.Background(), "cert_obtaining", data)
}

// TestIssuanceBudgets (security probe F4): one organization, or one
// registered domain, spends its own budget, never another's; an
// organization holding MaxCertificatesPerOrg certificates orders no new
// name; renewals and acme.hostnames count against the server-wide bucket
// only; every order placed is audited, with its organization.
func TestIssuanceBudgets(t *testing.T) {
	m, clk, orders, _ := budgetManager(t)
	m.SetServerBucketForTest(1000)

	// o1 orders names in as many registered domains: its own bucket ends
	// it, o2's is untouched.
	for i := range OrgIssueBurst {
		if err := obtain(m, fmt.Sprintf("o1-x.d%d.test", i), false); err != nil {
			t.Fatalf("o1's order %d: %v", i, err)
		}
	}
	if err := obtain(m, "o1-x.dmore.test", false); err == nil || !strings.Contains(err.Error(), RefusedOrgRate) {
		t.Errorf("o1's order beyond its budget = %v, want %s", err, RefusedOrgRate)
	}
	if err := obtain(m, "o2-x.dother.test", false); err != nil {
		t.Errorf("o2's first order = %v, want nil", err)
	}
	if len(*orders) != OrgIssueBurst+1 || (*orders)[0] != (Order{Name: "o1-x.d0.test", Org: "o1"}) {
		t.Errorf("audited %d orders, first %+v; want %d, the first o1's", len(*orders), (*orders)[0], OrgIssueBurst+1)
	}
	// Renewals are not the organization's to refuse.
	if err := obtain(m, "o1-x.d0.test", true); err != nil {
		t.Errorf("o1's renewal with its budget spent = %v, want nil", err)
	}
	if last := (*orders)[len(*orders)-1]; !last.Renewal {
		t.Errorf("the renewal was audited as %+v", last)
	}
	// The organization's bucket refills.
	clk.Advance(time.Hour)
	if err := obtain(m, "o1-x.dlater.test", false); err != nil {
		t.Errorf("o1's order an hour later = %v, want nil", err)
	}

	// Many organizations under one registered domain share its budget.
	for i := range DomainIssueBurst {
		if err := obtain(m, fmt.Sprintf("p%d-x.shared.test", i), false); err != nil {
			t.Fatalf("order %d under shared.test: %v", i, err)
		}
	}
	if err := obtain(m, "pmore-y.z.shared.test", false); err == nil || !strings.Contains(err.Error(), RefusedDomainRate) {
		t.Errorf("order beyond shared.test's budget = %v, want %s", err, RefusedDomainRate)
	}

	st := m.Stats()
	if st.Refused[RefusedOrgRate] != 1 || st.Refused[RefusedDomainRate] != 1 || st.RateLimited != 2 || st.Orders != int64(OrgIssueBurst+2+DomainIssueBurst) || st.Renewals != 1 {
		t.Errorf("Stats() = %+v", st)
	}
}

// TestServerBucket: the server-wide bucket still bounds everything, and
// the server's own names (acme.hostnames) only by it.
func TestServerBucket(t *testing.T) {
	m, _, _, _ := budgetManager(t)
	m.c.Hostnames = []string{"tunnel.test"}
	for i := range IssueBurst {
		if err := obtain(m, fmt.Sprintf("q%d-x.e%d.test", i, i), false); err != nil {
			t.Fatalf("order %d: %v", i, err)
		}
	}
	for _, name := range []string{"tunnel.test", "r-x.f.test"} {
		err := obtain(m, name, false)
		if err == nil || !strings.Contains(err.Error(), RefusedServerRate) {
			t.Errorf("%s beyond the server's bucket = %v, want %s", name, err, RefusedServerRate)
		}
		wantNoRetry(t, err)
	}
}

// wantNoRetry fails unless err tells certmagic not to retry: it retries
// while holding the name's issuance lock, which every server sharing the
// store waits on (the docker-compose acme_renewal step saw the server
// whose client binds the name unable to renew while another server
// retried a refused renewal).
func wantNoRetry(t *testing.T, err error) {
	t.Helper()
	var noRetry certmagic.ErrNoRetry
	if !errors.As(err, &noRetry) {
		t.Errorf("refusal %v is not certmagic.ErrNoRetry: certmagic would retry it holding the issuance lock", err)
	}
}

// TestStoredCertificatesPerOrg: an organization holding
// MaxCertificatesPerOrg certificates orders no new name; a note whose
// certificate is gone is not counted, and is dropped.
func TestStoredCertificatesPerOrg(t *testing.T) {
	m, _, _, _ := budgetManager(t)
	m.SetServerBucketForTest(1000)
	ctx := context.Background()
	st := m.o.Storage
	// An organization's first order finds no notes at all: none stored,
	// not an error (which would skip the cap, with a warning per order).
	if n, err := m.storedFor(ctx, "fresh"); n != 0 || err != nil {
		t.Errorf("stored certificates of an organization with none = %d, %v; want 0, nil", n, err)
	}
	for i := range MaxCertificatesPerOrg {
		cert := fmt.Sprintf("certificates/ca/n%d.full.test/n%d.full.test.crt", i, i)
		if err := st.Store(ctx, cert, []byte("pem")); err != nil {
			t.Fatal(err)
		}
		if err := st.Store(ctx, ownerKey("full", fmt.Sprintf("n%d.full.test", i)), []byte(cert)); err != nil {
			t.Fatal(err)
		}
	}
	if err := obtain(m, "full-x.new.test", false); err == nil || !strings.Contains(err.Error(), RefusedOrgStoreFull) {
		t.Errorf("a new name of an organization at its cap = %v, want %s", err, RefusedOrgStoreFull)
	}
	if err := obtain(m, "other-x.new.test", false); err != nil {
		t.Errorf("another organization's name = %v, want nil", err)
	}
	// One certificate expired and was cleaned: its note is stale.
	gone := "certificates/ca/n0.full.test/n0.full.test.crt"
	if err := st.Delete(ctx, gone); err != nil {
		t.Fatal(err)
	}
	if err := obtain(m, "full-y.new.test", false); err != nil {
		t.Errorf("a new name once a certificate is gone = %v, want nil", err)
	}
	if st.Exists(ctx, ownerKey("full", "n0.full.test")) {
		t.Error("the stale note was kept")
	}
	// cert_obtained notes the new certificate under its organization.
	if err := m.onEvent(ctx, "cert_obtained", map[string]any{"identifier": "full-y.new.test", "certificate_path": "certificates/ca/full-y.new.test/full-y.new.test.crt"}); err != nil {
		t.Fatal(err)
	}
	if v, err := st.Load(ctx, ownerKey("full", "full-y.new.test")); err != nil || string(v) != "certificates/ca/full-y.new.test/full-y.new.test.crt" {
		t.Errorf("note of the new certificate = %q, %v", v, err)
	}
}

// TestNegativeCache: a refused name is not asked again for a minute,
// unless the binds changed (Generation); the cache is bounded.
func TestNegativeCache(t *testing.T) {
	m, clk, _, asked := budgetManager(t)
	var gen uint64
	m.o.Generation = func() uint64 { return gen }
	for range 3 {
		if err := m.decide(context.Background(), "unbound.test"); err == nil {
			t.Fatal("an unbound name was allowed")
		}
	}
	if *asked != 1 {
		t.Errorf("3 handshakes for a refused name asked %d times, want 1", *asked)
	}
	gen++ // a client bound or left
	m.decide(context.Background(), "unbound.test")
	clk.Advance(negativeTTL)
	m.decide(context.Background(), "unbound.test")
	if *asked != 3 {
		t.Errorf("asked %d times after a bind change and a minute, want 3", *asked)
	}
	if st := m.Stats(); st.Refused[RefusedNotBound] != 3 || st.Refused[RefusedCached] != 2 || st.Denied != 5 {
		t.Errorf("Stats() = %+v", st)
	}
	for i := range maxNames + 100 {
		m.decide(context.Background(), fmt.Sprintf("unbound%d.test", i))
	}
	if n := m.refused.len(); n > maxNames {
		t.Errorf("negative cache holds %d names, bound %d", n, maxNames)
	}
	// Hostile names never reach the ask check.
	before := *asked
	for _, name := range []string{"", "*.a.test", "a..test", strings.Repeat("a", 300) + ".test", "1.2.3.4", "a b.test"} {
		if err := m.decide(context.Background(), name); err == nil {
			t.Errorf("decide(%q) = nil", name)
		}
	}
	if *asked != before {
		t.Errorf("hostile names reached the ask check %d times", *asked-before)
	}
}

// TestRegisteredDomain: the public suffix list decides.
func TestRegisteredDomain(t *testing.T) {
	for name, want := range map[string]string{
		"a.b.example.com":   "example.com",
		"x.y.example.co.uk": "example.co.uk",
		"rnd1.w.test":       "w.test",
		"app.github.io":     "app.github.io",
		"example.com":       "example.com",
		"com":               "com",
	} {
		if got := RegisteredDomain(name); got != want {
			t.Errorf("RegisteredDomain(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestStoredButUnbound: a name no client binds here whose certificate is
// in the store (another server obtained it for its client) is served
// from the store, and re-read from it so that the other server's renewal
// is served here before the old certificate expires; this server neither
// orders nor renews it (certmagic never holds it, so never tries), and a
// name bound here is left to certmagic.
func TestStoredButUnbound(t *testing.T) {
	m, clk, orders, _ := budgetManager(t)
	ctx := context.Background()
	ca := testcert.NewCA(t, "stored-but-unbound CA")
	put := func(name string) testcert.Cert {
		t.Helper()
		c := ca.Issue(t, testcert.Leaf{CommonName: name, DNSNames: []string{name}, Usage: x509.ExtKeyUsageServerAuth})
		if err := m.o.Storage.Store(ctx, certmagicSiteCert(m, name), c.CertPEM); err != nil {
			t.Fatal(err)
		}
		if err := m.o.Storage.Store(ctx, certmagicSiteKey(m, name), c.KeyPEM); err != nil {
			t.Fatal(err)
		}
		return c
	}
	serial := func(name string) string {
		t.Helper()
		cert, ok, err := m.servedFromStore(ctx, name)
		if !ok || err != nil {
			t.Fatalf("servedFromStore(%s) = ok %v, %v; want its stored certificate", name, ok, err)
		}
		return cert.Leaf.SerialNumber.String()
	}

	if _, ok, _ := m.servedFromStore(ctx, "unbound-elsewhere.test"); ok {
		t.Error("an unbound name without a stored certificate was served from the store")
	}
	if err := m.decide(ctx, "unbound-elsewhere.test"); err == nil {
		t.Error("an unbound name without a stored certificate was allowed an order")
	}

	name := "unbound-other.test"
	first := put(name)
	if got := serial(name); got != first.Cert.SerialNumber.String() {
		t.Errorf("served serial %s, want the stored %s", got, first.Cert.SerialNumber)
	}
	// The other server renews: served here once the copy is re-read, a
	// tenth of its life later at most a minute, long before it expires.
	renewed := put(name)
	if got := serial(name); got != first.Cert.SerialNumber.String() {
		t.Errorf("served serial %s right after the renewal, want the copy in memory %s", got, first.Cert.SerialNumber)
	}
	clk.Advance(storeRefreshMax)
	if got := serial(name); got != renewed.Cert.SerialNumber.String() {
		t.Errorf("served serial %s a minute after the renewal, want the renewed %s", got, renewed.Cert.SerialNumber)
	}

	for _, renewal := range []bool{false, true} {
		data := map[string]any{"identifier": name, "renewal": renewal}
		err := m.onEvent(ctx, "cert_obtaining", data)
		if err == nil {
			t.Errorf("an order (renewal %v) for a name no client binds here was placed", renewal)
		}
		wantNoRetry(t, err)
	}
	if err := m.decide(ctx, name); err == nil {
		t.Error("certmagic's ask allowed a name no client binds here: it would hold, and renew, it")
	}

	// A name bound here, stored or not, is certmagic's: loaded, renewed.
	put("o1-bound.test")
	if _, ok, _ := m.servedFromStore(ctx, "o1-bound.test"); ok {
		t.Error("a name bound here was served from the store, outside certmagic's renewal")
	}
	if len(*orders) != 0 {
		t.Errorf("audited orders %+v, want none", *orders)
	}
}
