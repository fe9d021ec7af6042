package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// common are the flags every measuring mode takes.
type common struct {
	serverBin string // path of aperio-server
	clientBin string // path of aperio-client
	workDir   string // "" = a temporary directory, removed at exit
	keep      bool   // keep workDir (logs of every process)
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.serverBin, "server", "", "path of the aperio-server binary (required)")
	fs.StringVar(&c.clientBin, "client", "", "path of the aperio-client binary (required)")
	fs.StringVar(&c.workDir, "work-dir", "", "directory for the processes' files and logs (default: a temporary one)")
	fs.BoolVar(&c.keep, "keep", false, "keep the work directory and print its path")
}

func (c *common) check() error {
	var errs []error
	if c.serverBin == "" {
		errs = append(errs, errors.New("-server is required"))
	}
	if c.clientBin == "" {
		errs = append(errs, errors.New("-client is required"))
	}
	return errors.Join(errs...)
}

// Bounds of the flags: every run is bounded in size and time.
const (
	maxBurst     = 10000
	maxBursts    = 8
	maxRuns      = 200
	maxLimit     = 1000
	maxWork      = 5 * time.Second
	maxColdStart = 5 * time.Minute
	maxDuration  = time.Hour
	maxWindow    = 5 * time.Minute
	maxCooldown  = 10 * time.Minute
	maxCrossings = 20
	maxServers   = 5
	// minWindow is the server's smallest scaling window and cooldown.
	minWindow = time.Second
)

// releaseOpts are the flags of the release mode.
type releaseOpts struct {
	common
	bursts    []int
	runs      int
	limit     int
	work      time.Duration
	coldStart time.Duration
}

func parseRelease(args []string, stderr io.Writer) (releaseOpts, error) {
	o := releaseOpts{}
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o.register(fs)
	bursts := fs.String("bursts", "1,100,1000", "burst sizes, comma list (each 1.."+strconv.Itoa(maxBurst)+")")
	fs.IntVar(&o.runs, "runs", 20, "measured cold starts per burst size, after one warm-up (1.."+strconv.Itoa(maxRuns)+")")
	fs.IntVar(&o.limit, "limit", 10, "max_concurrent of the started instance (1.."+strconv.Itoa(maxLimit)+")")
	fs.DurationVar(&o.work, "work", time.Millisecond, "time the backend spends on each request (0.."+maxWork.String()+")")
	fs.DurationVar(&o.coldStart, "cold-start", 30*time.Second, "cold_start of the scaling block: how long requests may be held (1s.."+maxColdStart.String()+")")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var errs []error
	errs = append(errs, o.check(), noArgs(fs))
	b, err := parseInts(*bursts, 1, maxBurst, maxBursts)
	errs = append(errs, prefix("-bursts", err))
	o.bursts = b
	errs = append(errs,
		intIn("-runs", o.runs, 1, maxRuns),
		intIn("-limit", o.limit, 1, maxLimit),
		durationIn("-work", o.work, 0, maxWork),
		durationIn("-cold-start", o.coldStart, time.Second, maxColdStart))
	return o, errors.Join(errs...)
}

// flapOpts are the flags of the flap mode.
type flapOpts struct {
	common
	duration  time.Duration // phase 1
	capacity  int           // max_concurrent of every client
	target    float64
	window    time.Duration
	cooldown  time.Duration
	work      time.Duration
	crossings int // phase 2
	// margin is how near the levels sit to the server's thresholds, as a
	// fraction of each threshold (flapLevels).
	margin float64
	// bandLow and bandHigh are phase 1's levels, crossHigh and crossLow
	// phase 2's, as fractions of one client's capacity.
	bandLow, bandHigh, crossHigh, crossLow float64
}

// Bounds of the flap mode's -margin.
const (
	minMargin = 0.01
	maxMargin = 0.25
)

func parseFlap(args []string, stderr io.Writer) (flapOpts, error) {
	o := flapOpts{}
	fs := flag.NewFlagSet("flap", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o.register(fs)
	fs.DurationVar(&o.duration, "duration", 10*time.Minute, "length of phase 1, the load stepping inside the band (1s.."+maxDuration.String()+")")
	fs.IntVar(&o.capacity, "capacity", 50, "max_concurrent of each client (2.."+strconv.Itoa(maxLimit)+"); the levels are rounded to whole requests of it, so it must be fine enough for them to stay within -margin of their thresholds")
	fs.Float64Var(&o.target, "target", 0.8, "target_utilization of the scaling block, in (0,1]")
	fs.DurationVar(&o.window, "window", 15*time.Second, "scaling window (1s.."+maxWindow.String()+")")
	fs.DurationVar(&o.cooldown, "cooldown", 60*time.Second, "scaling cooldown (1s.."+maxCooldown.String()+")")
	fs.DurationVar(&o.work, "work", 500*time.Millisecond, "time the backend spends on each request (1ms.."+maxWork.String()+")")
	fs.IntVar(&o.crossings, "crossings", 4, "steps across the band in phase 2, alternately up and down (0.."+strconv.Itoa(maxCrossings)+")")
	fs.Float64Var(&o.margin, "margin", 0.05, fmt.Sprintf("how near each level sits to its threshold, a fraction of the threshold (%g..%g); the server scales out at or above target_utilization for a window, and in below target_utilization/2 for four windows; a level left at 0 is derived from it, and every level is rounded to whole requests toward its threshold", minMargin, maxMargin))
	fs.Float64Var(&o.bandLow, "band-low", 0, "phase 1's low level, a fraction of one client's capacity, just above the scale-in threshold (default (1+margin) × target/2: 0.42 of 1 client at target 0.8)")
	fs.Float64Var(&o.bandHigh, "band-high", 0, "phase 1's high level, just under the scale-out threshold (default (1-margin) × target: 0.76 of 1 client)")
	fs.Float64Var(&o.crossHigh, "cross-high", 0, "phase 2's level just past the scale-out threshold with one client (default (1+margin) × target: 0.84 of 1 client, 0.42 of 2)")
	fs.Float64Var(&o.crossLow, "cross-low", 0, "phase 2's level just past the scale-in threshold with two clients (default (1-margin) × target/2 of 2 clients: 0.76 of 1 client, 0.38 of 2)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var errs []error
	targetOK := o.target > 0 && o.target <= 1
	if !targetOK {
		errs = append(errs, fmt.Errorf("-target %g: want a value in (0,1]", o.target))
	}
	marginOK := o.margin >= minMargin && o.margin <= maxMargin
	if !marginOK {
		errs = append(errs, fmt.Errorf("-margin %g: want %g..%g", o.margin, minMargin, maxMargin))
	}
	// A level left at 0 sits margin from its threshold; without a valid
	// target and margin it has no value, which the errors above explain.
	lv := flapLevels(o.target, o.margin)
	levels := []struct {
		name string
		v    *float64
		def  float64
	}{{"-band-low", &o.bandLow, lv.bandLow}, {"-band-high", &o.bandHigh, lv.bandHigh},
		{"-cross-high", &o.crossHigh, lv.crossHigh}, {"-cross-low", &o.crossLow, lv.crossLow}}
	for _, l := range levels {
		switch {
		case *l.v == 0 && targetOK && marginOK:
			*l.v = l.def
		case *l.v == 0:
		case !(*l.v > 0 && *l.v <= 2):
			errs = append(errs, fmt.Errorf("%s %g: want a fraction of capacity in (0,2]", l.name, *l.v))
		}
	}
	errs = append(errs, o.check(), noArgs(fs),
		durationIn("-duration", o.duration, time.Second, maxDuration),
		intIn("-capacity", o.capacity, 2, maxLimit),
		durationIn("-window", o.window, minWindow, maxWindow),
		durationIn("-cooldown", o.cooldown, minWindow, maxCooldown),
		durationIn("-work", o.work, time.Millisecond, maxWork),
		intIn("-crossings", o.crossings, 0, maxCrossings),
	)
	if err := errors.Join(errs...); err != nil {
		return o, err
	}
	// The levels must sit where the phases need them (flapPlan says why).
	_, err := flapPlan(o)
	return o, err
}

// callsOpts are the flags of the calls mode.
type callsOpts struct {
	common
	dsn       string
	servers   []int
	runs      int
	burst     int
	coldStart time.Duration
	settle    time.Duration
	// providerDelay is how long the provider holds each call before it
	// answers: while it does, the calling server's lease is live.
	providerDelay time.Duration
}

// dsnEnv names the variable the calls mode reads the PostgreSQL DSN from
// when -dsn is not given: the store tests' variable.
const dsnEnv = "APERIO_TEST_POSTGRES_DSN"

func parseCalls(args []string, stderr io.Writer, getenv func(string) string) (callsOpts, error) {
	o := callsOpts{}
	fs := flag.NewFlagSet("calls", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o.register(fs)
	fs.StringVar(&o.dsn, "dsn", "", "postgres:// URL the servers share (default $"+dsnEnv+")")
	servers := fs.String("servers", "2,3", "numbers of servers, comma list (each 1.."+strconv.Itoa(maxServers)+")")
	fs.IntVar(&o.runs, "runs", 3, "cold starts per number of servers (1..50)")
	fs.IntVar(&o.burst, "burst", 100, "requests per cold start, split across the servers (1.."+strconv.Itoa(maxBurst)+")")
	fs.DurationVar(&o.coldStart, "cold-start", 30*time.Second, "cold_start of the scaling block (1s.."+maxColdStart.String()+")")
	fs.DurationVar(&o.settle, "settle", 3*time.Second, "how long to wait for late calls after the burst was answered (0..1m)")
	fs.DurationVar(&o.providerDelay, "provider-delay", 0, "how long the provider holds each call before it answers, so that the other servers meet the caller's live lease, not only its recorded outcome (0.."+maxProviderDelay.String()+"; above the servers' 10s call timeout, calls fail)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.dsn == "" {
		o.dsn = getenv(dsnEnv)
	}
	errs := []error{o.check(), noArgs(fs),
		intIn("-runs", o.runs, 1, 50),
		intIn("-burst", o.burst, 1, maxBurst),
		durationIn("-cold-start", o.coldStart, time.Second, maxColdStart),
		durationIn("-settle", o.settle, 0, time.Minute),
		durationIn("-provider-delay", o.providerDelay, 0, maxProviderDelay),
	}
	s, err := parseInts(*servers, 1, maxServers, maxServers)
	errs = append(errs, prefix("-servers", err))
	o.servers = s
	if o.dsn == "" {
		errs = append(errs, errors.New("-dsn: no PostgreSQL DSN (-dsn or $"+dsnEnv+")"))
	} else if !strings.HasPrefix(o.dsn, "postgres://") && !strings.HasPrefix(o.dsn, "postgresql://") {
		// The DSN may hold a password: name the problem, not the value.
		errs = append(errs, errors.New("-dsn: want a postgres:// URL"))
	}
	return o, errors.Join(errs...)
}

// backendOpts are the flags of the backend subcommand.
type backendOpts struct {
	listen string
	work   time.Duration
}

func parseBackend(args []string, stderr io.Writer) (backendOpts, error) {
	o := backendOpts{}
	fs := flag.NewFlagSet("backend", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.listen, "listen", "127.0.0.1:0", "address to listen on")
	fs.DurationVar(&o.work, "work", time.Millisecond, "time spent on each request (0.."+maxWork.String()+")")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	return o, errors.Join(noArgs(fs), durationIn("-work", o.work, 0, maxWork))
}

// parseInts parses a comma list of at most maxN integers in [lo, hi],
// without duplicates, in the order given.
func parseInts(s string, lo, hi, maxN int) ([]int, error) {
	parts := strings.Split(s, ",")
	if len(parts) > maxN {
		return nil, fmt.Errorf("%d values, at most %d", len(parts), maxN)
	}
	var out []int
	for _, p := range parts {
		p = strings.TrimSpace(p)
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("%q is not an integer", p)
		}
		if n < lo || n > hi {
			return nil, fmt.Errorf("%d is outside %d..%d", n, lo, hi)
		}
		for _, seen := range out {
			if seen == n {
				return nil, fmt.Errorf("%d given twice", n)
			}
		}
		out = append(out, n)
	}
	return out, nil
}

func intIn(name string, v, lo, hi int) error {
	if v < lo || v > hi {
		return fmt.Errorf("%s %d: want %d..%d", name, v, lo, hi)
	}
	return nil
}

func durationIn(name string, v, lo, hi time.Duration) error {
	if v < lo || v > hi {
		return fmt.Errorf("%s %v: want %v..%v", name, v, lo, hi)
	}
	return nil
}

func noArgs(fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return nil
}

func prefix(name string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", name, err)
}
