// Command scaling measures Aperio's autoscaling with real binaries:
// aperio-server, aperio-client, a backend and the visitors run as separate
// processes, so that no figure shares one garbage collector with the
// harness. It is a benchmark tool, run by bench/scaling.sh (`make
// bench-scaling`), and is linked into no binary.
//
//	scaling release -server BIN -client BIN [-bursts 1,100,1000] [-runs 20]
//	scaling calls   -server BIN -client BIN [-dsn postgres://...] [-servers 2,3] [-provider-delay 2s]
//	scaling flap    -server BIN -client BIN [-duration 10m] [-window 15s] [-cooldown 60s] [-margin 0.05]
//	scaling backend [-listen 127.0.0.1:0] [-work 1ms]
//
// release times the release of requests held for a cold start, calls
// counts the provider calls of one cold start split across servers that
// share a database (with a provider that may answer slowly, so that the
// servers meet each other's live call lease), flap counts the calls of a
// load stepping within -margin of the scale-in and scale-out thresholds,
// inside the band between them and then just past them; backend is the service
// behind the tunnel, which the other modes start by re-executing this
// program. Tables go to stdout, progress to stderr.
//
// Every process the harness starts has its own process group, working
// directory and log, and is stopped (SIGTERM, then SIGKILL) when the run
// ends, fails or is interrupted; on Linux a child also dies with the
// harness. Every wait has a deadline and every flag a bound.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: scaling release|calls|flap -server BIN -client BIN [flags]
       scaling backend [-listen ADDR] [-work DURATION]
scaling MODE -h lists a mode's flags.`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	mode, rest := args[0], args[1:]
	var (
		c    common
		body func(context.Context, *harness) error
	)
	switch mode {
	case "backend":
		o, err := parseBackend(rest, stderr)
		if err != nil {
			return usageError(stderr, err)
		}
		if err := runBackend(ctx, o, stderr); err != nil {
			fmt.Fprintln(stderr, "backend:", err)
			return 1
		}
		return 0
	case "release":
		o, err := parseRelease(rest, stderr)
		if err != nil {
			return usageError(stderr, err)
		}
		c, body = o.common, func(ctx context.Context, h *harness) error { return runRelease(ctx, h, o, stdout) }
	case "calls":
		o, err := parseCalls(rest, stderr, os.Getenv)
		if err != nil {
			return usageError(stderr, err)
		}
		c, body = o.common, func(ctx context.Context, h *harness) error { return runCalls(ctx, h, o, stdout) }
	case "flap":
		o, err := parseFlap(rest, stderr)
		if err != nil {
			return usageError(stderr, err)
		}
		c, body = o.common, func(ctx context.Context, h *harness) error { return runFlap(ctx, h, o, stdout) }
	default:
		fmt.Fprintf(stderr, "unknown mode %q\n%s\n", mode, usage)
		return 2
	}
	if err := measure(ctx, c, stderr, body); err != nil {
		fmt.Fprintf(stderr, "scaling %s: %v\n", mode, err)
		return 1
	}
	return 0
}

func usageError(stderr io.Writer, err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintln(stderr, err)
	return 2
}

// measure sets up the work directory and the process table, runs body,
// and stops every process body started, whatever happened.
func measure(ctx context.Context, c common, stderr io.Writer, body func(context.Context, *harness) error) (err error) {
	dir := c.workDir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "aperio-scaling-"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ps := newProcs(dir)
	defer func() {
		ps.stopAll(10 * time.Second)
		if c.keep || err != nil {
			fmt.Fprintf(stderr, "scaling: processes' logs kept in %s\n", dir)
		} else if c.workDir == "" {
			os.RemoveAll(dir)
		}
	}()
	h, err := newHarness(c, ps, stderr)
	if err != nil {
		return err
	}
	return body(ctx, h)
}
