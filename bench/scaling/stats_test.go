package main

import (
	"testing"
	"time"
)

func msList(vs ...int) []time.Duration {
	out := make([]time.Duration, len(vs))
	for i, v := range vs {
		out[i] = time.Duration(v) * time.Millisecond
	}
	return out
}

func TestQuantile(t *testing.T) {
	twenty := msList(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20)
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Millisecond
	}
	tests := []struct {
		name   string
		sorted []time.Duration
		q      float64
		want   time.Duration
	}{
		{"empty", nil, 0.5, 0},
		{"one value", msList(7), 0.99, 7 * time.Millisecond},
		{"median of ten", msList(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0.5, 5 * time.Millisecond},
		{"p90 of ten", msList(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0.9, 9 * time.Millisecond},
		{"p99 of twenty is the max", twenty, 0.99, 20 * time.Millisecond},
		{"p90 of twenty", twenty, 0.9, 18 * time.Millisecond},
		{"p99 of a hundred", hundred, 0.99, 99 * time.Millisecond},
		{"p100", hundred, 1, 100 * time.Millisecond},
		{"p0 is the min", hundred, 0, time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := quantile(tt.sorted, tt.q); got != tt.want {
				t.Errorf("quantile(%v, %g) = %v, want %v", tt.sorted, tt.q, got, tt.want)
			}
		})
	}
}

func TestSummarizeSortsACopy(t *testing.T) {
	in := msList(30, 10, 20)
	s := summarize(in)
	want := summary{n: 3, min: 10 * time.Millisecond, p50: 20 * time.Millisecond, p90: 30 * time.Millisecond,
		p99: 30 * time.Millisecond, max: 30 * time.Millisecond}
	if s != want {
		t.Errorf("summarize(%v) = %+v, want %+v", in, s, want)
	}
	if in[0] != 30*time.Millisecond {
		t.Errorf("summarize sorted its input: %v", in)
	}
	if got := summarize(nil); got != (summary{}) {
		t.Errorf("summarize(nil) = %+v, want the zero summary", got)
	}
}

// TestSummarizeHundredRunsP99IsNotTheMax: with the 100 runs per burst of
// bench/scaling.sh, p99 is the 99th value by nearest rank, so that one
// outlier run shows as the max and not as the p99; p90 and p50 are the
// 90th and 50th (of 1..100 without 55, plus the outlier).
func TestSummarizeHundredRunsP99IsNotTheMax(t *testing.T) {
	runs := make([]time.Duration, 100)
	for i := range runs {
		// Shuffled order: summarize sorts a copy.
		runs[i] = time.Duration((i*37)%100+1) * time.Millisecond
	}
	runs[42] = time.Second // the outlier replaces one value, 55 ms
	s := summarize(runs)
	want := summary{n: 100, min: time.Millisecond, p50: 50 * time.Millisecond, p90: 91 * time.Millisecond,
		p99: 100 * time.Millisecond, max: time.Second}
	if (runs[42] != time.Second) || s != want {
		t.Errorf("summarize(100 runs with one outlier) = %+v, want %+v", s, want)
	}
}

func TestMS(t *testing.T) {
	if got := ms(1234567 * time.Nanosecond); got != "1.23" {
		t.Errorf("ms(1.234567ms) = %q, want %q", got, "1.23")
	}
}
