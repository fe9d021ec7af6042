package router

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/telemetry"
	"github.com/aperio-dev/aperio/internal/visitor/access"
	"github.com/aperio-dev/aperio/internal/visitor/policy"
)

// leakSettings are names a visitor's page must never show: every setting
// a refusal or a limit names to the operator, and the server's timeouts.
func leakSettings() []string {
	out := []string{"gateway_response_timeout", "client_down_threshold", "max_body_size", "x-aperio-limit", "error_pages", "maintenance_windows", "fallbacks"}
	for _, info := range refusalInfo {
		if info.setting != "" {
			out = append(out, info.setting)
		}
	}
	for _, li := range limitInfo {
		out = append(out, li.setting)
	}
	return out
}

var ipv4 = regexp.MustCompile(`\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b`)

// refusalsForTest returns one refusal of every kind, with what it needs.
func refusalsForTest() map[refusalKind]refusal {
	out := map[refusalKind]refusal{}
	for k := refusalKind(1); k < numRefusalKinds; k++ {
		out[k] = refuseWith(k)
	}
	out[refusedMaintenance] = refusal{kind: refusedMaintenance, maint: &maintenanceEntry{reason: "db upgrade"}}
	out[refusedBodyTooLarge] = refusal{kind: refusedBodyTooLarge, err: &http.MaxBytesError{Limit: 10}}
	out[refusedExchange] = refusal{kind: refusedExchange, err: fmt.Errorf("dial 10.0.0.7:8080 for client web-1: %w", errors.New("connection refused"))}
	out[refusedAccess] = refusal{kind: refusedAccess, dec: &access.Decision{Status: http.StatusForbidden, Reason: "token of web-1 refused"}}
	// A route rule's answer is the operator's own, not a page of the
	// server's.
	delete(out, answeredByRule)
	pol, err := policy.New(policy.Config{
		RateLimits: []policy.RateLimit{{Name: "login", Key: "ip", Rate: 1}},
		Routes:     []policy.Route{{Path: "/x", Policy: &policy.RoutePolicy{RateLimit: "login"}}},
	})
	if err != nil {
		panic("router: test policy: " + err.Error())
	}
	out[refusedRouteLimit] = refusal{kind: refusedRouteLimit, rule: pol.Match("app.test", "/x", http.MethodGet), retry: 2 * time.Second}
	return out
}

// TestEveryRefusalInEveryFormat answers every refusal kind in html, json
// and text, and checks the format, the status, the request id, and that no
// setting, internal address or client name reaches the visitor.
func TestEveryRefusalInEveryFormat(t *testing.T) {
	rt := newRouter(t, Config{})
	formats := []struct {
		name, accept, contentType string
	}{
		{"html", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", "text/html; charset=utf-8"},
		{"json", "application/json", "application/json"},
		{"text", "*/*", "text/plain; charset=utf-8"},
	}
	for kind, ref := range refusalsForTest() {
		for _, f := range formats {
			t.Run(fmt.Sprintf("%d/%s", kind, f.name), func(t *testing.T) {
				r := httptest.NewRequest(http.MethodGet, "http://app.test/x", nil)
				r.Header.Set("Accept", f.accept)
				r.Header.Set(HeaderRequestID, "req-42")
				w := httptest.NewRecorder()
				var rec telemetry.Request
				rt.answer(w, r, &rec, "app.test", ref)
				body := w.Body.String()
				if want := ref.status(); w.Code != want {
					t.Errorf("status = %d, want %d", w.Code, want)
				}
				if got := w.Header().Get("Content-Type"); got != f.contentType {
					t.Errorf("Content-Type = %q, want %q", got, f.contentType)
				}
				for _, s := range append(leakSettings(), "web-1", "10.0.0.7") {
					if strings.Contains(body, s) {
						t.Errorf("body names %q: %s", s, body)
					}
				}
				if ipv4.MatchString(body) {
					t.Errorf("body has an address: %s", body)
				}
				switch f.name {
				case "json":
					var got errorJSON
					if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
						t.Fatalf("json body %q: %v", body, err)
					}
					if got.Status != w.Code || got.RequestID != "req-42" || got.Error == "" {
						t.Errorf("json = %+v, want status %d, request_id req-42 and an error", got, w.Code)
					}
				case "html":
					if !strings.Contains(body, "<!doctype html>") || !strings.Contains(body, "req-42") || !strings.Contains(body, "<style>") {
						t.Errorf("html body is not the built-in page with the request id: %s", body)
					}
				case "text":
					if !strings.HasPrefix(body, "aperio: ") {
						t.Errorf("text body = %q, want aperio: and the reason", body)
					}
				}
			})
		}
	}
}

func TestRetryAfterOnEvery429(t *testing.T) {
	rt := newRouter(t, Config{})
	for k := range numLimitKinds {
		w := httptest.NewRecorder()
		var rec telemetry.Request
		rt.refuse(w, httptest.NewRequest(http.MethodGet, "http://app.test/", nil), &rec, k)
		want := "1"
		if k == limitTokenQuota || k == limitOrgQuota {
			want = "" // a quota refills only with its period
		}
		if got := w.Header().Get("Retry-After"); w.Code != 429 || got != want {
			t.Errorf("429 %s = %d with Retry-After %q, want 429 with %q", limitInfo[k].kind, w.Code, got, want)
		}
	}
	if got := limitHeader[limitTokenRate][0]; got != "token-rate; setting=token.max_rps" {
		t.Errorf("x-aperio-limit of token-rate = %q, want token-rate; setting=token.max_rps", got)
	}
}

func TestOperatorErrorPages(t *testing.T) {
	pages := []ErrorPage{
		{Status: 503, HTML: "default {hostname}: {reason} until {until} ({request_id})"},
		{Status: 503, Hostname: "*.example.com", HTML: "wildcard {hostname}"},
		{Status: 503, Hostname: "Shop.Example.com", HTML: "exact {hostname}"},
		{Status: 502, Hostname: "*", HTML: "gone {hostname}"},
	}
	until := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	rt := newRouter(t, Config{ErrorPages: pages, Now: func() time.Time { return until.Add(-time.Hour) }})
	rt.reg.SetMaintenance([]Maintenance{{Hostname: "*.example.com", Reason: `<script>alert("x")</script>`, Until: until}, {Hostname: "other.test"}})
	tests := []struct {
		host, requestID string
		status          int
		want            string
	}{
		{"shop.example.com", "r1", 503, "exact shop.example.com"},
		{"a.b.example.com", "r2", 503, "wildcard a.b.example.com"},
		{"other.test", `<i>"r3"</i>`, 503, "default other.test: other.test is down for maintenance until  (&lt;i&gt;&#34;r3&#34;&lt;/i&gt;)"},
		{"nobody.test", "r4", 502, "gone nobody.test"},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Host = tt.host
		r.Header.Set("Accept", "text/html")
		r.Header.Set(HeaderRequestID, tt.requestID)
		w := httptest.NewRecorder()
		rt.ServeHTTP(w, r)
		if w.Code != tt.status || w.Body.String() != tt.want {
			t.Errorf("GET %s = %d %q, want %d %q", tt.host, w.Code, w.Body.String(), tt.status, tt.want)
		}
	}
	// The wildcard's reason is escaped where the template shows it.
	rt2 := newRouter(t, Config{ErrorPages: []ErrorPage{{Status: 503, HTML: "{reason}|{until}"}}, Now: func() time.Time { return until.Add(-time.Hour) }})
	rt2.reg.SetMaintenance([]Maintenance{{Hostname: "*.example.com", Reason: `<script>alert("x")</script>`, Until: until}})
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Host = "a.example.com"
	r.Header.Set("Accept", "text/html")
	w := httptest.NewRecorder()
	rt2.ServeHTTP(w, r)
	if want := "a.example.com is down for maintenance: &lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;|2026-12-02T03:00:00Z"; w.Body.String() != want {
		t.Errorf("escaped page = %q, want %q", w.Body.String(), want)
	}
}

func TestParsePage(t *testing.T) {
	tests := []struct {
		in, want, err string
	}{
		{in: "<p>{hostname}</p>", want: "<p>H</p>"},
		{in: "a {{hostname} b", want: "a {hostname} b"},
		{in: "body { color: red } .x{}", want: "body { color: red } .x{}"},
		{in: "{reason}{until}{request_id}", want: "RU<I>"},
		{in: "line1\nline2 {colour}", err: "unknown field {colour} on line 2"},
		{in: "{", want: "{"},
	}
	for _, tt := range tests {
		p, err := parsePage(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("parsePage(%q) error = %v, want %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("parsePage(%q) error = %v", tt.in, err)
			continue
		}
		d := pageData{host: "H", reason: "R", until: "U", requestID: "<I>"}
		want := strings.ReplaceAll(tt.want, "<I>", "&lt;I&gt;")
		if got := string(p.render(&d)); got != want {
			t.Errorf("parsePage(%q).render = %q, want %q", tt.in, got, want)
		}
	}
}

func TestErrorPageCheck(t *testing.T) {
	tests := []struct {
		name string
		page ErrorPage
		err  string
	}{
		{"ok", ErrorPage{Status: 504, Hostname: "*.x.test", HTML: "{hostname}"}, ""},
		{"bad status", ErrorPage{Status: 404, HTML: "x"}, "status 404"},
		{"bad hostname", ErrorPage{Status: 502, Hostname: "a b", HTML: "x"}, "invalid hostname"},
		{"too large", ErrorPage{Status: 502, HTML: strings.Repeat("x", MaxErrorPageBytes+1)}, "larger than"},
		{"unknown field", ErrorPage{Status: 502, HTML: "{ip}"}, "unknown field {ip}"},
	}
	for _, tt := range tests {
		err := tt.page.Check()
		if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("%s: Check() = %v, want %q", tt.name, err, tt.err)
		}
	}
	many := make([]ErrorPage, MaxErrorPages+1)
	for i := range many {
		many[i] = ErrorPage{Status: 502, HTML: "x"}
	}
	if _, err := New(Config{ErrorPages: many}); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("New with %d pages = %v, want an error", len(many), err)
	}
}

func TestNegotiate(t *testing.T) {
	tests := []struct {
		accept []string
		want   pageFormat
	}{
		{nil, formatText},
		{[]string{"*/*"}, formatText},
		{[]string{"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}, formatHTML},
		{[]string{"application/json"}, formatJSON},
		{[]string{"application/problem+json"}, formatJSON},
		{[]string{"application/json, text/html;q=0.5"}, formatJSON},
		{[]string{"text/html;q=0, application/json"}, formatJSON},
		{[]string{"TEXT/HTML"}, formatHTML},
		{[]string{"text/html;q=bogus"}, formatText},
		{[]string{"text/plain"}, formatText},
		{[]string{strings.Repeat("text/plain,", maxAcceptRanges) + "text/html"}, formatText}, // past the bound
	}
	for _, tt := range tests {
		if got := negotiate(tt.accept); got != tt.want {
			t.Errorf("negotiate(%q) = %s, want %s", tt.accept, got, tt.want)
		}
	}
}

// TestHostileAccept: a huge Accept header is answered, cheaply.
func TestHostileAccept(t *testing.T) {
	rt := newRouter(t, Config{})
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Host = "nobody.test"
	r.Header.Set("Accept", strings.Repeat("a/b;q=0.5;q=x;,", 50_000))
	w := httptest.NewRecorder()
	rt.ServeHTTP(w, r)
	if w.Code != 502 || !strings.HasPrefix(w.Body.String(), "aperio: ") {
		t.Errorf("hostile Accept = %d %q, want 502 in text", w.Code, w.Body.String())
	}
}

func TestMaintenanceWildcardAndTTL(t *testing.T) {
	now := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	rt := newRouter(t, Config{Now: clock})
	rt.reg.update(newConn("a", 1), ann(svc("", "*.example.com", "example.com")))
	rt.reg.SetMaintenance([]Maintenance{
		{Hostname: "*.example.com", Reason: "upgrade", Until: now.Add(90 * time.Second)},
		{Hostname: "keep.example.com", Until: now.Add(-time.Second)}, // ended: the wildcard applies
		{Hostname: "exact.example.com"},                              // no end: wins over the wildcard
	})
	get := func(host string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Host = host
		w := httptest.NewRecorder()
		rt.ServeHTTP(w, r)
		return w
	}
	tests := []struct {
		host, retry, body string
		status            int
	}{
		{"a.example.com", "90", "aperio: a.example.com is down for maintenance: upgrade\n", 503},
		{"a.b.example.com", "90", "aperio: a.b.example.com is down for maintenance: upgrade\n", 503},
		{"keep.example.com", "90", "aperio: keep.example.com is down for maintenance: upgrade\n", 503},
		{"exact.example.com", "300", "aperio: exact.example.com is down for maintenance\n", 503},
		{"example.com", "", "", 200}, // a wildcard needs a label in front
	}
	for _, tt := range tests {
		w := get(tt.host)
		if w.Code != tt.status || w.Header().Get("Retry-After") != tt.retry || tt.body != "" && w.Body.String() != tt.body {
			t.Errorf("GET %s = %d (Retry-After %q) %q, want %d (%q) %q", tt.host, w.Code, w.Header().Get("Retry-After"), w.Body.String(), tt.status, tt.retry, tt.body)
		}
	}
	ex := rt.Explain(t.Context(), "a.example.com", "/", netipZero)
	if ex.Status != 503 || ex.Verdict != "503 maintenance: upgrade, until 2026-12-02T01:01:30Z (Retry-After: 90)" || !strings.Contains(ex.ErrorPage, "built-in") {
		t.Errorf("Explain in maintenance = %d %q (page %q), want 503 with reason and end, built-in page", ex.Status, ex.Verdict, ex.ErrorPage)
	}
	now = now.Add(89500 * time.Millisecond)
	if w := get("a.example.com"); w.Code != 503 || w.Header().Get("Retry-After") != "1" {
		t.Errorf("half a second before the end = %d (Retry-After %q), want 503 with 1", w.Code, w.Header().Get("Retry-After"))
	}
	now = now.Add(time.Second)
	if w := get("a.example.com"); w.Code != 200 {
		t.Errorf("after the end = %d %q, want 200: the entry ends by itself", w.Code, w.Body.String())
	}
	if w := get("exact.example.com"); w.Code != 503 {
		t.Errorf("entry without an end = %d, want 503", w.Code)
	}
}

func TestMaintenanceWindowAcrossDST(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatalf("load zone: %v", err)
	}
	// Saturday 22:00 to 03:00 New York time; daylight saving starts on
	// Sunday 2026-03-08 at 02:00 (clocks jump to 03:00), so that night
	// the window lasts 4 hours, the next Saturday 5 again.
	w := MaintenanceWindow{Hostname: "app.test", Weekdays: []time.Weekday{time.Saturday}, Start: 22 * time.Hour, End: 3 * time.Hour, Location: ny, Reason: "backup"}
	if err := w.Check(); err != nil {
		t.Fatalf("Check: %v", err)
	}
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatalf("parse %s: %v", s, err)
		}
		return tm
	}
	tests := []struct {
		now  string
		open bool
		end  string
	}{
		{"2026-03-07T21:59:00-05:00", false, ""},
		{"2026-03-07T22:00:00-05:00", true, "2026-03-08T03:00:00-04:00"},
		{"2026-03-08T01:59:00-05:00", true, "2026-03-08T03:00:00-04:00"},
		{"2026-03-08T03:00:00-04:00", true, "2026-03-08T03:00:00-04:00"}, // replaced below: the end is exclusive
		{"2026-03-08T03:30:00-04:00", false, ""},
		{"2026-03-14T23:00:00-04:00", true, "2026-03-15T03:00:00-04:00"},
		{"2026-03-08T23:00:00-04:00", false, ""}, // Sunday: not a start day
		// Autumn: 2026-11-01 01:00-02:00 happens twice; the window still
		// ends at 03:00 local, an hour later in absolute time.
		{"2026-10-31T22:00:00-04:00", true, "2026-11-01T03:00:00-05:00"},
	}
	tests[3].open, tests[3].end = false, ""
	for _, tt := range tests {
		end, open := w.openAt(at(tt.now))
		if open != tt.open || open && !end.Equal(at(tt.end)) {
			t.Errorf("openAt(%s) = %s, %t, want %s, %t", tt.now, end, open, tt.end, tt.open)
		}
	}
	if got := at("2026-03-08T03:00:00-04:00").Sub(at("2026-03-07T22:00:00-05:00")); got != 4*time.Hour {
		t.Errorf("the DST night's window lasts %s, want 4h", got)
	}

	// Through the router, with its clock.
	now := at("2026-03-07T23:30:00-05:00")
	rt := newRouter(t, Config{MaintenanceWindows: []MaintenanceWindow{w}, Now: func() time.Time { return now }})
	rt.reg.update(newConn("a", 1), ann(svc("", "app.test")))
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Host = "app.test"
	rec := httptest.NewRecorder()
	rt.ServeHTTP(rec, r)
	if rec.Code != 503 || rec.Header().Get("Retry-After") != "9000" || !strings.Contains(rec.Body.String(), "backup") {
		t.Errorf("in the window = %d (Retry-After %q) %q, want 503 with 9000 s left (03:00 EDT is 2.5 h away)", rec.Code, rec.Header().Get("Retry-After"), rec.Body.String())
	}
	now = at("2026-03-08T03:00:00-04:00")
	rec = httptest.NewRecorder()
	rt.ServeHTTP(rec, r)
	if rec.Code != 200 {
		t.Errorf("after the window = %d, want 200", rec.Code)
	}
}

func TestMaintenanceWindowCheck(t *testing.T) {
	tests := []struct {
		w   MaintenanceWindow
		err string
	}{
		{MaintenanceWindow{Hostname: "*.a.test", Start: time.Hour, End: 2 * time.Hour}, ""},
		{MaintenanceWindow{Hostname: "a.test", Start: time.Hour, End: time.Hour}, "same time"},
		{MaintenanceWindow{Hostname: "a.test", Start: 24 * time.Hour, End: time.Hour}, "00:00 to 23:59"},
		{MaintenanceWindow{Hostname: "", Start: 0, End: time.Hour}, "invalid hostname"},
		{MaintenanceWindow{Hostname: "a.test", End: time.Hour, Reason: strings.Repeat("r", MaxMaintenanceReasonBytes+1)}, "longer than"},
	}
	for _, tt := range tests {
		err := tt.w.Check()
		if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("Check(%+v) = %v, want %q", tt.w, err, tt.err)
		}
	}
	for _, s := range []string{"24:00", "1:00", "12:60", "ab:cd", ""} {
		if _, err := ParseTimeOfDay(s); err == nil {
			t.Errorf("ParseTimeOfDay(%q) = nil error, want one", s)
		}
	}
	if d, err := ParseTimeOfDay("23:59"); err != nil || d != 23*time.Hour+59*time.Minute {
		t.Errorf("ParseTimeOfDay(23:59) = %s, %v", d, err)
	}
	if d, err := ParseWeekday("Mon"); err != nil || d != time.Monday {
		t.Errorf("ParseWeekday(Mon) = %s, %v", d, err)
	}
	if _, err := ParseWeekday("funday"); err == nil {
		t.Errorf("ParseWeekday(funday) = nil error, want one")
	}
}

func TestFallbackList(t *testing.T) {
	rt := newRouter(t, Config{Fallbacks: []Fallback{
		{Hostname: "*", URL: "https://status.example.com/"},
		{Hostname: "*.shop.test", URL: "https://mirror.example.com/", PreservePath: true},
		{Hostname: "old.shop.test", URL: "https://new.example.com", Permanent: true, PreservePath: true},
	}})
	tests := []struct {
		host, uri string
		status    int
		location  string
	}{
		{"nobody.test", "/a?b=1", 302, "https://status.example.com/"},
		{"a.shop.test", "/cart?id=7", 302, "https://mirror.example.com/cart?id=7"},
		{"old.shop.test", "/x", 301, "https://new.example.com/x"},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(http.MethodGet, tt.uri, nil)
		r.Host = tt.host
		w := httptest.NewRecorder()
		rt.ServeHTTP(w, r)
		if w.Code != tt.status || w.Header().Get("Location") != tt.location {
			t.Errorf("GET %s%s = %d %q, want %d %q", tt.host, tt.uri, w.Code, w.Header().Get("Location"), tt.status, tt.location)
		}
	}
	if ex := rt.Explain(t.Context(), "a.shop.test", "/cart", netipZero); ex.Status != 302 || ex.Verdict != "302 fallback redirect to https://mirror.example.com/cart" {
		t.Errorf("Explain = %d %q, want the preserved-path redirect", ex.Status, ex.Verdict)
	}
	bad := []Fallback{{Hostname: "a.test", URL: "ftp://x/"}, {Hostname: "a.test", URL: "https://x/"}}
	if _, err := New(Config{Fallbacks: bad}); err == nil || !strings.Contains(err.Error(), "not an absolute http") || !strings.Contains(err.Error(), "another fallback") {
		t.Errorf("New with bad fallbacks = %v, want both problems", err)
	}
}

// netipZero is an unknown visitor.
var netipZero netip.Addr
