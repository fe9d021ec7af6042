//go:build linux

package main

import (
	"strings"
	"testing"
)

func TestParseGauge(t *testing.T) {
	const text = "# HELP go_goroutines Goroutines.\n# TYPE go_goroutines gauge\ngo_goroutines_other 7\ngo_goroutines 42\n"
	if n, err := parseGauge(strings.NewReader(text), "go_goroutines"); err != nil || n != 42 {
		t.Errorf("parseGauge = %d, %v; want 42", n, err)
	}
	if _, err := parseGauge(strings.NewReader("other 1\n"), "go_goroutines"); err == nil {
		t.Error("parseGauge of an exposition without it: no error")
	}
}
