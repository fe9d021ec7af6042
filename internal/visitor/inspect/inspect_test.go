package inspect

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex // guards t
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newInspector(t testing.TB, cfg Config) (*Inspector, *fakeClock) {
	t.Helper()
	clk := &fakeClock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	cfg.Now = clk.Now
	in, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return in, clk
}

func start(t testing.TB, in *Inspector, host string, req apitype.InspectRequest) *Capture {
	t.Helper()
	if _, err := in.Start(host, Options{InspectRequest: req, OrgID: "org_1", StartedBy: "test"}); err != nil {
		t.Fatalf("Start(%s): %v", host, err)
	}
	c := in.Lookup(host)
	if c == nil {
		t.Fatalf("Lookup(%s) = nil after Start", host)
	}
	return c
}

// serve records one request through c: body is read whole by the
// handler, which answers status and answer.
func serve(t testing.TB, c *Capture, method, target string, hdr http.Header, body string, status int, answer string) *Recording {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r := httptest.NewRequest(method, target, rd)
	for k, vv := range hdr {
		r.Header[k] = vv
	}
	rec := httptest.NewRecorder()
	ir, w := c.Begin(rec, r, time.Time{}, false)
	if ir == nil {
		return nil
	}
	if r.Body != nil {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			t.Fatal(err)
		}
	}
	w.Header().Set("Set-Cookie", "session=secret")
	w.WriteHeader(status)
	if _, err := io.WriteString(w, answer); err != nil {
		t.Fatal(err)
	}
	ir.Finish(0, 0, "cli_1")
	return ir
}

func TestRingBound(t *testing.T) {
	in, _ := newInspector(t, Config{})
	c := start(t, in, "a.test", apitype.InspectRequest{MaxRequests: 3})
	for i := 0; i < 5; i++ {
		serve(t, c, "GET", "/p"+string(rune('0'+i)), nil, "", 200, "ok")
	}
	got := c.Requests()
	if len(got) != 3 {
		t.Fatalf("Requests() has %d entries, want 3", len(got))
	}
	for i, want := range []string{"/p4", "/p3", "/p2"} {
		if got[i].URL != want {
			t.Errorf("Requests()[%d].URL = %q, want %q (newest first)", i, got[i].URL, want)
		}
	}
	if st := in.Captures()[0]; st.Captured != 5 || st.Kept != 3 || st.State != apitype.InspectRecording {
		t.Errorf("state = %+v, want captured 5, kept 3, recording", st)
	}
}

func TestStopWhenFull(t *testing.T) {
	in, _ := newInspector(t, Config{})
	c := start(t, in, "a.test", apitype.InspectRequest{MaxRequests: 2, StopWhenFull: true})
	serve(t, c, "GET", "/1", nil, "", 200, "")
	serve(t, c, "GET", "/2", nil, "", 200, "")
	if in.Lookup("a.test") != nil {
		t.Fatal("Lookup after the ring filled with stop_when_full: still recording")
	}
	if ir := serve(t, c, "GET", "/3", nil, "", 200, ""); ir != nil {
		t.Fatal("Begin on an ended capture returned a recording")
	}
	if got := len(c.Requests()); got != 2 {
		t.Fatalf("entries = %d, want 2", got)
	}
	if st := in.Captures()[0]; st.State != apitype.InspectEnded {
		t.Errorf("state = %q, want ended", st.State)
	}
}

func TestExpiry(t *testing.T) {
	in, clk := newInspector(t, Config{})
	c := start(t, in, "a.test", apitype.InspectRequest{DurationSeconds: 60})
	serve(t, c, "GET", "/before", nil, "", 200, "")
	clk.Advance(59 * time.Second)
	if in.Lookup("a.test") == nil {
		t.Fatal("capture ended before its duration")
	}
	clk.Advance(time.Second)
	if ir := serve(t, c, "GET", "/after", nil, "", 200, ""); ir != nil {
		t.Fatal("a request after the capture's end was recorded")
	}
	if in.Lookup("a.test") != nil {
		t.Fatal("Lookup after the end: still on the request path")
	}
	if got := c.Requests(); len(got) != 1 || got[0].URL != "/before" {
		t.Fatalf("entries after the end = %+v, want /before only", got)
	}
	clk.Advance(EndedRetention)
	if cs := in.Captures(); len(cs) != 0 {
		t.Fatalf("Captures() an hour after the end = %+v, want none (freed)", cs)
	}
	// Its memory is free again.
	in.mu.Lock()
	reserved := in.reserved
	in.mu.Unlock()
	if reserved != 0 {
		t.Errorf("reserved = %d after the capture was freed, want 0", reserved)
	}
}

func TestMemoryAndCountBounds(t *testing.T) {
	in, _ := newInspector(t, Config{MemoryBytes: 3 * reservation(10, 1024)})
	for _, h := range []string{"a.test", "b.test", "c.test"} {
		start(t, in, h, apitype.InspectRequest{MaxRequests: 10, BodyBytes: 1024})
	}
	_, err := in.Start("d.test", Options{InspectRequest: apitype.InspectRequest{MaxRequests: 10, BodyBytes: 1024}})
	if !errors.Is(err, ErrNoMemory) {
		t.Fatalf("Start beyond the memory bound = %v, want ErrNoMemory", err)
	}
	// Replacing a capture reuses its own reservation.
	if _, err := in.Start("a.test", Options{InspectRequest: apitype.InspectRequest{MaxRequests: 10, BodyBytes: 1024}}); err != nil {
		t.Fatalf("restarting a.test within its own reservation: %v", err)
	}
	if _, ok := in.Stop("b.test"); !ok {
		t.Fatal("Stop(b.test) = false")
	}
	if _, err := in.Start("d.test", Options{InspectRequest: apitype.InspectRequest{MaxRequests: 10, BodyBytes: 1024}}); err != nil {
		t.Fatalf("Start after Stop freed room: %v", err)
	}

	many, _ := newInspector(t, Config{})
	for i := 0; i < MaxCaptures; i++ {
		start(t, many, "h"+string(rune('a'+i%26))+string(rune('a'+i/26))+".test", apitype.InspectRequest{MaxRequests: 1, BodyBytes: 1})
	}
	if _, err := many.Start("one-more.test", Options{InspectRequest: apitype.InspectRequest{MaxRequests: 1, BodyBytes: 1}}); !errors.Is(err, ErrTooMany) {
		t.Fatalf("Start of capture %d = %v, want ErrTooMany", MaxCaptures+1, err)
	}
}

func TestCheckRequest(t *testing.T) {
	for name, req := range map[string]apitype.InspectRequest{
		"negative duration":   {DurationSeconds: -1},
		"huge duration":       {DurationSeconds: 3601},
		"negative count":      {MaxRequests: -5},
		"huge count":          {MaxRequests: 1001},
		"huge body":           {BodyBytes: MaxBodyBytes + 1},
		"negative body":       {BodyBytes: -1},
		"bad header name":     {RedactHeaders: []string{"X-Ok", "Bad Header"}},
		"newline header name": {RedactHeaders: []string{"X-A\nB"}},
		"too many headers":    {RedactHeaders: make([]string, MaxRedactHeaders+1)},
	} {
		if err := CheckRequest(req); !errors.Is(err, ErrBadInput) {
			t.Errorf("%s: CheckRequest(%+v) = %v, want ErrBadInput", name, req, err)
		}
	}
	if err := CheckRequest(apitype.InspectRequest{DurationSeconds: 3600, MaxRequests: 1000, BodyBytes: MaxBodyBytes, RedactHeaders: []string{"X-Api-Key"}}); err != nil {
		t.Errorf("CheckRequest at the bounds = %v, want nil", err)
	}
	if err := (Config{RedactHeaders: []string{"x y"}}).Validate(); err == nil {
		t.Error("Config.Validate with a bad header name = nil")
	}
}

func TestRedaction(t *testing.T) {
	in, _ := newInspector(t, Config{RedactHeaders: []string{"x-server-secret"}})
	c := start(t, in, "a.test", apitype.InspectRequest{RedactHeaders: []string{"X-Capture-Secret"}})
	hdr := http.Header{
		"Authorization":       {"Bearer hunter2"},
		"Proxy-Authorization": {"Basic aHVudGVyMg=="},
		"Cookie":              {"sid=hunter2"},
		"X-Server-Secret":     {"hunter2"},
		"X-Capture-Secret":    {"hunter2", "hunter3"},
		"X-Plain":             {"visible"},
	}
	serve(t, c, "GET", "/", hdr, "", 200, "")
	e, err := c.Entry(c.Requests()[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"Authorization", "Proxy-Authorization", "Cookie", "X-Server-Secret", "X-Capture-Secret"} {
		for _, v := range e.Request.Header[k] {
			if v != Redacted {
				t.Errorf("request header %s = %q, want %q", k, v, Redacted)
			}
		}
	}
	if got := len(e.Request.Header["X-Capture-Secret"]); got != 2 {
		t.Errorf("X-Capture-Secret has %d values, want 2 redacted", got)
	}
	if got := e.Response.Header["Set-Cookie"]; len(got) != 1 || got[0] != Redacted {
		t.Errorf("response Set-Cookie = %q, want redacted", got)
	}
	if got := e.Request.Header["X-Plain"]; len(got) != 1 || got[0] != "visible" {
		t.Errorf("X-Plain = %q, want visible", got)
	}
	if strings.Contains(e.Curl, "hunter") || strings.Contains(e.Curl, Redacted) {
		t.Errorf("curl carries a redacted header: %s", e.Curl)
	}
	if !strings.Contains(e.Curl, "X-Plain: visible") {
		t.Errorf("curl lacks X-Plain: %s", e.Curl)
	}
}

func TestHeadBound(t *testing.T) {
	in, _ := newInspector(t, Config{})
	c := start(t, in, "a.test", apitype.InspectRequest{})
	big := strings.Repeat("x", 1024)
	hdr := http.Header{}
	for i := 0; i < 40; i++ {
		hdr.Add("X-Big", big)
	}
	serve(t, c, "GET", "/", hdr, "", 200, "")
	e, err := c.Entry(c.Requests()[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for k, vv := range e.Request.Header {
		for _, v := range vv {
			n += len(k) + len(v)
		}
	}
	if !e.Request.HeadersTruncated || n > MaxHeadBytes {
		t.Errorf("40 KiB of headers: truncated %t, %d bytes kept, want truncated and at most %d", e.Request.HeadersTruncated, n, MaxHeadBytes)
	}
}

func TestBodies(t *testing.T) {
	in, _ := newInspector(t, Config{})
	c := start(t, in, "a.test", apitype.InspectRequest{BodyBytes: 8})
	serve(t, c, "POST", "/", nil, "0123456789abcdef", 201, "short")
	serve(t, c, "POST", "/", nil, "small", 200, "a longer answer")
	es := c.Requests()
	big, err := c.Entry(es[1].ID)
	if err != nil {
		t.Fatal(err)
	}
	if string(big.Request.Body) != "01234567" || big.Request.BodySize != 16 || !big.Request.BodyTruncated {
		t.Errorf("request body = %q size %d truncated %t, want 01234567, 16, true", big.Request.Body, big.Request.BodySize, big.Request.BodyTruncated)
	}
	if big.Request.Text == nil || *big.Request.Text != "01234567" {
		t.Errorf("request text = %v, want 01234567", big.Request.Text)
	}
	if string(big.Response.Body) != "short" || big.Response.BodyTruncated || big.Response.Status != 201 {
		t.Errorf("response = %d %q truncated %t, want 201 short, whole", big.Response.Status, big.Response.Body, big.Response.BodyTruncated)
	}
	small, err := c.Entry(es[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if string(small.Request.Body) != "small" || small.Request.BodyTruncated {
		t.Errorf("small request body = %q truncated %t, want whole", small.Request.Body, small.Request.BodyTruncated)
	}
	if string(small.Response.Body) != "a longer" || small.Response.BodySize != 15 || !small.Response.BodyTruncated {
		t.Errorf("response body = %q size %d truncated %t", small.Response.Body, small.Response.BodySize, small.Response.BodyTruncated)
	}
	if _, _, err := c.ReplayRequest(context.Background(), big.ID); !errors.Is(err, ErrNoReplay) {
		t.Errorf("ReplayRequest of a truncated body = %v, want ErrNoReplay", err)
	}
	r, mark, err := c.ReplayRequest(context.Background(), small.ID)
	if err != nil {
		t.Fatalf("ReplayRequest: %v", err)
	}
	got, err := io.ReadAll(r.Body)
	if err != nil || string(got) != "small" || r.Host != "a.test" || r.Header.Get(ReplayHeader) != small.ID {
		t.Errorf("replay request: body %q host %q %s %q", got, r.Host, ReplayHeader, r.Header.Get(ReplayHeader))
	}
	// The replay's own recording is marked, and reports its id.
	ir, _ := c.Begin(httptest.NewRecorder(), r, time.Time{}, false)
	ir.Finish(0, 0, "")
	if id := mark.ID(); id == "" {
		t.Fatal("ReplayMark.ID() is empty after the replay was recorded")
	} else if e, err := c.Entry(id); err != nil || e.ReplayOf != small.ID {
		t.Errorf("replay entry %s: replay_of %q (%v), want %s", id, e.ReplayOf, err, small.ID)
	}
}

func TestTimeline(t *testing.T) {
	in, clk := newInspector(t, Config{})
	c := start(t, in, "a.test", apitype.InspectRequest{})
	r := httptest.NewRequest("GET", "/t", nil)
	rec := httptest.NewRecorder()
	ir, w := c.Begin(rec, r, time.Time{}, true)
	clk.Advance(30 * time.Millisecond)
	ir.Dispatched()
	clk.Advance(20 * time.Millisecond)
	w.WriteHeader(204)
	clk.Advance(5 * time.Millisecond)
	ir.Finish(25*time.Millisecond, 3*time.Millisecond, "cli_9")
	e, err := c.Entry(c.Requests()[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	tl := e.Timeline
	if tl.QueueWaitMS != 25 || tl.HoldMS != 3 || tl.DispatchMS == nil || *tl.DispatchMS != 30 || tl.ResponseHeadMS == nil || *tl.ResponseHeadMS != 50 || tl.DoneMS != 55 {
		t.Errorf("timeline = %+v (dispatch %v, head %v), want queue 25, hold 3, dispatch 30, head 50, done 55", tl, deref(tl.DispatchMS), deref(tl.ResponseHeadMS))
	}
	if e.ClientID != "cli_9" || e.Scheme != "https" || e.Response.Status != 204 {
		t.Errorf("entry client %q scheme %q status %d", e.ClientID, e.Scheme, e.Response.Status)
	}
}

func deref(p *float64) float64 {
	if p == nil {
		return -1
	}
	return *p
}

// hostile are values a curl command line must carry as data, never run.
var hostile = []string{
	`it's`, `'; touch /tmp/pwned; '`, `$(touch /tmp/pwned)`, "`touch /tmp/pwned`",
	`"double" \back\slash`, `a'b'c''`, "tab\there", `${HOME} %s %n`,
}

func TestCurlQuotingHostile(t *testing.T) {
	for _, v := range hostile {
		if got := quote(v); unquoteSh(t, got) != v {
			t.Errorf("quote(%q) = %s, which a shell reads as %q", v, got, unquoteSh(t, got))
		}
	}
	// A value with a newline, as a body (header values cannot carry one).
	in, _ := newInspector(t, Config{})
	c := start(t, in, "a.test", apitype.InspectRequest{})
	hdr := http.Header{}
	for _, v := range hostile {
		hdr.Add("X-Hostile", v)
	}
	body := "line one\n'$(touch /tmp/pwned)'\nline three"
	serve(t, c, "POST", "/q?a='b'&c=$(x)", hdr, body, 200, "")
	e, err := c.Entry(c.Requests()[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	args := shArgs(t, e.Curl)
	want := []string{"curl", "-X", "POST"}
	for _, v := range hostile {
		want = append(want, "-H", "X-Hostile: "+v)
	}
	want = append(want, "--data-raw", body, "http://a.test/q?a='b'&c=$(x)")
	if strings.Join(args, "\x00") != strings.Join(want, "\x00") {
		t.Errorf("curl %s\nparses as %q\nwant      %q", e.Curl, args, want)
	}
}

func TestCurlBinaryBody(t *testing.T) {
	in, _ := newInspector(t, Config{})
	c := start(t, in, "a.test", apitype.InspectRequest{})
	body := "\x00\x01\xff%s\\'$(x)\n"
	serve(t, c, "PUT", "/bin", nil, body, 200, "")
	e, err := c.Entry(c.Requests()[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if e.Request.Text != nil {
		t.Errorf("text of a binary body = %q, want none", *e.Request.Text)
	}
	if !strings.HasPrefix(e.Curl, "printf '") || !strings.Contains(e.Curl, "--data-binary @-") {
		t.Fatalf("curl of a binary body = %s, want printf … | curl --data-binary @-", e.Curl)
	}
	// The printf part, run by a real shell, prints the body exactly.
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatalf("no sh to check the printf: %v", err)
	}
	printf, _, _ := strings.Cut(e.Curl, " | ")
	out, err := exec.Command(sh, "-c", printf).Output()
	if err != nil {
		t.Fatalf("sh -c %s: %v", printf, err)
	}
	if !bytes.Equal(out, []byte(body)) {
		t.Errorf("printf prints %q, want %q", out, body)
	}
}

// TestCurlNeverReadsLocalFiles: whatever a visitor's body starts with
// (@ names a local file for --data and --data-binary, < for -F), the
// command sends that body and nothing of the machine that runs it (#38,
// F9). The only @ argument written is @-, stdin, for a binary body. Each
// command is parsed by a real shell and run by a real curl against a
// local server, with a file at the path the body names.
func TestCurlNeverReadsLocalFiles(t *testing.T) {
	dir := t.TempDir()
	secret := dir + "/secret"
	if err := os.WriteFile(secret, []byte("LOCAL-SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	bodies := map[string]string{
		"at file":        "@" + secret,
		"at stdin":       "@-",
		"lt file":        "<" + secret,
		"at multiline":   "@" + secret + "\nsecond line",
		"binary at file": "@" + secret + "\x00\xff",
		"binary lt file": "<" + secret + "\x01",
	}
	curlBin, err := exec.LookPath("curl")
	if err != nil && os.Getenv("CI") == "true" {
		t.Fatalf("no curl in CI: %v", err)
	}
	for name, body := range bodies {
		t.Run(name, func(t *testing.T) {
			in, _ := newInspector(t, Config{})
			c := start(t, in, "a.test", apitype.InspectRequest{})
			serve(t, c, "POST", "/atbody", nil, body, 200, "")
			e, err := c.Entry(c.Requests()[0].ID)
			if err != nil {
				t.Fatal(err)
			}
			_, line, piped := strings.Cut(e.Curl, " | ")
			if !piped {
				line = e.Curl
			}
			args := shArgs(t, line)
			for i, a := range args {
				if !strings.HasPrefix(a, "--data") && a != "-d" && a != "-F" && a != "--form" {
					continue
				}
				next := ""
				if i+1 < len(args) {
					next = args[i+1]
				}
				if a != "--data-raw" && !(a == "--data-binary" && next == "@-") {
					t.Errorf("curl writes %s %q, want --data-raw or --data-binary @-: %s", a, next, e.Curl)
				}
			}
			if printable([]byte(body)) && !slices.Contains(args, "--data-raw") {
				t.Errorf("curl of text body %q = %s, want --data-raw", body, e.Curl)
			}
			if curlBin == "" {
				t.Skip("no curl to run the command (CI installs it)")
			}
			// Run it: the server must receive the body, byte for byte.
			got := make(chan []byte, 1)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, err := io.ReadAll(r.Body)
				if err != nil {
					t.Error(err)
				}
				got <- b
			}))
			t.Cleanup(srv.Close)
			run := strings.Replace(e.Curl, "'http://a.test/atbody'", quote(srv.URL+"/atbody"), 1)
			run = strings.Replace(run, "curl ", quote(curlBin)+" -s -o /dev/null --noproxy '*' ", 1)
			out, err := exec.Command("sh", "-c", run).CombinedOutput()
			if err != nil {
				t.Fatalf("sh -c %s: %v: %s", run, err, out)
			}
			if b := <-got; string(b) != body {
				t.Errorf("the command sent %q, want %q (the visitor's body)", b, body)
			}
		})
	}
}

// shArgs returns the words a POSIX shell makes of line, by asking one to
// print them NUL-separated instead of running curl.
func shArgs(t *testing.T, line string) []string {
	t.Helper()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatalf("no sh: %v", err)
	}
	script := `curl() { printf 'curl'; for a in "$@"; do printf '\0%s' "$a"; done; }; ` + line
	out, err := exec.Command(sh, "-c", script).Output()
	if err != nil {
		t.Fatalf("sh -c %s: %v", line, err)
	}
	return strings.Split(string(out), "\x00")
}

func unquoteSh(t *testing.T, word string) string {
	t.Helper()
	args := shArgs(t, "curl "+word)
	if len(args) != 2 {
		t.Fatalf("%s is %d words, want 1", word, len(args)-1)
	}
	return args[1]
}

func TestLookupNil(t *testing.T) {
	var in *Inspector
	if in.Lookup("a.test") != nil {
		t.Fatal("nil Inspector captured")
	}
	in2, _ := newInspector(t, Config{})
	if in2.Lookup("a.test") != nil || in2.active.Load() != nil {
		t.Fatal("an Inspector with no capture has an active snapshot")
	}
	start(t, in2, "a.test", apitype.InspectRequest{})
	if in2.Lookup("b.test") != nil {
		t.Fatal("Lookup of another hostname found a capture")
	}
}

func TestLookupAllocs(t *testing.T) {
	in, _ := newInspector(t, Config{})
	if n := testing.AllocsPerRun(100, func() { in.Lookup("a.test") }); n != 0 {
		t.Errorf("Lookup allocates %v times with no capture, want 0", n)
	}
}

// FuzzQuote checks that quote's word reads back, by the shell's rules
// for single quotes and backslashes outside them, as the value itself.
func FuzzQuote(f *testing.F) {
	for _, v := range hostile {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		q := quote(v)
		var out strings.Builder
		in := false
		for i := 0; i < len(q); i++ {
			switch {
			case q[i] == '\'':
				in = !in
			case !in && q[i] == '\\' && i+1 < len(q):
				i++
				out.WriteByte(q[i])
			case !in:
				t.Fatalf("quote(%q) = %s: %q outside quotes", v, q, q[i])
			default:
				out.WriteByte(q[i])
			}
		}
		if in || out.String() != v {
			t.Errorf("quote(%q) = %s reads back as %q (open quote %t)", v, q, out.String(), in)
		}
	})
}
