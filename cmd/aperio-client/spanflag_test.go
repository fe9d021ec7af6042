package main

import (
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// TestSpanFlagsNeedUnits: --expires-in and --grace take a duration with its
// unit; a bare number (which config.ParseDuration reads as seconds) is
// refused while the flags are parsed, exit 2, and nothing is called.
func TestSpanFlagsNeedUnits(t *testing.T) {
	s := newAPIServer(t)
	t.Setenv("APERIO_SERVER_URL", s.url)
	t.Setenv("APERIO_API_KEY", testMaster)
	create := []string{"api", "tokens", "create", "--name", "x", "--hostname", "a.example.com"}
	rotate := []string{"api", "tokens", "rotate", "tok_nope"}
	tests := []struct {
		name   string
		args   []string
		stderr string
	}{
		{"bare one", append(create, "--expires-in", "1"), `"1" has no unit`},
		{"bare seconds", append(create, "--expires-in", "90"), `"90" has no unit`},
		{"bare decimal", append(create, "--expires-in", "1.5"), "has no unit"},
		{"bare with plus", append(create, "--expires-in", "+7"), "has no unit"},
		{"grace bare", append(rotate, "--grace", "1"), `"1" has no unit`},
		{"word", append(create, "--expires-in", "soon"), `invalid duration "soon" (want a number and a unit`},
		{"negative", append(create, "--expires-in", "-1h"), "is negative"},
		{"overflow", append(create, "--expires-in", "99999999999d"), "invalid duration"},
		{"long digits", append(create, "--expires-in", strings.Repeat("9", 10000)), "has no unit"},
		{"empty", append(rotate, "--grace", ""), "invalid duration"},
		{"control bytes", append(create, "--expires-in", "1h\x00"), "invalid duration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, stderr := cli(t, tt.args...)
			if code != 2 || !strings.Contains(stderr, tt.stderr) {
				t.Fatalf("aperio-client %q = exit %d, stderr %q, want exit 2 and %q", tt.args, code, stderr, tt.stderr)
			}
			if out != "" {
				t.Errorf("a refused span printed %q", out)
			}
		})
	}
	list := ok(t, "api", "tokens", "list")
	if strings.Contains(list, "a.example.com") {
		t.Errorf("a refused --expires-in still minted a token:\n%s", list)
	}
}

// TestSpanFlagsWithUnits: spans with units work, days and mixed ones
// included: --grace 1d12h reaches the server as a span it reads (36h).
func TestSpanFlagsWithUnits(t *testing.T) {
	s := newAPIServer(t)
	t.Setenv("APERIO_SERVER_URL", s.url)
	t.Setenv("APERIO_API_KEY", testMaster)
	before := time.Now()
	var tok apitype.MintedToken
	okJSON(t, &tok, "api", "tokens", "create", "--name", "web", "--hostname", "app.example.com", "--expires-in", "90m", "--json")
	after := time.Now()
	if e := tok.ExpiresAt; e == nil || e.Before(before.Add(90*time.Minute).Truncate(time.Second)) || e.After(after.Add(90*time.Minute)) {
		t.Errorf("expires_at with --expires-in 90m = %v, want 90 minutes after the call", e)
	}
	before = time.Now()
	var rot apitype.MintedToken
	okJSON(t, &rot, "api", "tokens", "rotate", tok.ID, "--grace", "1d12h", "--json")
	after = time.Now()
	if p := rot.PreviousExpiresAt; p == nil || p.Before(before.Add(36*time.Hour).Truncate(time.Second)) || p.After(after.Add(36*time.Hour)) {
		t.Errorf("previous_expires_at with --grace 1d12h = %v, want 36 hours after the call", p)
	}
}
