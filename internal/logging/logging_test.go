package logging_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/logging"
	"github.com/aperio-dev/aperio/internal/logkey"
)

// TestNewVarFollowsItsLevel: a logger built over a LevelVar, and one
// derived from it with With, write at the level the variable holds when
// each line is written.
func TestNewVarFollowsItsLevel(t *testing.T) {
	var out bytes.Buffer
	lv := new(slog.LevelVar)
	log, err := logging.NewVar(&out, lv, "text")
	if err != nil {
		t.Fatal(err)
	}
	child := log.With(logkey.Logger, "x")
	log.Debug("hidden one")
	lv.Set(slog.LevelDebug)
	child.Debug("shown")
	lv.Set(slog.LevelError)
	log.Warn("hidden two")
	got := out.String()
	if !strings.Contains(got, "msg=shown") || strings.Contains(got, "hidden") {
		t.Fatalf("log = %q, want only the debug line written while the level was debug", got)
	}
}

func TestParseLevel(t *testing.T) {
	for in, want := range map[string]slog.Level{"": slog.LevelInfo, "DEBUG": slog.LevelDebug, "warning": slog.LevelWarn, "error": slog.LevelError} {
		if got, err := logging.ParseLevel(in); err != nil || got != want {
			t.Errorf("ParseLevel(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"verbose", "info ", strings.Repeat("x", 1000)} {
		if _, err := logging.ParseLevel(bad); err == nil {
			t.Errorf("ParseLevel(%.20q) = nil error, want one", bad)
		}
	}
	if _, err := logging.NewVar(&bytes.Buffer{}, slog.LevelInfo, "xml"); err == nil {
		t.Error("NewVar(format xml) = nil error, want one")
	}
}
