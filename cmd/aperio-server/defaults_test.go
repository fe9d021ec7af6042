package main

import (
	"regexp"
	"strings"
	"testing"
)

// TestHelpAndPrintConfigAgree (issue 39, trap 11): for every key,
// --help's "(default X)" is what --print-config prints as its default,
// and a key --help shows no default for prints the zero of its kind. A
// usage text that claims a default of its own ("(default …)" inside it)
// would say something --print-config does not.
func TestHelpAndPrintConfigAgree(t *testing.T) {
	code, help, stderr := runServer(t, nil, "--help")
	if code != 0 {
		t.Fatalf("--help: exit %d, %s", code, stderr)
	}
	code, printed, stderr := runServer(t, map[string]string{"APERIO_SERVER_TOKEN": "defaults-test-token-0123456789abcdef"}, "--print-config")
	if code != 0 {
		t.Fatalf("--print-config: exit %d, %s", code, stderr)
	}
	defaults := map[string]string{}
	printLine := regexp.MustCompile(`^(\S+) = (.*?)  # default$`)
	for _, l := range strings.Split(printed, "\n") {
		if m := printLine.FindStringSubmatch(l); m != nil {
			defaults[m[1]] = strings.Trim(m[2], `"`)
		}
	}
	helpLine := regexp.MustCompile(`^  ([a-z][a-z0-9_.]*) +(\S+) +(.*)$`)
	helpDefault := regexp.MustCompile(`\(default (.*)\)$`)
	zero := map[string]bool{"": true, "0": true, "0s": true, "false": true, "<unset>": true, "[]": true, "{}": true}
	checked := 0
	for _, l := range strings.Split(help, "\n") {
		m := helpLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		key, usage := m[1], m[3]
		got, ok := defaults[key]
		if !ok {
			continue // a block, or a key set by the test (server.token)
		}
		checked++
		if strings.Count(usage, "(default ") > 1 || strings.Contains(strings.TrimSuffix(usage, ")"), "(default ") && !helpDefault.MatchString(usage) {
			t.Errorf("--help %s: its usage claims a default of its own: %q", key, usage)
			continue
		}
		if d := helpDefault.FindStringSubmatch(usage); d != nil {
			if want := strings.Trim(d[1], `"`); got != want {
				t.Errorf("%s: --help says default %q, --print-config %q", key, want, got)
			}
		} else if !zero[got] && m[2] != "yaml" {
			t.Errorf("%s: --print-config says default %q, --help shows none", key, got)
		}
	}
	if checked < 60 {
		t.Errorf("compared %d keys; the parsing missed most of them", checked)
	}
}
