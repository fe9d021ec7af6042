package main

import (
	"errors"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

var bins = []string{"-server", "/bin/aperio-server", "-client", "/bin/aperio-client"}

func TestParseReleaseDefaults(t *testing.T) {
	o, err := parseRelease(bins, io.Discard)
	if err != nil {
		t.Fatalf("parseRelease(%q) = %v, want nil", bins, err)
	}
	if !slices.Equal(o.bursts, []int{1, 100, 1000}) || o.runs != 20 || o.limit != 10 || o.work != time.Millisecond || o.coldStart != 30*time.Second {
		t.Errorf("parseRelease defaults = %+v, want bursts 1,100,1000, 20 runs, limit 10, work 1ms, cold start 30s", o)
	}
	if o.serverBin != "/bin/aperio-server" || o.clientBin != "/bin/aperio-client" {
		t.Errorf("binaries = %q, %q", o.serverBin, o.clientBin)
	}
}

// TestParseHostile: every bad value is refused with a message naming the
// flag, and every problem of one command line is reported at once.
func TestParseHostile(t *testing.T) {
	getenv := func(string) string { return "" }
	release := func(args ...string) error {
		_, err := parseRelease(append(slices.Clone(bins), args...), io.Discard)
		return err
	}
	flap := func(args ...string) error {
		_, err := parseFlap(append(slices.Clone(bins), args...), io.Discard)
		return err
	}
	calls := func(args ...string) error {
		_, err := parseCalls(append(slices.Clone(bins), args...), io.Discard, getenv)
		return err
	}
	backend := func(args ...string) error {
		_, err := parseBackend(args, io.Discard)
		return err
	}
	tests := []struct {
		name string
		err  error
		want []string
	}{
		{"no binaries", func() error { _, err := parseRelease(nil, io.Discard); return err }(), []string{"-server is required", "-client is required"}},
		{"empty burst", release("-bursts", "1,,3"), []string{"-bursts", `"" is not an integer`}},
		{"word burst", release("-bursts", "ten"), []string{"-bursts", `"ten" is not an integer`}},
		{"zero burst", release("-bursts", "0"), []string{"-bursts", "0 is outside 1..10000"}},
		{"huge burst", release("-bursts", "10001"), []string{"10001 is outside"}},
		{"overflowing burst", release("-bursts", "99999999999999999999999"), []string{"is not an integer"}},
		{"too many bursts", release("-bursts", "1,2,3,4,5,6,7,8,9"), []string{"9 values, at most 8"}},
		{"twice the same burst", release("-bursts", "5,5"), []string{"5 given twice"}},
		{"two problems at once", release("-runs", "0", "-limit", "0"), []string{"-runs 0", "-limit 0"}},
		{"too many runs", release("-runs", "201"), []string{"-runs 201: want 1..200"}},
		{"negative work", release("-work", "-1ms"), []string{"-work -1ms"}},
		{"endless cold start", release("-cold-start", "1h"), []string{"-cold-start 1h0m0s"}},
		{"stray argument", release("extra"), []string{`unexpected arguments ["extra"]`}},
		{"unknown flag", release("-nope"), []string{"-nope"}},
		{"zero target", flap("-target", "0"), []string{"-target 0"}},
		{"target above one", flap("-target", "1.5"), []string{"-target 1.5"}},
		{"NaN target", flap("-target", "NaN"), []string{"-target NaN"}},
		{"window under a second", flap("-window", "500ms"), []string{"-window 500ms"}},
		{"endless flap", flap("-duration", "2h"), []string{"-duration 2h0m0s"}},
		{"negative level", flap("-band-low", "-0.1"), []string{"-band-low -0.1"}},
		{"NaN level", flap("-cross-low", "NaN"), []string{"-cross-low NaN"}},
		{"margin too wide", flap("-margin", "0.3"), []string{"-margin 0.3: want 0.01..0.25"}},
		{"margin and target at once", flap("-margin", "0", "-target", "2"), []string{"-margin 0", "-target 2"}},
		{"capacity of one", flap("-capacity", "1"), []string{"-capacity 1"}},
		{"too many crossings", flap("-crossings", "21"), []string{"-crossings 21"}},
		{"no DSN", calls(), []string{"no PostgreSQL DSN"}},
		{"not PostgreSQL", calls("-dsn", "mysql://u:secret@h/db"), []string{"want a postgres:// URL"}},
		{"negative provider delay", calls("-dsn", "postgres://h/db", "-provider-delay", "-1s"), []string{"-provider-delay -1s: want 0s..30s"}},
		{"provider delay too long", calls("-dsn", "postgres://h/db", "-provider-delay", "31s"), []string{"-provider-delay 31s: want 0s..30s"}},
		{"too many servers", calls("-dsn", "postgres://h/db", "-servers", "2,6"), []string{"-servers", "6 is outside 1..5"}},
		{"backend work too long", backend("-work", "1m"), []string{"-work 1m0s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.err == nil {
				t.Fatalf("parse = nil, want an error mentioning %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(tt.err.Error(), w) {
					t.Errorf("parse = %q, want it to mention %q", tt.err, w)
				}
			}
			if strings.Contains(tt.err.Error(), "secret") {
				t.Errorf("parse = %q: the error quotes the DSN's password", tt.err)
			}
		})
	}
}

func TestParseCallsDSNFromEnvironment(t *testing.T) {
	const dsn = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	getenv := func(k string) string {
		if k == dsnEnv {
			return dsn
		}
		return ""
	}
	o, err := parseCalls(bins, io.Discard, getenv)
	if err != nil {
		t.Fatalf("parseCalls with $%s set = %v, want nil", dsnEnv, err)
	}
	if o.dsn != dsn || !slices.Equal(o.servers, []int{2, 3}) || o.runs != 3 || o.burst != 100 || o.providerDelay != 0 {
		t.Errorf("parseCalls = %+v, want the DSN from the environment, servers 2,3, 3 runs, burst 100, no provider delay", o)
	}
	o, err = parseCalls(append(slices.Clone(bins), "-provider-delay", "2s"), io.Discard, getenv)
	if err != nil || o.providerDelay != 2*time.Second {
		t.Errorf("parseCalls -provider-delay 2s = %v, %v, want 2s", o.providerDelay, err)
	}
	o, err = parseCalls(append(slices.Clone(bins), "-dsn", "postgres://other/db"), io.Discard, getenv)
	if err != nil || o.dsn != "postgres://other/db" {
		t.Errorf("parseCalls -dsn = %q, %v, want the flag to win over the environment", o.dsn, err)
	}
}

func TestParseHelpIsNotAnError(t *testing.T) {
	_, err := parseRelease([]string{"-h"}, io.Discard)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("parseRelease(-h) = %v, want flag.ErrHelp", err)
	}
	if code := usageError(io.Discard, err); code != 0 {
		t.Errorf("usageError(ErrHelp) = %d, want 0", code)
	}
	if code := usageError(io.Discard, errors.New("bad")); code != 2 {
		t.Errorf("usageError(bad) = %d, want 2", code)
	}
}

func TestRunRefusesUnknownMode(t *testing.T) {
	var stderr strings.Builder
	if code := run([]string{"nope"}, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), `unknown mode "nope"`) {
		t.Errorf("run(nope) = %d, stderr %q, want 2 naming the mode", code, stderr.String())
	}
	if code := run(nil, io.Discard, &stderr); code != 2 {
		t.Errorf("run() = %d, want 2", code)
	}
}
