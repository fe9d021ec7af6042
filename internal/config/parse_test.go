package config

import (
	"strings"
	"testing"
	"time"
)

// durationCases is shared by TestParseDuration and FuzzParseDuration's seeds.
var durationCases = []struct {
	name string
	in   string
	want time.Duration
	ok   bool
}{
	{"seconds", "45s", 45 * time.Second, true},
	{"minutes", "15m", 15 * time.Minute, true},
	{"go compound", "1h30m", 90 * time.Minute, true},
	{"milliseconds", "250ms", 250 * time.Millisecond, true},
	{"microseconds", "3µs", 3 * time.Microsecond, true},
	{"days", "2d", 48 * time.Hour, true},
	{"days and hours", "1d12h", 36 * time.Hour, true},
	{"days hours minutes", "1d1h1m1s", 25*time.Hour + time.Minute + time.Second, true},
	{"fractional days", "1.5d", 36 * time.Hour, true},
	{"thirty days", "30d", 720 * time.Hour, true},
	{"bare integer is seconds", "45", 45 * time.Second, true},
	{"bare decimal is seconds", "0.5", 500 * time.Millisecond, true},
	{"bare zero", "0", 0, true},
	{"zero with unit", "0s", 0, true},
	{"surrounding spaces", " 10s ", 10 * time.Second, true},
	{"leading plus", "+5s", 5 * time.Second, true},
	{"leading dot", ".5s", 500 * time.Millisecond, true},
	{"empty", "", 0, false},
	{"spaces only", "   ", 0, false},
	{"plus only", "+", 0, false},
	{"negative", "-5s", 0, false},
	{"negative bare", "-5", 0, false},
	{"negative days", "-1d", 0, false},
	{"unknown unit", "5y", 0, false},
	{"unit only", "d", 0, false},
	{"missing unit after days", "1d5", 0, false},
	{"word", "soon", 0, false},
	{"two dots", "1.2.3", 0, false},
	{"exponent", "1e3", 0, false},
	{"inner space", "1 d", 0, false},
	{"days overflow", "200000d", 0, false},
	{"sum overflow", "106751d23h47m16s854775808ns", 0, false},
	{"go overflow", "9999999999h", 0, false},
	{"bare overflow", "99999999999999", 0, false},
}

func TestParseDuration(t *testing.T) {
	for _, tc := range durationCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseDuration(tc.in)
			if (err == nil) != tc.ok {
				t.Fatalf("ParseDuration(%q) error = %v, want ok %v", tc.in, err, tc.ok)
			}
			if got != tc.want {
				t.Errorf("ParseDuration(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

// TestParseDurationUnit: every form ParseDuration reads with a unit reads
// the same; the bare numbers it takes as seconds are refused.
func TestParseDurationUnit(t *testing.T) {
	for _, tc := range durationCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseDurationUnit(tc.in)
			bare := isDecimal(strings.TrimPrefix(strings.TrimSpace(tc.in), "+"))
			if want := tc.ok && !bare; (err == nil) != want {
				t.Fatalf("ParseDurationUnit(%q) error = %v, want ok %v", tc.in, err, want)
			}
			if err == nil && got != tc.want {
				t.Errorf("ParseDurationUnit(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
	for _, in := range []string{"1", "30", "0", "1.5", " 7 ", "+2"} {
		if _, err := ParseDurationUnit(in); err == nil || !strings.Contains(err.Error(), "has no unit") {
			t.Errorf("ParseDurationUnit(%q) error = %v, want one saying it has no unit", in, err)
		}
	}
}

func TestFormatDurationRoundTrip(t *testing.T) {
	tests := []struct {
		in   time.Duration
		want string
	}{
		{0, "0s"},
		{45 * time.Second, "45s"},
		{90 * time.Second, "1m30s"},
		{time.Hour, "1h"},
		{36 * time.Hour, "1d12h"},
		{720 * time.Hour, "30d"},
		{1500 * time.Millisecond, "1.5s"},
		{250 * time.Millisecond, "250ms"},
	}
	for _, tc := range tests {
		t.Run(tc.want, func(t *testing.T) {
			if got := formatDuration(tc.in); got != tc.want {
				t.Errorf("formatDuration(%v) = %q, want %q", tc.in, got, tc.want)
			}
			back, err := ParseDuration(tc.want)
			if err != nil || back != tc.in {
				t.Errorf("ParseDuration(%q) = %v, %v, want %v", tc.want, back, err, tc.in)
			}
		})
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want int64
		ok   bool
	}{
		{"plain bytes", "1024", 1024, true},
		{"zero", "0", 0, true},
		{"bytes unit", "512B", 512, true},
		{"mebibytes", "10MiB", 10 << 20, true},
		{"megabytes", "64MB", 64_000_000, true},
		{"gibibyte", "1GiB", 1 << 30, true},
		{"kibibytes", "512KiB", 512 << 10, true},
		{"kilobytes", "2KB", 2000, true},
		{"tebibyte", "1TiB", 1 << 40, true},
		{"terabyte", "1TB", 1e12, true},
		{"lowercase", "10mib", 10 << 20, true},
		{"space before unit", "10 MiB", 10 << 20, true},
		{"surrounding spaces", " 1KiB ", 1024, true},
		{"fraction", "1.5KiB", 1536, true},
		{"fraction decimal", "1.5GB", 1_500_000_000, true},
		{"empty", "", 0, false},
		{"negative", "-1", 0, false},
		{"negative with unit", "-10MiB", 0, false},
		{"unknown unit", "10XB", 0, false},
		{"unit only", "MiB", 0, false},
		{"fraction of a byte", "1.5", 0, false},
		{"fraction of a byte with unit", "0.0001KB", 0, false},
		{"too large", "9999999TiB", 0, false},
		{"two dots", "1.2.3MB", 0, false},
		{"hex", "0x10", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseSize(tc.in)
			if (err == nil) != tc.ok {
				t.Fatalf("ParseSize(%q) error = %v, want ok %v", tc.in, err, tc.ok)
			}
			if got != tc.want {
				t.Errorf("ParseSize(%q) = %d, want %d", tc.in, got, tc.want)
			}
		})
	}
}

func TestFormatSize(t *testing.T) {
	tests := []struct {
		in   int64
		want string
	}{
		{0, "0"},
		{1000, "1000"},
		{1024, "1KiB"},
		{10 << 20, "10MiB"},
		{64 << 20, "64MiB"},
		{1536, "1536"},
		{3 << 40, "3TiB"},
	}
	for _, tc := range tests {
		t.Run(tc.want, func(t *testing.T) {
			if got := formatSize(tc.in); got != tc.want {
				t.Errorf("formatSize(%d) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestParseBool(t *testing.T) {
	tests := []struct {
		in   string
		want bool
		ok   bool
	}{
		{"1", true, true},
		{"0", false, true},
		{"true", true, true},
		{"TRUE", true, true},
		{"False", false, true},
		{" true ", true, true},
		{"yes", false, false},
		{"on", false, false},
		{"2", false, false},
		{"", false, false},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseBool(tc.in)
			if (err == nil) != tc.ok || got != tc.want {
				t.Errorf("parseBool(%q) = %v, %v, want %v (ok %v)", tc.in, got, err, tc.want, tc.ok)
			}
		})
	}
}

func TestExpand(t *testing.T) {
	env := envOf(map[string]string{"TOKEN": "s3cret", "EMPTY": "", "HOST": "example.com", "LOOP": "${LOOP}"})
	tests := []struct {
		name string
		in   string
		want string
		ok   bool
	}{
		{"no dollar", "plain", "plain", true},
		{"set", "${TOKEN}", "s3cret", true},
		{"inside text", "https://${HOST}/scale", "https://example.com/scale", true},
		{"two vars", "${HOST}:${TOKEN}", "example.com:s3cret", true},
		// An unset variable used to become "" silently (issue 19).
		{"unset is an error", "a${NOPE}b", "", false},
		{"set but empty is empty", "a${EMPTY}b", "ab", true},
		{"required set", "${TOKEN:?set TOKEN}", "s3cret", true},
		{"required unset", "${NOPE:?set NOPE to the key}", "", false},
		{"required empty", "${EMPTY:?}", "", false},
		{"value not expanded again", "${LOOP}", "${LOOP}", true},
		{"default when unset", "${NOPE:-fallback}", "fallback", true},
		{"default when empty", "${EMPTY:-fallback}", "fallback", true},
		{"default unused when set", "${TOKEN:-fallback}", "s3cret", true},
		{"empty default", "${NOPE:-}", "", true},
		{"double dollar", "$$", "$", true},
		{"double dollar before brace", "$${TOKEN}", "${TOKEN}", true},
		{"bare dollar kept", "a$b", "a$b", true},
		{"trailing dollar kept", "cost$", "cost$", true},
		{"unterminated", "${TOKEN", "", false},
		{"empty name", "${}", "", false},
		{"bad name", "${1X}", "", false},
		{"dash in name", "${A-B}", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := expand(tc.in, env)
			if (err == nil) != tc.ok || got != tc.want {
				t.Errorf("expand(%q) = %q, %v, want %q (ok %v)", tc.in, got, err, tc.want, tc.ok)
			}
		})
	}
}

func TestNormalizeTarget(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
		ok   bool
	}{
		{"port", "3000", "http://localhost:3000", true},
		{"host and port", "localhost:8080", "http://localhost:8080", true},
		{"ip and port", "10.0.0.5:80", "http://10.0.0.5:80", true},
		{"ipv6 and port", "[::1]:3000", "http://[::1]:3000", true},
		{"http URL", "http://app:3000", "http://app:3000", true},
		{"https URL", "https://app.internal", "https://app.internal", true},
		{"h2c URL", "h2c://localhost:50051", "h2c://localhost:50051", true},
		{"port zero", "0", "", false},
		{"port too large", "99999", "", false},
		{"host without port", "localhost", "", false},
		{"host with bad port", "localhost:http", "", false},
		{"ftp URL", "ftp://files", "", false},
		{"URL without host", "http://", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := normalizeTarget(tc.in)
			if (err == nil) != tc.ok || got != tc.want {
				t.Errorf("normalizeTarget(%q) = %q, %v, want %q (ok %v)", tc.in, got, err, tc.want, tc.ok)
			}
		})
	}
}

func TestValidHostname(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{"app.example.com", true},
		{"localhost", true},
		{"*.example.com", true},
		{"a-b.example.com", true},
		{"xn--bcher-kva.example", true},
		{"", false},
		{"*", false},
		{"*.", false},
		{"app.*.example.com", false},
		{"bad_host.example.com", false},
		{"-app.example.com", false},
		{"app-.example.com", false},
		{"app..example.com", false},
		{"example.com.", false},
		{"app.example.com:8080", false},
		{"https://app.example.com", false},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			if got := validHostname(tc.in); got != tc.want {
				t.Errorf("validHostname(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

func TestEditDistance(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"port", "port", 0},
		{"prot", "port", 1},
		{"port", "ports", 1},
		{"host", "", 4},
		{"kitten", "sitting", 3},
	}
	for _, tc := range tests {
		t.Run(tc.a+"/"+tc.b, func(t *testing.T) {
			if got := editDistance(tc.a, tc.b); got != tc.want {
				t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
			}
		})
	}
}
