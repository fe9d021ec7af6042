package main

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestProviderStartsInstances: POST /scale with the bearer secret runs
// the instance file once per missing instance, at most
// maxProviderInstances in all, and a call repeated with its
// Idempotency-Key starts nothing more; a wrong secret or a body that is
// not a scaling call starts nothing.
func TestProviderStartsInstances(t *testing.T) {
	dir := t.TempDir()
	marks := filepath.Join(dir, "marks")
	run := filepath.Join(dir, "instance.sh")
	if err := os.WriteFile(run, []byte("#!/bin/sh\necho x >> "+marks+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := &provider{run: run, secret: "0123456789abcdef", log: slog.New(slog.DiscardHandler)}
	t.Cleanup(p.stop)
	d := newDemo()
	d.provider = p
	h := d.routes()
	call := func(auth, key, body string) int {
		req := httptest.NewRequest(http.MethodPost, "/scale", strings.NewReader(body))
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	good := "Bearer 0123456789abcdef"
	for _, c := range []struct {
		name, auth, key, body string
		want                  int
	}{
		{"no secret", "", "", `{"current":0,"desired":1}`, http.StatusUnauthorized},
		{"wrong secret", "Bearer 0123456789abcdeX", "", `{"current":0,"desired":1}`, http.StatusUnauthorized},
		{"not JSON", good, "", `{"current":`, http.StatusBadRequest},
		{"negative", good, "", `{"current":-5,"desired":1}`, http.StatusBadRequest},
		{"too big", good, "", `{"reason":"` + strings.Repeat("a", maxScaleBody) + `"}`, http.StatusBadRequest},
		{"cold start", good, "k1", `{"reason":"cold_start","hostname":"app.localhost","current":0,"desired":1}`, http.StatusAccepted},
		{"the same call again", good, "k1", `{"reason":"cold_start","hostname":"app.localhost","current":0,"desired":1}`, http.StatusAccepted},
		{"a fleet asked for", good, "k2", `{"reason":"scale_out","current":1,"desired":100}`, http.StatusAccepted},
		{"scale in", good, "k3", `{"reason":"scale_in","current":3,"desired":2}`, http.StatusAccepted},
	} {
		if got := call(c.auth, c.key, c.body); got != c.want {
			t.Errorf("%s: status %d, want %d", c.name, got, c.want)
		}
	}
	// 1 for the cold start, 2 more for the fleet (capped at 3 in all); the
	// instances are processes of their own, so their marks are polled.
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(marks)
		n := strings.Count(string(b), "x")
		if n == maxProviderInstances {
			break
		}
		if n > maxProviderInstances || time.Now().After(deadline) {
			t.Fatalf("instances run = %d, want %d", n, maxProviderInstances)
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.mu.Lock()
	started := len(p.procs)
	p.mu.Unlock()
	if started != maxProviderInstances {
		t.Errorf("instances started = %d, want %d", started, maxProviderInstances)
	}
}
