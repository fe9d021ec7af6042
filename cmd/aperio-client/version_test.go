package main

import (
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/buildinfo"
)

// TestVersion: the binary has `version` and --version, both printing the
// build report (internal/buildinfo's TestAddVersion checks its lines).
func TestVersion(t *testing.T) {
	want := buildinfo.Read().Text("aperio-client")
	for _, arg := range []string{"version", "--version"} {
		if code, out, stderr := runClient(t, nil, arg); code != 0 || out != want {
			t.Errorf("aperio-client %s = exit %d, %q (stderr %q), want 0 and %q", arg, code, out, stderr, want)
		}
	}
	if !strings.HasPrefix(want, "aperio-client "+buildinfo.Version()+"\n") {
		t.Errorf("report %q does not start with the program and its version", want)
	}
}
