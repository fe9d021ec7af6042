package main

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// quantile returns the q quantile of sorted by nearest rank: the smallest
// value with at least q of the values at or below it. With 20 values the
// 0.99 quantile is the largest. It returns 0 for no values.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(q * float64(len(sorted))))
	return sorted[max(0, min(rank-1, len(sorted)-1))]
}

// summary is the distribution of one figure over the runs.
type summary struct {
	n                       int
	min, p50, p90, p99, max time.Duration
}

// summarize returns the summary of ds, which it leaves unsorted.
func summarize(ds []time.Duration) summary {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return summary{}
	}
	return summary{n: len(s), min: s[0], p50: quantile(s, 0.50), p90: quantile(s, 0.90),
		p99: quantile(s, 0.99), max: s[len(s)-1]}
}

// ms formats d in milliseconds with two decimals.
func ms(d time.Duration) string {
	return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond))
}
