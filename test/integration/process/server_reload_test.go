package process_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/server"
	"github.com/aperio-dev/aperio/internal/testkit/procs"
	"github.com/aperio-dev/aperio/internal/testkit/testcert"
)

// liveConfig is the body of the live-settings test's file at version v:
// a fixed answer and a header rule naming v, a body limit and
// tunnel_max_streams (which needs a restart), and log_level.
func liveConfig(v string, maxBody, streams int, level string) string {
	return fmt.Sprintf(`log_level: %s
max_body_size: %d
tunnel_max_streams: %d
routes:
  - path: /fixed
    respond: {body: "fixed %s"}
headers:
  - response: {set: {X-Config: %s}}
`, level, maxBody, streams, v, v)
}

// splitKeys splits a logged key list ("a, b" or none).
func splitKeys(s string) []string {
	if s == "none" {
		return nil
	}
	return strings.Split(s, ", ")
}

// TestProcessReloadLiveSettings: an edit of the server's file applies
// max_body_size, a route rule, a header rule and log_level while the
// server runs, names tunnel_max_streams as needing a restart, and lets a
// request admitted before it finish on the old settings (its answer
// carries the old header) while new requests see the new ones.
func TestProcessReloadLiveSettings(t *testing.T) {
	bin := procs.Binaries(t)
	entered, release := make(chan struct{}, 1), make(chan struct{})
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-release
		}
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "%s read %d", r.URL.Path, n)
	}))
	t.Cleanup(backend.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	s := startReloadServer(t, bin, "http", liveConfig("v1", 64, 100, "info"))

	client := exec.Command(filepath.Join(bin, "aperio-client"), strings.TrimPrefix(backend.URL, "http://"),
		"--hostname", "live.test", "--server-url", s.base, "--server-token", reloadMaster)
	client.Dir = t.TempDir()
	client.Env = append(processEnv(), "HOME="+client.Dir)
	startLogged(t, client).waitLine(t, 0, regexp.MustCompile(`msg="tunnel connected"`))

	c := &http.Client{Transport: &http.Transport{Proxy: nil}}
	t.Cleanup(c.CloseIdleConnections)
	waitFor(t, "live.test answers 200", func() bool {
		resp, _ := get(t, c, "GET", s.base+"/", "live.test", nil, nil)
		return resp.StatusCode == http.StatusOK
	})
	body := strings.Repeat("x", 100)
	if resp, _ := get(t, c, "POST", s.base+"/", "live.test", strings.NewReader(body), nil); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("POST of 100 bytes under max_body_size 64 = %d, want 413", resp.StatusCode)
	}

	type answer struct {
		code         int
		header, body string
	}
	slow := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest("GET", s.base+"/slow", nil)
		req.Host = "live.test"
		resp, err := c.Do(req)
		if err != nil {
			slow <- answer{body: err.Error()}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		slow <- answer{resp.StatusCode, resp.Header.Get("X-Config"), string(b)}
	}()
	<-entered

	from := s.mark()
	s.write(t, "aperio-server.yaml", liveConfig("v2", 1<<20, 50, "debug"))
	m := s.waitLine(t, from, reloaded)
	if m[1] != "file changed: "+s.file {
		t.Errorf("reload reason = %q, want file changed: %s", m[1], s.file)
	}
	reloadLevel(t, m) // WARN: tunnel_max_streams waits for a restart
	applied, restart := splitKeys(m[2]), splitKeys(m[3])
	for _, k := range []string{"max_body_size", "routes", "headers", "log_level"} {
		if !slices.Contains(applied, k) {
			t.Errorf("applied = %v, want %s in it", applied, k)
		}
	}
	if !slices.Equal(restart, []string{"tunnel_max_streams"}) {
		t.Errorf("restart needed = %v, want [tunnel_max_streams]", restart)
	}

	// New requests: all of the new configuration.
	resp, got := get(t, c, "GET", s.base+"/", "live.test", nil, nil)
	if resp.Header.Get("X-Config") != "v2" {
		t.Errorf("X-Config of a request after the reload = %q, want v2", resp.Header.Get("X-Config"))
	}
	if _, got = get(t, c, "GET", s.base+"/fixed", "live.test", nil, nil); got != "fixed v2" {
		t.Errorf("GET /fixed after the reload = %q, want fixed v2", got)
	}
	if resp, got = get(t, c, "POST", s.base+"/", "live.test", strings.NewReader(body), nil); resp.StatusCode != http.StatusOK || got != "/ read 100" {
		t.Errorf("POST of 100 bytes after max_body_size 1MiB = %d %q, want 200 \"/ read 100\"", resp.StatusCode, got)
	}
	// The request admitted before the reload finishes on the old one.
	close(release)
	if a := <-slow; a.code != http.StatusOK || a.body != "/slow read 0" || a.header != "v1" {
		t.Errorf("request in flight across the reload = %d %q, X-Config %q; want 200 \"/slow read 0\" with the old v1", a.code, a.body, a.header)
	}
	// log_level is live: at error, the reload's own line (info) is not
	// written, though the reload applies and is audited; back at info,
	// it is.
	from = s.mark()
	s.write(t, "aperio-server.yaml", liveConfig("v3", 1<<20, 50, "error"))
	waitFor(t, "GET /fixed answers fixed v3", func() bool {
		_, got := get(t, c, "GET", s.base+"/fixed", "live.test", nil, nil)
		return got == "fixed v3"
	})
	waitFor(t, "the v3 reload audited", func() bool { return len(audit(t, s, c, server.EventConfigReloaded)) == 2 })
	if n := s.count(from, reloadedAny); n != 0 {
		t.Errorf("%d info lines of a reload under log_level error, want none", n)
	}
	s.write(t, "aperio-server.yaml", liveConfig("v4", 1<<20, 50, "info"))
	m = s.waitLine(t, from, reloaded)
	if applied := splitKeys(m[2]); !slices.Contains(applied, "log_level") || !slices.Contains(applied, "routes") {
		t.Errorf("applied of the reload back to info = %v, want log_level and routes", applied)
	}
}

// audit returns the server's audit entries of event, newest first, read
// with the master token.
func audit(t *testing.T, s *reloadServer, c *http.Client, event string) []apitype.AuditEntry {
	t.Helper()
	resp, body := get(t, c, "GET", s.base+apitype.Prefix+"/audit?event="+event, "", nil, http.Header{"Authorization": {"Bearer " + reloadMaster}})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /aperio/api/audit = %d %q, want 200", resp.StatusCode, body)
	}
	var es []apitype.AuditEntry
	if err := json.Unmarshal([]byte(body), &es); err != nil {
		t.Fatalf("GET /aperio/api/audit: %v in %q", err, body)
	}
	return es
}

// waitAudit waits for at least n audit entries of event and returns them
// all: the entry is written through the events queue after the log line
// a test waits on, so it may come a moment later. It returns what is
// there once n have come, so a test still sees one entry too many; it
// fails the test when n do not come within the poll.
func waitAudit(t *testing.T, s *reloadServer, c *http.Client, event string, n int) []apitype.AuditEntry {
	t.Helper()
	var es []apitype.AuditEntry
	waitFor(t, fmt.Sprintf("%d %s audit entries", n, event), func() bool {
		es = audit(t, s, c, event)
		return len(es) >= n
	})
	return es
}

// fixedRoute is an included file's route rule answering body at /fixed.
func fixedRoute(body string) string {
	return "routes:\n  - path: /fixed\n    respond: {body: \"" + body + "\"}\n"
}

// TestProcessReloadBrokenEditKeepsOld: an edit of an included file that
// does not validate, and a main file past the size bound, are refused:
// the server answers on as before, logs why at ERROR and audits
// config_reload_failed; fixing the file (still watched) applies it, and
// a file newly included is watched from then on.
func TestProcessReloadBrokenEditKeepsOld(t *testing.T) {
	bin := procs.Binaries(t)
	s := newReloadServer(t)
	s.write(t, "aperio-server.yaml", "include: [routes.yaml]\n")
	s.write(t, "routes.yaml", fixedRoute("good"))
	s.start(t, bin, "http")
	c := &http.Client{Transport: &http.Transport{Proxy: nil}}
	t.Cleanup(c.CloseIdleConnections)
	fixed := func() string {
		_, got := get(t, c, "GET", s.base+"/fixed", "any.test", nil, nil)
		return got
	}
	if got := fixed(); got != "good" {
		t.Fatalf("GET /fixed = %q, want good", got)
	}

	// A glob that does not compile, in the included file.
	from := s.mark()
	s.write(t, "routes.yaml", "routes:\n  - path: \"/a/[b\"\n    respond: {body: broken}\n")
	m := s.waitLine(t, from, reloadFailed)
	if want := "file changed: " + filepath.Join(s.dir, "routes.yaml"); m[1] != want {
		t.Errorf("failed reload's reason = %q, want %q", m[1], want)
	}
	if !strings.Contains(m[2], "routes.yaml") || !strings.Contains(m[2], "not a valid glob") {
		t.Errorf("failed reload's error = %s, want the file and the glob's problem", m[2])
	}
	if got := fixed(); got != "good" {
		t.Errorf("GET /fixed after a broken edit = %q, want the old good", got)
	}
	es := waitAudit(t, s, c, server.EventConfigReloadFailed, 1)
	if len(es) != 1 || !strings.Contains(es[0].Detail, "not a valid glob") || es[0].Actor != "server" {
		t.Fatalf("config_reload_failed entries = %+v, want one by server naming the glob's problem", es)
	}

	// A main file past the 1 MiB bound (a hostile or runaway edit).
	from = s.mark()
	s.write(t, "aperio-server.yaml", "include: [routes.yaml]\n# "+strings.Repeat("x", 2<<20)+"\n")
	m = s.waitLine(t, from, reloadFailed)
	if !strings.Contains(m[2], "MiB") && !strings.Contains(m[2], "bytes") {
		t.Errorf("error of a 2 MiB file = %s, want it to name the size bound", m[2])
	}
	if got := fixed(); got != "good" {
		t.Errorf("GET /fixed after an oversized file = %q, want the old good", got)
	}
	if n := len(waitAudit(t, s, c, server.EventConfigReloadFailed, 2)); n != 2 {
		t.Errorf("%d config_reload_failed entries, want 2", n)
	}

	// Fixed: the included file is still watched, and applies.
	s.write(t, "aperio-server.yaml", "include: [routes.yaml]\n")
	from = s.mark()
	s.write(t, "routes.yaml", fixedRoute("better"))
	waitFor(t, "GET /fixed answers better", func() bool { return fixed() == "better" })
	s.waitLine(t, from, regexp.MustCompile(`msg="configuration reloaded" .*applied=routes `))
	waitFor(t, "the fixed edit audited", func() bool {
		es := audit(t, s, c, server.EventConfigReloaded)
		return len(es) > 0 && strings.Contains(es[0].Detail, "applied: routes;")
	})

	// A file the main one comes to include is watched from that reload
	// on: an edit of it alone reloads.
	s.write(t, "more.yaml", "max_body_size: 1000\n")
	from = s.mark()
	s.write(t, "aperio-server.yaml", "include: [routes.yaml, more.yaml]\n")
	if m := s.waitLine(t, from, reloaded); m[2] != "max_body_size" {
		t.Errorf("reload that adds an include applied %q, want max_body_size", m[2])
	}
	from = s.mark()
	s.write(t, "more.yaml", "max_body_size: 2000\n")
	m = s.waitLine(t, from, reloaded)
	if want := "file changed: " + filepath.Join(s.dir, "more.yaml"); m[1] != want || m[2] != "max_body_size" {
		t.Errorf("edit of the new include: reason %q, applied %q; want %q, max_body_size", m[1], m[2], want)
	}
}

// TestProcessReloadOnSIGHUP: SIGHUP reloads the configuration (logged and
// audited with the reason SIGHUP) and the server keeps serving; SIGTERM
// still ends it with exit 0.
func TestProcessReloadOnSIGHUP(t *testing.T) {
	bin := procs.Binaries(t)
	s := startReloadServer(t, bin, "http", fixedRoute("up"))
	c := &http.Client{Transport: &http.Transport{Proxy: nil}}
	t.Cleanup(c.CloseIdleConnections)
	for i := range 2 {
		from := s.mark()
		if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		m := s.waitLine(t, from, reloaded)
		reloadLevel(t, m) // INFO: nothing waits for a restart
		if m[1] != "SIGHUP" || m[2] != "none" || m[3] != "none" {
			t.Errorf("SIGHUP %d: reload reason %q, applied %q, restart %q; want SIGHUP, none, none", i+1, m[1], m[2], m[3])
		}
		if _, got := get(t, c, "GET", s.base+"/fixed", "any.test", nil, nil); got != "up" {
			t.Fatalf("GET /fixed after SIGHUP %d = %q, want up (still serving)", i+1, got)
		}
	}
	es := waitAudit(t, s, c, server.EventConfigReloaded, 2)
	if len(es) != 2 || !strings.HasPrefix(es[0].Detail, "SIGHUP;") {
		t.Errorf("config_reloaded entries = %+v, want two for SIGHUP", es)
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, s.cmd); code != 0 {
		t.Fatalf("exit code after SIGHUP twice then SIGTERM = %d, want 0", code)
	}
}

// TestProcessReloadSwapsCertificate: new tls_cert and tls_key files (same
// names) are served to the next handshake, while a connection opened
// before keeps working on the certificate it got.
func TestProcessReloadSwapsCertificate(t *testing.T) {
	bin := procs.Binaries(t)
	ca := testcert.NewCA(t, "reload test CA")
	leaf := func() testcert.Cert {
		return ca.Issue(t, testcert.Leaf{CommonName: "127.0.0.1", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Usage: x509.ExtKeyUsageServerAuth})
	}
	first, second := leaf(), leaf()
	s := newReloadServer(t)
	s.write(t, "cert.pem", string(first.CertPEM))
	s.write(t, "key.pem", string(first.KeyPEM))
	s.write(t, "aperio-server.yaml", "tls_cert: "+filepath.Join(s.dir, "cert.pem")+"\ntls_key: "+filepath.Join(s.dir, "key.pem")+"\n")
	s.start(t, bin, "https")

	newClient := func() *http.Client {
		tr := &http.Transport{Proxy: nil, TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr}
	}
	// serial asks for /aperio/health through c and returns the serial of
	// the certificate its connection got, and whether the connection was
	// an open one reused.
	serial := func(c *http.Client) (string, bool) {
		var reused bool
		trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), "GET", s.base+"/aperio/health", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET /aperio/health over TLS: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 {
			t.Fatalf("GET /aperio/health = %d, TLS %v; want 200 over TLS", resp.StatusCode, resp.TLS != nil)
		}
		return resp.TLS.PeerCertificates[0].SerialNumber.String(), reused
	}
	open := newClient()
	if got, _ := serial(open); got != first.Cert.SerialNumber.String() {
		t.Fatalf("serial before the swap = %s, want the first certificate's %s", got, first.Cert.SerialNumber)
	}

	from := s.mark()
	s.write(t, "key.pem", string(second.KeyPEM))
	s.write(t, "cert.pem", string(second.CertPEM))
	s.waitLine(t, from, regexp.MustCompile(`msg="configuration reloaded" .*applied="[^"]*tls certificate`))
	if got, reused := serial(open); !reused || got != first.Cert.SerialNumber.String() {
		t.Errorf("the connection opened before the swap: reused %v, serial %s; want it kept, with the first certificate %s", reused, got, first.Cert.SerialNumber)
	}
	if got, reused := serial(newClient()); reused || got != second.Cert.SerialNumber.String() {
		t.Errorf("a new handshake after the swap: reused %v, serial %s; want a new connection with the second certificate %s", reused, got, second.Cert.SerialNumber)
	}
}
