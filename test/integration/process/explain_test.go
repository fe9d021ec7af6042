package process_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// TestProcessesClientExplainsItself runs the real binaries (#19): the
// client names the public URL of each bind at connect; a visitor's 502
// for an unreachable backend names no address while the client's warning
// does; a client whose token is refused exits 1 within a few seconds with
// what to do, and with --retry-forever keeps trying; aperio-client check
// passes the good items and fails the bad ones, exiting 1.
func TestProcessesClientExplainsItself(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "explain-master-0123456789")
	server := f.startServer(t)
	base := server.url
	port := strings.TrimPrefix(base, "http://127.0.0.1")
	app := statusBackend(t, "app", http.StatusOK)
	down := refusedAddr(t)

	services := fmt.Sprintf("  - target: %s\n    hostname: app.test\n    path: /api\n  - target: http://%s\n    hostname: down.test\n", app, down)
	_, log := f.startClient(t, base, "explainer", services)
	log.wait(t, regexp.MustCompile(regexp.QuoteMeta(`msg=serving server_url=`+base+` public_url="http://app.test`+port+`/api → `+app+`"`)))
	log.wait(t, regexp.MustCompile(regexp.QuoteMeta(`public_url="http://down.test`+port+` → http://`+down+`"`)))

	// The visitor's 502 names neither the target nor the dial error; the
	// client's warning names the target.
	code, body := getHost(t, f.http, base, "down.test", "/")
	if code != http.StatusBadGateway {
		t.Fatalf("GET down.test = %d %q, want 502", code, body)
	}
	host, p, _ := strings.Cut(down, ":")
	for _, leak := range []string{down, p, host, "dial", "connection refused", "127.0.0.1"} {
		if strings.Contains(body, leak) {
			t.Errorf("502 body %q contains %q, want no internal address or dial error", body, leak)
		}
	}
	log.wait(t, regexp.MustCompile(`level=WARN msg="backend unreachable".*`+regexp.QuoteMeta(down)))

	// A refused token: exit 1 within the three attempts' backoff (under
	// 1 s + 2 s of jittered waits), saying what to do.
	bad := f.client(t, base, "app.test", "apr_not-a-token")
	started := time.Now()
	badLog := startLogged(t, bad)
	badLog.wait(t, regexp.MustCompile(`level=ERROR msg="giving up: every server refused the tunnel.*code=token.*aperio-client api tokens create`))
	if code := waitExit(t, bad); code != 1 {
		t.Errorf("client with a refused token exited %d, want 1", code)
	}
	// Three handshakes and two waits of at most 1 s and 2 s: 10 s leaves
	// room for a loaded machine and still fails an unbounded retry.
	if d := time.Since(started); d > 10*time.Second {
		t.Errorf("client with a refused token exited after %v, want within 10s", d)
	} else {
		t.Logf("client with a refused token exited 1 after %v", d.Round(time.Millisecond))
	}
	if n := badLog.count(0, regexp.MustCompile(`msg="tunnel refused"`)); n != 3 {
		t.Errorf("client with a refused token logged %d refusals before giving up, want 3", n)
	}

	// With --retry-forever it is still running after a fourth refusal.
	forever := f.client(t, base, "app.test", "apr_not-a-token", "--retry-forever")
	exited := make(chan struct{})
	foreverLog := startLogged(t, forever)
	go func() {
		defer close(exited)
		forever.Process.Wait() // the cleanup's Kill ends it
	}()
	waitFor(t, "four refusals", func() bool { return foreverLog.count(0, regexp.MustCompile(`msg="tunnel refused"`)) >= 4 })
	select {
	case <-exited:
		t.Fatal("client with --retry-forever exited after four refusals, want it still running")
	default:
	}
	if n := foreverLog.count(0, regexp.MustCompile(`giving up`)); n != 0 {
		t.Errorf("client with --retry-forever logged giving up %d times, want none", n)
	}

	// check: a token minted for app.test only; the service bound to
	// other.test is refused, and the target of down.test does not answer.
	token := f.mintToken(t, base, "app.test", "down.test")
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "aperio.yaml"), "server: {url: "+base+", token: "+token+"}\nservices:\n"+services+
		"  - target: "+app+"\n    hostname: other.test\n    health: {endpoint: /healthz}\n")
	check := exec.Command(filepath.Join(f.bin, "aperio-client"), "check", "--timeout", "5s")
	check.Dir = dir
	check.Env = append(os.Environ(), "HOME="+dir)
	var out bytes.Buffer
	check.Stdout, check.Stderr = &out, &out
	start := time.Now()
	err := check.Run()
	if code := check.ProcessState.ExitCode(); code != 1 {
		t.Fatalf("check = exit %d (%v), want 1; output:\n%s", code, err, &out)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("check took %v, want well under its bounds", d)
	}
	want := []string{
		"✓ server " + base + ": token",
		"✓ server " + base + ": service #0 binds app.test/api",
		"✓ server " + base + ": service #1 binds down.test",
		"✗ server " + base + ": service #2 binds other.test: token",
		"→ no hostname of this client may be bound with its token",
		"✓ service #0: target " + app + ": 200 OK",
		"✗ service #1: target http://" + down + ": ",
		"→ nothing answers there: start the app",
		"✓ service #2: target " + app + ": 200 OK",
		"✓ service #2: health endpoint /healthz",
		"2 of 8 checks failed",
	}
	for _, w := range want {
		if !strings.Contains(out.String(), w) {
			t.Errorf("check output lacks %q; output:\n%s", w, &out)
		}
	}
	// The check's handshakes left no client behind on the server.
	waitFor(t, "the server lists only the explainer client", func() bool {
		for _, c := range f.clients(t, base) {
			if c.Name != "explainer" {
				return false
			}
		}
		return true
	})
}

// client returns an aperio-client command (not started) serving a
// backend nobody needs at host, through the server at base with token,
// and args.
func (f fleet) client(t *testing.T, base, host, token string, args ...string) *exec.Cmd {
	t.Helper()
	c := exec.Command(filepath.Join(f.bin, "aperio-client"), append([]string{"127.0.0.1:1", "--hostname", host,
		"--server-url", base, "--server-token", token}, args...)...)
	c.Dir = t.TempDir()
	c.Env = append(os.Environ(), "HOME="+c.Dir)
	return c
}

// mintToken creates a client token for hostnames on the server at base
// and returns it.
func (f fleet) mintToken(t *testing.T, base string, hostnames ...string) string {
	t.Helper()
	body, err := json.Marshal(map[string]any{"name": "explain", "hostnames": hostnames})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+apitype.Prefix+"/tokens", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+f.master)
	req.Header.Set("Content-Type", "application/json")
	resp, err := f.http.Do(req)
	if err != nil {
		t.Fatalf("POST /tokens: %v", err)
	}
	defer resp.Body.Close()
	var minted struct {
		Token string `json:"token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&minted); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /tokens = %d, %v, want 201 with a token", resp.StatusCode, err)
	}
	return minted.Token
}
