//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// sample is one reading of the processes and the counters. A figure that
// could not be read is -1 (the process was gone, the scrape failed): it
// is printed, and left out of the fit.
type sample struct {
	at                    time.Duration // since the traffic started
	srvRSS, srvGor, srvFD int64         // bytes, goroutines, fds
	cliRSS, cliFD         int64         // the steady client
	started               map[string]int64
	failed                int64
}

// rss returns VmRSS of pid in bytes, -1 when unreadable.
func rss(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kib, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return -1
			}
			return kib << 10
		}
	}
	return -1
}

// fds counts the open file descriptors of pid, -1 when unreadable.
func fds(pid int) int64 {
	es, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return -1
	}
	return int64(len(es))
}

func (s *soak) sample(ctx context.Context, at time.Duration) sample {
	sm := sample{at: at, started: map[string]int64{}, srvGor: -1,
		srvRSS: rss(s.server.pid()), srvFD: fds(s.server.pid()),
		cliRSS: rss(s.steady.pid()), cliFD: fds(s.steady.pid())}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if n, err := s.api.goroutines(ctx); err == nil {
		sm.srvGor = int64(n)
	} else {
		s.logf("sample at %v: %v", at.Round(time.Second), err)
	}
	for _, k := range kinds {
		sm.started[k] = s.tally.started[k].Load()
	}
	sm.failed = s.tally.totalFailed()
	return sm
}

func mib(b int64) string {
	if b < 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(b)/(1<<20))
}

func count(n int64) string {
	if n < 0 {
		return "-"
	}
	return strconv.FormatInt(n, 10)
}

func (s *soak) printSample(header bool, sm sample) {
	if header {
		fmt.Fprintf(s.out, "== samples every %v (server and the steady client; requests started so far by kind)\n", s.o.interval)
		fmt.Fprintf(s.out, "%6s %11s %8s %7s %11s %7s %8s %7s %6s %5s %8s %6s\n",
			"t_s", "srv_rss_MiB", "srv_gor", "srv_fds", "cli_rss_MiB", "cli_fds",
			kindSmall, kindStream, kindWS, kindCold, kindRestart, "failed")
	}
	fmt.Fprintf(s.out, "%6.0f %11s %8s %7s %11s %7s %8d %7d %6d %5d %8d %6d\n",
		sm.at.Seconds(), mib(sm.srvRSS), count(sm.srvGor), count(sm.srvFD), mib(sm.cliRSS), count(sm.cliFD),
		sm.started[kindSmall], sm.started[kindStream], sm.started[kindWS], sm.started[kindCold], sm.started[kindRestart], sm.failed)
}

// Floors of the flatness check (fit.go): what a healthy process may
// drift over a run anyway.
const (
	floorRSS        = 2 << 20
	floorGoroutines = 20
	floorFDs        = 10
)

// summary prints the requests per kind and the verdict of each series,
// and reports whether everything passed.
func (s *soak) summary(samples []sample, took time.Duration) bool {
	passed := true
	fmt.Fprintf(s.out, "\n== requests by kind over %v (ok: 200 with the exact body; ws: 101, %d echoes, a clean close)\n", took.Round(time.Second), wsMessages)
	fmt.Fprintf(s.out, "%-8s %9s %9s %7s\n", "kind", "started", "ok", "failed")
	for _, k := range kinds {
		st, ok, f := s.tally.started[k].Load(), s.tally.ok[k].Load(), s.tally.failed[k].Load()
		fmt.Fprintf(s.out, "%-8s %9d %9d %7d\n", k, st, ok, f)
		if f > 0 || st != ok {
			passed = false
		}
		if st == 0 && (k == kindSmall || k == kindStream || k == kindWS || k == kindCold) {
			passed = false
			fmt.Fprintf(s.out, "         no %s request ran\n", k)
		}
	}
	s.mu.Lock()
	fmt.Fprintf(s.out, "cold-start instances the provider started: %d (one of them the setup's)\n", s.colds)
	s.mu.Unlock()
	s.tally.mu.Lock()
	for _, f := range s.tally.failures {
		fmt.Fprintf(s.out, "failure: %s\n", f)
	}
	s.tally.mu.Unlock()

	warmup := max(30, 0.2*s.o.duration.Seconds())
	fmt.Fprintf(s.out, "\n== trends: least-squares line past the %.0f s warm-up; flat when |slope × span| <= max(%d × residual sd, floor)\n", warmup, noiseK)
	fmt.Fprintf(s.out, "%-18s %3s %12s %10s %9s %9s  %s\n", "series", "n", "slope/min", "change", "resid_sd", "limit", "verdict")
	series := []struct {
		name  string
		scale float64 // printed unit
		floor float64
		get   func(sample) int64
	}{
		{"server rss MiB", 1 << 20, floorRSS, func(x sample) int64 { return x.srvRSS }},
		{"server goroutines", 1, floorGoroutines, func(x sample) int64 { return x.srvGor }},
		{"server fds", 1, floorFDs, func(x sample) int64 { return x.srvFD }},
		{"client rss MiB", 1 << 20, floorRSS, func(x sample) int64 { return x.cliRSS }},
		{"client fds", 1, floorFDs, func(x sample) int64 { return x.cliFD }},
	}
	for _, se := range series {
		var t, y []float64
		for _, x := range samples {
			if v := se.get(x); v >= 0 {
				t, y = append(t, x.at.Seconds()), append(y, float64(v))
			}
		}
		v := judge(se.name, t, y, warmup, se.floor)
		word := "flat"
		if !v.ok {
			word, passed = "FAIL: "+v.reason, false
		}
		fmt.Fprintf(s.out, "%-18s %3d %12.3f %10.2f %9.2f %9.2f  %s\n", se.name, v.n,
			v.slope*60/se.scale, v.change/se.scale, v.resid/se.scale, v.limit/se.scale, word)
	}
	fmt.Fprintln(s.out, "client goroutines: not sampled (aperio-client exposes no goroutine count)")
	if passed {
		fmt.Fprintln(s.out, "\nsoak: PASS")
	} else {
		fmt.Fprintln(s.out, "\nsoak: FAIL")
	}
	return passed
}
