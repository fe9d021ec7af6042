package events

import (
	"fmt"
	"testing"
	"time"
)

func TestRefusalBudget(t *testing.T) {
	t.Parallel()
	now := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	b := NewRefusalBudget(func() time.Time { return now })
	for i := range MaxRefusalAudits {
		if ok, leftOut, _ := b.Admit("token:a"); !ok || leftOut != 0 {
			t.Fatalf("Admit(token:a) #%d = %v, %d; want true, 0", i, ok, leftOut)
		}
	}
	if ok, _, first := b.Admit("token:a"); ok || !first {
		t.Fatalf("Admit(token:a) over budget = %v, first %v; want false, first true", ok, first)
	}
	for range 99 {
		if ok, _, first := b.Admit("token:a"); ok || first {
			t.Fatalf("Admit(token:a) over budget again = %v, first %v; want false, false", ok, first)
		}
	}
	// Another token has a budget of its own.
	if ok, _, _ := b.Admit("token:b"); !ok {
		t.Error("Admit(token:b) while token:a is over budget = false, want true")
	}
	// The next window reports what the last one left out.
	now = now.Add(time.Minute)
	if ok, leftOut, _ := b.Admit("token:a"); !ok || leftOut != 100 {
		t.Errorf("Admit(token:a) in the next window = %v, %d; want true, 100 left out", ok, leftOut)
	}
	if ok, leftOut, _ := b.Admit("token:a"); !ok || leftOut != 0 {
		t.Errorf("Admit(token:a) after the summary = %v, %d; want true, 0", ok, leftOut)
	}
}

// TestRefusalBudgetBounded: however many actors refusals name, the budget
// tracks at most maxRefusalActors of them.
func TestRefusalBudgetBounded(t *testing.T) {
	t.Parallel()
	now := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	b := NewRefusalBudget(func() time.Time { return now })
	// A few actors past the bound: each new actor at the bound scans the
	// whole table for stale windows, so twice the bound took ~10 s under
	// -race for nothing the first few past it do not show.
	for i := range maxRefusalActors + 16 {
		b.Admit(fmt.Sprint("token:", i))
	}
	if n := len(b.actors); n > maxRefusalActors {
		t.Fatalf("budget tracks %d actors, want at most %d", n, maxRefusalActors)
	}
	// Stale windows with nothing to report make room again.
	now = now.Add(time.Minute)
	if ok, _, _ := b.Admit("token:new"); !ok {
		t.Error("Admit(token:new) after the windows went stale = false, want true")
	}
	if _, ok := b.actors["token:new"]; !ok {
		t.Error("token:new has no window of its own after stale ones were pruned")
	}
}
