package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// bodyGen is body with a lease_generation ("null" for none).
func bodyGen(desired int, gen string) string {
	return strings.TrimSuffix(body(desired, 0, 8), "}") + `,"lease_generation":` + gen + `}`
}

// callGen sends one call with a key, an Aperio-Lease-Generation header
// (none when "") and body b.
func (f *fixture) callGen(key, header, b string) int {
	f.t.Helper()
	rec := f.callWith(key, b, func(h http.Header) {
		if header != "" {
			h.Set(leaseGenerationHeader, header)
		}
	})
	return rec.Code
}

// TestFencingRefusesOlderGeneration (issue #42 item 3): the stalled
// holder's call, under an older lease generation, arrives after its
// successor's and is refused with 409 whatever its key: the replicas the
// successor set stand. The same generation again, a higher one, and a
// call without one are served.
func TestFencingRefusesOlderGeneration(t *testing.T) {
	f := newFixture(t, Config{KeyTTL: time.Minute}, deployment("web", 0, forHost(testHost), nil))
	for _, s := range []struct {
		name, key, hdr, gen string
		desired             int
		want                int
		replicas            int32
	}{
		{"successor", "k-new", "9", "9", 2, http.StatusOK, 2},
		{"stalled holder, late", "k-old", "8", "8", 1, http.StatusConflict, 2},
		{"stalled holder, successor's key", "k-new", "8", "8", 2, http.StatusConflict, 2},
		{"same generation, new decision", "k-new2", "9", "9", 3, http.StatusOK, 3},
		{"higher generation", "k-next", "10", "10", 1, http.StatusOK, 1},
		{"no lease", "k-none", "", "null", 4, http.StatusOK, 4},
	} {
		if got := f.callGen(s.key, s.hdr, bodyGen(s.desired, s.gen)); got != s.want {
			t.Fatalf("%s: status %d, want %d", s.name, got, s.want)
		}
		if got := f.replicas(deploymentsGVR, "web"); got != s.replicas {
			t.Errorf("%s: replicas %d, want %d", s.name, got, s.replicas)
		}
	}
}

// TestFencingHostileGenerations: generations that are not positive
// integers, too long, or differ between header and body get 400 and set
// no mark.
func TestFencingHostileGenerations(t *testing.T) {
	f := newFixture(t, Config{}, deployment("web", 0, forHost(testHost), nil))
	for _, tc := range []struct{ name, hdr, gen string }{
		{"not a number", "x1", "null"},
		{"zero header", "0", "null"},
		{"negative body", "", "-1"},
		{"too long", strings.Repeat("1", 30), "null"},
		{"header and body differ", "4", "5"},
		{"not an integer", "", "1.5"},
	} {
		if got := f.callGen("k-"+tc.name, tc.hdr, bodyGen(1, tc.gen)); got != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400", tc.name, got)
		}
	}
	if n := f.scaleUpdates(); n != 0 {
		t.Errorf("scale updates after refused calls = %d, want 0", n)
	}
	if got := f.callGen("k-ok", "1", bodyGen(1, "1")); got != http.StatusOK {
		t.Errorf("generation 1 after refused calls = %d, want 200", got)
	}
}

// TestGenerationsBounded: marks are bounded, least recently admitted
// forgotten first.
func TestGenerationsBounded(t *testing.T) {
	g := newGenerations()
	for i := range maxFencedTargets + 5 {
		g.admit(fmt.Sprint("h", i), 3)
	}
	if len(g.marks) != maxFencedTargets || g.lru.Len() != maxFencedTargets {
		t.Fatalf("marks = %d, want %d", len(g.marks), maxFencedTargets)
	}
	if !g.admit("h0", 1) {
		t.Error("forgotten h0 refused generation 1")
	}
	if g.admit("h10", 2) {
		t.Error("h10 admitted 2 below its mark 3")
	}
}
