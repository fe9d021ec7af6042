//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Settings of the topology, shared with test/docker-compose.yml through
// its E2E_* variables. idleTimeout runs from an instance's first tunnel (a
// healthy service) until its first request too, so it must outlast the
// seed's wait for both servers to list it and for its container to turn
// healthy before it is sent one.
const (
	appHost             = "app.e2e.test"
	idleTimeout         = 20 * time.Second
	clientDownThreshold = 6 * time.Second
	scalingMax          = 3
	// armedReload is how long a server waits after a scaling record
	// changes before it re-arms its binds (internal/server/changes.go debounces by
	// one second); see waitArmed.
	armedReload = time.Second
)

// topology is one running docker-compose project.
type topology struct {
	t       *testing.T // the running (sub)test, for failures
	root    *testing.T // the test that owns the topology, for teardown
	project string
	network string
	token   string
	secret  string
	oidc    string // the test OpenID provider's admin secret
	envFile string
	env     map[string]string // what envFile holds; see setEnv
	acmeDir string            // E2E_ACME_DIR: Pebble's API certificate, its issuing root (acme_test.go)
	compose []string          // the compose command and its fixed arguments
	http    *http.Client

	mu    sync.Mutex        // guards the following field
	ports map[string]string // "service/port" -> published address
}

// randomHex returns n random bytes in hex.
func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// composeCommand finds docker-compose (Compose v1) or the docker compose
// plugin, whichever answers.
func composeCommand(t testing.TB) []string {
	t.Helper()
	if err := exec.Command("docker-compose", "version").Run(); err == nil {
		return []string{"docker-compose"}
	}
	if err := exec.Command("docker", "compose", "version").Run(); err == nil {
		return []string{"docker", "compose"}
	}
	t.Fatal("neither docker-compose nor the docker compose plugin answers: the e2e suite needs one")
	return nil
}

// images returns the image tags to run: from the file E2E_IMAGES names
// (what `make e2e` writes), else by running deploy/images/build.sh.
func images(t testing.TB) map[string]string {
	t.Helper()
	var out []byte
	if f := os.Getenv("E2E_IMAGES"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatalf("E2E_IMAGES: %v", err)
		}
		out = b
	} else {
		cmd := exec.Command("bash", "../deploy/images/build.sh", "server", "provider", "postgres", "e2e-app", "e2e-oidc", "e2e-pebble")
		cmd.Stderr = os.Stderr
		b, err := cmd.Output()
		if err != nil {
			t.Fatalf("build images: %v", err)
		}
		out = b
	}
	imgs := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "="); ok {
			imgs[k] = v
		}
	}
	for _, k := range []string{"SERVER", "PROVIDER", "POSTGRES", "E2E_APP", "E2E_OIDC", "E2E_PEBBLE"} {
		if imgs[k] == "" {
			t.Fatalf("no %s image in %q", k, out)
		}
	}
	return imgs
}

// dockerGID is the group owning the Docker socket, which the provider
// (an unprivileged user) joins.
func dockerGID(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("stat", "-c", "%g", "/var/run/docker.sock").Output()
	if err != nil {
		t.Fatalf("stat /var/run/docker.sock: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// up brings a fresh project up and registers its teardown: on failure the
// logs of every container are dumped first.
func up(t *testing.T) *topology {
	t.Helper()
	imgs := images(t)
	tp := &topology{
		t:       t,
		root:    t,
		project: "aperioe2e" + randomHex(t, 4),
		token:   randomHex(t, 16),
		secret:  randomHex(t, 16),
		oidc:    randomHex(t, 16),
		http:    &http.Client{Timeout: 90 * time.Second},
	}
	tp.network = tp.project + "_net"
	tp.acmeDir = pebbleCerts(t)
	tp.env = map[string]string{
		"E2E_SERVER_IMAGE":          imgs["SERVER"],
		"E2E_PROVIDER_IMAGE":        imgs["PROVIDER"],
		"E2E_POSTGRES_IMAGE":        imgs["POSTGRES"],
		"E2E_APP_IMAGE":             imgs["E2E_APP"],
		"E2E_OIDC_IMAGE":            imgs["E2E_OIDC"],
		"E2E_PEBBLE_IMAGE":          imgs["E2E_PEBBLE"],
		"E2E_ACME_DIR":              tp.acmeDir,
		"E2E_ACME_APP_TOKEN":        "", // minted by the acme_on_demand step
		"E2E_OIDC_CLIENT_SECRET":    randomHex(t, 16),
		"E2E_OIDC_ADMIN_SECRET":     tp.oidc,
		"E2E_TOKEN":                 tp.token,
		"E2E_SCALE_SECRET":          tp.secret,
		"E2E_PG_PASSWORD":           randomHex(t, 8),
		"E2E_PROJECT":               tp.project,
		"E2E_NETWORK":               tp.network,
		"E2E_DOCKER_GID":            dockerGID(t),
		"E2E_IDLE_TIMEOUT":          idleTimeout.String(),
		"E2E_CLIENT_DOWN_THRESHOLD": clientDownThreshold.String(),
	}
	tp.envFile = filepath.Join(t.TempDir(), "e2e.env")
	tp.writeEnv()
	tp.compose = append(composeCommand(t), "-f", "docker-compose.yml", "--env-file", tp.envFile, "-p", tp.project)

	t.Cleanup(tp.down)
	start := time.Now()
	tp.mustCompose("up", "-d")
	t.Logf("topology %s up in %v", tp.project, time.Since(start).Round(time.Millisecond))
	for _, s := range []string{"server-a", "server-b"} {
		tp.waitFor(s+" answers /aperio/readyz", 60*time.Second, func() bool {
			return tp.statusOf("GET", "http://"+tp.port(s, 8080)+"/aperio/readyz") == http.StatusOK
		})
	}
	return tp
}

// writeEnv writes tp.env to the env file every compose command reads.
func (tp *topology) writeEnv() {
	tp.t.Helper()
	var lines []string
	for k, v := range tp.env {
		lines = append(lines, k+"="+v)
	}
	sort.Strings(lines)
	if err := os.WriteFile(tp.envFile, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		tp.t.Fatal(err)
	}
}

// setEnv sets one E2E_* variable for the compose commands that follow: a
// service started after it sees the new value. Services already running
// keep theirs unless their configuration names the variable and compose
// recreates them.
func (tp *topology) setEnv(k, v string) {
	tp.t.Helper()
	tp.env[k] = v
	tp.writeEnv()
}

// down dumps logs when the test failed, then removes the app containers
// the provider made and the compose project with its volumes.
func (tp *topology) down() {
	t := tp.root
	tp.t = t
	if t.Failed() {
		out, err := tp.composeOut("--profile", "acme", "logs", "--no-color", "--timestamps")
		t.Logf("docker-compose logs (err %v):\n%s", err, out)
		for _, id := range tp.apps(true) {
			out, err := exec.Command("docker", "logs", "--timestamps", id).CombinedOutput()
			t.Logf("app container %s logs (err %v):\n%s", id, err, out)
		}
	}
	// The servers and the provider stop first: a scaling call a server
	// made in the last step may still be reconciling, and a container the
	// provider starts after the app containers were listed would stay on
	// the project's network, which down then cannot remove (a clean-clone
	// CI run failed so, with an app container 7 s old).
	if out, err := tp.composeOut("stop", "-t", "5", "server-a", "server-b", "provider"); err != nil {
		t.Logf("docker-compose stop: %v\n%s", err, out)
	}
	if ids := tp.apps(true); len(ids) > 0 {
		if out, err := exec.Command("docker", append([]string{"rm", "-f"}, ids...)...).CombinedOutput(); err != nil {
			t.Errorf("remove app containers: %v\n%s", err, out)
		}
	}
	// The profile's services (acme-app) are only torn down when it is on.
	if out, err := tp.composeOut("--profile", "acme", "down", "-v", "--remove-orphans", "-t", "5"); err != nil {
		t.Errorf("docker-compose down: %v\n%s", err, out)
	}
}

func (tp *topology) composeOut(args ...string) (string, error) {
	cmd := exec.Command(tp.compose[0], append(tp.compose[1:], args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (tp *topology) mustCompose(args ...string) string {
	tp.t.Helper()
	out, err := tp.composeOut(args...)
	if err != nil {
		tp.t.Fatalf("docker-compose %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func docker(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command("docker", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// port is the 127.0.0.1 address a service's port is published on (it
// changes when the container restarts).
func (tp *topology) port(service string, port int) string {
	tp.t.Helper()
	key := fmt.Sprintf("%s/%d", service, port)
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if addr, ok := tp.ports[key]; ok {
		return addr
	}
	cmd := exec.Command(tp.compose[0], append(tp.compose[1:], "port", service, fmt.Sprint(port))...)
	out, err := cmd.Output()
	if err != nil {
		tp.t.Fatalf("docker-compose port %s %d: %v", service, port, err)
	}
	addr := strings.TrimSpace(string(out))
	if addr == "" || strings.HasSuffix(addr, ":0") {
		tp.t.Fatalf("docker-compose port %s %d: %q, want an address", service, port, addr)
	}
	if tp.ports == nil {
		tp.ports = map[string]string{}
	}
	tp.ports[key] = addr
	return addr
}

// forgetPorts drops the cached published ports of service, after a
// restart gave it new ones.
func (tp *topology) forgetPorts(service string) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	for k := range tp.ports {
		if strings.HasPrefix(k, service+"/") {
			delete(tp.ports, k)
		}
	}
}

// containerID is the id of a compose service's container.
func (tp *topology) containerID(service string) string {
	tp.t.Helper()
	return strings.TrimSpace(tp.mustCompose("ps", "-q", service))
}

// ip is a container's address on the topology's network.
func (tp *topology) ip(id string) string {
	tp.t.Helper()
	return docker(tp.t, "inspect", "-f", `{{(index .NetworkSettings.Networks "`+tp.network+`").IPAddress}}`, id)
}

// apps lists the app containers' short ids: all of them, or the running.
func (tp *topology) apps(all bool) []string {
	args := []string{"ps", "-q", "--filter", "label=aperio.e2e.project=" + tp.project}
	if all {
		args = append(args, "-a")
	}
	out, err := exec.Command("docker", args...).Output()
	if err != nil {
		tp.t.Errorf("docker ps: %v", err)
		return nil
	}
	return strings.Fields(string(out))
}

// waitFor polls cond every 100ms until it holds, failing the test after
// timeout. It returns how long it took.
func (tp *topology) waitFor(what string, timeout time.Duration, cond func() bool) time.Duration {
	tp.t.Helper()
	start := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Since(start) > timeout {
			tp.t.Fatalf("timed out after %v waiting until %s", timeout, what)
		}
		<-tick.C
	}
	return time.Since(start)
}

// waitHealthy waits until Docker reports the container id healthy (the
// image's HEALTHCHECK passed), failing at once when the container has no
// health check or Docker declared it unhealthy (with the probe's last
// output), and after timeout otherwise. It returns how long it took.
func (tp *topology) waitHealthy(what, id string, timeout time.Duration) time.Duration {
	tp.t.Helper()
	return tp.waitFor(what+" is healthy (docker inspect .State.Health.Status)", timeout, func() bool {
		status := docker(tp.t, "inspect", "-f", "{{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}", id)
		switch status {
		case "none":
			tp.t.Fatalf("%s (%s) has no health check: its image declares no HEALTHCHECK", what, id)
		case "unhealthy":
			last := docker(tp.t, "inspect", "-f", "{{range .State.Health.Log}}exit {{.ExitCode}}: {{.Output}}{{end}}", id)
			tp.t.Fatalf("%s (%s) is unhealthy; probes:\n%s", what, id, last)
		}
		return status == "healthy"
	})
}

// statusOf sends a request and returns its status, or 0 on a transport
// error.
func (tp *topology) statusOf(method, url string) int {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		return 0
	}
	req.Header.Set("Authorization", "Bearer "+tp.token)
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// api sends an admin API request to a server with the master token and
// decodes a 2xx JSON answer into out; it returns the status (0 on a
// transport error) so that callers can poll through outages.
func (tp *topology) api(server, method, path string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+tp.port(server, 8080)+"/aperio/api"+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+tp.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, fmt.Errorf("%s %s = %d %s", method, path, resp.StatusCode, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: decode %s: %w", method, path, b, err)
		}
	}
	return resp.StatusCode, nil
}

// liveClient is the part of GET /aperio/api/clients the suite reads.
type liveClient struct {
	ID        string   `json:"id"`
	Name      string   `json:"name"` // the container's hostname: its short id
	Hostnames []string `json:"hostnames"`
	Healthy   bool     `json:"healthy"`
	Draining  bool     `json:"draining"`
	Inflight  int      `json:"inflight"`
}

// clients lists the app's clients a server sees (nil when it cannot be
// asked).
func (tp *topology) clients(server string) []liveClient {
	return tp.clientsOf(server, appHost)
}

// clientsOf lists the clients serving host that a server sees (nil when
// it cannot be asked).
func (tp *topology) clientsOf(server, host string) []liveClient {
	var all, mine []liveClient
	if _, err := tp.api(server, "GET", "/clients", nil, &all); err != nil {
		return nil
	}
	for _, c := range all {
		for _, h := range c.Hostnames {
			if h == host {
				mine = append(mine, c)
				break
			}
		}
	}
	return mine
}

// hasClient reports whether server lists a client named name.
func (tp *topology) hasClient(server, name string) bool {
	for _, c := range tp.clients(server) {
		if c.Name == name {
			return true
		}
	}
	return false
}

// scalingRecord is the part of GET /aperio/api/scaling the suite reads.
type scalingRecord struct {
	ID        string    `json:"id"`
	Hostname  string    `json:"hostname"`
	Disarmed  bool      `json:"disarmed"`
	UpdatedAt time.Time `json:"updated_at"`
}

func (tp *topology) records(server string) []scalingRecord {
	var all, mine []scalingRecord
	if _, err := tp.api(server, "GET", "/scaling", nil, &all); err != nil {
		return nil
	}
	for _, r := range all {
		if r.Hostname == appHost {
			mine = append(mine, r)
		}
	}
	return mine
}

// waitArmed waits until both servers have had time to re-arm the app's
// record after its last change: the re-arm is internal and debounced by
// armedReload, and nothing outside the process shows it, so this polls
// the clock against the record's updated_at.
func (tp *topology) waitArmed() {
	tp.t.Helper()
	for _, s := range []string{"server-a", "server-b"} {
		var r []scalingRecord
		tp.waitFor(s+" has the app's scaling record", 30*time.Second, func() bool {
			r = tp.records(s)
			return len(r) == 1
		})
		if r[0].Disarmed {
			tp.t.Fatalf("%s: the app's scaling record is disarmed", s)
		}
		ready := r[0].UpdatedAt.Add(armedReload + 500*time.Millisecond)
		tp.waitFor(s+" re-armed the app's binds", 10*time.Second, func() bool { return time.Now().After(ready) })
	}
}

// providerCall is one entry of the provider's GET /calls.
type providerCall struct {
	At         time.Time `json:"at"`
	Reason     string    `json:"reason"`
	Current    int       `json:"current"`
	Desired    int       `json:"desired"`
	Duplicate  bool      `json:"duplicate"`
	RemoteAddr string    `json:"remote_addr"`
}

func (tp *topology) providerCalls() []providerCall {
	tp.t.Helper()
	req, err := http.NewRequest("GET", "http://"+tp.port("provider", 9000)+"/calls", nil)
	if err != nil {
		tp.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tp.secret)
	resp, err := tp.http.Do(req)
	if err != nil {
		tp.t.Fatalf("provider /calls: %v", err)
	}
	defer resp.Body.Close()
	var calls []providerCall
	if resp.StatusCode != http.StatusOK {
		tp.t.Fatalf("provider /calls = %d, want 200", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&calls); err != nil {
		tp.t.Fatalf("provider /calls: %v", err)
	}
	return calls
}

// seed asks the provider directly for n instances, the way an operator
// would bring the first instance up before Aperio has ever seen the app.
func (tp *topology) seed(n int) {
	tp.t.Helper()
	body := fmt.Sprintf(`{"reason":"seed","hostname":%q,"current":0,"desired":%d,"min":0,"max":%d}`, appHost, n, scalingMax)
	req, err := http.NewRequest("POST", "http://"+tp.port("provider", 9000)+"/scale/web", strings.NewReader(body))
	if err != nil {
		tp.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tp.secret)
	req.Header.Set("Idempotency-Key", "seed-"+randomHex(tp.t, 4))
	resp, err := tp.http.Do(req)
	if err != nil {
		tp.t.Fatalf("seed: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		tp.t.Fatalf("seed: provider answered %d, want 202", resp.StatusCode)
	}
}

// visit sends GET path for the app through server base ("127.0.0.1:port")
// and returns the status, the body and the time to the response head.
func (tp *topology) visit(base, path string) (int, string, time.Duration, error) {
	req, err := http.NewRequest("GET", "http://"+base+path, nil)
	if err != nil {
		return 0, "", 0, err
	}
	req.Host = appHost
	start := time.Now()
	resp, err := tp.http.Do(req)
	if err != nil {
		return 0, "", 0, err
	}
	ttfb := time.Since(start)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), ttfb, err
}

// loadGen is the suite's load generator: workers sending GETs for the app
// through a changeable set of servers, counting what came back. It runs
// on the host against the published ports.
type loadGen struct {
	tp    *topology
	path  string
	bases atomic.Pointer[[]string]
	next  atomic.Uint64

	ok, failed atomic.Int64
	inflight   sync.Map // base -> *atomic.Int64

	mu     sync.Mutex // guards the following fields
	errors []string   // the first few failures, for the report

	stop chan struct{}
	wg   sync.WaitGroup
}

func (tp *topology) startLoad(workers int, path string, bases ...string) *loadGen {
	l := &loadGen{tp: tp, path: path, stop: make(chan struct{})}
	l.setBases(bases...)
	for range workers {
		l.wg.Add(1)
		go l.worker()
	}
	tp.root.Cleanup(l.close)
	return l
}

func (l *loadGen) setBases(bases ...string) {
	l.bases.Store(&bases)
}

func (l *loadGen) counter(base string) *atomic.Int64 {
	v, _ := l.inflight.LoadOrStore(base, new(atomic.Int64))
	return v.(*atomic.Int64)
}

func (l *loadGen) worker() {
	defer l.wg.Done()
	for {
		select {
		case <-l.stop:
			return
		default:
		}
		bases := *l.bases.Load()
		base := bases[l.next.Add(1)%uint64(len(bases))]
		c := l.counter(base)
		c.Add(1)
		status, body, _, err := l.tp.visit(base, l.path)
		c.Add(-1)
		if err == nil && status == http.StatusOK && strings.HasPrefix(body, "hello from ") {
			l.ok.Add(1)
			continue
		}
		l.failed.Add(1)
		l.mu.Lock()
		if len(l.errors) < 10 {
			l.errors = append(l.errors, fmt.Sprintf("%s %s: status %d err %v body %.80q", time.Now().Format("15:04:05.000"), base, status, err, body))
		}
		l.mu.Unlock()
	}
}

// counts returns the requests answered and failed so far.
func (l *loadGen) counts() (ok, failed int64) { return l.ok.Load(), l.failed.Load() }

func (l *loadGen) failures() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.errors...)
}

// close stops the workers and waits for them; it is idempotent.
func (l *loadGen) close() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// killAndWait SIGKILLs a container and returns the exit code of the run it
// killed, as docker wait reports it. The wait starts before the kill, so a
// container started again at once (a scale_out) cannot make it wait for
// the next run's end; it is bounded all the same.
func killAndWait(t testing.TB, id string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out strings.Builder
	wait := exec.CommandContext(ctx, "docker", "wait", id)
	wait.Stdout = &out
	if err := wait.Start(); err != nil {
		t.Fatalf("docker wait %s: %v", id, err)
	}
	docker(t, "kill", "-s", "KILL", id)
	if err := wait.Wait(); err != nil {
		t.Fatalf("docker wait %s: %v (output %q)", id, err, out.String())
	}
	return strings.TrimSpace(out.String())
}
