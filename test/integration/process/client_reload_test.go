package process_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// reloadClient starts a client whose aperio.yaml is head (server, name and
// top-level keys) followed by services, and returns it with its log and
// the path of its file once its tunnel is up.
func reloadClient(t *testing.T, f fleet, head, services string) (*exec.Cmd, *processLog, string) {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "aperio.yaml")
	writeFile(t, file, head+"services:\n"+services)
	c := exec.Command(filepath.Join(f.bin, "aperio-client"))
	c.Dir = dir
	c.Env = append(os.Environ(), "HOME="+dir)
	l := startLogged(t, c)
	l.wait(t, regexp.MustCompile(`msg="tunnel connected"`))
	return c, l, file
}

// TestProcessReloadServices: an edit of the client's file adds a service
// live, and a later edit removes another under load, without a failed
// request on the service kept: the removed service's request in flight
// finishes, new ones stop reaching it, and it is withdrawn; the tunnel
// never drops.
func TestProcessReloadServices(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "reload-master-token-0123456789abcdef")
	base := f.startServer(t, "APERIO_GATEWAY_TIMEOUT=200ms").url
	keep := statusBackend(t, "keep", http.StatusOK)
	added := statusBackend(t, "added", http.StatusOK)
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	gone := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-release
		}
		io.WriteString(w, "gone "+r.URL.Path)
	}))
	t.Cleanup(gone.Close)
	// Cleanups run last first: a failed test releases the slow request,
	// which Close would wait for.
	releaseSlow := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseSlow)

	head := "server: {url: " + base + ", token: " + f.master + "}\nname: reloader\nreload_drain: 20s\n"
	keepSvc := "  - {target: " + keep + ", hostname: keep.test}\n"
	goneSvc := "  - {target: " + gone.URL + ", hostname: gone.test}\n"
	addedSvc := "  - {target: " + added + ", hostname: added.test}\n"
	_, cli, file := reloadClient(t, f, head, keepSvc+goneSvc)
	get := func(host, path string) (int, string) { return getHost(t, f.http, base, host, path) }
	waitFor(t, "keep.test and gone.test answer", func() bool {
		c1, _ := get("keep.test", "/")
		c2, _ := get("gone.test", "/")
		return c1 == 200 && c2 == 200
	})

	// Add a service.
	replaceFile(t, file, head+"services:\n"+keepSvc+goneSvc+addedSvc)
	cli.wait(t, regexp.MustCompile(`msg="config reloaded" reason="file changed: `))
	cli.wait(t, regexp.MustCompile(`msg="service added" service=2 `))
	waitFor(t, "added.test answers from its backend", func() bool {
		code, body := get("added.test", "/")
		return code == 200 && body == "added"
	})

	// Load on the kept and the doomed service.
	var (
		stop                  atomic.Bool
		wg                    sync.WaitGroup
		keepOK, keepFailed    atomic.Int64
		goneOK, goneRefused   atomic.Int64
		mu                    sync.Mutex
		keepFailures, goneBad []string
	)
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				code, body := get("keep.test", "/")
				if code == 200 && body == "keep" {
					keepOK.Add(1)
					continue
				}
				keepFailed.Add(1)
				mu.Lock()
				keepFailures = append(keepFailures, body)
				mu.Unlock()
			}
		})
		wg.Go(func() {
			for !stop.Load() {
				code, body := get("gone.test", "/")
				switch {
				case code == 200 && body == "gone /":
					goneOK.Add(1)
				case code != 0 && !strings.Contains(body, "backend unreachable"):
					// The server's answer once nothing serves gone.test.
					goneRefused.Add(1)
				default:
					mu.Lock()
					goneBad = append(goneBad, body)
					mu.Unlock()
				}
			}
		})
	}
	t.Cleanup(func() { stop.Store(true); wg.Wait() }) // a failed test's load too
	waitFor(t, "both services served under load", func() bool { return keepOK.Load() > 20 && goneOK.Load() > 20 })

	slow := make(chan string, 1)
	go func() {
		code, body := get("gone.test", "/slow")
		slow <- strings.TrimSpace(body) + " " + http.StatusText(code)
	}()
	<-entered

	// Remove gone.test.
	replaceFile(t, file, head+"services:\n"+keepSvc+addedSvc)
	cli.wait(t, regexp.MustCompile(`msg="service draining" service=1 `))
	before := goneRefused.Load()
	waitFor(t, "new requests stop reaching the removed service", func() bool { return goneRefused.Load() > before+4 })
	// Its request in flight holds the withdrawal: the server still lists
	// it, draining, with that request.
	withdrawn := regexp.MustCompile(`msg="service withdrawn" service=1 `)
	if e, ok := clientEntry(f.clients(t, base), "reloader", "gone.test"); !ok || !e.Draining || e.Healthy || e.Inflight != 1 {
		t.Fatalf("server's entry of gone.test while its request is in flight = %+v, %v; want listed, draining, unhealthy, 1 in flight", e, ok)
	}
	if cli.count(0, withdrawn) != 0 {
		t.Fatal("removed service withdrawn with a request in flight")
	}
	releaseSlow()
	if got := <-slow; got != "gone /slow OK" {
		t.Fatalf("in-flight request on the removed service = %q, want %q", got, "gone /slow OK")
	}
	cli.wait(t, withdrawn)
	waitFor(t, "the server forgets gone.test", func() bool { _, ok := clientEntry(f.clients(t, base), "reloader", "gone.test"); return !ok })
	afterWithdrawal := keepOK.Load()
	waitFor(t, "keep.test served after the withdrawal", func() bool { return keepOK.Load() > afterWithdrawal+20 })
	stop.Store(true)
	wg.Wait()

	if n := keepFailed.Load(); n != 0 {
		t.Errorf("kept service: %d failed requests of %d, want none; first bodies: %q", n, n+keepOK.Load(), keepFailures[:min(len(keepFailures), 3)])
	}
	if len(goneBad) != 0 {
		t.Errorf("removed service: %d requests failed in the client or the transport, want none; first: %q", len(goneBad), goneBad[:min(len(goneBad), 3)])
	}
	t.Logf("kept service: %d requests served; removed service: %d served, then %d answered by the server", keepOK.Load(), goneOK.Load(), goneRefused.Load())
	if code, body := get("added.test", "/"); code != 200 || body != "added" {
		t.Errorf("added.test after the removal = %d %q, want 200 added", code, body)
	}
	if cli.count(0, regexp.MustCompile(`msg="tunnel connected"`)) != 1 {
		t.Error("the tunnel reconnected during the reloads, want one session throughout")
	}
}

// TestProcessReloadBadEdit: an edit that does not load (broken yaml, an
// invalid value) keeps the running configuration, logged at ERROR; a
// good edit then applies, and a key that needs a restart is named.
func TestProcessReloadBadEdit(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "reload-master-token-0123456789abcdef")
	base := f.startServer(t).url
	keep := statusBackend(t, "keep", http.StatusOK)
	head := "server: {url: " + base + ", token: " + f.master + "}\nname: reloader\n"
	keepSvc := "  - {target: " + keep + ", hostname: keep.test}\n"
	_, cli, file := reloadClient(t, f, head, keepSvc)
	get := func(host string) (int, string) { return getHost(t, f.http, base, host, "/") }
	waitFor(t, "keep.test answers", func() bool { code, _ := get("keep.test"); return code == 200 })

	failed := regexp.MustCompile(`level=ERROR msg="config reload failed, the running configuration stays" reason="file changed: [^"]*" err=`)
	replaceFile(t, file, head+"services: [\n")
	cli.wait(t, failed)
	replaceFile(t, file, head+"services:\n  - {target: ftp://nowhere, hostname: keep.test}\n")
	waitFor(t, "the second bad edit logged", func() bool { return cli.count(0, failed) == 2 })
	if code, body := get("keep.test"); code != 200 || body != "keep" {
		t.Fatalf("keep.test after bad edits = %d %q, want 200 keep (the running configuration)", code, body)
	}

	other := statusBackend(t, "other", http.StatusOK)
	replaceFile(t, file, strings.Replace(head, "name: reloader", "name: renamed", 1)+"services:\n"+keepSvc+"  - {target: "+other+", hostname: other.test}\n")
	cli.wait(t, regexp.MustCompile(`level=WARN msg="settings need a restart to change" restart=name`))
	cli.wait(t, regexp.MustCompile(`msg="config reloaded"`))
	waitFor(t, "other.test answers after the good edit", func() bool { code, body := get("other.test"); return code == 200 && body == "other" })
}
