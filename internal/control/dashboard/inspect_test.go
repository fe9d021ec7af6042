package dashboard

import (
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// inspectFakeAPI answers the inspector's routes of the admin API from
// fixed data, taking the cookie "s=<role>" for a session of that role
// (csrf "tok-<role>"), refusing write routes below operator as the real
// API does, and recording every call but whoami.
type inspectFakeAPI struct {
	captures []apitype.InspectCapture
	requests []apitype.InspectSummary
	entries  map[string]apitype.InspectEntry
	replay   apitype.InspectReplay
	// refuse answers a path ("METHOD /path") with a status and message.
	refuse map[string]struct {
		status int
		msg    string
	}
	calls []inspectCall
}

// inspectCall is one call the fake saw.
type inspectCall struct {
	Method, Path, CSRF, Body string
}

func (f *inspectFakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	fail := func(status int, msg string) { apiError(w, status, msg) }
	role, done := fakeSession(w, r, "")
	if done {
		return
	}
	p := strings.TrimPrefix(r.URL.Path, apitype.Prefix)
	b, done := readBody(w, r)
	if done {
		return
	}
	f.calls = append(f.calls, inspectCall{r.Method, r.URL.Path, r.Header.Get(apitype.CSRFHeader), b})
	if r.Method != http.MethodGet && (csrfRefused(w, r, role) || roleRefused(w, role, apitype.RoleOperator, "this needs the operator role")) {
		return
	}
	if rf, ok := f.refuse[r.Method+" "+p]; ok {
		fail(rf.status, rf.msg)
		return
	}
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	switch {
	case r.Method == http.MethodGet && p == "/inspect":
		json.NewEncoder(w).Encode(f.captures)
	case r.Method == http.MethodPut && len(parts) == 2 && parts[0] == "inspect":
		json.NewEncoder(w).Encode(apitype.InspectCapture{Hostname: parts[1], State: apitype.InspectRecording})
	case r.Method == http.MethodDelete && len(parts) == 2 && parts[0] == "inspect":
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodGet && len(parts) == 3 && parts[2] == "requests":
		json.NewEncoder(w).Encode(f.requests)
	case r.Method == http.MethodGet && len(parts) == 4 && parts[2] == "requests":
		e, ok := f.entries[parts[3]]
		if !ok {
			fail(http.StatusNotFound, parts[1]+" has no captured request "+parts[3])
			return
		}
		json.NewEncoder(w).Encode(e)
	case r.Method == http.MethodPost && len(parts) == 5 && parts[4] == "replay":
		json.NewEncoder(w).Encode(f.replay)
	default:
		fail(http.StatusNotFound, "no such endpoint")
	}
}

// writes returns the state-changing calls the fake saw.
func (f *inspectFakeAPI) writes() []inspectCall {
	var out []inspectCall
	for _, c := range f.calls {
		if c.Method != http.MethodGet {
			out = append(out, c)
		}
	}
	return out
}

// alertRe finds the page's error notice.
var alertRe = regexp.MustCompile(`<p class="notice error" role="alert">([^<]*)</p>`)

var inspectNow = time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)

func newInspectUI(t testing.TB) (*UI, *inspectFakeAPI) {
	t.Helper()
	text := "hello <b>world</b>"
	head, dispatch := 41.5, 2.5
	api := &inspectFakeAPI{
		captures: []apitype.InspectCapture{{
			Hostname: "app.test", OrgID: "o1", State: apitype.InspectRecording, StartedAt: inspectNow.Add(-time.Minute),
			EndsAt: inspectNow.Add(9*time.Minute + 5*time.Second), StartedBy: "key:k1", MaxRequests: 100, BodyBytes: 16 << 10,
			RedactHeaders: []string{"X-Api-Key"}, Captured: 2, Kept: 2,
		}, {
			Hostname: "old.test", State: apitype.InspectEnded, StartedAt: inspectNow.Add(-time.Hour), EndsAt: inspectNow.Add(-50 * time.Minute),
			MaxRequests: 10, BodyBytes: 1 << 10,
		}},
		requests: []apitype.InspectSummary{
			{ID: "req_2", At: inspectNow.Add(-10 * time.Second), Method: "POST", URL: "/api/items?x=1", Status: 201, DurationMS: 43.25, ClientID: "sess-7"},
			{ID: "req_1", At: inspectNow.Add(-20 * time.Second), Method: "GET", URL: "/<script>alert(1)</script>", Status: 0, Error: "429 ip"},
		},
		entries: map[string]apitype.InspectEntry{
			"req_2": {
				ID: "req_2", At: inspectNow.Add(-10 * time.Second), Method: "POST", URL: "/api/items?x=1", Scheme: "https", Proto: "HTTP/2.0",
				ClientID: "sess-7", RequestID: "rid-1",
				Request: apitype.InspectMessage{Header: map[string][]string{
					"Authorization": {"[redacted]"}, "X-Evil": {"<script>alert(1)</script>"}, "Content-Type": {"text/plain"},
				}, Body: []byte(text), Text: &text, BodySize: 5000, BodyTruncated: true},
				Response: apitype.InspectMessage{Status: 201, Header: map[string][]string{"Set-Cookie": {"[redacted]"}},
					Body: []byte{0x00, 0xff, 0x10, 'A'}, BodySize: 4},
				Timeline: apitype.InspectTimeline{Received: inspectNow.Add(-10 * time.Second), QueueWaitMS: 1.5, DispatchMS: &dispatch, ResponseHeadMS: &head, DoneMS: 43.25},
				Curl:     "curl -X POST 'https://app.test/api/items?x=1' -H 'X-Evil: <script>alert(1)</script>'",
			},
		},
		replay: apitype.InspectReplay{ID: "req_3", Status: 201},
	}
	u, err := New(Config{API: api, Login: &fakeLogin{}, Now: func() time.Time { return inspectNow }})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	return u, api
}

func TestInspectListByRole(t *testing.T) {
	for _, c := range []struct {
		role     string
		canWrite bool
	}{
		{apitype.RoleViewer, false},
		{apitype.RoleOperator, true},
		{apitype.RoleAdmin, true},
		{apitype.Master, true},
	} {
		t.Run(c.role, func(t *testing.T) {
			u, _ := newInspectUI(t)
			b := render(t, u, "inspect", c.role)
			contains(t, "list", b, `href="/aperio/ui/inspect?hostname=app.test"`, "old.test", "9m 05s", "recording", "ended", "X-Api-Key", "16 KiB", `/aperio/ui/assets/inspect.js`)
			for _, write := range []string{`action="/aperio/ui/inspect/start"`, `action="/aperio/ui/inspect/stop"`} {
				if got := strings.Contains(b, write); got != c.canWrite {
					t.Errorf("list shows %s: %t, want %t", write, got, c.canWrite)
				}
			}
			if c.canWrite && !strings.Contains(b, `data-confirm="Stop the capture of app.test and drop its requests?"`) {
				t.Errorf("stop form has no confirmation")
			}
		})
	}
}

func TestInspectCaptureAndDetailByRole(t *testing.T) {
	for _, c := range []struct {
		role     string
		canWrite bool
	}{{apitype.RoleViewer, false}, {apitype.RoleOperator, true}} {
		t.Run(c.role, func(t *testing.T) {
			u, api := newInspectUI(t)
			w := get(t, u, UIPrefix+"inspect?hostname=App.Test", c.role)
			if w.Code != http.StatusOK {
				t.Fatalf("GET capture = %d, body %s", w.Code, w.Body)
			}
			b := w.Body.String()
			// Newest first, as the API answers, each linking its detail.
			i2, i1 := strings.Index(b, `id=req_2`), strings.Index(b, `id=req_1`)
			if i2 < 0 || i1 < 0 || i2 > i1 {
				t.Errorf("requests not listed newest first with links (req_2 at %d, req_1 at %d)", i2, i1)
			}
			contains(t, "capture page", b, "43.2 ms", "sess-7", "201", `<span class="muted">429 ip</span>`, "&lt;script&gt;alert(1)&lt;/script&gt;", `data-host="app.test"`, `data-live="1"`)
			if strings.Contains(b, "<script>alert") {
				t.Errorf("a captured path is not escaped")
			}
			if got := strings.Contains(b, `id="stop"`); got != c.canWrite {
				t.Errorf("capture page shows stop: %t, want %t", got, c.canWrite)
			}
			if got, want := api.calls[len(api.calls)-1].Path, apitype.Prefix+"/inspect/app.test/requests"; got != want {
				t.Errorf("last API call = %s, want %s (the hostname lowercased)", got, want)
			}

			w = get(t, u, UIPrefix+"inspect?hostname=app.test&id=req_2", c.role)
			if w.Code != http.StatusOK {
				t.Fatalf("GET detail = %d, body %s", w.Code, w.Body)
			}
			b = w.Body.String()
			if got := strings.Contains(b, `action="/aperio/ui/inspect/replay"`); got != c.canWrite {
				t.Errorf("detail shows replay: %t, want %t", got, c.canWrite)
			}
			if strings.Contains(b, "<script>alert") {
				t.Errorf("detail carries a visitor's <script> unescaped")
			}
			curl := regexp.MustCompile(`(?s)<pre id="curl" class="code">(.*?)</pre>`).FindStringSubmatch(b)
			if curl == nil || curl[1] != "curl -X POST &#39;https://app.test/api/items?x=1&#39; -H &#39;X-Evil: &lt;script&gt;alert(1)&lt;/script&gt;&#39;" {
				t.Errorf("curl block = %q", curl)
			}
			contains(t, "detail", b,
				`data-copy="curl"`,
				// Redacted values show as the placeholder, marked.
				`<code>Authorization</code></th><td><span class="redacted">[redacted]</span>`,
				`<code>Set-Cookie</code></th><td><span class="redacted">[redacted]</span>`,
				`<code>X-Evil</code></th><td><code>&lt;script&gt;alert(1)&lt;/script&gt;</code>`,
				// The text body escaped, its truncation and sizes.
				`<pre class="code" id="request-body">hello &lt;b&gt;world&lt;/b&gt;</pre>`,
				`id="request-truncated"`, "18 bytes kept of 5000",
				// The binary body as hex.
				`<pre class="code" id="response-body">00000000  00 ff 10 41`,
				// The timeline as a bar and as ms values.
				`<svg class="timeline"`, `<rect x="34.7" y="2" width="541.0" height="20" fill="#2454c5">`, "1.5 ms", "2.5 ms", "41.5 ms", "43.2 ms",
				"rid-1",
			)
		})
	}
}

func TestInspectStart(t *testing.T) {
	u, api := newInspectUI(t)
	form := url.Values{"csrf": {"tok-operator"}, "hostname": {" App.Test "}, "duration": {"120"}, "max_requests": {"50"},
		"body_kib": {"8"}, "redact_headers": {"X-Api-Key, X-Session\nX-Other"}, "stop_when_full": {"1"}}
	w := post(t, u, UIPrefix+"inspect/start", apitype.RoleOperator, form)
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != UIPrefix+"inspect?done=start" {
		t.Fatalf("POST start = %d %q, body %s", w.Code, w.Header().Get("Location"), w.Body)
	}
	calls := api.writes()
	if len(calls) != 1 {
		t.Fatalf("API writes = %+v, want one PUT", calls)
	}
	want := inspectCall{http.MethodPut, apitype.Prefix + "/inspect/app.test", "tok-operator",
		`{"duration_seconds":120,"max_requests":50,"body_bytes":8192,"redact_headers":["X-Api-Key","X-Session","X-Other"],"stop_when_full":true}`}
	if calls[0] != want {
		t.Errorf("PUT = %+v, want %+v", calls[0], want)
	}

	// Empty fields take the inspector's defaults: nothing but the hostname.
	api.calls = nil
	w = post(t, u, UIPrefix+"inspect/start", apitype.RoleOperator, url.Values{"csrf": {"tok-operator"}, "hostname": {"app.test"}})
	if w.Code != http.StatusSeeOther {
		t.Fatalf("POST start with defaults = %d, body %s", w.Code, w.Body)
	}
	if calls := api.writes(); len(calls) != 1 || calls[0].Body != `{}` {
		t.Errorf("PUT with defaults = %+v, want body {}", calls)
	}
	w = get(t, u, UIPrefix+"inspect?done=start", apitype.RoleOperator)
	if !strings.Contains(w.Body.String(), "The capture was started.") {
		t.Errorf("page after start lacks the done message")
	}
}

func TestInspectStartBadInput(t *testing.T) {
	good := url.Values{"csrf": {"tok-operator"}, "hostname": {"app.test"}, "duration": {"60"}, "max_requests": {"10"}, "body_kib": {"4"}}
	for name, c := range map[string]struct {
		field, value, msg string
	}{
		"negative-duration":    {"duration", "-5", "The duration must be a whole number of seconds from 1 to 3600."},
		"zero-duration":        {"duration", "0", "The duration must be"},
		"long-duration":        {"duration", "3601", "from 1 to 3600"},
		"non-numeric-duration": {"duration", "10m", "The duration must be"},
		"float-max":            {"max_requests", "1.5", "Max requests must be a whole number from 1 to 1000."},
		"huge-max":             {"max_requests", "99999999999999999999999", "Max requests"},
		"big-body":             {"body_kib", "65", "Body KiB must be a whole number from 1 to 64."},
		"hex-body":             {"body_kib", "0x10", "Body KiB"},
		"slash-hostname":       {"hostname", "app.test/x", "The hostname must be an exact hostname"},
		"space-hostname":       {"hostname", "app test", "The hostname must be an exact hostname"},
		"wildcard-hostname":    {"hostname", "*.app.test", "The hostname must be an exact hostname"},
		"ip-hostname":          {"hostname", "10.0.0.1", "The hostname must be an exact hostname"},
		"empty-hostname":       {"hostname", "", "The hostname must be an exact hostname"},
		"long-hostname":        {"hostname", strings.Repeat("a.", 200) + "test", "The hostname must be an exact hostname"},
		"10kb-headers":         {"redact_headers", strings.Repeat("X-A,", 2500), "Extra headers to redact: at most 32"},
		"33-headers":           {"redact_headers", strings.Repeat("X-A ", 33), "at most 32"},
		"bad-header":           {"redact_headers", "X-Ok, X Bad:", "at most 32"},
		"control-header":       {"redact_headers", "X-\x00", "at most 32"},
		"long-header":          {"redact_headers", strings.Repeat("x", 129), "at most 32"},
	} {
		t.Run(name, func(t *testing.T) {
			u, api := newInspectUI(t)
			form := url.Values{}
			for k, v := range good {
				form[k] = v
			}
			form.Set(c.field, c.value)
			w := post(t, u, UIPrefix+"inspect/start", apitype.RoleOperator, form)
			if w.Code != http.StatusBadRequest {
				t.Fatalf("POST start %s=%.40q = %d, want 400", c.field, c.value, w.Code)
			}
			if m := alertRe.FindStringSubmatch(w.Body.String()); m == nil || !strings.Contains(m[1], c.msg) {
				t.Errorf("alert = %q, want it to say %q", m, c.msg)
			}
			if calls := api.writes(); len(calls) != 0 {
				t.Errorf("bad input reached the API: %+v", calls)
			}
			// The form keeps what was posted, so it can be corrected.
			if c.field == "duration" && !strings.Contains(w.Body.String(), `value="`+c.value+`"`) {
				t.Errorf("the form lost the posted duration")
			}
		})
	}
}

func TestInspectStartRefused(t *testing.T) {
	u, api := newInspectUI(t)
	api.refuse = map[string]struct {
		status int
		msg    string
	}{"PUT /inspect/app.test": {http.StatusInsufficientStorage, "inspect: not enough capture memory: the capture needs 1 bytes"}}
	w := post(t, u, UIPrefix+"inspect/start", apitype.RoleOperator, url.Values{"csrf": {"tok-operator"}, "hostname": {"app.test"}})
	if w.Code != http.StatusInsufficientStorage || !strings.Contains(w.Body.String(), "not enough capture memory") {
		t.Errorf("refused start = %d, want 507 and the API's message; body %s", w.Code, w.Body)
	}
	// A viewer that posts anyway is refused by the API, and told so.
	w = post(t, u, UIPrefix+"inspect/start", apitype.RoleViewer, url.Values{"csrf": {"tok-viewer"}, "hostname": {"app.test"}})
	if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "this needs the operator role") {
		t.Errorf("viewer start = %d, want the API's 403 shown", w.Code)
	}
}

func TestInspectStop(t *testing.T) {
	u, api := newInspectUI(t)
	w := post(t, u, UIPrefix+"inspect/stop", apitype.RoleOperator, url.Values{"csrf": {"tok-operator"}, "hostname": {"app.test"}})
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != UIPrefix+"inspect?done=stop" {
		t.Fatalf("POST stop = %d %q", w.Code, w.Header().Get("Location"))
	}
	if calls := api.writes(); len(calls) != 1 || calls[0] != (inspectCall{http.MethodDelete, apitype.Prefix + "/inspect/app.test", "tok-operator", ""}) {
		t.Errorf("API writes = %+v, want one DELETE with the CSRF token", calls)
	}
	api.calls = nil
	w = post(t, u, UIPrefix+"inspect/stop", apitype.RoleOperator, url.Values{"csrf": {"tok-operator"}, "hostname": {"../tokens"}})
	if w.Code != http.StatusBadRequest || len(api.writes()) != 0 {
		t.Errorf("stop of a bad hostname = %d with writes %+v, want 400 and none", w.Code, api.writes())
	}
}

func TestInspectReplay(t *testing.T) {
	u, api := newInspectUI(t)
	w := post(t, u, UIPrefix+"inspect/replay", apitype.RoleOperator, url.Values{"csrf": {"tok-operator"}, "hostname": {"app.test"}, "id": {"req_2"}})
	if w.Code != http.StatusOK {
		t.Fatalf("POST replay = %d, body %s", w.Code, w.Body)
	}
	calls := api.writes()
	if len(calls) != 1 || calls[0] != (inspectCall{http.MethodPost, apitype.Prefix + "/inspect/app.test/requests/req_2/replay", "tok-operator", ""}) {
		t.Errorf("API writes = %+v, want one POST to the replay path with the CSRF token", calls)
	}
	b := w.Body.String()
	contains(t, "page after replay", b, "answered 201", `<a href="/aperio/ui/inspect?hostname=app.test&amp;id=req_3" id="replayed-link">req_3</a>`, "The request was replayed.", `id="curl"`)

	for name, form := range map[string]url.Values{
		"bad-id":       {"hostname": {"app.test"}, "id": {"req_2/../../tokens"}},
		"no-id":        {"hostname": {"app.test"}},
		"letters-id":   {"hostname": {"app.test"}, "id": {"req_x"}},
		"long-id":      {"hostname": {"app.test"}, "id": {"req_" + strings.Repeat("1", 21)}},
		"bad-hostname": {"hostname": {"app.test/requests"}, "id": {"req_2"}},
	} {
		api.calls = nil
		form.Set("csrf", "tok-operator")
		w := post(t, u, UIPrefix+"inspect/replay", apitype.RoleOperator, form)
		if w.Code != http.StatusBadRequest || len(api.writes()) != 0 {
			t.Errorf("%s: replay = %d with writes %+v, want 400 and none", name, w.Code, api.writes())
		}
	}

	// The API's refusal is shown, and the entry still is.
	api.refuse = map[string]struct {
		status int
		msg    string
	}{"POST /inspect/app.test/requests/req_2/replay": {http.StatusConflict, "app.test has no active capture: start one to replay"}}
	w = post(t, u, UIPrefix+"inspect/replay", apitype.RoleOperator, url.Values{"csrf": {"tok-operator"}, "hostname": {"app.test"}, "id": {"req_2"}})
	if w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), "no active capture") || !strings.Contains(w.Body.String(), `id="curl"`) {
		t.Errorf("refused replay = %d, want 409 with the message and the entry; body %s", w.Code, w.Body)
	}
	// Without the CSRF token the framework refuses it before the API.
	api.calls = nil
	if w := post(t, u, UIPrefix+"inspect/replay", apitype.RoleOperator, url.Values{"hostname": {"app.test"}, "id": {"req_2"}}); w.Code != http.StatusForbidden || len(api.writes()) != 0 {
		t.Errorf("replay without token = %d, writes %+v", w.Code, api.writes())
	}
}

func TestInspectBadQuery(t *testing.T) {
	u, api := newInspectUI(t)
	for _, q := range []string{"hostname=a/b", "hostname=" + url.QueryEscape("a b"), "hostname=" + strings.Repeat("x", 300), "hostname=app.test&id=../x", "hostname=app.test&id=req_"} {
		api.calls = nil
		w := get(t, u, UIPrefix+"inspect?"+q, apitype.RoleViewer)
		if w.Code != http.StatusBadRequest {
			t.Errorf("GET ?%.40s = %d, want 400", q, w.Code)
		}
		for _, c := range api.calls {
			if c.Path != apitype.Prefix+"/inspect" && c.Path != apitype.Prefix+"/inspect/app.test/requests" {
				t.Errorf("GET ?%.40s called the API at %s", q, c.Path)
			}
		}
		// The captures still show.
		if !strings.Contains(w.Body.String(), "app.test") {
			t.Errorf("GET ?%.40s shows no capture", q)
		}
	}
	// An entry the capture no longer has: the API's 404, the list kept.
	w := get(t, u, UIPrefix+"inspect?hostname=app.test&id=req_99", apitype.RoleViewer)
	if w.Code != http.StatusNotFound || !strings.Contains(w.Body.String(), "app.test has no captured request req_99") || !strings.Contains(w.Body.String(), "id=req_2") {
		t.Errorf("GET missing entry = %d, want 404 with the message and the list", w.Code)
	}
}

func TestInspectGerman(t *testing.T) {
	u, _ := newInspectUI(t)
	for _, p := range []string{"inspect", "inspect?hostname=app.test", "inspect?hostname=app.test&id=req_2"} {
		w := get(t, u, UIPrefix+p, apitype.RoleOperator, "Accept-Language", "de")
		if w.Code != http.StatusOK {
			t.Fatalf("GET %s (de) = %d", p, w.Code)
		}
		b := w.Body.String()
		if !strings.Contains(b, "<title>Inspektor · Aperio</title>") || !strings.Contains(b, `lang="de"`) {
			t.Errorf("German %s lacks its title", p)
		}
		if m := regexp.MustCompile(`inspect\.[a-z_.]+`).FindString(b); m != "" && m != "inspect.js" {
			t.Errorf("German %s shows a bare message key %q", p, m)
		}
	}
	w := get(t, u, UIPrefix+"inspect?hostname=app.test&id=req_2", apitype.RoleOperator, "Accept-Language", "de")
	for _, want := range []string{"Als cURL kopieren", "Wiederholen", "Zeitverlauf"} {
		if !strings.Contains(w.Body.String(), want) {
			t.Errorf("German detail lacks %q", want)
		}
	}
}

func TestInspectTimeline(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	for name, c := range map[string]struct {
		tl   apitype.InspectTimeline
		keys []string
	}{
		"served":  {apitype.InspectTimeline{HoldMS: 10, QueueWaitMS: 5, DispatchMS: f(20), ResponseHeadMS: f(60), DoneMS: 100}, []string{"inspect.tl.hold", "inspect.tl.queue", "inspect.tl.server", "inspect.tl.backend", "inspect.tl.body"}},
		"refused": {apitype.InspectTimeline{DoneMS: 0.2}, []string{"inspect.tl.server"}},
		"no-head": {apitype.InspectTimeline{DispatchMS: f(1), DoneMS: 30}, []string{"inspect.tl.server", "inspect.tl.backend"}},
		"zero":    {apitype.InspectTimeline{}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			v := newTimeline(c.tl)
			var keys []string
			for _, s := range v.Segments {
				keys = append(keys, s.Key)
			}
			if strings.Join(keys, ",") != strings.Join(c.keys, ",") {
				t.Errorf("newTimeline(%+v) segments = %v, want %v", c.tl, keys, c.keys)
			}
		})
	}
	if got := newTimeline(apitype.InspectTimeline{DoneMS: 0.2}).Done; got != "0.20 ms" {
		t.Errorf("a sub-millisecond done = %q, want 0.20 ms", got)
	}
	v := newTimeline(apitype.InspectTimeline{HoldMS: 10, QueueWaitMS: 5, DispatchMS: f(20), ResponseHeadMS: f(60), DoneMS: 100})
	if s := v.Segments[3]; s.X != "120.0" || s.W != "240.0" {
		t.Errorf("backend segment at x=%s w=%s, want 120.0 240.0", s.X, s.W)
	}
}

// FuzzInspectStartForm posts arbitrary start forms: the page answers a
// redirect (the capture started) or a 400 with a message, and a PUT it
// makes names an exact hostname and carries only bounded values.
func FuzzInspectStartForm(f *testing.F) {
	f.Add("app.test", "120", "50", "8", "X-Api-Key, X-Session")
	f.Add("app.test/x", "-5", "1.5", "65", strings.Repeat("X-A,", 2500))
	f.Add("*.app.test", "0x10", "", "", "X Bad:")
	f.Add(" App.Test ", "3600", "1000", "64", "")
	u, api := newInspectUI(f)
	hostRe := regexp.MustCompile(`^/aperio/api/inspect/[a-z0-9_-]+(\.[a-z0-9_-]+)*$`)
	f.Fuzz(func(t *testing.T, host, dur, max, kib, redact string) {
		api.calls = nil
		form := url.Values{"csrf": {"tok-operator"}, "hostname": {host}, "duration": {dur}, "max_requests": {max}, "body_kib": {kib}, "redact_headers": {redact}}
		w := post(t, u, UIPrefix+"inspect/start", apitype.RoleOperator, form)
		writes := api.writes()
		switch w.Code {
		case http.StatusSeeOther:
			if len(writes) != 1 || !hostRe.MatchString(writes[0].Path) {
				t.Fatalf("started with writes %+v", writes)
			}
			var req apitype.InspectRequest
			if err := json.Unmarshal([]byte(writes[0].Body), &req); err != nil {
				t.Fatalf("PUT body %q: %v", writes[0].Body, err)
			}
			if req.DurationSeconds < 0 || req.DurationSeconds > 3600 || req.MaxRequests < 0 || req.MaxRequests > 1000 ||
				req.BodyBytes < 0 || req.BodyBytes > 64<<10 || len(req.RedactHeaders) > 32 {
				t.Fatalf("PUT body out of bounds: %+v", req)
			}
		case http.StatusBadRequest:
			if len(writes) != 0 || alertRe.FindString(w.Body.String()) == "" {
				t.Fatalf("refused form: writes %+v, alert %q", writes, alertRe.FindString(w.Body.String()))
			}
		default:
			t.Fatalf("POST start = %d", w.Code)
		}
	})
}
