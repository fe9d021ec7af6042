package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/aperio-dev/aperio/bench/internal/benchproc"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// options are run's flags.
type options struct {
	server, dir      string
	counts           []int
	idle, settle     time.Duration
	rate             float64
	perProc, perIP   int
	signal           syscall.Signal
	connectSlack     time.Duration
	reconnectTimeout time.Duration
}

const (
	token        = "scale-clients-master-0123456789abcdef"
	metricsToken = "scale-clients-metrics-0123456789"
)

func runMain(args []string) error {
	fset := flag.NewFlagSet("run", flag.ContinueOnError)
	var o options
	counts := fset.String("clients", "1000 5000 10000", "client counts to measure, space or comma separated")
	sig := fset.String("signal", "TERM", "how the server is stopped for the reconnect: TERM or KILL")
	fset.StringVar(&o.server, "server", "", "aperio-server binary")
	fset.StringVar(&o.dir, "dir", "", "work directory (data dirs and logs)")
	fset.DurationVar(&o.idle, "idle", 20*time.Second, "idle window the server's CPU is measured over")
	fset.DurationVar(&o.settle, "settle", 5*time.Second, "wait before each measurement")
	fset.Float64Var(&o.rate, "rate", 250, "clients connected per second, all child processes together")
	fset.IntVar(&o.perProc, "per-proc", 2500, "clients per child process")
	fset.IntVar(&o.perIP, "per-ip", 250, "clients per loopback source address")
	fset.DurationVar(&o.connectSlack, "connect-slack", 60*time.Second, "time past N/rate the server may take to count N clients")
	fset.DurationVar(&o.reconnectTimeout, "reconnect-timeout", 150*time.Second, "time the clients have to reconnect after the restart")
	if err := fset.Parse(args); err != nil {
		return err
	}
	var err error
	if o.counts, err = parseCounts(*counts); err != nil {
		return err
	}
	switch *sig {
	case "TERM":
		o.signal = syscall.SIGTERM
	case "KILL":
		o.signal = syscall.SIGKILL
	default:
		return fmt.Errorf("-signal %q: want TERM or KILL", *sig)
	}
	if o.server == "" || o.dir == "" || o.rate <= 0 || o.perProc <= 0 || o.perIP <= 0 {
		return errors.New("run needs -server, -dir, -rate > 0, -per-proc > 0 and -per-ip > 0")
	}
	nofile, err := raiseNofile()
	if err != nil {
		return err
	}
	logf("RLIMIT_NOFILE %d for the harness, the server and the client processes", nofile)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var rows []row
	for _, n := range o.counts {
		r, err := measure(ctx, o, n)
		if err != nil {
			printTable(os.Stdout, o, rows)
			return fmt.Errorf("%d clients: %w", n, err)
		}
		rows = append(rows, r)
	}
	printTable(os.Stdout, o, rows)
	for _, r := range rows {
		if r.ConnectGot != int64(r.Clients) || r.ReconnectGot != int64(r.Clients) {
			return errors.New("the server did not count every client of some run (the >T (count) cells)")
		}
	}
	return nil
}

// parseCounts reads "1000 5000,10000".
func parseCounts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == ',' }) {
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("client count %q: want a positive integer", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("no client count")
	}
	return out, nil
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench-scale-clients: "+format+"\n", args...)
}

// measure runs one client count on a fresh server and data directory.
func measure(ctx context.Context, o options, n int) (r row, err error) {
	r.Clients, r.Window = n, o.idle
	dir := filepath.Join(o.dir, fmt.Sprintf("n%d", n))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return r, err
	}
	port, err := benchproc.FreePort()
	if err != nil {
		return r, err
	}
	srv := &server{bin: o.server, dir: dir, addr: fmt.Sprintf("127.0.0.1:%d", port), log: filepath.Join(dir, "server.log")}
	defer srv.stop(syscall.SIGKILL, 5*time.Second)
	if err := srv.start(ctx); err != nil {
		return r, err
	}
	logf("%d clients: server pid %d on %s", n, srv.pid(), srv.addr)
	if _, err := srv.connected(ctx); err != nil {
		return r, err
	}
	if err := sleep(ctx, o.settle); err != nil {
		return r, err
	}
	if r.Mem0, err = readMemory(srv.pid()); err != nil {
		return r, err
	}
	r.GC0, _ = srv.lastGC()
	r.Stack0, _ = srv.stackInuse(ctx)
	logf("%d clients: 0 connected, RSS %d KiB; server CPU over %s idle", n, r.Mem0.RSS, o.idle)
	if r.CPU0, _, err = cpuOver(ctx, o.idle, srv.pid(), nil); err != nil {
		return r, err
	}

	var kids []*child
	defer func() {
		for _, k := range kids {
			k.kill()
		}
	}()
	procs := (n + o.perProc - 1) / o.perProc
	start := time.Now()
	for i := range procs {
		first := i * o.perProc
		k, err := startChild(ctx, dir, i, srv.url(), first, min(o.perProc, n-first), o.rate/float64(procs), o.perIP)
		if err != nil {
			return r, err
		}
		kids = append(kids, k)
	}
	logf("%d clients: %d client processes, %.0f clients/s", n, procs, o.rate)
	deadline := time.Duration(float64(n)/o.rate*float64(time.Second)) + o.connectSlack
	if got, err := srv.waitCount(ctx, n, deadline, kids); err != nil {
		if ctx.Err() != nil || !errors.Is(err, errShort) {
			return r, err
		}
		// The figures of a server that cannot hold n are no figures of
		// n clients: the row says how far it got, the run goes on.
		r.Connect, r.ConnectGot = time.Since(start), got
		logf("%d clients: %v", n, err)
		return r, nil
	}
	r.Connect, r.ConnectGot = time.Since(start), int64(n)
	logf("%d clients: all connected after %.1fs", n, r.Connect.Seconds())
	if err := sleep(ctx, o.settle); err != nil {
		return r, err
	}
	logf("%d clients: server CPU over %s idle", n, o.idle)
	var kidPIDs []int
	for _, k := range kids {
		kidPIDs = append(kidPIDs, k.cmd.Process.Pid)
	}
	if r.CPUN, r.ClientCPU, err = cpuOver(ctx, o.idle, srv.pid(), kidPIDs); err != nil {
		return r, err
	}
	if r.MemN, err = readMemory(srv.pid()); err != nil {
		return r, err
	}
	r.GCN, r.GCOK = srv.lastGC()
	r.StackN, r.StackOK = srv.stackInuse(ctx)
	if got, err := srv.connected(ctx); err != nil || got != int64(n) {
		return r, fmt.Errorf("after the idle window the server counts %d clients (%v), want %d", got, err, n)
	}
	logf("%d clients: RSS %d KiB (anon %d KiB); restarting the server with SIG%s", n, r.MemN.RSS, r.MemN.Anon, strings.ToUpper(unix(o.signal)))

	t0 := time.Now()
	if err := srv.stop(o.signal, 60*time.Second); err != nil {
		return r, err
	}
	if err := srv.start(ctx); err != nil {
		return r, err
	}
	listening := time.Now()
	r.Restart = listening.Sub(t0)
	got, err := srv.waitCount(ctx, n, o.reconnectTimeout, kids)
	r.Reconnect, r.ReconnectGot = time.Since(listening), got
	if err != nil {
		if ctx.Err() != nil || !errors.Is(err, errShort) {
			return r, fmt.Errorf("reconnect: %w", err)
		}
		logf("%d clients: reconnect: %v", n, err)
		return r, nil
	}
	logf("%d clients: server back after %.1fs, all reconnected %.1fs later", n, r.Restart.Seconds(), r.Reconnect.Seconds())
	return r, nil
}

func unix(s syscall.Signal) string {
	if s == syscall.SIGKILL {
		return "kill"
	}
	return "term"
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// cpuOver returns the CPU time process pid, and the processes others
// together, used over window.
func cpuOver(ctx context.Context, window time.Duration, pid int, others []int) (own, sum time.Duration, err error) {
	read := func() (time.Duration, time.Duration, error) {
		a, err := readCPU(pid)
		if err != nil {
			return 0, 0, err
		}
		var b time.Duration
		for _, p := range others {
			c, err := readCPU(p)
			if err != nil {
				return 0, 0, err
			}
			b += c
		}
		return a, b, nil
	}
	a0, b0, err := read()
	if err != nil {
		return 0, 0, err
	}
	if err := sleep(ctx, window); err != nil {
		return 0, 0, err
	}
	a1, b1, err := read()
	if err != nil {
		return 0, 0, err
	}
	return a1 - a0, b1 - b0, nil
}

// server is one aperio-server, started and restarted on one address and
// data directory.
type server struct {
	bin, dir, addr, log string
	cmd                 *exec.Cmd
	done                chan struct{}
}

func (s *server) url() string { return "http://" + s.addr }
func (s *server) pid() int    { return s.cmd.Process.Pid }

// env is the server's environment: the harness's without APERIO_* and
// HOME, the process tests' settings (master token, loopback address, data
// directory), the limits lifted that would refuse the clients (max_tunnels,
// max_connections_per_ip, the per-address token bucket), metrics on, and
// GODEBUG=gctrace=1 so that the log shows the live heap.
func (s *server) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "APERIO_") && !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "GODEBUG=") {
			env = append(env, kv)
		}
	}
	host, port, _ := net.SplitHostPort(s.addr)
	return append(env, "HOME="+s.dir, "GODEBUG=gctrace=1",
		"APERIO_SERVER_TOKEN="+token, "APERIO_HOST="+host, "APERIO_PORT="+port,
		"APERIO_DATA_DIR="+filepath.Join(s.dir, "data"), "APERIO_LOG_LEVEL=warn",
		"APERIO_METRICS_TOKEN="+metricsToken,
		"APERIO_MAX_TUNNELS=0", "APERIO_MAX_CONNECTIONS_PER_IP=0",
		"APERIO_IP_LIMIT_MAX=1000000", "APERIO_IP_LIMIT_REFILL=1000000",
		"APERIO_SHUTDOWN_TIMEOUT=5s")
}

// start starts the server and waits (20 s at most) until it accepts
// connections.
func (s *server) start(ctx context.Context) error {
	f, err := os.OpenFile(s.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Fprintf(f, "=== start %s\n", time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(s.bin)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = s.dir, s.env(), f, f
	benchproc.Isolate(cmd)
	if err := cmd.Start(); err != nil {
		return err
	}
	s.cmd, s.done = cmd, make(chan struct{})
	done := s.done
	go func() {
		cmd.Wait()
		close(done)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("server exited at start; see %s", s.log)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("server does not listen on %s after 20 s; see %s", s.addr, s.log)
		}
	}
}

// stop sends sig and waits up to timeout for the exit, then kills the
// process group. It is a no-op once the server exited.
func (s *server) stop(sig syscall.Signal, timeout time.Duration) error {
	if s.cmd == nil {
		return nil
	}
	select {
	case <-s.done:
		return nil
	default:
	}
	s.cmd.Process.Signal(sig)
	select {
	case <-s.done:
		return nil
	case <-time.After(timeout):
		benchproc.KillGroup(s.pid())
		<-s.done
		return fmt.Errorf("server did not exit %s after SIG%s", timeout, strings.ToUpper(unix(sig)))
	}
}

var metricsHTTP = &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 10 * time.Second}

// connected is the server's aperio_connected_clients gauge.
func (s *server) connected(ctx context.Context) (int64, error) {
	b, err := s.metrics(ctx)
	if err != nil {
		return 0, err
	}
	n, ok := connectedClients(b)
	if !ok {
		return 0, errors.New("GET /aperio/metrics has no aperio_connected_clients")
	}
	return n, nil
}

// stackInuse is the server's go_memstats_stack_inuse_bytes: the stacks
// the runtime holds, where gctrace counts only their used part.
func (s *server) stackInuse(ctx context.Context) (int64, bool) {
	b, err := s.metrics(ctx)
	if err != nil {
		return 0, false
	}
	return gauge(b, "go_memstats_stack_inuse_bytes")
}

// metrics is the server's /aperio/metrics exposition.
func (s *server) metrics(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url()+"/aperio/metrics", nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+metricsToken)
	resp, err := metricsHTTP.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET /aperio/metrics: %s", resp.Status)
	}
	return string(b), nil
}

// errShort is waitCount's error when the server counts fewer than n
// clients at the deadline.
var errShort = errors.New("too few clients connected")

// waitCount polls the gauge until it reads n, for timeout at most, and
// returns the last count it read; a client process that exits fails it at
// once.
func (s *server) waitCount(ctx context.Context, n int, timeout time.Duration, kids []*child) (int64, error) {
	deadline := time.Now().Add(timeout)
	var got int64
	var last time.Time
	for {
		c, err := s.connected(ctx)
		if err == nil {
			got = c
			if got == int64(n) {
				return got, nil
			}
		}
		for _, k := range kids {
			select {
			case <-k.done:
				return got, fmt.Errorf("client process %d exited; see %s", k.cmd.Process.Pid, k.log)
			default:
			}
		}
		if time.Now().After(deadline) {
			return got, fmt.Errorf("%w: the server counts %d of %d after %s (last poll error: %v)", errShort, got, n, timeout, err)
		}
		if time.Since(last) >= 5*time.Second {
			logf("  %d of %d connected", got, n)
			last = time.Now()
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return got, err
		}
	}
}

func (s *server) lastGC() (gcLine, bool) {
	b, err := os.ReadFile(s.log)
	if err != nil {
		return gcLine{}, false
	}
	return lastGC(string(b))
}

// child is one `scaleclients clients` process.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	log   string
	done  chan struct{}
}

func startChild(ctx context.Context, dir string, i int, url string, first, count int, rate float64, perIP int) (*child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, fmt.Sprintf("clients-%d.log", i))
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.Command(self, "clients", "-url", url, "-token", token,
		"-first", strconv.Itoa(first), "-count", strconv.Itoa(count),
		"-rate", strconv.FormatFloat(rate, 'f', -1, 64), "-per-ip", strconv.Itoa(perIP))
	cmd.Dir, cmd.Stderr = dir, f
	benchproc.Isolate(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	k := &child{cmd: cmd, stdin: stdin, log: logPath, done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			logf("  client process %d: %s", i, sc.Text())
		}
		cmd.Wait()
		close(k.done)
	}()
	return k, nil
}

// kill stops the process group at once and reaps it: the figures are
// taken by then, and a drain of thousands of agents is not measured.
func (k *child) kill() {
	k.stdin.Close()
	benchproc.KillGroup(k.cmd.Process.Pid)
	<-k.done
}
