//go:build linux

// Command soak drives mixed traffic through a real aperio-server and
// aperio-client processes for a while and checks that nothing leaks and
// no request is lost. It is run by bench/soak.sh (`make soak`), is linked
// into no binary, and needs Linux (/proc).
//
//	soak -server BIN -client BIN [-duration 3m] [-interval 10s] [-rate 150]
//	     [-cold-every 40s] [-restart-every 30s] [-work-dir DIR] [-keep]
//
// One server (embedded store) and, for hostname app.soak.test, two
// clients: "steady", never restarted, and "churn", stopped with SIGTERM
// and started again every -restart-every. A third hostname,
// cold.soak.test, has a scaling block (min 0, max 1) whose client is
// stopped, so each -cold-every a burst of GETs is held while the
// server calls the harness's provider, which starts a client for it; the
// harness stops that client again once the burst is answered.
//
// The traffic: -rate small GETs a second (HTTP/1.1 and h2c in turn), two
// loops of 1 MiB streamed bodies checked by SHA-256, two loops of
// WebSocket sessions of 10 echoes. Every request counts as started and
// ends as ok or failed; ok is a 200 (a 101 and every echo for a
// WebSocket) with the exact body. Nothing else is allowed, during client
// restarts included: a client stopped with SIGTERM announces draining,
// waits for every server's acknowledgement (no new request is routed to
// it), finishes its requests in flight and only then closes its tunnel
// (docs/architecture.md, Shutdown), and the other client serves the
// hostname throughout. Requests held for a cold start were never
// dispatched; they are released to the new client (docs/autoscaling.md).
//
// Every -interval it samples the server's and the steady client's RSS
// (/proc/PID/status VmRSS) and open fds (/proc/PID/fd), and the server's
// goroutines (go_goroutines on /aperio/metrics); the client exposes no
// goroutine count, so its goroutines are not sampled. After the run it
// fits a least-squares line to each series past the warm-up (the first
// 20% of the run, at least 30 s) and checks its slope is within noise
// (fit.go). Tables go to stdout, progress to stderr; the exit status is 1
// on any failed request, restart or series.
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"github.com/aperio-dev/aperio/bench/internal/benchproc"
	"io"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/aperio-dev/aperio/bench/internal/waitfor"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type opts struct {
	serverBin, clientBin string
	workDir              string
	keep                 bool
	duration, interval   time.Duration
	coldEvery, restartEv time.Duration
	rate                 int
}

func parse(args []string, stderr io.Writer) (opts, error) {
	var o opts
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.serverBin, "server", "", "path of aperio-server (required)")
	fs.StringVar(&o.clientBin, "client", "", "path of aperio-client (required)")
	fs.StringVar(&o.workDir, "work-dir", "", "directory for the processes' files and logs (default: a temporary one)")
	fs.BoolVar(&o.keep, "keep", false, "keep the work directory and print its path")
	fs.DurationVar(&o.duration, "duration", 3*time.Minute, "how long the traffic runs (1m to 24h)")
	fs.DurationVar(&o.interval, "interval", 10*time.Second, "time between samples (1s to 10m)")
	fs.DurationVar(&o.coldEvery, "cold-every", 40*time.Second, "time between cold starts (10s to 1h; a run without one fails)")
	fs.DurationVar(&o.restartEv, "restart-every", 30*time.Second, "time between restarts of the churn client (10s to 1h)")
	fs.IntVar(&o.rate, "rate", 150, "small GETs per second (1 to 2000)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var errs []error
	if o.serverBin == "" || o.clientBin == "" {
		errs = append(errs, errors.New("-server and -client are required"))
	}
	check := func(name string, d, lo, hi time.Duration) {
		if d < lo || d > hi {
			errs = append(errs, fmt.Errorf("-%s %v: want %v to %v", name, d, lo, hi))
		}
	}
	check("duration", o.duration, time.Minute, 24*time.Hour)
	check("interval", o.interval, time.Second, 10*time.Minute)
	check("cold-every", o.coldEvery, 10*time.Second, time.Hour)
	check("restart-every", o.restartEv, 10*time.Second, time.Hour)
	if o.rate < 1 || o.rate > 2000 {
		errs = append(errs, fmt.Errorf("-rate %d: want 1 to 2000", o.rate))
	}
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	return o, errors.Join(errs...)
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir := o.workDir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "aperio-soak-"); err != nil {
			fmt.Fprintln(stderr, "soak:", err)
			return 1
		}
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		fmt.Fprintln(stderr, "soak:", err)
		return 1
	}
	s := &soak{o: o, ks: newChildren(dir), out: stdout, progress: stderr, tally: newTally(),
		master: randomToken(), metricsToken: randomToken()}
	passed, err := s.run(ctx)
	s.ks.stopAll(20 * time.Second)
	if s.stopBackends != nil {
		s.stopBackends()
	}
	if err != nil {
		fmt.Fprintln(stderr, "soak:", err)
	}
	if o.keep || err != nil || !passed {
		fmt.Fprintf(stderr, "soak: processes' logs kept in %s\n", dir)
	} else if o.workDir == "" {
		os.RemoveAll(dir)
	}
	if err != nil || !passed {
		return 1
	}
	return 0
}

const (
	appHost  = "app.soak.test"
	coldHost = "cold.soak.test"
	// coldBurst is the GETs of one cold start.
	coldBurst = 4
	// coldLinger is how long a cold-started instance serves before the
	// harness stops it.
	coldLinger = 3 * time.Second
	// readyTimeout bounds every wait for a process or a state.
	readyTimeout = 60 * time.Second
)

// soak is one run.
type soak struct {
	o                    opts
	ks                   *children
	out, progress        io.Writer
	tally                *tally
	master, metricsToken string
	stopBackends         func()
	backendAddr          string
	providerURL          string
	server               *child
	api                  *api
	steady               *child

	mu    sync.Mutex // guards the following fields
	churn *child     // the client being restarted
	cold  *child     // the cold host's instance, nil when stopped
	colds int        // instances the provider started
}

func (s *soak) logf(format string, args ...any) {
	fmt.Fprintf(s.progress, "soak: "+format+"\n", args...)
}

// startServer starts the server on a port the harness picked (its log
// level is warn: an access line per request would be the most of a long
// soak's disk and CPU) and waits until it is ready.
func (s *soak) startServer(ctx context.Context) error {
	port, err := benchproc.FreePort()
	if err != nil {
		return err
	}
	env := []string{
		"APERIO_SERVER_TOKEN=" + s.master, "APERIO_METRICS_TOKEN=" + s.metricsToken,
		"APERIO_HOST=127.0.0.1", "APERIO_PORT=" + strconv.Itoa(port), "APERIO_DATA_DIR=data", "APERIO_LOG_LEVEL=warn",
		"APERIO_SCALING=1", "APERIO_SCALING_ALLOW_HTTP=1", "APERIO_SCALING_ALLOW_PRIVATE=1",
		// Every visitor is 127.0.0.1: no per-address limit may refuse one.
		"APERIO_IP_LIMIT_MAX=10000000", "APERIO_IP_LIMIT_REFILL=10000000", "APERIO_MAX_CONNECTIONS_PER_IP=0",
	}
	p, err := s.ks.start("aperio-server", s.o.serverBin, nil, env)
	if err != nil {
		return err
	}
	s.server, s.api = p, newAPI("http://127.0.0.1:"+strconv.Itoa(port), s.master, s.metricsToken)
	return waitfor.Until(ctx, readyTimeout, 100*time.Millisecond, "the server's /aperio/readyz", func(ctx context.Context) (bool, error) {
		if p.exited() {
			return false, fmt.Errorf("aperio-server exited: %v; see %s", p.err, p.log)
		}
		_, err := s.api.get(ctx, "/aperio/readyz", "")
		return err == nil, err
	})
}

// startClient starts an aperio-client serving the backend for hostname;
// with scaling, it declares the cold host's scaling block.
func (s *soak) startClient(name, hostname string, scaling bool) (*child, error) {
	args := []string{s.backendAddr, "--hostname", hostname, "--server-url", s.api.base,
		"--status-socket", "off", "--log-level", "info", "--drain-timeout", "30s"}
	if scaling {
		args = append(args, "--scaling-url", s.providerURL, "--scaling-min", "0", "--scaling-max", "1",
			"--scaling-cold-start", "30s", "--scaling-window", "5s", "--scaling-cooldown", "5s")
	}
	return s.ks.start(name, s.o.clientBin, args, []string{"APERIO_SERVER_TOKEN=" + s.master})
}

// waitClients waits until n clients, none draining, serve hostname.
func (s *soak) waitClients(ctx context.Context, hostname string, n int) error {
	return waitfor.Until(ctx, readyTimeout, 100*time.Millisecond, fmt.Sprintf("%d clients serving %s", n, hostname), func(ctx context.Context) (bool, error) {
		got, err := s.api.routable(ctx, hostname)
		return got == n, err
	})
}

// coldStart is the provider's action: it starts the cold host's instance
// unless one runs.
func (s *soak) coldStart() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cold != nil && !s.cold.exited() {
		return
	}
	p, err := s.startClient("cold-instance", coldHost, true)
	if err != nil {
		s.logf("provider: %v", err)
		return
	}
	s.cold = p
	s.colds++
}

// stopCold stops the cold host's instance, if one runs, and waits until
// the server would hold a request for the host again.
func (s *soak) stopCold(ctx context.Context) error {
	s.mu.Lock()
	p := s.cold
	s.cold = nil
	s.mu.Unlock()
	if p != nil {
		if err := p.stop(40 * time.Second); err != nil {
			return fmt.Errorf("cold instance exit after SIGTERM: %w", err)
		}
	}
	return waitfor.Until(ctx, readyTimeout, 100*time.Millisecond, coldHost+" armed for a cold start", func(ctx context.Context) (bool, error) {
		return s.api.wouldHold(ctx, coldHost)
	})
}

func (s *soak) setup(ctx context.Context) error {
	be, stopBe, err := serve(backendHandler())
	if err != nil {
		return err
	}
	prov, stopProv, err := serve(providerHandler(s.coldStart))
	if err != nil {
		stopBe()
		return err
	}
	s.backendAddr, s.providerURL = be, "http://"+prov+"/scale"
	s.stopBackends = func() { stopProv(); stopBe() }
	s.logf("starting aperio-server")
	if err := s.startServer(ctx); err != nil {
		return err
	}
	if s.steady, err = s.startClient("steady", appHost, false); err != nil {
		return err
	}
	churn, err := s.startClient("churn", appHost, false)
	if err != nil {
		return err
	}
	s.churn = churn
	if err := s.waitClients(ctx, appHost, 2); err != nil {
		return err
	}
	// The first instance declares the scaling block; once the server has
	// the record, stopping it leaves the host armed with an empty pool.
	s.logf("arming %s", coldHost)
	s.coldStart()
	if err := s.waitClients(ctx, coldHost, 1); err != nil {
		return err
	}
	return s.stopCold(ctx)
}

// coldOnce is one cold start: a burst of GETs while nothing serves the
// host, each of which must be held and answered 200; then the instance
// the provider started is stopped and the host armed again.
func (s *soak) coldOnce(ctx context.Context, v *visitor) error {
	var wg sync.WaitGroup
	for range coldBurst {
		wg.Go(func() {
			s.tally.do(kindCold, func() error {
				body, err := v.get(context.WithoutCancel(ctx), v.h1, "/small/cold", 64)
				if err == nil && string(body) != "ok\n" {
					err = fmt.Errorf("cold: body %q", body)
				}
				return err
			})
		})
	}
	wg.Wait()
	// The server samples its pools every second; an instance gone before
	// it was seen leaves the next burst joining this, finished, cold
	// start for the whole cold_start (docs/autoscaling.md).
	time.Sleep(coldLinger)
	return s.stopCold(ctx)
}

// restartOnce stops the churn client with SIGTERM, which must exit 0, and
// starts it again; steady serves the hostname meanwhile.
func (s *soak) restartOnce(ctx context.Context) error {
	if err := s.waitClients(ctx, appHost, 2); err != nil {
		return err
	}
	s.mu.Lock()
	old := s.churn
	s.mu.Unlock()
	if err := old.stop(40 * time.Second); err != nil {
		return fmt.Errorf("churn client exit after SIGTERM: %w (log %s)", err, old.log)
	}
	p, err := s.startClient("churn", appHost, false)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.churn = p
	s.mu.Unlock()
	return s.waitClients(ctx, appHost, 2)
}

// every runs f every d (one at a time) until ctx ends; f's errors count
// as kind's failures.
func (s *soak) every(ctx context.Context, d time.Duration, kind string, f func(context.Context) error) {
	paced(ctx, d, 1, func() { s.tally.do(kind, func() error { return f(ctx) }) })
}

func (s *soak) run(abort context.Context) (bool, error) {
	setupCtx, cancel := context.WithTimeout(abort, 3*time.Minute)
	err := s.setup(setupCtx)
	cancel()
	if err != nil {
		return false, fmt.Errorf("setup: %w", err)
	}
	app, cold := newVisitor(s.api.base, appHost), newVisitor(s.api.base, coldHost)
	defer app.close()
	defer cold.close()

	s.logf("traffic for %v: %d small GETs/s, 2 stream loops, 2 WebSocket loops, a cold start every %v, a client restart every %v",
		s.o.duration, s.o.rate, s.o.coldEvery, s.o.restartEv)
	start := time.Now()
	traffic, stopTraffic := context.WithTimeout(abort, s.o.duration)
	defer stopTraffic()
	// Requests run on reqCtx: the end of the traffic stops new ones,
	// never one in flight.
	reqCtx := context.WithoutCancel(abort)
	var wg sync.WaitGroup
	wg.Go(func() {
		paced(traffic, time.Second/time.Duration(s.o.rate), 64, func() {
			s.tally.do(kindSmall, func() error { return app.small(reqCtx) })
		})
	})
	wg.Go(func() {
		looped(traffic, 2, 100*time.Millisecond, func() {
			s.tally.do(kindStream, func() error { return app.stream(reqCtx) })
		})
	})
	wg.Go(func() {
		looped(traffic, 2, 100*time.Millisecond, func() {
			s.tally.do(kindWS, func() error { return app.ws(reqCtx) })
		})
	})
	wg.Go(func() {
		s.every(traffic, s.o.coldEvery, kindRearm, func(ctx context.Context) error {
			// The burst's GETs count as cold, one by one; the cycle
			// counts as rearm.
			return s.coldOnce(context.WithoutCancel(ctx), cold)
		})
	})
	wg.Go(func() {
		s.every(traffic, s.o.restartEv, kindRestart, func(ctx context.Context) error {
			return s.restartOnce(context.WithoutCancel(ctx))
		})
	})

	var samples []sample
	take := func() {
		sm := s.sample(abort, time.Since(start))
		samples = append(samples, sm)
		s.printSample(len(samples) == 1, sm)
	}
	take()
	tick := time.NewTicker(s.o.interval)
sampling:
	for {
		select {
		case <-traffic.Done():
			break sampling
		case <-tick.C:
			take()
			if s.server.exited() || s.steady.exited() {
				stopTraffic()
				wg.Wait()
				return false, fmt.Errorf("a process died: server %v, steady client %v", s.server.err, s.steady.err)
			}
		}
	}
	tick.Stop()
	if abort.Err() != nil {
		return false, abort.Err()
	}
	s.logf("traffic over; waiting for the requests in flight")
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		return false, errors.New("requests still in flight 2 minutes after the traffic ended")
	}
	take()
	return s.summary(samples, time.Since(start)), nil
}

func randomToken() string { return "soak-" + rand.Text() }
