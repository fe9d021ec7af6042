package hostname

import (
	"errors"
	"strings"
	"testing"
)

var validateTests = []struct {
	in string
	ok bool
}{
	{"app.example.com", true},
	{"*.example.com", true},
	{"localhost", true},
	{"a-b.c_d.test", true},
	{"xn--bcher-kva.example", true},
	{"", false},
	{"*", false},
	{"*.", false},
	{"a..b", false},
	{"-a.test", false},
	{"a-.test", false},
	{"a b.test", false},
	{"app.example.com.", false},
	{"*.*.example.com", false},
	{"a.*.example.com", false},
	{"127.0.0.1", false},
	{"::1", false},
	{strings.Repeat("a", 64) + ".test", false},
	{strings.Repeat("a.", 127) + "a", false}, // 255 bytes
}

func TestValidate(t *testing.T) {
	for _, tt := range validateTests {
		err := Validate(tt.in)
		if (err == nil) != tt.ok {
			t.Errorf("Validate(%q) = %v, want ok=%v", tt.in, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("Validate(%q) = %v, want an error wrapping ErrInvalid", tt.in, err)
		}
	}
}

func TestNormalize(t *testing.T) {
	tests := []struct{ in, want string }{
		{"App.Example.COM", "app.example.com"},
		{"app.example.com:8080", "app.example.com"},
		{"app.example.com.", "app.example.com"},
		{"app.example.com.:443", "app.example.com"},
		{"[::1]:8080", "[::1]"},
		{"plain", "plain"},
	}
	for _, tt := range tests {
		if got := Normalize(tt.in); got != tt.want {
			t.Errorf("Normalize(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestMatch(t *testing.T) {
	tests := []struct {
		pattern, name string
		want          bool
	}{
		{"app.example.com", "app.example.com", true},
		{"app.example.com", "APP.example.com", true},
		{"app.example.com", "www.app.example.com", false},
		{"*.example.com", "a.example.com", true},
		{"*.example.com", "a.b.example.com", true},
		{"*.example.com", "example.com", false},
		{"*.example.com", "badexample.com", false},
		{"*.example.com", ".example.com", false},
		{"*.Example.com", "a.EXAMPLE.com", true},
	}
	for _, tt := range tests {
		if got := Match(tt.pattern, tt.name); got != tt.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tt.pattern, tt.name, got, tt.want)
		}
	}
}

func FuzzHostname(f *testing.F) {
	for _, tt := range validateTests {
		f.Add(tt.in, "a.example.com")
	}
	f.Fuzz(func(t *testing.T, pattern, host string) {
		name := Normalize(host)
		matched := Match(pattern, name)
		if Validate(pattern) != nil {
			return
		}
		// A valid exact pattern matches exactly its own normalized form.
		if !strings.HasPrefix(pattern, "*.") {
			if want := strings.EqualFold(pattern, name); matched != want {
				t.Fatalf("Match(%q, %q) = %v, want %v", pattern, name, matched, want)
			}
			if !Match(pattern, Normalize(pattern)) {
				t.Fatalf("Match(%q, Normalize(%q)) = false, want true", pattern, pattern)
			}
		}
	})
}
