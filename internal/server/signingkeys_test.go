package server_test

import (
	"encoding/json"
	"errors"
	"net/http"
	neturl "net/url"
	"os"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/visitor/access"
	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/store/storetest"
)

// sharedStores returns, per backend, a function opening the store of one
// more server on a common database: on SQLite the same DB each time (one
// server owns a file, and its change feed reaches only that DB), on
// PostgreSQL a DB of its own, as on separate machines. Without
// storetest.DSNEnv the PostgreSQL variant is left out, and the log says so.
func sharedStores(t *testing.T) map[string]func(t *testing.T) *store.DB {
	t.Helper()
	out := map[string]func(t *testing.T) *store.DB{}
	var lite *store.DB
	out["sqlite"] = func(t *testing.T) *store.DB {
		if lite == nil {
			lite = storetest.Open(t, storetest.SQLite(t))
		}
		return lite
	}
	admin := os.Getenv(storetest.DSNEnv)
	if admin == "" {
		t.Logf("%s is not set: the PostgreSQL variant is left out, SQLite only", storetest.DSNEnv)
		return out
	}
	dsn := storetest.CreateDatabase(t, admin)
	out["postgres"] = func(t *testing.T) *store.DB { return storetest.Open(t, store.Config{DatabaseURL: dsn}) }
	return out
}

func jwksOf(t *testing.T, s *testServer) string {
	t.Helper()
	code, body := get(t, newVisitor(t, s), s, "anything.test", "/aperio/.well-known/jwks.json")
	if code != http.StatusOK {
		t.Fatalf("GET jwks.json = %d %q", code, body)
	}
	return body
}

// shareToken mints a link for appHost through s's admin API and returns
// its token.
func shareToken(t *testing.T, s *testServer) string {
	t.Helper()
	code, body := adminCall(t, newVisitor(t, s), s, "POST", "/share", map[string]string{"hostname": appHost, "ttl": "1h"})
	if code != http.StatusCreated {
		t.Fatalf("POST /share = %d %s, want 201", code, body)
	}
	var link struct {
		URL string `json:"url"`
	}
	if err := json.Unmarshal([]byte(body), &link); err != nil {
		t.Fatal(err)
	}
	u, err := neturl.Parse(link.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Query().Get(access.ShareParam)
}

// TestSigningKeysSharedByServers: three servers on one database publish
// the same identity key set, also after one restarts; a share link minted
// on one verifies on another; a plain rotation keeps it valid on both, a
// rotation with revoke refuses it on both (on the other through the
// change feed, well before its periodic reload).
func TestSigningKeysSharedByServers(t *testing.T) {
	t.Parallel()
	for name, open := range sharedStores(t) {
		t.Run(name, func(t *testing.T) {
			cfg := serverConfig(t)
			servers := []*testServer{startServerOn(t, cfg, open(t)), startServerOn(t, cfg, open(t)), startServerOn(t, cfg, open(t))}
			want := jwksOf(t, servers[0])
			for i, s := range servers[1:] {
				if got := jwksOf(t, s); got != want {
					t.Errorf("server %d publishes %s, server 0 %s", i+1, got, want)
				}
			}
			if err := servers[2].stop(); err != nil {
				t.Fatal(err)
			}
			if got := jwksOf(t, startServerOn(t, cfg, open(t))); got != want {
				t.Errorf("restarted server publishes %s, want %s", got, want)
			}

			a, b := servers[0], servers[1].gw.SharesForTest()
			old := shareToken(t, a) // the organization's first key, created on A
			poll(t, 10*time.Second, func() (bool, string) {
				_, err := b.Verify(old)
				return err == nil, "server B does not verify a link of the key A created"
			})
			rotate(t, a, false)
			fresh := shareToken(t, a)
			start := time.Now()
			poll(t, 10*time.Second, func() (bool, string) {
				_, err := b.Verify(fresh)
				return err == nil, "server B does not verify a link of A's rotated key"
			})
			if _, err := b.Verify(old); err != nil {
				t.Errorf("server B after a plain rotation: Verify(old link) = %v, want valid", err)
			}
			rotate(t, a, true)
			if _, err := a.gw.SharesForTest().Verify(fresh); !errors.Is(err, access.ErrShareKey) {
				t.Errorf("server A after revoke: Verify(link of the revoked key) = %v, want ErrShareKey", err)
			}
			poll(t, 10*time.Second, func() (bool, string) {
				_, err := b.Verify(fresh)
				return errors.Is(err, access.ErrShareKey), "server B still verifies a link of the revoked key"
			})
			t.Logf("rotations on A seen by B within %v", time.Since(start).Round(time.Millisecond))
			if _, err := b.Verify(shareToken(t, a)); err != nil {
				t.Errorf("server B: Verify(link of the current key) = %v", err)
			}
		})
	}
}
