package admin_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/control/admin"
	"github.com/aperio-dev/aperio/internal/visitor/inspect"
)

// newTestInspector returns an inspector with room for the matrix's
// captures.
func newTestInspector(tb testing.TB) *inspect.Inspector {
	tb.Helper()
	in, err := inspect.New(inspect.Config{MemoryBytes: 1 << 30})
	if err != nil {
		tb.Fatal(err)
	}
	return in
}

// fakePipeline stands in for the server's pipeline: it records through
// the hostname's capture, reads the body and answers 200 "replayed".
func fakePipeline(in *inspect.Inspector) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := in.Lookup(r.Host)
		if c == nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		ir, cw := c.Begin(w, r, time.Time{}, false)
		defer ir.Finish(0, 0, "cli_test")
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			cw.WriteHeader(http.StatusBadRequest)
			return
		}
		cw.WriteHeader(http.StatusOK)
		io.WriteString(cw, "replayed")
	})
}

// recordOne sends one request for host through the fake pipeline and
// returns the id of its entry.
func recordOne(tb testing.TB, in *inspect.Inspector, host, body string) string {
	tb.Helper()
	r := httptest.NewRequest("POST", "/x?y=1", strings.NewReader(body))
	r.Host = host
	r.Header.Set("X-Note", "it's $(here)")
	fakePipeline(in).ServeHTTP(httptest.NewRecorder(), r)
	c := in.Capture(host)
	if c == nil || len(c.Requests()) == 0 {
		tb.Fatalf("nothing captured for %s", host)
	}
	return c.Requests()[0].ID
}

func inspectFixture(t *testing.T) (*fixture, *inspect.Inspector) {
	t.Helper()
	base := newFixture(t)
	in := newTestInspector(t)
	return base.withConfig(t, admin.Config{Inspector: in, Replay: fakePipeline(in)}), in
}

func TestInspectAPI(t *testing.T) {
	f, in := inspectFixture(t)
	var st admin.InspectCapture
	f.expect(t, "PUT", "/inspect/app.test", masterToken, `{"duration_seconds":60,"max_requests":5,"body_bytes":64,"redact_headers":["X-Note"],"stop_when_full":false}`, http.StatusOK, &st)
	if st.Hostname != "app.test" || st.MaxRequests != 5 || st.BodyBytes != 64 || st.State != "recording" || st.StartedBy == "" {
		t.Fatalf("PUT /inspect/app.test = %+v", st)
	}
	id := recordOne(t, in, "app.test", "hello")
	var sums []admin.InspectSummary
	f.expect(t, "GET", "/inspect/app.test/requests", masterToken, "", http.StatusOK, &sums)
	if len(sums) != 1 || sums[0].ID != id || sums[0].Status != 200 {
		t.Fatalf("requests = %+v", sums)
	}
	var e admin.InspectEntry
	f.expect(t, "GET", "/inspect/app.test/requests/"+id, masterToken, "", http.StatusOK, &e)
	if string(e.Request.Body) != "hello" || e.Request.Text == nil || *e.Request.Text != "hello" || e.Response.Text == nil || *e.Response.Text != "replayed" {
		t.Errorf("entry bodies = %q %v / %v", e.Request.Body, e.Request.Text, e.Response.Text)
	}
	if e.Request.Header["X-Note"][0] != inspect.Redacted || strings.Contains(e.Curl, "X-Note") || !strings.Contains(e.Curl, "'http://app.test/x?y=1'") {
		t.Errorf("redacted X-Note: header %q, curl %s", e.Request.Header["X-Note"], e.Curl)
	}
	var rep admin.InspectReplay
	f.expect(t, "POST", "/inspect/app.test/requests/"+id+"/replay", masterToken, "", http.StatusOK, &rep)
	if rep.Status != 200 || rep.ID == "" || rep.ID == id {
		t.Fatalf("replay = %+v", rep)
	}
	found := 0
	for _, a := range f.audit(t) {
		switch a.Event {
		case admin.EventInspectStart, admin.EventInspectReplay:
			if a.Hostname != "app.test" || a.Actor == "" {
				t.Errorf("audit %s = %+v, want hostname and actor", a.Event, a)
			}
			found++
		}
	}
	if found != 2 {
		t.Errorf("found %d inspect_start/inspect_replay audit entries, want 2", found)
	}
	f.expectError(t, "GET", "/inspect/app.test/requests/req_999999", masterToken, "", http.StatusNotFound, "no captured request")
	f.expectError(t, "GET", "/inspect/nothing.test/requests", masterToken, "", http.StatusNotFound, "has no capture")
	f.expect(t, "DELETE", "/inspect/app.test", masterToken, "", http.StatusNoContent, nil)
	f.expectError(t, "POST", "/inspect/app.test/requests/"+id+"/replay", masterToken, "", http.StatusNotFound, "has no capture")
}

func TestInspectReplayNeedsActiveCapture(t *testing.T) {
	f, in := inspectFixture(t)
	f.expect(t, "PUT", "/inspect/app.test", masterToken, `{"max_requests":1,"stop_when_full":true}`, http.StatusOK, nil)
	id := recordOne(t, in, "app.test", "x")
	// Full with stop_when_full: ended, still readable, not replayed.
	var cs []admin.InspectCapture
	f.expect(t, "GET", "/inspect", masterToken, "", http.StatusOK, &cs)
	if len(cs) != 1 || cs[0].State != "ended" {
		t.Fatalf("captures = %+v, want one ended", cs)
	}
	f.expect(t, "GET", "/inspect/app.test/requests/"+id, masterToken, "", http.StatusOK, nil)
	f.expectError(t, "POST", "/inspect/app.test/requests/"+id+"/replay", masterToken, "", http.StatusConflict, "no active capture")
}

func TestInspectHostileInput(t *testing.T) {
	f, _ := inspectFixture(t)
	for _, tc := range []struct {
		body string
		want int
		msg  string
	}{
		{`{"duration_seconds":-1}`, 400, "duration_seconds"},
		{`{"duration_seconds":99999999999}`, 400, "duration_seconds"},
		{`{"max_requests":-3}`, 400, "max_requests"},
		{`{"max_requests":1001}`, 400, "max_requests"},
		{`{"max_requests":1e30}`, 400, ""},
		{`{"body_bytes":65537}`, 400, "body_bytes"},
		{`{"body_bytes":-1}`, 400, "body_bytes"},
		{`{"redact_headers":["bad name"]}`, 400, "redact_headers"},
		{`{"redact_headers":"X-A"}`, 400, ""},
		{`{"surprise":1}`, 400, "unknown field"},
		{`{"max_requests":5,"max_requests":6}`, 400, "duplicate"},
		{`[1,2]`, 400, ""},
		{`{"redact_headers":["` + strings.Repeat("a", 2<<20) + `"]}`, 413, "larger than"},
	} {
		f.expectError(t, "PUT", "/inspect/app.test", masterToken, tc.body, tc.want, tc.msg)
	}
	f.expectError(t, "PUT", "/inspect/not..a.host", masterToken, "", 400, "")
	f.expectError(t, "GET", "/inspect/app.test/requests/"+strings.Repeat("9", 65), masterToken, "", 400, "request id")
	// The memory bound: 1000 × (2 × 64 KiB + 32 KiB) is over 64 MiB.
	mem := newFixture(t)
	small, err := inspect.New(inspect.Config{})
	if err != nil {
		t.Fatal(err)
	}
	g := mem.withConfig(t, admin.Config{Inspector: small})
	g.expectError(t, "PUT", "/inspect/big.test", masterToken, `{"max_requests":1000,"body_bytes":65536}`, http.StatusInsufficientStorage, "lower max_requests or body_bytes")
	// The count bound.
	for i := 0; i < inspect.MaxCaptures; i++ {
		g.expect(t, "PUT", fmt.Sprintf("/inspect/h%d.test", i), masterToken, `{"max_requests":1,"body_bytes":1}`, http.StatusOK, nil)
	}
	g.expectError(t, "PUT", "/inspect/one-more.test", masterToken, `{"max_requests":1,"body_bytes":1}`, http.StatusConflict, "at most 32")
}

func TestInspectOff(t *testing.T) {
	f := newFixture(t)
	f.expectError(t, "GET", "/inspect", masterToken, "", http.StatusNotFound, "inspector is off")
	f.expectError(t, "PUT", "/inspect/app.test", masterToken, "", http.StatusNotFound, "inspector is off")
}
