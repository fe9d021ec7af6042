package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

func TestParseQueued(t *testing.T) {
	text := "# HELP aperio_requests_queued Requests waiting.\n" +
		"# TYPE aperio_requests_queued gauge\n" +
		"aperio_requests_queued_total 99\n" +
		"aperio_requests_queued 37\n"
	if n, err := parseQueued(strings.NewReader(text)); n != 37 || err != nil {
		t.Errorf("parseQueued = %d, %v, want 37, nil", n, err)
	}
}

func TestParseQueuedHostile(t *testing.T) {
	for _, text := range []string{
		"",
		"aperio_requests_queued_total 3\n",
		"aperio_requests_queued NaN\n",
		"aperio_requests_queued -1\n",
		"aperio_requests_queued 1e12\n",
		"aperio_requests_queued many\n",
		strings.Repeat("x", 2<<20) + "\naperio_requests_queued 1\n",
	} {
		if n, err := parseQueued(strings.NewReader(text)); err == nil {
			t.Errorf("parseQueued(%.40q) = %d, nil, want an error", text, n)
		}
	}
}

// TestLineWatcher: the output is copied whole; the first matching line is
// reported once, even when it arrives in pieces; an overlong line is
// dropped, not buffered without bound.
func TestLineWatcher(t *testing.T) {
	var out bytes.Buffer
	found := make(chan string, 1)
	w := &lineWatcher{out: &out, re: regexp.MustCompile(`listening addr=(\S+)`), found: found}
	chunks := []string{"starting\nserver list", "ening addr=127.0.0.1:4", "242 tls=false\n", "listening addr=other\n"}
	for _, c := range chunks {
		if n, err := w.Write([]byte(c)); n != len(c) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", c, n, err)
		}
	}
	if out.String() != strings.Join(chunks, "") {
		t.Errorf("copied output = %q, want everything written", out.String())
	}
	select {
	case s := <-found:
		if s != "127.0.0.1:4242" {
			t.Errorf("found %q, want 127.0.0.1:4242", s)
		}
	default:
		t.Fatal("no match reported")
	}
	select {
	case s := <-found:
		t.Errorf("a second match %q was reported", s)
	default:
	}

	longFound := make(chan string, 1)
	long := &lineWatcher{out: &bytes.Buffer{}, re: regexp.MustCompile(`addr=(\S+)`), found: longFound}
	long.Write(bytes.Repeat([]byte("y"), maxWatchedLine+1))
	if len(long.partial) != 0 {
		t.Errorf("kept %d bytes of an overlong line, want none", len(long.partial))
	}
	long.Write([]byte(" addr=late\naddr=next\n"))
	if s := <-longFound; s != "next" {
		t.Errorf("after an overlong line found %q, want the next whole line's %q", s, "next")
	}
}

func TestChildEnv(t *testing.T) {
	got := childEnv([]string{"PATH=/bin", "APERIO_SERVER_TOKEN=leak", "HOME=/root", "APERIO_PORT=80", "LANG=C"}, "/tmp/p")
	want := []string{"PATH=/bin", "LANG=C", "HOME=/tmp/p"}
	if !slices.Equal(got, want) {
		t.Errorf("childEnv = %q, want %q", got, want)
	}
}

func TestStatusList(t *testing.T) {
	if got := statusList(map[int]int{504: 2, 0: 1, 200: 97}); got != "0×1 200×97 504×2" {
		t.Errorf("statusList = %q", got)
	}
}

// TestDecodeOKHostile: an admin API answer that is not a 200 with JSON is
// an error quoting at most 200 bytes of it.
func TestDecodeOKHostile(t *testing.T) {
	answer := func(code int, body string) *http.Response {
		w := httptest.NewRecorder()
		w.WriteHeader(code)
		io.WriteString(w, body)
		return w.Result()
	}
	var out []apitype.ClientInfo
	if err := decodeOK(answer(200, `[{"id":"c1","hostnames":["a.test"]}]`), &out); err != nil || len(out) != 1 || out[0].ID != "c1" {
		t.Fatalf("decodeOK(200 list) = %v, %+v, want one client", err, out)
	}
	tests := []struct {
		name string
		resp *http.Response
		want string
	}{
		{"refused", answer(401, "unauthorized\n"), "status 401: unauthorized"},
		{"long error", answer(500, strings.Repeat("e", 10000)), "status 500: " + strings.Repeat("e", 200)},
		{"not JSON", answer(200, "<html>"), "invalid character"},
		{"wrong shape", answer(200, `{"id":"c1"}`), "cannot unmarshal"},
	}
	for _, tt := range tests {
		err := decodeOK(tt.resp, &out)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: decodeOK = %v, want an error containing %q", tt.name, err, tt.want)
		}
		if err != nil && len(err.Error()) > 300 {
			t.Errorf("%s: error of %d bytes, want the body cut", tt.name, len(err.Error()))
		}
	}
}

// TestServerEnv: a server takes one visitor address's whole burst (no
// per-address stream cap: 744 of a burst of 1000 were answered 429 with
// the default 256), logs at the level asked (the calls mode counts debug
// lines), and uses PostgreSQL when given a DSN.
func TestServerEnv(t *testing.T) {
	env := serverEnv("m", "x", serverOpts{maxBurst: 1000, records: 5}, "/w")
	for _, want := range []string{"APERIO_MAX_STREAMS_PER_IP=0", "APERIO_MAX_CONNECTIONS_PER_IP=0",
		"APERIO_LOG_LEVEL=info", "APERIO_SCALING_MAX_HELD=2000", "APERIO_DATA_DIR=/w/data"} {
		if !slices.Contains(env, want) {
			t.Errorf("serverEnv = %q, want it to hold %s", env, want)
		}
	}
	env = serverEnv("m", "x", serverOpts{dsn: "postgres://h/db", logLevel: "debug"}, "/w")
	for _, want := range []string{"APERIO_LOG_LEVEL=debug", "APERIO_DATABASE_URL=postgres://h/db"} {
		if !slices.Contains(env, want) {
			t.Errorf("serverEnv(dsn, debug) = %q, want it to hold %s", env, want)
		}
	}
	if slices.Contains(env, "APERIO_DATA_DIR=/w/data") {
		t.Errorf("serverEnv(dsn) = %q: a data dir beside the DSN", env)
	}
}
