package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// scaleGen sends one scaling call for hostname with a lease generation
// in the header (hdr, "" for none) and the body (body, "null" for none),
// and returns the status.
func scaleGen(t *testing.T, srv *httptest.Server, key, hostname, hdr, body string, desired int) int {
	t.Helper()
	b := fmt.Sprintf(`{"reason":"cold_start","hostname":%q,"path":null,"org_id":null,"current":0,"desired":%d,"min":0,"max":5,"lease_generation":%s}`,
		hostname, desired, body)
	req, err := http.NewRequest("POST", srv.URL+"/scale/web", strings.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testSecret)
	req.Header.Set("Idempotency-Key", key)
	if hdr != "" {
		req.Header.Set(generationHeader, hdr)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestFencingRefusesOlderGeneration (issue #42 item 3): a call under a
// lease generation lower than one already seen for the same hostname and
// path is refused with 409 and scales nothing, whatever its key; the same
// or a higher generation, another hostname, and a call without a
// generation are served.
func TestFencingRefusesOlderGeneration(t *testing.T) {
	f, sock := newFakeDocker(t)
	p, srv := startProvider(t, sock)
	steps := []struct {
		name, key, host, hdr, body string
		desired, want, running     int
	}{
		{"successor's call", "k-new", "app.test", "7", "7", 2, http.StatusAccepted, 2},
		{"stalled holder's call arrives late", "k-old", "app.test", "6", "6", 1, http.StatusConflict, 2},
		{"same generation again (same lease)", "k-new2", "app.test", "7", "7", 3, http.StatusAccepted, 3},
		{"another hostname keeps its own mark", "k-other", "other.test", "1", "1", 1, http.StatusAccepted, 1},
		{"no lease: not fenced", "k-nolease", "app.test", "", "null", 2, http.StatusAccepted, 2},
	}
	for _, s := range steps {
		if got := scaleGen(t, srv, s.key, s.host, s.hdr, s.body, s.desired); got != s.want {
			t.Fatalf("%s: status %d, want %d", s.name, got, s.want)
		}
		waitApplied(t, p)
		if got := f.running(webLabels); got != s.running {
			t.Errorf("%s: running %d, want %d", s.name, got, s.running)
		}
	}
}

// TestFencingHostileGenerations: a generation that is not a positive
// integer, too long, or that differs between header and body is refused
// with 400 and leaves the mark alone.
func TestFencingHostileGenerations(t *testing.T) {
	f, sock := newFakeDocker(t)
	p, srv := startProvider(t, sock)
	for _, tc := range []struct{ name, hdr, body string }{
		{"not a number", "abc", "null"},
		{"zero", "0", "null"},
		{"negative body", "", "-3"},
		{"too long", strings.Repeat("9", 40), "null"},
		{"header and body differ", "5", "6"},
		{"huge body", "", "1e30"},
	} {
		if got := scaleGen(t, srv, "k-"+tc.name, "app.test", tc.hdr, tc.body, 1); got != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400", tc.name, got)
		}
	}
	waitApplied(t, p)
	if got := f.running(webLabels); got != 0 {
		t.Errorf("running after refused calls = %d, want 0", got)
	}
	if got := scaleGen(t, srv, "k-ok", "app.test", "1", "1", 1); got != http.StatusAccepted {
		t.Errorf("generation 1 after the refused ones = %d, want 202 (no mark was set)", got)
	}
}

// TestFenceBounded: the marks kept are bounded; the oldest target is
// forgotten first.
func TestFenceBounded(t *testing.T) {
	f := newFence()
	for i := range maxTargets + 10 {
		if !f.admit(fmt.Sprint("t", i), 5) {
			t.Fatalf("target %d refused its first generation", i)
		}
	}
	if len(f.highest) != maxTargets || len(f.order) != maxTargets {
		t.Fatalf("marks kept = %d (%d in order), want %d", len(f.highest), len(f.order), maxTargets)
	}
	if !f.admit("t0", 1) {
		t.Error("forgotten target t0 refused; want its mark gone")
	}
	if f.admit(fmt.Sprint("t", maxTargets+9), 4) {
		t.Error("newest target admitted an older generation")
	}
}
