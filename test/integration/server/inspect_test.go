package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"github.com/aperio-dev/aperio/internal/server/servertest"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/server"
)

// inspectBackend records what reached it and answers per path: /stream
// sends one chunk, waits for release, then a second; /echo answers the
// body's length and its X-Aperio-Replay header.
type inspectBackend struct {
	release chan struct{}

	mu  sync.Mutex // guards got
	got []backendSaw
}

type backendSaw struct {
	path, body, replay, auth string
}

func (b *inspectBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	b.mu.Lock()
	b.got = append(b.got, backendSaw{r.URL.Path, string(body), r.Header.Get("X-Aperio-Replay"), r.Header.Get("Authorization")})
	b.mu.Unlock()
	switch r.URL.Path {
	case "/socket":
		servertest.WSEcho("echo: ", nil)(w, r)
	case "/stream":
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-b.release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "data: two\n\n")
	default:
		w.Header().Set("X-Backend", "yes")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "got "+strings.Repeat("!", len(body)%7))
	}
}

func (b *inspectBackend) saw() []backendSaw {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]backendSaw(nil), b.got...)
}

func inspectCall[T any](t *testing.T, st *servertest.Stack, method, path string, body any, want int) T {
	t.Helper()
	code, out := servertest.AdminCall(t, st.Visitor, st.Server, method, path, body)
	if code != want {
		t.Fatalf("%s %s = %d %s, want %d", method, path, code, out, want)
	}
	var v T
	if want/100 == 2 && out != "" {
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("%s %s: decode %q: %v", method, path, out, err)
		}
	}
	return v
}

// TestInspectThroughServer captures app.test's requests through a real
// tunnel and client: a body larger than body_bytes is kept in part while
// the backend receives it whole, a refusal is captured with its status, a
// streaming answer still streams, a WebSocket still works, and a replay
// re-sends the request through the pipeline and is audited.
func TestInspectThroughServer(t *testing.T) {
	t.Parallel()
	b := &inspectBackend{release: make(chan struct{})}
	st := servertest.StartStack(t, b, func(c *server.Config) { c.Router.MaxBodyBytes = 4096 })
	capture := inspectCall[apitype.InspectCapture](t, st, "PUT", "/inspect/"+servertest.AppHost, map[string]any{"body_bytes": 1024, "max_requests": 50}, http.StatusOK)
	if capture.State != apitype.InspectRecording || capture.BodyBytes != 1024 {
		t.Fatalf("PUT /inspect = %+v", capture)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	// A body of 3000 bytes: 1024 kept, 3000 reach the backend.
	big := strings.Repeat("abcdefghij", 300)
	req := servertest.NewRequest(t, ctx, st.Server, "POST", servertest.AppHost, "/echo?x=1", strings.NewReader(big))
	req.Header.Set("Authorization", "Bearer visitor-secret")
	resp, _ := servertest.Do(t, st.Visitor, req)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /echo = %d, want 201", resp.StatusCode)
	}
	if saw := b.saw(); len(saw) != 1 || len(saw[0].body) != len(big) {
		t.Fatalf("backend saw %+v, want one request with %d bytes", saw, len(big))
	}
	// A refusal: over max_body_size.
	resp, _ = servertest.Do(t, st.Visitor, servertest.NewRequest(t, ctx, st.Server, "POST", servertest.AppHost, "/echo", strings.NewReader(strings.Repeat("x", 5000))))
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized POST = %d, want 413", resp.StatusCode)
	}
	// Another hostname: nothing captured.
	servertest.Get(t, st.Visitor, st.Server, "other.test", "/")

	// Streaming: the first event arrives before the backend sends the
	// second.
	sresp, err := st.Visitor.Do(servertest.NewRequest(t, ctx, st.Server, "GET", servertest.AppHost, "/stream", nil))
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(sresp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "data: one\n" {
		t.Fatalf("first streamed line = %q, %v, want data: one (before the second was sent)", line, err)
	}
	close(b.release)
	rest, err := io.ReadAll(br)
	sresp.Body.Close()
	if err != nil || string(rest) != "\ndata: two\n\n" {
		t.Fatalf("rest of the stream = %q, %v", rest, err)
	}

	sums := inspectCall[[]apitype.InspectSummary](t, st, "GET", "/inspect/"+servertest.AppHost+"/requests", nil, http.StatusOK)
	if len(sums) != 3 {
		t.Fatalf("captured %d requests, want 3 (POST, 413, stream): %+v", len(sums), sums)
	}
	if sums[0].URL != "/stream" || sums[1].Status != http.StatusRequestEntityTooLarge || sums[2].URL != "/echo?x=1" {
		t.Fatalf("summaries = %+v", sums)
	}
	stream := inspectCall[apitype.InspectEntry](t, st, "GET", "/inspect/"+servertest.AppHost+"/requests/"+sums[0].ID, nil, http.StatusOK)
	if stream.Response.Text == nil || *stream.Response.Text != "data: one\n\ndata: two\n\n" {
		t.Errorf("captured stream = %v, want both events", stream.Response.Text)
	}
	e := inspectCall[apitype.InspectEntry](t, st, "GET", "/inspect/"+servertest.AppHost+"/requests/"+sums[2].ID, nil, http.StatusOK)
	if len(e.Request.Body) != 1024 || e.Request.BodySize != int64(len(big)) || !e.Request.BodyTruncated {
		t.Errorf("request body: %d bytes kept of %d, truncated %t; want 1024 of %d", len(e.Request.Body), e.Request.BodySize, e.Request.BodyTruncated, len(big))
	}
	if e.Response.Status != http.StatusCreated || e.Response.Header["X-Backend"][0] != "yes" || e.ClientID == "" || e.RequestID == "" {
		t.Errorf("entry = status %d headers %v client %q request id %q", e.Response.Status, e.Response.Header, e.ClientID, e.RequestID)
	}
	if e.Request.Header["Authorization"][0] != "[redacted]" || strings.Contains(e.Curl, "visitor-secret") {
		t.Errorf("Authorization %q, curl %s: want redacted and left out", e.Request.Header["Authorization"], e.Curl)
	}
	if e.Timeline.DispatchMS == nil || e.Timeline.ResponseHeadMS == nil {
		t.Errorf("timeline %+v lacks dispatch or response head", e.Timeline)
	}
	// A truncated body is not replayed.
	code, out := servertest.AdminCall(t, st.Visitor, st.Server, "POST", "/inspect/"+servertest.AppHost+"/requests/"+e.ID+"/replay", nil)
	if code != http.StatusConflict || !strings.Contains(out, "not captured whole") {
		t.Errorf("replay of a truncated body = %d %s, want 409", code, out)
	}

	// A small POST, replayed.
	resp, _ = servertest.Do(t, st.Visitor, servertest.NewRequest(t, ctx, st.Server, "POST", servertest.AppHost, "/echo", strings.NewReader("small body")))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("small POST = %d", resp.StatusCode)
	}
	orig := inspectCall[[]apitype.InspectSummary](t, st, "GET", "/inspect/"+servertest.AppHost+"/requests", nil, http.StatusOK)[0]
	rep := inspectCall[apitype.InspectReplay](t, st, "POST", "/inspect/"+servertest.AppHost+"/requests/"+orig.ID+"/replay", nil, http.StatusOK)
	if rep.Status != http.StatusCreated || rep.ID == "" || rep.ID == orig.ID {
		t.Fatalf("replay = %+v, want 201 and a new id", rep)
	}
	saw := b.saw()
	last := saw[len(saw)-1]
	if last.body != "small body" || last.path != "/echo" || last.replay != "" {
		t.Errorf("backend saw the replay as %+v, want the same body and path, no X-Aperio-Replay", last)
	}
	re := inspectCall[apitype.InspectEntry](t, st, "GET", "/inspect/"+servertest.AppHost+"/requests/"+rep.ID, nil, http.StatusOK)
	if re.ReplayOf != orig.ID || re.Request.Header["X-Aperio-Replay"][0] != orig.ID || re.Response.Status != http.StatusCreated {
		t.Errorf("replay entry: replay_of %q header %v status %d", re.ReplayOf, re.Request.Header["X-Aperio-Replay"], re.Response.Status)
	}
	if evs := servertest.AuditEvents(t, st.Server, "inspect_replay"); len(evs) != 1 || evs[0]["hostname"] != servertest.AppHost || evs[0]["actor"] == "" {
		t.Errorf("inspect_replay audit entries = %v, want one for %s with its actor", evs, servertest.AppHost)
	}
	if evs := servertest.AuditEvents(t, st.Server, "inspect_start"); len(evs) != 1 {
		t.Errorf("inspect_start audit entries = %v, want one", evs)
	}

	// A WebSocket on the captured hostname still works.
	testCapturedWebSocket(t, st)

	// Stopped: no capture, no replay.
	inspectCall[struct{}](t, st, "DELETE", "/inspect/"+servertest.AppHost, nil, http.StatusNoContent)
	if evs := servertest.AuditEvents(t, st.Server, "inspect_stop"); len(evs) != 1 {
		t.Errorf("inspect_stop audit entries = %v, want one", evs)
	}
	code, out = servertest.AdminCall(t, st.Visitor, st.Server, "POST", "/inspect/"+servertest.AppHost+"/requests/"+orig.ID+"/replay", nil)
	if code != http.StatusNotFound {
		t.Errorf("replay without a capture = %d %s, want 404", code, out)
	}
	if cs := inspectCall[[]apitype.InspectCapture](t, st, "GET", "/inspect", nil, http.StatusOK); len(cs) != 0 {
		t.Errorf("captures after DELETE = %+v, want none", cs)
	}
}

// testCapturedWebSocket opens a WebSocket to the stack's backend, which
// answers /socket by echoing, on a hostname under capture.
func testCapturedWebSocket(t *testing.T, st *servertest.Stack) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c, resp := servertest.WSDial(t, ctx, st, "/socket")
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d, want 101", resp.StatusCode)
	}
	for _, msg := range []string{"hello", strings.Repeat("y", 20<<10)} {
		if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		_, got, err := c.ReadMessage()
		if err != nil || string(got) != "echo: "+msg {
			t.Fatalf("Read = %d bytes, %v, want the echo", len(got), err)
		}
	}
	if err := servertest.WSClose(c, websocket.CloseNormalClosure, ""); !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
		t.Fatalf("close = %v, want the backend's normal closure", err)
	}
	servertest.Poll(t, servertest.WaitFor, func() (bool, string) {
		sums := inspectCall[[]apitype.InspectSummary](t, st, "GET", "/inspect/"+servertest.AppHost+"/requests", nil, http.StatusOK)
		return len(sums) > 0 && sums[0].URL == "/socket" && sums[0].Status == http.StatusSwitchingProtocols, "the WebSocket's entry with 101"
	})
}
