package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// harness holds what every mode shares: the binaries, the child
// processes, the tokens and an HTTP client for the admin API.
type harness struct {
	serverBin, clientBin string
	self                 string // this program, re-executed as the backend
	ps                   *procs
	master               string // the servers' master token, also the clients' token
	metricsToken         string
	api                  *http.Client
	progress             io.Writer
}

// readyTimeout bounds the wait for a process to be ready; the machine may
// be busy compiling.
const readyTimeout = 60 * time.Second

// maxAPIBody bounds an admin API or metrics answer read by the harness.
const maxAPIBody = 32 << 20

func newHarness(c common, ps *procs, progress io.Writer) (*harness, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	h := &harness{serverBin: c.serverBin, clientBin: c.clientBin, self: self, ps: ps,
		master: randomToken(), metricsToken: randomToken(), progress: progress,
		api: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 16}}}
	for _, bin := range []string{c.serverBin, c.clientBin} {
		if _, err := os.Stat(bin); err != nil {
			return nil, err
		}
	}
	return h, nil
}

func randomToken() string {
	b := make([]byte, 16)
	rand.Read(b)
	return "bench-" + hex.EncodeToString(b)
}

func (h *harness) logf(format string, args ...any) {
	fmt.Fprintf(h.progress, "scaling: "+format+"\n", args...)
}

// backend is a running backend process.
type backend struct {
	addr string // host:port
	proc *proc
}

func (h *harness) startBackend(work time.Duration) (*backend, error) {
	p, err := h.ps.start(spec{name: "backend", path: h.self, args: []string{"backend", "-work", work.String()},
		watch: regexp.MustCompile(regexp.QuoteMeta(backendReady) + `(\S+)`)})
	if err != nil {
		return nil, err
	}
	addr, err := p.waitFound(readyTimeout)
	if err != nil {
		return nil, err
	}
	return &backend{addr: addr, proc: p}, nil
}

// stats returns what the backend recorded for key; ok is false when no
// request for key arrived.
func (h *harness) backendStats(ctx context.Context, be *backend, key string) (keyStats, bool, error) {
	var s keyStats
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+be.addr+statsPath+"?key="+url.QueryEscape(key), nil)
	if err != nil {
		return s, false, err
	}
	resp, err := h.api.Do(req)
	if err != nil {
		return s, false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return s, false, nil
	}
	if err := decodeOK(resp, &s); err != nil {
		return s, false, fmt.Errorf("backend stats: %w", err)
	}
	return s, true, nil
}

// server is a running aperio-server.
type server struct {
	base string // http://127.0.0.1:port
	proc *proc
}

// serverOpts is what differs between the servers of the modes.
type serverOpts struct {
	dsn      string // PostgreSQL; "" for the embedded store
	maxBurst int    // the largest burst it must hold from one visitor
	records  int    // scaling records it must accept
	logLevel string // APERIO_LOG_LEVEL; "" is info
}

// serverEnv is the environment of a server of o, with tokens master and
// metrics and its files under dir.
func serverEnv(master, metrics string, o serverOpts, dir string) []string {
	held := max(1000, 2*o.maxBurst)
	level := o.logLevel
	if level == "" {
		level = "info"
	}
	env := []string{
		"APERIO_SERVER_TOKEN=" + master,
		"APERIO_METRICS_TOKEN=" + metrics,
		"APERIO_HOST=127.0.0.1", "APERIO_PORT=0",
		"APERIO_LOG_LEVEL=" + level,
		"APERIO_SCALING=1", "APERIO_SCALING_ALLOW_HTTP=1", "APERIO_SCALING_ALLOW_PRIVATE=1",
		// One visitor address sends every burst, over as many
		// connections (and HTTP/2 streams) as its transport opens at
		// once: no per-address cap. With max_streams_per_ip at its
		// default (256), a burst of 1000 had 744 requests answered 429.
		"APERIO_IP_LIMIT_MAX=10000000", "APERIO_IP_LIMIT_REFILL=10000000", "APERIO_MAX_CONNECTIONS_PER_IP=0",
		"APERIO_MAX_STREAMS_PER_IP=0",
		"APERIO_MAX_CONCURRENT_REQUESTS=" + strconv.Itoa(held),
		"APERIO_SCALING_MAX_HELD=" + strconv.Itoa(held),
		// Every run is a cold start of its own hostname: many calls and
		// records, none of them a flood.
		"APERIO_SCALING_MAX_CALLS_PER_MINUTE=100000",
		"APERIO_SCALING_MAX_RECORDS_PER_ORG=" + strconv.Itoa(max(100, o.records+10)),
	}
	if o.dsn != "" {
		return append(env, "APERIO_DATABASE_URL="+o.dsn)
	}
	return append(env, "APERIO_DATA_DIR="+filepath.Join(dir, "data"))
}

// startServer starts an aperio-server of o and waits until it listens.
func (h *harness) startServer(o serverOpts) (*server, error) {
	dir, err := h.ps.newDir("aperio-server")
	if err != nil {
		return nil, err
	}
	env := serverEnv(h.master, h.metricsToken, o, dir)
	p, err := h.ps.start(spec{name: "aperio-server", path: h.serverBin, env: env, dir: dir,
		watch: regexp.MustCompile(`msg="server listening" addr=(\S+)`)})
	if err != nil {
		return nil, err
	}
	addr, err := p.waitFound(readyTimeout)
	if err != nil {
		return nil, err
	}
	return &server{base: "http://" + addr, proc: p}, nil
}

// scalingBlock is a client's scaling declaration.
type scalingBlock struct {
	url                         string
	min, max                    int
	coldStart, window, cooldown time.Duration
	target                      float64
}

// clientOpts says what one aperio-client serves and declares.
type clientOpts struct {
	servers       []*server // it holds a tunnel to each
	backend       *backend
	hostnames     []string
	maxConcurrent int
	scaling       scalingBlock
}

func (h *harness) startClient(o clientOpts) (*proc, error) {
	args := []string{o.backend.addr, "--hostname", strings.Join(o.hostnames, ","),
		"--server-url", o.servers[0].base,
		"--max-concurrent", strconv.Itoa(o.maxConcurrent),
		"--scaling-url", o.scaling.url,
		"--scaling-min", strconv.Itoa(o.scaling.min), "--scaling-max", strconv.Itoa(o.scaling.max),
		"--scaling-cold-start", o.scaling.coldStart.String(),
		"--scaling-window", o.scaling.window.String(), "--scaling-cooldown", o.scaling.cooldown.String(),
		"--scaling-target-utilization", strconv.FormatFloat(o.scaling.target, 'g', -1, 64),
		"--status-socket", "off", "--log-level", "info", "--drain-timeout", "10s"}
	if len(o.servers) > 1 {
		var more []string
		for _, s := range o.servers[1:] {
			more = append(more, s.base)
		}
		args = append(args, "--server-urls", strings.Join(more, ","))
	}
	return h.ps.start(spec{name: "aperio-client", path: h.clientBin, args: args,
		env: []string{"APERIO_SERVER_TOKEN=" + h.master}})
}

// stopClient stops a client with SIGTERM (it drains, then exits 0).
func (h *harness) stopClient(p *proc) error {
	if err := p.stop(15 * time.Second); err != nil {
		return fmt.Errorf("client exit after SIGTERM: %w (log %s)", err, p.log)
	}
	return nil
}

// apiGet GETs path of the admin API on s with the master token and
// decodes the answer into out.
func (h *harness) apiGet(ctx context.Context, s *server, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, "GET", s.base+"/aperio/api"+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+h.master)
	resp, err := h.api.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := decodeOK(resp, out); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}

// decodeOK decodes a 200 answer's JSON body into out.
func decodeOK(resp *http.Response, out any) error {
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAPIBody))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d: %s", resp.StatusCode, truncate(strings.TrimSpace(string(body)), 200))
	}
	return json.Unmarshal(body, out)
}

// clientsFor lists the client connections of s serving hostname.
func (h *harness) clientsFor(ctx context.Context, s *server, hostname string) ([]apitype.ClientInfo, error) {
	var all []apitype.ClientInfo
	if err := h.apiGet(ctx, s, "/clients", &all); err != nil {
		return nil, err
	}
	var out []apitype.ClientInfo
	for _, c := range all {
		if slices.Contains(c.Hostnames, hostname) {
			out = append(out, c)
		}
	}
	return out, nil
}

// recordsOn returns s's scaling records by hostname.
func (h *harness) recordsOn(ctx context.Context, s *server) (map[string]apitype.ScalingRecord, error) {
	var all []apitype.ScalingRecord
	if err := h.apiGet(ctx, s, "/scaling", &all); err != nil {
		return nil, err
	}
	out := make(map[string]apitype.ScalingRecord, len(all))
	for _, r := range all {
		out[r.Hostname] = r
	}
	return out, nil
}

// wouldHold reports whether s would hold a request for hostname now and
// make or join a cold start: the explain API's cold_start step waits.
func (h *harness) wouldHold(ctx context.Context, s *server, hostname string) (bool, error) {
	var ex apitype.Explanation
	if err := h.apiGet(ctx, s, "/explain?"+url.Values{"host": {hostname}, "path": {"/"}}.Encode(), &ex); err != nil {
		return false, err
	}
	for _, st := range ex.Steps {
		if st.Name == apitype.StepColdStart {
			return st.Outcome == apitype.OutcomeWait, nil
		}
	}
	return false, nil
}

// queued returns the requests s holds or queues now
// (aperio_requests_queued).
func (h *harness) queued(ctx context.Context, s *server) (int, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", s.base+"/aperio/metrics", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+h.metricsToken)
	resp, err := h.api.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /aperio/metrics: status %d", resp.StatusCode)
	}
	return parseQueued(io.LimitReader(resp.Body, maxAPIBody))
}

// parseQueued finds the aperio_requests_queued gauge in a Prometheus text
// exposition.
func parseQueued(r io.Reader) (int, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "aperio_requests_queued ")
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || !(f >= 0 && f <= 1e9) {
			return 0, fmt.Errorf("aperio_requests_queued %q: not a count", truncate(v, 40))
		}
		return int(f), nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no aperio_requests_queued in the metrics")
}

// h2cVisitor returns an HTTP client multiplexing requests over HTTP/2
// without TLS, so that a burst of thousands needs a few connections.
func h2cVisitor() (*http.Client, *http.Transport) {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Proxy: nil, Protocols: p, MaxIdleConnsPerHost: 1000}
	return &http.Client{Transport: tr}, tr
}

// answer is one visitor request's outcome.
type answer struct {
	status int // 0 on a transport error
	err    error
	at     time.Time
}

// burst sends n GETs of /key/i for hostname, request i to servers[i%len],
// all at once, each bounded by ctx, and returns their answers on a
// channel of n; answered counts them as they come, for a provider waiting
// for the rest of the burst to be held.
func burst(ctx context.Context, c *http.Client, servers []*server, hostname, key string, n int, answered *atomic.Int64) <-chan answer {
	out := make(chan answer, n)
	for i := range n {
		go func() {
			a := visit(ctx, c, servers[i%len(servers)], hostname, "/"+key+"/"+strconv.Itoa(i))
			answered.Add(1)
			out <- a
		}()
	}
	return out
}

// visit GETs path for hostname through s and reads the whole answer.
func visit(ctx context.Context, c *http.Client, s *server, hostname, path string) answer {
	req, err := http.NewRequestWithContext(ctx, "GET", s.base+path, nil)
	if err != nil {
		return answer{err: err, at: time.Now()}
	}
	req.Host = hostname
	resp, err := c.Do(req)
	if err != nil {
		return answer{err: err, at: time.Now()}
	}
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	a := answer{status: resp.StatusCode, at: time.Now()}
	if err != nil {
		a.status, a.err = 0, err
	}
	return a
}

// answers is what a burst got back.
type answers struct {
	statuses map[int]int // count per status, 0 for transport errors
	last     time.Time   // when the last answer came
	firstErr error       // the first transport error, if any
}

// collect reads n answers from ch. It gives up when ctx ends.
func collect(ctx context.Context, ch <-chan answer, n int) (answers, error) {
	got := answers{statuses: map[int]int{}}
	for i := range n {
		select {
		case a := <-ch:
			got.statuses[a.status]++
			if a.at.After(got.last) {
				got.last = a.at
			}
			if a.err != nil && got.firstErr == nil {
				got.firstErr = a.err
			}
		case <-ctx.Done():
			return got, fmt.Errorf("%d of %d answers: %w", i, n, ctx.Err())
		}
	}
	return got, nil
}

// statusList formats a status count as "200×100 0×2", statuses in order.
func statusList(m map[int]int) string {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d×%d", k, m[k])
	}
	return b.String()
}
