package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestRequestKeyHostile(t *testing.T) {
	tests := []struct {
		path string
		key  string
		ok   bool
	}{
		{"/b100-r3/17", "b100-r3", true},
		{"/flap/x", "flap", true},
		{"/k", "k", true},
		{"", "", false},
		{"/", "", false},
		{"//k", "", false},
		{"k/1", "", false},
		{"/K/1", "", false},
		{"/_bench/stats", "", false},
		{"/a b/1", "", false},
		{"/a.b/1", "", false},
		{"/%2e%2e/1", "", false},
		{"/ключ/1", "", false},
		{"/" + strings.Repeat("a", maxKeyLen) + "/1", strings.Repeat("a", maxKeyLen), true},
		{"/" + strings.Repeat("a", maxKeyLen+1) + "/1", "", false},
	}
	for _, tt := range tests {
		key, ok := requestKey(tt.path)
		if key != tt.key || ok != tt.ok {
			t.Errorf("requestKey(%q) = %q, %v, want %q, %v", tt.path, key, ok, tt.key, tt.ok)
		}
	}
}

func get(t *testing.T, h http.Handler, target string) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", target, nil))
	return w
}

func TestArrivalsRecordsPerKey(t *testing.T) {
	a := newArrivals(0)
	before := time.Now()
	for i := range 3 {
		if w := get(t, a, fmt.Sprintf("/run-1/%d", i)); w.Code != http.StatusOK || w.Body.String() != "ok\n" {
			t.Fatalf("GET /run-1/%d = %d %q, want 200 ok", i, w.Code, w.Body.String())
		}
	}
	get(t, a, "/run-2/0")
	w := get(t, a, statsPath+"?key=run-1")
	if w.Code != http.StatusOK {
		t.Fatalf("GET stats = %d %s, want 200", w.Code, w.Body.String())
	}
	var s keyStats
	if err := json.Unmarshal(w.Body.Bytes(), &s); err != nil {
		t.Fatal(err)
	}
	if s.Count != 3 || s.Peak != 1 || s.Inflight != 0 || s.First.Before(before) || s.First.After(time.Now()) {
		t.Errorf("stats of run-1 = %+v, want 3 arrivals, peak 1, none in flight, first within the test", s)
	}
}

// TestArrivalsPeak: the peak counts requests in flight at once.
func TestArrivalsPeak(t *testing.T) {
	a := newArrivals(0)
	now := time.Now()
	for range 3 {
		if !a.enter("k", now) {
			t.Fatal("enter = false, want true")
		}
	}
	a.leave("k")
	a.enter("k", now.Add(-time.Second))
	s := a.keys["k"]
	if s.Peak != 3 || s.Inflight != 3 || s.Count != 4 || !s.First.Equal(now.Add(-time.Second)) {
		t.Errorf("stats = %+v, want peak 3, 3 in flight, 4 arrivals, first the earliest", *s)
	}
}

func TestArrivalsHostile(t *testing.T) {
	a := newArrivals(0)
	tests := []struct {
		target string
		code   int
	}{
		{"/", http.StatusNotFound},
		{"/Bad/1", http.StatusNotFound},
		{statsPath, http.StatusBadRequest},
		{statsPath + "?key=", http.StatusBadRequest},
		{statsPath + "?key=../etc", http.StatusBadRequest},
		{statsPath + "?key=" + strings.Repeat("a", maxKeyLen+1), http.StatusBadRequest},
		{statsPath + "?key=never-seen", http.StatusNotFound},
	}
	for _, tt := range tests {
		if w := get(t, a, tt.target); w.Code != tt.code {
			t.Errorf("GET %s = %d, want %d", tt.target, w.Code, tt.code)
		}
	}
	if len(a.keys) != 0 {
		t.Errorf("keys after hostile requests = %v, want none", a.keys)
	}
}

// TestArrivalsBoundsKeys: past maxKeys, a new key gets 503 and is not
// recorded; known keys still work.
func TestArrivalsBoundsKeys(t *testing.T) {
	a := newArrivals(0)
	for i := range maxKeys {
		a.enter(fmt.Sprintf("k%d", i), time.Now())
	}
	if w := get(t, a, "/one-too-many/1"); w.Code != http.StatusServiceUnavailable {
		t.Errorf("GET for key %d = %d, want 503", maxKeys+1, w.Code)
	}
	if w := get(t, a, "/k0/1"); w.Code != http.StatusOK {
		t.Errorf("GET for a known key = %d, want 200", w.Code)
	}
	if len(a.keys) != maxKeys {
		t.Errorf("keys = %d, want %d", len(a.keys), maxKeys)
	}
}
