package main

import (
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/buildinfo"
)

// TestVersion: the binary has `version` and --version, both printing the
// build report (internal/buildinfo's TestAddVersion checks its lines).
func TestVersion(t *testing.T) {
	want := buildinfo.Read().Text("aperio-server")
	for _, arg := range []string{"version", "--version"} {
		if code, out, stderr := runServer(t, nil, arg); code != 0 || out != want {
			t.Errorf("aperio-server %s = exit %d, %q (stderr %q), want 0 and %q", arg, code, out, stderr, want)
		}
	}
	if !strings.HasPrefix(want, "aperio-server "+buildinfo.Version()+"\n") {
		t.Errorf("report %q does not start with the program and its version", want)
	}
}
