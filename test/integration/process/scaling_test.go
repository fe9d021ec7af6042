package process_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/testkit/procs"
)

// scalingMaster is the master token of the servers these tests start; the
// clients use it as their client token too.
const scalingMaster = "scaling-master-0123456789"

// scalingHost is the hostname the tests' clients serve.
const scalingHost = "scale.test"

// scalingServer starts a real aperio-server with autoscaling on, plus env,
// and returns its base URL.
func scalingServer(t *testing.T, bin string, env ...string) string {
	t.Helper()
	base, _ := startServerProcess(t, bin, env...)
	return base
}

// startServerProcess starts a real aperio-server with autoscaling on, plus
// env, and returns its base URL and a stop that kills it (also done at
// cleanup).
func startServerProcess(t *testing.T, bin string, env ...string) (string, func()) {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "aperio-server"))
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "APERIO_SERVER_TOKEN="+scalingMaster, "APERIO_HOST=127.0.0.1", "APERIO_PORT=0",
		"APERIO_DATA_DIR="+filepath.Join(cmd.Dir, "data"), "APERIO_LOG_LEVEL=debug", "APERIO_SCALING=1")
	cmd.Env = append(cmd.Env, env...)
	logs := &syncBuffer{}
	startLogging(t, cmd, logs)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	re := regexp.MustCompile(`msg="server listening" addr=(\S+)`)
	var addr string
	waitFor(t, "the server listens", func() bool {
		m := re.FindStringSubmatch(logs.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	stop := sync.OnceFunc(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return "http://" + addr, stop
}

// scalingClient returns an aperio-client command (not started) serving
// scalingHost from target through base, with the given scaling flags.
func scalingClient(t *testing.T, bin, target, base string, flags ...string) *exec.Cmd {
	t.Helper()
	args := append([]string{target, "--hostname", scalingHost, "--server-url", base, "--server-token", scalingMaster}, flags...)
	cmd := exec.Command(filepath.Join(bin, "aperio-client"), args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "HOME="+cmd.Dir)
	return cmd
}

// scalingRecord is the part of GET /aperio/api/scaling these tests read.
type scalingRecord struct {
	ID                  string    `json:"id"`
	Hostname            string    `json:"hostname"`
	Disarmed            bool      `json:"disarmed"`
	ConsecutiveFailures int       `json:"consecutive_failures"`
	LastStatus          int       `json:"last_status"`
	Refused             string    `json:"refused"`
	UpdatedAt           time.Time `json:"updated_at"`
}

// adminGet GETs /aperio/api+path on base with the master token and
// decodes the JSON answer into out.
func adminGet(t testing.TB, base, path string, out any) {
	t.Helper()
	req, err := http.NewRequest("GET", base+"/aperio/api"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+scalingMaster)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %d %s, want 200", path, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, out); err != nil {
		t.Fatalf("GET %s: decode %s: %v", path, body, err)
	}
}

// records lists the scaling records for scalingHost.
func records(t testing.TB, base string) []scalingRecord {
	t.Helper()
	var all, mine []scalingRecord
	adminGet(t, base, "/scaling", &all)
	for _, r := range all {
		if r.Hostname == scalingHost {
			mine = append(mine, r)
		}
	}
	return mine
}

// armedReload is how long the server waits after a record changes before
// it reloads the router's armed binds (internal/server/changes.go debounces the
// reload by one second). Until then a request for a hostname whose only
// client has left is not cold started, and nothing outside the process
// shows when the reload has happened.
const armedReload = time.Second

// waitArmed waits until the server has had time to arm scalingHost's pool:
// armedReload (plus a margin) after the record was last updated. This is
// polled with a deadline rather than observed, because the server exposes
// no sign of it.
func waitArmed(t *testing.T, base string) {
	t.Helper()
	r := records(t, base)
	if len(r) != 1 {
		t.Fatalf("scaling records for %s = %d, want 1", scalingHost, len(r))
	}
	ready := r[0].UpdatedAt.Add(armedReload + 500*time.Millisecond)
	waitFor(t, "the armed binds are reloaded", func() bool { return time.Now().After(ready) })
}

// auditEvents lists the event names of the server's audit log.
func auditEvents(t testing.TB, base string) []string {
	t.Helper()
	var es []struct {
		Event    string `json:"event"`
		Hostname string `json:"hostname"`
		Detail   string `json:"detail"`
	}
	adminGet(t, base, "/audit", &es)
	var out []string
	for _, e := range es {
		out = append(out, e.Event)
	}
	return out
}

// visit sends method path for scalingHost through base and returns the
// status and body.
func visit(c *http.Client, base, method, path string, body io.Reader) (int, string, error) {
	req, err := http.NewRequest(method, base+path, body)
	if err != nil {
		return 0, "", err
	}
	req.Host = scalingHost
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// echoBackend answers "METHOD PATH LEN" with the length of the body read.
func echoBackend(t *testing.T) string {
	t.Helper()
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "%s %s %d", r.Method, r.URL.Path, len(b))
	}))
	t.Cleanup(backend.Close)
	return strings.TrimPrefix(backend.URL, "http://")
}

// leave SIGTERMs a running client and fails unless it exits 0.
func leave(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, cmd); code != 0 {
		t.Fatalf("client exit code after SIGTERM = %d, want 0", code)
	}
}

// TestScalingColdStartFromZero: a client declares min 0 and leaves; a
// burst of 200 requests (POSTs with bodies among them) makes exactly one
// provider call, whose receiver starts a new aperio-client process, and
// every request is answered by the backend.
func TestScalingColdStartFromZero(t *testing.T) {
	t.Parallel()
	bin := procs.Binaries(t)
	target := echoBackend(t)
	// 200 requests from one address: raise the per-visitor bucket.
	base := scalingServer(t, bin, "APERIO_SCALING_ALLOW_HTTP=1", "APERIO_SCALING_ALLOW_PRIVATE=1", "APERIO_IP_LIMIT_MAX=1000")

	var (
		mu       sync.Mutex
		calls    int
		hookBody map[string]any
	)
	startNew := make(chan struct{}, 1)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		err := json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		calls++
		first := calls == 1
		if first {
			hookBody = body
		}
		mu.Unlock()
		if err != nil {
			t.Errorf("hook body: %v", err)
		}
		if first {
			startNew <- struct{}{}
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(hook.Close)

	flags := []string{"--scaling-url", hook.URL + "/scale", "--scaling-min", "0", "--scaling-max", "3",
		"--scaling-cold-start", "30s", "--scaling-window", "15s", "--scaling-cooldown", "60s",
		"--scaling-target-utilization", "0.8", "--max-concurrent", "50"}

	// The goroutine that starts the second client on the first hook call;
	// the test owns it and joins it (and kills the process) at cleanup.
	second := scalingClient(t, bin, target, base, flags...)
	secondLogs := &syncBuffer{}
	second.Stderr = secondLogs
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-startNew:
		case <-stop:
			return
		}
		if err := second.Start(); err != nil {
			t.Errorf("start the second client: %v", err)
		}
	})
	t.Cleanup(func() {
		close(stop)
		wg.Wait()
		if second.Process != nil {
			second.Process.Kill()
			second.Wait()
		}
		if t.Failed() {
			t.Logf("second client log:\n%s", secondLogs.String())
		}
	})

	first := scalingClient(t, bin, target, base, flags...)
	startAndFind(t, first, regexp.MustCompile(`msg="tunnel connected"`))
	waitFor(t, "the scaling record is declared", func() bool { return len(records(t, base)) == 1 })
	leave(t, first)
	waitArmed(t, base)

	tr := &http.Transport{MaxIdleConnsPerHost: 200}
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr, Timeout: 60 * time.Second}
	const burst = 200
	type result struct {
		i      int
		status int
		body   string
		err    error
	}
	results := make(chan result, burst)
	start := time.Now()
	for i := range burst {
		method, body := "GET", io.Reader(nil)
		if i%4 == 0 {
			method, body = "POST", strings.NewReader(strings.Repeat("x", 1000))
		}
		go func() {
			status, b, err := visit(c, base, method, fmt.Sprint("/r", i), body)
			results <- result{i, status, b, err}
		}()
	}
	var failures []string
	for range burst {
		r := <-results
		want := fmt.Sprintf("GET /r%d 0", r.i)
		if r.i%4 == 0 {
			want = fmt.Sprintf("POST /r%d 1000", r.i)
		}
		if r.err != nil || r.status != http.StatusOK || r.body != want {
			failures = append(failures, fmt.Sprintf("request %d = %d %q, %v, want 200 %q", r.i, r.status, r.body, r.err, want))
		}
	}
	took := time.Since(start)
	t.Logf("burst of %d: last answer %v after the burst started", burst, took)
	if len(failures) > 0 {
		t.Fatalf("%d of %d held requests failed, first: %s", len(failures), burst, failures[0])
	}

	mu.Lock()
	defer mu.Unlock()
	if calls != 1 {
		t.Fatalf("provider calls for a burst of %d = %d, want exactly 1", burst, calls)
	}
	if hookBody["reason"] != "cold_start" || hookBody["hostname"] != scalingHost || hookBody["desired"] != 1.0 || hookBody["current"] != 0.0 {
		t.Fatalf("hook body = %v, want a cold_start for %s from 0 to 1", hookBody, scalingHost)
	}
}

// hookCall is the body of one scaling hook call.
type hookCall struct {
	Reason   string `json:"reason"`
	Hostname string `json:"hostname"`
	Current  int    `json:"current"`
	Desired  int    `json:"desired"`
	Min      int    `json:"min"`
	Max      int    `json:"max"`
}

// liveClients counts the clients GET /aperio/api/clients lists for
// scalingHost.
func liveClients(t testing.TB, base string) int {
	t.Helper()
	var cs []struct {
		Hostnames []string `json:"hostnames"`
	}
	adminGet(t, base, "/clients", &cs)
	n := 0
	for _, c := range cs {
		if contains(c.Hostnames, scalingHost) {
			n++
		}
	}
	return n
}

// TestScalingOutThenIn: with real binaries, one client of max_concurrent 2
// kept saturated for a whole window makes one scale_out call (1 → 2),
// whose receiver starts a second client process; once the load stops and
// stays away for four windows, one scale_in call asks for 2 → 1. The
// server kills nothing: both clients are still connected afterwards.
func TestScalingOutThenIn(t *testing.T) {
	t.Parallel()
	bin := procs.Binaries(t)
	// A backend whose /busy requests stay in flight until the test lets
	// them go, so the pool is saturated for as long as the test says.
	release := make(chan struct{})
	var releaseOnce sync.Once
	letGo := func() { releaseOnce.Do(func() { close(release) }) }
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/busy" {
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		fmt.Fprintf(w, "%s %s", r.Method, r.URL.Path)
	}))
	t.Cleanup(backend.Close)
	t.Cleanup(letGo) // before backend.Close, which waits for handlers
	target := strings.TrimPrefix(backend.URL, "http://")
	base := scalingServer(t, bin, "APERIO_SCALING_ALLOW_HTTP=1", "APERIO_SCALING_ALLOW_PRIVATE=1", "APERIO_IP_LIMIT_MAX=1000")

	calls := make(chan hookCall, 16)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var c hookCall
		if err := json.NewDecoder(r.Body).Decode(&c); err != nil {
			t.Errorf("hook body: %v", err)
		}
		calls <- c
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(hook.Close)
	nextCall := func(what string) hookCall {
		t.Helper()
		select {
		case c := <-calls:
			return c
		case <-time.After(60 * time.Second):
			t.Fatalf("no %s call within 60s", what)
			return hookCall{}
		}
	}

	// The cooldown covers the second client's start, however slow the
	// machine: without it a pool still saturated one window after the
	// call is rightly asked for again.
	const cooldown = 10 * time.Second
	flags := []string{"--scaling-url", hook.URL + "/scale", "--scaling-min", "1", "--scaling-max", "2",
		"--scaling-cold-start", "30s", "--scaling-window", "1s", "--scaling-cooldown", cooldown.String(),
		"--scaling-target-utilization", "0.8", "--max-concurrent", "2"}
	first := scalingClient(t, bin, target, base, flags...)
	startAndFind(t, first, regexp.MustCompile(`msg="tunnel connected"`))
	waitFor(t, "the scaling record is declared", func() bool { return len(records(t, base)) == 1 })

	// Saturate the only client: two requests in flight of its two.
	c := &http.Client{Timeout: 60 * time.Second}
	t.Cleanup(c.CloseIdleConnections)
	busy := make(chan error, 2)
	loadStarted := time.Now()
	for range 2 {
		go func() {
			status, body, err := visit(c, base, "GET", "/busy", nil)
			if err == nil && (status != http.StatusOK || body != "GET /busy") {
				err = fmt.Errorf("GET /busy = %d %q, want 200 %q", status, body, "GET /busy")
			}
			busy <- err
		}()
	}
	out := nextCall("scale_out")
	outAt := time.Now()
	t.Logf("scale_out call %v after the load began", time.Since(loadStarted).Round(time.Millisecond))
	if want := (hookCall{Reason: "scale_out", Hostname: scalingHost, Current: 1, Desired: 2, Min: 1, Max: 2}); out != want {
		t.Fatalf("call under saturation = %+v, want %+v", out, want)
	}

	// The provider's answer: a second instance.
	second := scalingClient(t, bin, target, base, flags...)
	startAndFind(t, second, regexp.MustCompile(`msg="tunnel connected"`))
	waitFor(t, "both clients are listed", func() bool { return liveClients(t, base) == 2 })

	letGo()
	for range 2 {
		if err := <-busy; err != nil {
			t.Fatal(err)
		}
	}
	loadStopped := time.Now()
	in := nextCall("scale_in")
	t.Logf("scale_in call %v after the load stopped", time.Since(loadStopped).Round(time.Millisecond))
	if want := (hookCall{Reason: "scale_in", Hostname: scalingHost, Current: 2, Desired: 1, Min: 1, Max: 2}); in != want {
		t.Fatalf("call after the load stopped = %+v, want %+v", in, want)
	}
	if gap := time.Since(outAt); gap < cooldown-500*time.Millisecond {
		t.Fatalf("scale_in came %v after scale_out, want at least the cooldown %v", gap, cooldown)
	}
	if n := liveClients(t, base); n != 2 {
		t.Fatalf("clients after scale_in = %d, want 2: the server asks, it never disconnects", n)
	}
	select {
	case c := <-calls:
		t.Fatalf("unexpected further call %+v", c)
	default:
	}
}

// TestScalingBreakerRearmsOnClientRestart: a provider answering 500 makes
// every cold start fail fast; after five failed calls the record is
// disarmed and a further request makes no call; a client announcing the
// block again re-arms it.
//
// The cooldown is the smallest allowed (1s): the backoff after the nth
// consecutive failure is cooldown × 2^n, so the fifth call comes some 30 s
// (2+4+8+16) after the first.
func TestScalingBreakerRearmsOnClientRestart(t *testing.T) {
	t.Parallel()
	bin := procs.Binaries(t)
	target := echoBackend(t)
	// A disarmed record takes the usual wait for a client; keep it short.
	base := scalingServer(t, bin, "APERIO_SCALING_ALLOW_HTTP=1", "APERIO_SCALING_ALLOW_PRIVATE=1",
		"APERIO_GATEWAY_TIMEOUT=1s", "APERIO_IP_LIMIT_MAX=1000")

	var mu sync.Mutex
	var callTimes []time.Time
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		callTimes = append(callTimes, time.Now())
		mu.Unlock()
		w.WriteHeader(http.StatusInternalServerError)
	}))
	t.Cleanup(hook.Close)
	calls := func() (int, time.Time) {
		mu.Lock()
		defer mu.Unlock()
		if len(callTimes) == 0 {
			return 0, time.Time{}
		}
		return len(callTimes), callTimes[len(callTimes)-1]
	}

	flags := []string{"--scaling-url", hook.URL, "--scaling-min", "0", "--scaling-max", "2",
		"--scaling-cold-start", "30s", "--scaling-cooldown", "1s", "--max-concurrent", "10"}
	first := scalingClient(t, bin, target, base, flags...)
	startAndFind(t, first, regexp.MustCompile(`msg="tunnel connected"`))
	waitFor(t, "the scaling record is declared", func() bool { return len(records(t, base)) == 1 })
	leave(t, first)
	waitArmed(t, base)

	c := &http.Client{Timeout: 60 * time.Second}
	t.Cleanup(c.CloseIdleConnections)
	// Requests arriving during the backoff fail at once without a call;
	// the first one after it makes the next call. Poll at 4 requests a
	// second, under the per-visitor refill of 5.
	began := time.Now()
	slowest := time.Duration(0)
	for i := 1; i <= 5; i++ {
		pollUntil(t, 25*time.Second, 250*time.Millisecond, fmt.Sprintf("failed call %d", i), func() bool {
			sent := time.Now()
			status, body, err := visit(c, base, "GET", "/", nil)
			took := time.Since(sent)
			slowest = max(slowest, took)
			if took > 100*time.Millisecond {
				n, _ := calls()
				t.Logf("slow 504 before failed call %d: %v (%d calls so far)", i, took.Round(time.Millisecond), n)
			}
			if err != nil || status != http.StatusGatewayTimeout {
				t.Fatalf("request before failed call %d = %d %q, %v, want 504", i, status, body, err)
			}
			if took > 2*time.Second {
				t.Fatalf("request before failed call %d answered after %v, want at once (well under cold_start 30s)", i, took)
			}
			n, _ := calls()
			if n > i {
				t.Fatalf("provider calls = %d, want at most %d", n, i)
			}
			return n == i
		})
	}
	mu.Lock()
	for i := 1; i < len(callTimes); i++ {
		t.Logf("gap between failed calls %d and %d: %v", i, i+1, callTimes[i].Sub(callTimes[i-1]).Round(10*time.Millisecond))
	}
	mu.Unlock()
	t.Logf("slowest 504 while the provider failed: %v", slowest.Round(time.Millisecond))
	t.Logf("five failed calls took %v", time.Since(began).Round(time.Millisecond))

	waitFor(t, "the record is disarmed", func() bool {
		r := records(t, base)
		return len(r) == 1 && r[0].Disarmed
	})
	waitFor(t, "the audit log has scaling_disarmed", func() bool {
		return contains(auditEvents(t, base), "scaling_disarmed")
	})

	sent := time.Now()
	status, body, err := visit(c, base, "GET", "/", nil)
	took := time.Since(sent)
	t.Logf("request to a disarmed record: %d %q after %v", status, body, took.Round(time.Millisecond))
	if err != nil || (status != http.StatusBadGateway && status != http.StatusGatewayTimeout) {
		t.Fatalf("request to a disarmed record = %d %q, %v, want 502 or 504", status, body, err)
	}
	if took > 5*time.Second {
		t.Fatalf("request to a disarmed record took %v, want a fast failure", took)
	}
	if n, _ := calls(); n != 5 {
		t.Fatalf("provider calls after the record was disarmed = %d, want 5", n)
	}

	// A new client session announcing the same block re-arms it.
	again := scalingClient(t, bin, target, base, flags...)
	startAndFind(t, again, regexp.MustCompile(`msg="tunnel connected"`))
	waitFor(t, "the record is re-armed", func() bool {
		r := records(t, base)
		return len(r) == 1 && !r[0].Disarmed
	})
	if r := records(t, base); r[0].ConsecutiveFailures != 0 {
		t.Fatalf("consecutive_failures after re-arming = %d, want 0", r[0].ConsecutiveFailures)
	}
	if status, body, err := visit(c, base, "GET", "/back", nil); err != nil || status != 200 || body != "GET /back 0" {
		t.Fatalf("request with the client back = %d %q, %v, want 200 %q", status, body, err, "GET /back 0")
	}
}

// TestScalingFenceRefusesLoopbackHTTP: without the permissive flags, a
// declared http:// loopback hook is refused at declaration: the client
// logs the server's notice with the reason, the audit log records
// scaling_refused, the list shows the bind refused and no record; once
// the client has left, a visitor fails fast (nothing is armed) and the
// hook is never called.
func TestScalingFenceRefusesLoopbackHTTP(t *testing.T) {
	t.Parallel()
	bin := procs.Binaries(t)
	target := echoBackend(t)
	base := scalingServer(t, bin)

	var mu sync.Mutex
	hookCalls := 0
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hookCalls++
		mu.Unlock()
	}))
	t.Cleanup(hook.Close)

	flags := []string{"--scaling-url", hook.URL, "--scaling-min", "0", "--scaling-max", "2",
		"--scaling-cold-start", "30s", "--scaling-cooldown", "1s"}
	first := scalingClient(t, bin, target, base, flags...)
	firstLogs := &syncBuffer{}
	first.Stderr = firstLogs
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if first.ProcessState == nil {
			first.Process.Kill()
			first.Wait()
		}
	})
	waitFor(t, "the client connects", func() bool { return strings.Contains(firstLogs.String(), `msg="tunnel connected"`) })
	waitFor(t, "the client logs the refusal", func() bool {
		return strings.Contains(firstLogs.String(), "http is not permitted, only https")
	})
	if r := records(t, base); len(r) != 1 || r[0].ID != "" || !r[0].Disarmed || !strings.Contains(r[0].Refused, "http is not permitted") {
		t.Fatalf("scaling list with the fenced hook declared = %+v, want the bind refused, without a record", r)
	}
	// The entry goes through the server's events queue, written after the
	// ack that carried the notice.
	waitFor(t, "the audit log records scaling_refused", func() bool { return contains(auditEvents(t, base), "scaling_refused") })
	leave(t, first)
	waitFor(t, "the refusal goes with the client", func() bool { return len(records(t, base)) == 0 })

	c := &http.Client{Timeout: 60 * time.Second}
	t.Cleanup(c.CloseIdleConnections)
	sent := time.Now()
	status, body, err := visit(c, base, "GET", "/", nil)
	took := time.Since(sent)
	t.Logf("request with a fenced hook: %d %q after %v", status, body, took.Round(time.Millisecond))
	if err != nil || (status != http.StatusGatewayTimeout && status != http.StatusBadGateway) {
		t.Fatalf("request with a fenced hook = %d %q, %v, want 504 or 502", status, body, err)
	}
	// Nothing is armed, so the visitor waits as for any pool whose client
	// just left (gateway_timeout, 10 s), never the 30 s cold_start hold.
	if took > 20*time.Second {
		t.Fatalf("request with a fenced hook took %v, want no cold start hold (30s cold_start)", took)
	}
	if contains(auditEvents(t, base), "scaling_failed") {
		t.Fatalf("audit events = %q, want no scaling_failed: no call is made", auditEvents(t, base))
	}
	mu.Lock()
	defer mu.Unlock()
	if hookCalls != 0 {
		t.Fatalf("requests reaching the fenced hook = %d, want 0", hookCalls)
	}
}

// pollUntil calls cond every tick until it is true, failing after
// deadline.
func pollUntil(t *testing.T, deadline, tick time.Duration, what string, cond func() bool) {
	t.Helper()
	timer := time.NewTimer(deadline)
	defer timer.Stop()
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	for !cond() {
		select {
		case <-timer.C:
			t.Fatalf("timed out after %v waiting for %s", deadline, what)
		case <-ticker.C:
		}
	}
}

func contains(l []string, s string) bool {
	for _, e := range l {
		if e == s {
			return true
		}
	}
	return false
}
