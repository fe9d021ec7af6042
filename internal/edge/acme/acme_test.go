package acme

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/edge/acme/acmetest"
	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/store/storetest"
)

// server is one Aperio-like server under test: a manager, its public TLS
// port and its HTTP port.
type server struct {
	m         *Manager
	tlsPort   int
	httpPort  int
	asked     chan string
	stopServe func()
}

// startServer runs a manager over db with the ask check allowing allowed,
// its TLS listener on tlsPort and HTTP listener on httpPort.
func startServer(t *testing.T, p acmetest.Pebble, db *store.DB, c Config, tlsPort, httpPort int, allowed ...string) *server {
	t.Helper()
	s := &server{tlsPort: tlsPort, httpPort: httpPort, asked: make(chan string, 100)}
	c.CA, c.CARoot, c.HTTPPort = p.Dir, p.APIRoot, httpPort
	m, err := New(c, Options{
		Storage: NewStorage(db),
		Allowed: func(_ context.Context, name string) (string, error) {
			select {
			case s.asked <- name:
			default:
			}
			for _, a := range allowed {
				if a == name {
					return "org-" + name, nil
				}
			}
			return "", fmt.Errorf("no client binds %s", name)
		},
		PublicPort:         tlsPort,
		Logger:             slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		RenewCheckInterval: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.m = m
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello from "+r.Host) })
	tlsLn, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(tlsPort))
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: app, TLSConfig: m.TLSConfig(&tls.Config{MinVersion: tls.VersionTLS12})}
	go hs.ServeTLS(tlsLn, "", "")
	var hh *http.Server
	if httpPort != 0 {
		httpLn, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(httpPort))
		if err != nil {
			t.Fatal(err)
		}
		hh = &http.Server{Handler: m.HTTPHandler()}
		go hh.Serve(httpLn)
	}
	s.stopServe = func() {
		hs.Close()
		if hh != nil {
			hh.Close()
		}
		cancel()
		<-done
	}
	t.Cleanup(s.stopServe)
	return s
}

// openStore opens the SQLite store in dir; tests pass a copy of a
// migrated database (storetest.MigratedDataDir), as none tests migrating
// and migrating an empty one costs about half a second of CPU under -race.
func openStore(t *testing.T, dir string) *store.DB {
	t.Helper()
	return openStoreConfig(t, store.Config{DataDir: dir})
}

func openStoreConfig(t *testing.T, cfg store.Config) *store.DB {
	t.Helper()
	db, err := store.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestPebbleIssuesOnDemand: the first handshake for an allowed name
// obtains a certificate from Pebble (each challenge type on its own, so
// both solvers are proven), chained to Pebble's root, and stored; a name
// the ask check refuses gets no certificate and no ACME order.
func TestPebbleIssuesOnDemand(t *testing.T) {
	for _, ch := range []string{ChallengeTLSALPN, ChallengeHTTP} {
		t.Run(ch, func(t *testing.T) {
			tlsPort, httpPort := acmetest.FreePort(t), acmetest.FreePort(t)
			p := acmetest.Start(t, httpPort, tlsPort, time.Hour)
			db := openStore(t, storetest.MigratedDataDir(t))
			c := DefaultConfig()
			c.Challenges = []string{ch}
			c.Email = "ops@example.com"
			s := startServer(t, p, db, c, tlsPort, httpPort, "app.test")

			conn, leaf, err := acmetest.Visit(t, tlsPort, "app.test", p.Roots)
			if err != nil {
				t.Fatalf("handshake for app.test: %v", err)
			}
			defer conn.Close()
			if leaf.Subject.CommonName != "app.test" && (len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != "app.test") {
				t.Errorf("certificate for %v %q, want app.test", leaf.DNSNames, leaf.Subject.CommonName)
			}
			if got := acmetest.Get(t, conn, "app.test"); got != "hello from app.test" {
				t.Errorf("request over the issued certificate: %q", got)
			}
			if st := s.m.Stats(); st.Issued != 1 {
				t.Errorf("stats %+v, want one issued", st)
			}
			items, err := db.ACMEList(context.Background(), "")
			if err != nil {
				t.Fatal(err)
			}
			var stored bool
			for _, it := range items {
				if strings.HasSuffix(it.Key, "/app.test/app.test.crt") {
					stored = true
				}
			}
			if !stored {
				t.Errorf("no certificate for app.test in the store: %v", items)
			}

			// A name no token may serve: the handshake fails and nothing
			// is ordered.
			if c, _, err := acmetest.Visit(t, tlsPort, "evil.test", p.Roots); err == nil {
				c.Close()
				t.Fatal("a handshake for evil.test succeeded")
			}
			if st := s.m.Stats(); st.Issued != 1 || st.Denied == 0 {
				t.Errorf("after evil.test: %+v, want still one issued and a denial", st)
			}
			items, _ = db.ACMEList(context.Background(), "")
			for _, it := range items {
				if strings.Contains(it.Key, "evil.test") {
					t.Errorf("the store holds %s for a refused name", it.Key)
				}
			}
		})
	}
}

// TestPebbleTwoServersOneCertificate: two servers sharing one store (an
// SQLite file, and a PostgreSQL database when APERIO_TEST_POSTGRES_DSN
// names a server, as in CI), each asked for the same name at once, obtain
// one certificate between them and serve the same one. Only the first
// listens where Pebble validates: when the second starts the order, the
// first answers the challenge from the shared store.
func TestPebbleTwoServersOneCertificate(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			var cfg store.Config
			if backend == "sqlite" {
				cfg = storetest.MigratedSQLite(t)
			} else {
				cfg = storetest.MigratedPostgres(t)
			}
			tlsA, httpA, tlsB := acmetest.FreePort(t), acmetest.FreePort(t), acmetest.FreePort(t)
			p := acmetest.Start(t, httpA, tlsA, time.Hour)
			dbA, dbB := openStoreConfig(t, cfg), openStoreConfig(t, cfg) // two servers, one database
			c := DefaultConfig()
			c.Challenges = []string{ChallengeTLSALPN}
			a := startServer(t, p, dbA, c, tlsA, httpA, "app.test")
			b := startServer(t, p, dbB, c, tlsB, 0, "app.test")

			var wg sync.WaitGroup
			serials := make([]string, 2)
			errs := make([]error, 2)
			for i, port := range []int{tlsA, tlsB} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					conn, leaf, err := acmetest.Visit(t, port, "app.test", p.Roots)
					if err != nil {
						errs[i] = err
						return
					}
					conn.Close()
					serials[i] = leaf.SerialNumber.String()
				}()
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatalf("handshakes: %v", err)
			}
			if serials[0] != serials[1] {
				t.Errorf("the servers serve two certificates (%s, %s), want one", serials[0], serials[1])
			}
			if total := a.m.Stats().Issued + b.m.Stats().Issued; total != 1 {
				t.Errorf("the two servers obtained %d certificates, want 1 (a: %+v, b: %+v)", total, a.m.Stats(), b.m.Stats())
			}
		})
	}
}

// TestPebbleRenewsWithoutDropping: with Pebble issuing short-lived
// certificates, the manager renews before expiry, no handshake fails
// meanwhile, a connection opened on the first certificate keeps working,
// and new handshakes get the new one.
func TestPebbleRenewsWithoutDropping(t *testing.T) {
	// The certificate's life is what the test waits for: the renewal
	// window opens after two thirds of it (certmagic's ratio), or once
	// less than five RenewCheckIntervals (5 s) are left, whichever comes
	// first. 24 s opens it at 16 s and leaves the renewal order (well
	// under a second on an idle machine) 8 s before expiry, room for a
	// loaded CI run; 30 s made the test wait 20 s, 12 s left only 5 s.
	const validity = 24 * time.Second
	tlsPort, httpPort := acmetest.FreePort(t), acmetest.FreePort(t)
	p := acmetest.Start(t, httpPort, tlsPort, validity)
	db := openStore(t, storetest.MigratedDataDir(t))
	s := startServer(t, p, db, DefaultConfig(), tlsPort, httpPort, "app.test")
	conn, first, err := acmetest.Visit(t, tlsPort, "app.test", p.Roots)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// An on-demand certificate is renewed by the handshakes that find it
	// in its renewal window: visitors keep coming, one every half second
	// (the traffic, not a wait: without handshakes nothing renews), and
	// one of them starts the renewal while being served the current
	// certificate.
	visitor := time.NewTicker(500 * time.Millisecond)
	defer visitor.Stop()
	deadline := time.Now().Add(validity * 4 / 3)
	for s.m.Stats().Issued < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no renewal within %v of a %v certificate: %+v", validity*4/3, validity, s.m.Stats())
		}
		if c, _, err := acmetest.Visit(t, tlsPort, "app.test", p.Roots); err != nil {
			t.Fatalf("a handshake while the certificate is valid failed: %v", err)
		} else {
			c.Close()
		}
		<-visitor.C
	}
	c2, second, err := acmetest.Visit(t, tlsPort, "app.test", p.Roots)
	if err != nil {
		t.Fatal(err)
	}
	c2.Close()
	if second.SerialNumber.Cmp(first.SerialNumber) == 0 {
		t.Error("a handshake after the renewal got the old certificate")
	}
	if got := acmetest.Get(t, conn, "app.test"); got != "hello from app.test" {
		t.Errorf("the connection opened before the renewal: %q", got)
	}
}

// TestHTTPPortRedirects: the HTTP port answers a challenge path it does
// not know with the redirect like any other path, keeps path and query,
// names the public port, and refuses a Host that is not a hostname
// (no open redirect to whatever a visitor writes).
func TestHTTPPortRedirects(t *testing.T) {
	m, err := New(DefaultConfig(), Options{Storage: NewStorage(openStore(t, storetest.MigratedDataDir(t))), Allowed: allowAll, PublicPort: 8443})
	if err != nil {
		t.Fatal(err)
	}
	h := m.HTTPHandler()
	for _, c := range []struct{ host, uri, want string }{
		{"app.test", "/a/b?c=d", "https://app.test:8443/a/b?c=d"},
		{"APP.test:80", "/", "https://app.test:8443/"},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, request(c.host, c.uri))
		if rec.Code != http.StatusPermanentRedirect || rec.Header().Get("Location") != c.want {
			t.Errorf("%s%s: %d %q, want 308 %q", c.host, c.uri, rec.Code, rec.Header().Get("Location"), c.want)
		}
	}
	for _, host := range []string{"evil.test/@attacker.example", "1.2.3.4", "", "a b"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, request(host, "/"))
		if rec.Code != http.StatusBadRequest {
			t.Errorf("Host %q: %d %q, want 400", host, rec.Code, rec.Header().Get("Location"))
		}
	}
}

// TestConfigValidate: each bad acme: value is refused naming its key.
func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.CA = "http://ca.example/dir" }, "acme.ca"},
		{func(c *Config) { c.Email = "not an email" }, "acme.email"},
		{func(c *Config) { c.Challenges = nil }, "acme.challenges"},
		{func(c *Config) { c.Challenges = []string{"dns-01"} }, "dns-01 is not supported"},
		{func(c *Config) { c.HTTPPort = 70000 }, "acme.http_port"},
		{func(c *Config) { c.HTTPPort = 0; c.Challenges = []string{ChallengeHTTP} }, "http-01 alone"},
		{func(c *Config) { c.OnDemandGrace = -time.Second }, "acme.on_demand_grace"},
		{func(c *Config) { c.OnDemandGrace = MaxOnDemandGrace + time.Second }, "acme.on_demand_grace"},
	} {
		cfg := DefaultConfig()
		c.mod(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%+v) = %v, want an error naming %q", cfg, err, c.want)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Errorf("the defaults do not validate: %v", err)
	}
	if _, err := New(DefaultConfig(), Options{}); err == nil {
		t.Error("New without storage or ask check accepted")
	}
	bad := DefaultConfig()
	bad.CARoot = os.DevNull
	if _, err := New(bad, Options{Storage: NewStorage(openStore(t, storetest.MigratedDataDir(t))), Allowed: allowAll}); err == nil || !strings.Contains(err.Error(), "acme.ca_root") {
		t.Errorf("a ca_root without a certificate: %v", err)
	}
}

func allowAll(context.Context, string) (string, error) { return "", nil }

func request(host, uri string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, uri, nil)
	r.Host = host
	return r
}
