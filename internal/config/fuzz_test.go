package config

import (
	"io"
	"strings"
	"testing"
	"time"
)

func FuzzParseDuration(f *testing.F) {
	for _, tc := range durationCases {
		f.Add(tc.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err != nil {
			return
		}
		if d < 0 {
			t.Fatalf("ParseDuration(%q) = %v, want a non-negative duration", s, d)
		}
		// What ParseDuration accepts, formatDuration spells back.
		back, err := ParseDuration(formatDuration(d))
		if err != nil || back != d {
			t.Fatalf("ParseDuration(formatDuration(%v)) = %v, %v, want %v", d, back, err, d)
		}
		// Go syntax keeps its meaning.
		if std, err := time.ParseDuration(s); err == nil && std != d && !strings.HasPrefix(s, "-") {
			t.Fatalf("ParseDuration(%q) = %v, want %v as time.ParseDuration", s, d, std)
		}
	})
}

// FuzzLoadClientYAML feeds arbitrary files to the client loader: every
// problem is a one-line *Error, and whatever loads resolves each service's
// concurrency and prints.
func FuzzLoadClientYAML(f *testing.F) {
	for _, tc := range clientLoadCases {
		f.Add(tc.in.file)
	}
	for _, tc := range clientErrorCases {
		f.Add(tc.in.file)
	}
	for _, s := range []string{
		"adaptive_concurrency: {mode: load-signal, signals: [cpu]}\nservices: [{target: 1, hostname: a.example.com, adaptive_concurrency: false}]\n",
		"max_concurrent: 3\nadaptive_concurrency: true\nservices: [{target: 1, hostname: a.example.com, max_concurrent: 2}, {target: 2, hostname: b.example.com, adaptive_concurrency: {min: 2, max: 1}}]\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		read := func(string) ([]byte, error) { return []byte(data), nil }
		cfg, src, err := LoadClient(ClientOptions{File: "aperio.yaml", ReadFile: read, Hostname: func() (string, error) { return "h", nil }})
		problems(t, err) // every problem a one-line *Error
		for i, s := range cfg.Services {
			if s.Concurrency.Mode == "" {
				t.Fatalf("services[%d] has no resolved concurrency", i)
			}
		}
		if err := PrintClient(io.Discard, cfg, src); err != nil {
			t.Fatalf("PrintClient() = %v", err)
		}
	})
}
