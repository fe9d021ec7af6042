package server_test

import (
	"context"
	"crypto/tls"
	"github.com/aperio-dev/aperio/internal/server/servertest"
	"net/http"
	"net/http/httptrace"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/server"
	"github.com/aperio-dev/aperio/internal/visitor/policy"
)

func withHeader(cfg *server.Config, value string) {
	cfg.Router.Policy = policy.Config{Headers: []policy.HeaderRule{{Response: policy.HeaderOps{Set: map[string]string{"X-Config": value}}}}}
}

// TestReloadAppliesLiveKeys: a reload applies a header rule and
// max_body_size at once, names the keys it cannot apply live (and keeps
// their running values), and /aperio/health counts it.
func TestReloadAppliesLiveKeys(t *testing.T) {
	t.Parallel()
	var cfg server.Config
	st := servertest.StartStack(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), func(c *server.Config) {
		withHeader(c, "old")
		c.Router.MaxBodyBytes = 4
		cfg = *c
	})
	headerNow := func() string {
		resp, _ := servertest.Do(t, st.Visitor, servertest.NewRequest(t, context.Background(), st.Server, "GET", servertest.AppHost, "/", nil))
		return resp.Header.Get("X-Config")
	}
	postStatus := func() int {
		resp, _ := servertest.Do(t, st.Visitor, servertest.NewRequest(t, context.Background(), st.Server, "POST", servertest.AppHost, "/", strings.NewReader("0123456789")))
		return resp.StatusCode
	}
	if got := headerNow(); got != "old" {
		t.Fatalf("X-Config before the reload = %q, want old", got)
	}
	if got := postStatus(); got != http.StatusRequestEntityTooLarge {
		t.Fatalf("POST of 10 bytes under max_body_size 4 = %d, want 413", got)
	}
	next := cfg
	withHeader(&next, "new")
	next.Router.MaxBodyBytes = 1 << 20
	next.Port = 1 // needs a restart
	next.Store.DataDir = t.TempDir()
	applied, restart, err := st.Server.Gateway.Reload(next)
	if err != nil {
		t.Fatalf("Reload() = %v, want nil", err)
	}
	for _, k := range []string{"max_body_size", "headers"} {
		if !slices.Contains(applied, k) {
			t.Errorf("Reload() applied = %v, want %s in it", applied, k)
		}
	}
	if want := []string{"port", "data_dir"}; !slices.Equal(restart, want) {
		t.Errorf("Reload() restart = %v, want %v", restart, want)
	}
	if got := headerNow(); got != "new" {
		t.Fatalf("X-Config after the reload = %q, want new", got)
	}
	if got := postStatus(); got != http.StatusOK {
		t.Fatalf("POST of 10 bytes after max_body_size 1MiB = %d, want 200", got)
	}
	// A second reload of the same file changes nothing, and still counts.
	applied, restart, err = st.Server.Gateway.Reload(next)
	if err != nil || len(applied) != 0 || !slices.Equal(restart, []string{"port", "data_dir"}) {
		t.Fatalf("Reload(same) = %v, %v, %v; want nothing applied, port and data_dir still needing a restart", applied, restart, err)
	}
}

// TestReloadRefusedKeepsOld: a configuration that does not validate is
// refused whole: nothing of it applies.
func TestReloadRefusedKeepsOld(t *testing.T) {
	t.Parallel()
	var cfg server.Config
	st := servertest.StartStack(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), func(c *server.Config) {
		withHeader(c, "old")
		cfg = *c
	})
	bad := cfg
	withHeader(&bad, "new")
	bad.Router.Policy.Routes = []policy.Route{{Policy: &policy.RoutePolicy{RateLimit: "missing"}}}
	if _, _, err := st.Server.Gateway.Reload(bad); err == nil {
		t.Fatal("Reload(a route naming no rate limit) = nil, want an error")
	}
	bad = cfg
	withHeader(&bad, "new")
	bad.Token = ""
	if _, _, err := st.Server.Gateway.Reload(bad); err == nil {
		t.Fatal("Reload(no token) = nil, want an error")
	}
	resp, _ := servertest.Do(t, st.Visitor, servertest.NewRequest(t, context.Background(), st.Server, "GET", servertest.AppHost, "/", nil))
	if got := resp.Header.Get("X-Config"); got != "old" {
		t.Fatalf("X-Config after refused reloads = %q, want old", got)
	}
}

// TestReloadSwapsCertificate: new certificate files are served to new
// handshakes after a reload, while an open connection keeps working.
func TestReloadSwapsCertificate(t *testing.T) {
	t.Parallel()
	var cfg server.Config
	st := servertest.StartStackFor(t, servertest.Service(servertest.Backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})).URL), func(c *server.Config) { cfg = *c }, true)
	leaf := func(c *http.Client) (raw []byte, reused bool) {
		var got []byte
		trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}
		req := servertest.NewRequest(t, httptrace.WithClientTrace(context.Background(), trace), st.Server, "GET", servertest.AppHost, "/", nil)
		resp, _ := servertest.Do(t, c, req)
		if resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 {
			t.Fatal("answer without a TLS peer certificate")
		}
		got = resp.TLS.PeerCertificates[0].Raw
		return got, reused
	}
	before, _ := leaf(st.Visitor)
	certFile, keyFile, roots := servertest.WriteCert(t)
	for _, f := range [][2]string{{certFile, cfg.TLSCert}, {keyFile, cfg.TLSKey}} {
		b, err := os.ReadFile(f[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f[1], b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	applied, _, err := st.Server.Gateway.Reload(cfg)
	if err != nil {
		t.Fatalf("Reload() = %v, want nil", err)
	}
	if !slices.Contains(applied, "tls certificate") {
		t.Fatalf("Reload() applied = %v, want tls certificate", applied)
	}
	same, reused := leaf(st.Visitor)
	if !reused || string(same) != string(before) {
		t.Fatalf("open connection after the swap: reused %v, same certificate %v; want the connection kept, with its certificate", reused, string(same) == string(before))
	}
	fresh := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	t.Cleanup(fresh.CloseIdleConnections)
	after, _ := leaf(fresh)
	if string(after) == string(before) {
		t.Fatal("a new handshake after the swap got the old certificate, want the new one")
	}
	// A broken certificate file is refused: the new one stays.
	if err := os.WriteFile(cfg.TLSCert, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.Server.Gateway.Reload(cfg); err == nil {
		t.Fatal("Reload(a broken certificate file) = nil, want an error")
	}
	fresh.CloseIdleConnections()
	if again, _ := leaf(fresh); string(again) != string(after) {
		t.Fatal("after a refused certificate, a new handshake got another certificate, want the last good one")
	}
}
