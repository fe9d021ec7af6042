package main

import (
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/config/configtest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestClientHelpGolden pins `aperio-client --help`: every key's flag with
// the kind of value it takes and its default.
func TestClientHelpGolden(t *testing.T) {
	path, err := filepath.Abs(filepath.Join("testdata", "help.golden"))
	if err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runClient(t, nil, "--help")
	if code != 0 || stderr != "" {
		t.Fatalf("--help = exit %d, stderr %q", code, stderr)
	}
	configtest.Golden(t, path, []byte(stdout), *update)
}

// TestKeyFlagsTyped: each key's flag names its kind in --help (pflag's
// value name), shows the key's default unless it is the kind's zero, and
// has a usage pflag does not mistake for a value name.
func TestKeyFlagsTyped(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	registerKeyFlags(fs)
	names := map[config.Kind]string{
		config.KindString: "string", config.KindInt: "int", config.KindFloat: "float",
		config.KindBool: "", config.KindDuration: "duration", config.KindList: "strings",
	}
	seen := map[config.Kind]bool{}
	for _, k := range config.ClientKeys() {
		if k.Flag == "" {
			continue
		}
		f := fs.Lookup(k.Flag)
		if f == nil {
			t.Errorf("no flag --%s for %s", k.Flag, k.Name)
			continue
		}
		seen[k.Kind] = true
		name, usage := pflag.UnquoteUsage(f)
		want, ok := names[k.Kind]
		if k.Kind == config.KindEnum {
			want, ok = strings.Join(k.Values, "|"), len(k.Values) > 0
		}
		if !ok {
			t.Errorf("--%s: kind %q has no flag type", k.Flag, k.Kind)
		}
		if name != want {
			t.Errorf("--%s: value name %q, want %q (kind %s)", k.Flag, name, want, k.Kind)
		}
		wantUsage := k.Usage
		if k.Secret && k.Env != "" {
			// A secret's flag says to use the environment instead (issue 39).
			wantUsage += " (a secret: set " + k.Env + " instead, a command line is visible to other users)"
		}
		if usage != wantUsage || strings.Contains(usage, "`") {
			t.Errorf("--%s: usage %q, want the key's %q without back-quotes", k.Flag, usage, wantUsage)
		}
		switch k.Default {
		case "", "0", "0s", "false":
			if f.DefValue != "" {
				t.Errorf("--%s: default %q shown for a zero default", k.Flag, f.DefValue)
			}
		default:
			if f.DefValue != k.Default {
				t.Errorf("--%s: default %q, want the key's %q", k.Flag, f.DefValue, k.Default)
			}
		}
		if k.Bool != (f.NoOptDefVal == "true") {
			t.Errorf("--%s: stands alone %v, want %v", k.Flag, f.NoOptDefVal == "true", k.Bool)
		}
	}
	for kind := range names {
		if !seen[kind] {
			t.Errorf("no client flag of kind %s: the test no longer covers it", kind)
		}
	}
	for _, want := range []string{"drain_timeout", "health.interval", "scaling.cold_start"} {
		if k := clientKey(t, want); k.Default == "" || k.Default == "0s" {
			t.Errorf("%s has no default, want the contract's", want)
		}
	}
}

func clientKey(t *testing.T, name string) config.Key {
	t.Helper()
	for _, k := range config.ClientKeys() {
		if k.Name == name {
			return k
		}
	}
	t.Fatalf("no client key %s", name)
	return config.Key{}
}

// TestKeyFlagsReachLoader: typed flags hand the loader the text given, and
// only when given: a flag left out leaves the key to the lower surfaces
// even though its value holds the default.
func TestKeyFlagsReachLoader(t *testing.T) {
	base := []string{"3000", "--server-url", "http://127.0.0.1:8080", "--server-token", "t", "--print-config"}
	code, stdout, stderr := runClient(t, map[string]string{"APERIO_DRAIN_TIMEOUT": "12s", "APERIO_HEALTH_INTERVAL": "7s"},
		append(base, "--drain-timeout", "45s", "--adaptive-concurrency", "--max-concurrent", "3", "--hostname", "a.test,B.test", "--log-level", "DEBUG")...)
	if code != 0 {
		t.Fatalf("--print-config = exit %d, stderr %q", code, stderr)
	}
	lines := configtest.LinesByKey(stdout)
	for key, want := range map[string]string{
		"drain_timeout":              "drain_timeout = 45s  # flag --drain-timeout",
		"health.interval":            "health.interval = 7s  # env APERIO_HEALTH_INTERVAL",
		"adaptive_concurrency":       "adaptive_concurrency = true  # flag --adaptive-concurrency",
		"max_concurrent":             "max_concurrent = 3  # flag --max-concurrent",
		"services[0].hostname":       "services[0].hostname = a.test,b.test  # flag --hostname",
		"log_level":                  "log_level = debug  # flag --log-level",
		"scaling.target_utilization": "",
	} {
		if lines[key] != want {
			t.Errorf("--print-config %s line = %q, want %q", key, lines[key], want)
		}
	}
}
