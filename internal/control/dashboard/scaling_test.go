package dashboard

import (
	"encoding/json"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// fakeScalingAPI answers the admin API's scaling routes as the real one
// does for a caller of organization "o1": the cookie "s=<role>" is the
// session (csrf "tok-<role>"), a record of another organization answers
// 404 like an unknown one, DELETE needs operator and the CSRF header.
type fakeScalingAPI struct {
	records []apitype.ScalingRecord
	// history is each record's decisions and series by ID.
	history map[string]apitype.ScalingRecordDetail
	// calls records every call but whoami: method, path and CSRF header.
	calls []string
}

func (f *fakeScalingAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	role, done := fakeSession(w, r, "o1")
	if done {
		return
	}
	f.calls = append(f.calls, r.Method+" "+r.URL.Path+" csrf="+r.Header.Get(apitype.CSRFHeader))
	if r.URL.Path == apitype.Prefix+"/scaling" && r.Method == http.MethodGet {
		var mine []apitype.ScalingRecord
		for _, rec := range f.records {
			if rec.OrgID == "o1" {
				mine = append(mine, rec)
			}
		}
		json.NewEncoder(w).Encode(mine)
		return
	}
	id, ok := strings.CutPrefix(r.URL.Path, apitype.Prefix+"/scaling/")
	if !ok {
		apiError(w, http.StatusNotFound, "no such endpoint")
		return
	}
	var rec *apitype.ScalingRecord
	for i := range f.records {
		if f.records[i].ID == id && f.records[i].OrgID == "o1" {
			rec = &f.records[i]
		}
	}
	switch r.Method {
	case http.MethodGet:
		if rec == nil {
			apiError(w, http.StatusNotFound, "scaling record "+strconv.Quote(id)+" not found")
			return
		}
		d := f.history[id]
		d.ScalingRecord = *rec
		json.NewEncoder(w).Encode(d)
	case http.MethodDelete:
		if csrfRefused(w, r, role) || roleRefused(w, role, apitype.RoleOperator, "this needs role operator") {
			return
		}
		if rec == nil {
			apiError(w, http.StatusNotFound, "scaling record "+strconv.Quote(id)+" not found")
			return
		}
		w.WriteHeader(http.StatusNoContent)
	default:
		apiError(w, http.StatusMethodNotAllowed, "method not allowed")
	}
}

func fptr(f float64) *float64 { return &f }

// scalingT0 is the first sample's time of the fixtures.
var scalingT0 = time.Date(2026, 11, 29, 19, 22, 0, 0, time.UTC)

func newScalingUI(t testing.TB) (*UI, *fakeScalingAPI) {
	t.Helper()
	last := scalingT0.Add(-time.Minute)
	api := &fakeScalingAPI{
		records: []apitype.ScalingRecord{
			{ID: "scl_a", Hostname: "app.test", Path: "/api", OrgID: "o1", URL: "https://hooks.example:8443/scale?token=HOOKSECRET",
				Min: 1, Max: 5, TargetUtilization: 0.8, ColdStart: "45s", Window: "30s", Cooldown: "1m0s",
				Instances: 2, Capacity: 20, Inflight: 17, Utilization: fptr(0.85),
				LastCallAt: &last, LastReason: apitype.ScalingActionScaleOut, LastStatus: 202},
			{ID: "scl_b", Hostname: "broken.test", OrgID: "o1", URL: "http://10.0.0.9/hook", Min: 1, Max: 1, TargetUtilization: 0.5,
				Disarmed: true, ConsecutiveFailures: 5, LastError: "provider answered 500"},
			{ID: "scl_empty", Hostname: "idle.test", OrgID: "o1", URL: "https://p.example/", Min: 0, Max: 2, TargetUtilization: 0.7},
			{ID: "scl_nocap", Hostname: "nocap.test", OrgID: "o1", URL: "https://p.example/", Min: 0, Max: 2, TargetUtilization: 0.7},
			{ID: "scl_other", Hostname: "other-org.test", OrgID: "o2", URL: "https://o2.example/", Min: 1, Max: 2, TargetUtilization: 0.7},
		},
		history: map[string]apitype.ScalingRecordDetail{
			"scl_a": {
				Series: []apitype.ScalingPoint{
					{At: scalingT0, Instances: 2, Capacity: 20, Inflight: 0, Utilization: fptr(0)},
					{At: scalingT0.Add(time.Second), Instances: 2, Capacity: 20, Inflight: 10, Utilization: fptr(0.5)},
					{At: scalingT0.Add(2 * time.Second), Instances: 2, Capacity: 20, Inflight: 20, Utilization: fptr(1)},
				},
				Decisions: []apitype.ScalingDecision{{
					Seq: 7, RecordID: "scl_a", At: scalingT0.Add(-time.Minute), Action: apitype.ScalingActionScaleOut,
					Reason: "utilization at or above target for a whole window", Samples: []float64{0.85, 0.9, 0.95},
					SampleCount: 16, Current: 2, Desired: 3, Outcome: apitype.ScalingOutcomeFailed, Status: 503, Error: "provider answered 503",
				}, {
					Seq: 6, RecordID: "scl_a", At: scalingT0.Add(-2 * time.Minute), Action: apitype.ScalingActionNone,
					Reason: "held by the cooldown", Current: 2, Desired: 2, Outcome: apitype.ScalingOutcomeHeld, Repeats: 41,
				}},
			},
			"scl_nocap": {Series: []apitype.ScalingPoint{{At: scalingT0}, {At: scalingT0.Add(time.Second)}}},
		},
	}
	u, err := New(Config{API: api, Login: &fakeLogin{}})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	return u, api
}

const disarmAction = `action="/aperio/ui/scaling/disarm"`

func TestScalingListRenders(t *testing.T) {
	u, api := newScalingUI(t)
	for _, role := range []string{apitype.RoleViewer, apitype.RoleOperator} {
		t.Run(role, func(t *testing.T) {
			b := render(t, u, "scaling", role)
			contains(t, "list", b,
				`href="/aperio/ui/scaling?id=scl_a"`, "app.test/api", "hooks.example:8443", "1–5",
				"85% / 80%", `<span class="badge ok">armed</span>`,
				`href="/aperio/ui/scaling?id=scl_b"`, `<span class="badge bad">disarmed</span>`, `<td class="num">5</td>`,
				"2026-11-29 19:21:00Z", "scale out", "202", "never called",
			)
			for _, leak := range []string{"HOOKSECRET", "/scale?", "other-org.test", disarmAction} {
				if strings.Contains(b, leak) {
					t.Errorf("list shows %q", leak)
				}
			}
		})
	}
	if want := "GET /aperio/api/scaling csrf="; len(api.calls) != 2 || api.calls[0] != want {
		t.Errorf("API calls = %q, want two of %q", api.calls, want)
	}
}

func TestScalingListEmptyAndRefused(t *testing.T) {
	u, api := newScalingUI(t)
	api.records = []apitype.ScalingRecord{{ID: "", Hostname: "bad.test", OrgID: "o1", Disarmed: true, Refused: "hook URL refused by the outbound policy"}}
	b := get(t, u, UIPrefix+"scaling", apitype.RoleViewer).Body.String()
	if strings.Contains(b, `href="/aperio/ui/scaling?id=`) {
		t.Errorf("a bind without a record links to a detail")
	}
	if !strings.Contains(b, `title="hook URL refused by the outbound policy"`) || !strings.Contains(b, "declaration refused") {
		t.Errorf("the refused declaration is not shown")
	}
	api.records = nil
	if b := get(t, u, UIPrefix+"scaling", apitype.RoleViewer).Body.String(); !strings.Contains(b, "No scaling records") {
		t.Errorf("empty list lacks its message")
	}
}

func TestScalingDetailRoles(t *testing.T) {
	u, _ := newScalingUI(t)
	for _, c := range []struct {
		role   string
		disarm bool
	}{{apitype.RoleViewer, false}, {apitype.RoleOperator, true}, {apitype.RoleAdmin, true}} {
		t.Run(c.role, func(t *testing.T) {
			b := render(t, u, "scaling?id=scl_a", c.role)
			contains(t, "detail", b,
				`data-id="scl_a" data-seq="7"`, `data-field="instances">2<`, `data-field="capacity">20<`, `data-field="inflight">17<`,
				`data-field="utilization">85%<`, "hooks.example:8443", "45s", "1m0s",
				// the decisions, newest first
				"utilization at or above target for a whole window", "2 → 3", `<span class="bad">failed</span>`,
				"provider answered 503", "16 samples", `aria-label="85% 90% 95%"`, "held by the cooldown", "×41",
				`src="/aperio/ui/assets/scaling.js"`,
				// the live state is a badge, as on the other pages
				`<span id="scaling-live" class="badge muted" role="status"`,
			)
			if strings.Index(b, "2 → 3") > strings.Index(b, "2 → 2") {
				t.Errorf("decisions are not newest first")
			}
			if got := strings.Contains(b, disarmAction); got != c.disarm {
				t.Errorf("disarm form shown = %v, want %v", got, c.disarm)
			}
			if c.disarm {
				contains(t, "disarm form", b, `name="id" value="scl_a"`, `name="csrf" value="tok-`+c.role+`"`, `data-confirm="Disarm this scaling record?`)
			}
		})
	}
}

// TestScalingDetailChart checks the chart the detail draws for a known
// series: utilization 0, 0.5 and 1 a second apart across the plot
// (x 44 to 1184, y 150 at 0% to 10 at 100%), the target 0.8 at y 38.
func TestScalingDetailChart(t *testing.T) {
	u, _ := newScalingUI(t)
	b := get(t, u, UIPrefix+"scaling?id=scl_a", apitype.RoleViewer).Body.String()
	contains(t, "chart", b,
		`<svg class="chart" id="scaling-chart" role="img" aria-label="Utilization over the last 3 samples: now 85%, target 80%"`,
		`<polyline points="44,150 614,80 1184,10"/>`,
		`id="scaling-target" x1="44" y1="38" x2="1184" y2="38"`, `stroke-dasharray="6 4"`,
		`cx="1184" cy="10"`, `data-x="44" data-y="10" data-w="1140" data-h="140" data-ymax="1"`, ">0%<", ">50%<", ">100%<", ">19:22:00<", ">19:22:02<", "Target 80%",
	)
	if strings.Count(b, `<polyline`) != 2 { // the chart's one line and one sparkline
		t.Errorf("detail has %d polylines, want 2", strings.Count(b, `<polyline`))
	}
}

func TestScalingDetailNoSamples(t *testing.T) {
	u, _ := newScalingUI(t)
	for id, want := range map[string]string{"scl_empty": "No samples yet.", "scl_nocap": "the pool had no capacity"} {
		w := get(t, u, UIPrefix+"scaling?id="+id, apitype.RoleViewer)
		b := w.Body.String()
		if w.Code != http.StatusOK || !strings.Contains(b, want) {
			t.Errorf("%s: detail = %d, want 200 with %q", id, w.Code, want)
		}
		if strings.Contains(b, "<polyline") || strings.Contains(b, `id="scaling-chart"`) {
			t.Errorf("%s: an empty chart is drawn", id)
		}
		if !strings.Contains(b, "This server has made no decision") {
			t.Errorf("%s: no-decisions message missing", id)
		}
	}
}

func TestScalingHostileID(t *testing.T) {
	u, api := newScalingUI(t)
	for _, id := range []string{"", "..", "../clients", "a/b", "a b", "scl_a?x=1", "scl_a#", "é", "\x00", "%2F", strings.Repeat("a", 65)} {
		w := get(t, u, UIPrefix+"scaling?id="+url.QueryEscape(id), apitype.RoleViewer)
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "not a scaling record") {
			t.Errorf("GET ?id=%q = %d, want 400 with a message", id, w.Code)
		}
		w = post(t, u, UIPrefix+"scaling/disarm", apitype.RoleOperator, url.Values{"csrf": {"tok-operator"}, "id": {id}})
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "not a scaling record") {
			t.Errorf("POST disarm id=%q = %d, want 400 with a message", id, w.Code)
		}
	}
	for _, c := range api.calls {
		if c != "GET /aperio/api/scaling csrf=" { // the list a refused form re-renders
			t.Errorf("a hostile id reached the API: %s", c)
		}
	}
	if w := get(t, u, UIPrefix+"scaling?id="+strings.Repeat("a", 64), apitype.RoleViewer); w.Code != http.StatusNotFound {
		t.Errorf("64-character id = %d, want the API's 404", w.Code)
	}
}

func TestValidScalingID(t *testing.T) {
	for id, want := range map[string]bool{
		"scl_4kq2m7xw3nfbzd5hjt6yrpca2e": true, "a": true, "A-b_9": true, strings.Repeat("z", 64): true,
		"": false, strings.Repeat("z", 65): false, "a.b": false, "a/b": false, "a%2f": false, "ä": false, " a": false,
	} {
		if got := validScalingID(id); got != want {
			t.Errorf("validScalingID(%q) = %v, want %v", id, got, want)
		}
	}
}

func TestScalingOtherOrg(t *testing.T) {
	u, api := newScalingUI(t)
	w := get(t, u, UIPrefix+"scaling?id=scl_other", apitype.RoleAdmin)
	b := w.Body.String()
	if w.Code != http.StatusNotFound || !strings.Contains(b, html.EscapeString(`scaling record "scl_other" not found`)) {
		t.Errorf("another org's record = %d, want the API's 404 and its message; body %s", w.Code, b)
	}
	if strings.Contains(b, "other-org.test") || strings.Contains(b, "o2.example") || strings.Contains(b, disarmAction) {
		t.Errorf("the 404 page shows the other org's record")
	}
	if want := "GET /aperio/api/scaling/scl_other csrf="; len(api.calls) != 1 || api.calls[0] != want {
		t.Errorf("API calls = %q, want [%q]", api.calls, want)
	}
}

func TestScalingDisarm(t *testing.T) {
	u, api := newScalingUI(t)
	w := post(t, u, UIPrefix+"scaling/disarm", apitype.RoleOperator, url.Values{"csrf": {"tok-operator"}, "id": {"scl_a"}}, "Origin", "http://example.com")
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != UIPrefix+"scaling?done=disarm" {
		t.Fatalf("disarm = %d %q, want 303 to the list", w.Code, w.Header().Get("Location"))
	}
	if want := "DELETE /aperio/api/scaling/scl_a csrf=tok-operator"; len(api.calls) != 1 || api.calls[0] != want {
		t.Fatalf("API calls = %q, want [%q]", api.calls, want)
	}
	if b := get(t, u, UIPrefix+"scaling?done=disarm", apitype.RoleOperator).Body.String(); !strings.Contains(b, "The scaling record was disarmed.") {
		t.Errorf("the list after a disarm lacks the done message")
	}

	// The API refuses a viewer (a form built by hand) and an unknown
	// record: the page shows its message with its status.
	for _, c := range []struct {
		role, id string
		code     int
		msg      string
	}{
		{apitype.RoleViewer, "scl_a", http.StatusForbidden, "this needs role operator"},
		{apitype.RoleOperator, "scl_other", http.StatusNotFound, html.EscapeString(`scaling record "scl_other" not found`)},
	} {
		api.calls = nil
		w := post(t, u, UIPrefix+"scaling/disarm", c.role, url.Values{"csrf": {"tok-" + c.role}, "id": {c.id}})
		if w.Code != c.code || !strings.Contains(w.Body.String(), c.msg) {
			t.Errorf("%s disarm %s = %d, want %d with %q", c.role, c.id, w.Code, c.code, c.msg)
		}
		if want := "DELETE /aperio/api/scaling/" + c.id + " csrf=tok-" + c.role; len(api.calls) == 0 || api.calls[0] != want {
			t.Errorf("API calls = %q, want %q first", api.calls, want)
		}
	}

	// Without the CSRF token the framework refuses before the API.
	api.calls = nil
	if w := post(t, u, UIPrefix+"scaling/disarm", apitype.RoleOperator, url.Values{"id": {"scl_a"}}); w.Code != http.StatusForbidden || len(api.calls) != 0 {
		t.Errorf("disarm without token = %d, API calls %q; want 403 and none", w.Code, api.calls)
	}
}

func TestScalingGerman(t *testing.T) {
	u, _ := newScalingUI(t)
	b := get(t, u, UIPrefix+"scaling", apitype.RoleOperator, "Accept-Language", "de").Body.String()
	contains(t, "German list", b, `lang="de"`, "<h1>Autoskalierung</h1>", "Hostname und Pfad", "deaktiviert", "hochskalieren")
	b = get(t, u, UIPrefix+"scaling?id=scl_a", apitype.RoleOperator, "Accept-Language", "de").Body.String()
	contains(t, "German detail", b, "Auslastung über die letzten 3 Messwerte", "Letzte Entscheidungen", "fehlgeschlagen", "zurückgehalten", "Eintrag deaktivieren", "16 Messwerte")
}

func TestUtilChart(t *testing.T) {
	box := plotBox{W: 100, H: 100}
	at := func(s int) time.Time { return scalingT0.Add(time.Duration(s) * time.Second) }
	pt := func(s int, u *float64) apitype.ScalingPoint { return apitype.ScalingPoint{At: at(s), Utilization: u} }
	for _, c := range []struct {
		name    string
		series  []apitype.ScalingPoint
		target  float64
		lines   []string
		targetY float64
		yMax    float64
	}{
		{"known", []apitype.ScalingPoint{pt(0, fptr(0)), pt(1, fptr(0.5)), pt(2, fptr(1))}, 0.8, []string{"0,100 50,50 100,0"}, 20, 1},
		{"by-time", []apitype.ScalingPoint{pt(0, fptr(0.25)), pt(3, fptr(0.5)), pt(4, fptr(0.75))}, 0.5, []string{"0,75 75,50 100,25"}, 50, 1},
		{"gap-breaks-line", []apitype.ScalingPoint{pt(0, fptr(0)), pt(1, fptr(1)), pt(2, nil), pt(3, fptr(0.5)), pt(4, fptr(0.5))}, 1, []string{"0,100 25,0", "75,50 100,50"}, 0, 1},
		{"over-capacity-rescales", []apitype.ScalingPoint{pt(0, fptr(0.5)), pt(1, fptr(1.1))}, 0.8, []string{"0,60 100,12"}, 36, 1.25},
		{"far-over-is-capped", []apitype.ScalingPoint{pt(0, fptr(1e9)), pt(1, fptr(-3))}, 1, []string{"0,0 100,100"}, 75, maxChartY},
		{"single-point", []apitype.ScalingPoint{pt(0, fptr(0.5))}, 0.8, []string{"100,50"}, 20, 1},
		{"same-time", []apitype.ScalingPoint{pt(0, fptr(0)), pt(0, fptr(1))}, 0.8, []string{"0,100 100,0"}, 20, 1},
		{"clock-backwards-clamped", []apitype.ScalingPoint{pt(5, fptr(0)), pt(0, fptr(1)), pt(10, fptr(1))}, 0.8, []string{"0,100 0,0 100,0"}, 20, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			ch := newUtilChart(c.series, c.target, box)
			if ch == nil {
				t.Fatal("newUtilChart = nil")
			}
			if strings.Join(ch.Lines, "|") != strings.Join(c.lines, "|") {
				t.Errorf("Lines = %q, want %q", ch.Lines, c.lines)
			}
			if ch.TargetY != c.targetY || ch.YMax != c.yMax {
				t.Errorf("TargetY, YMax = %v, %v, want %v, %v", ch.TargetY, ch.YMax, c.targetY, c.yMax)
			}
		})
	}
	for name, s := range map[string][]apitype.ScalingPoint{"empty": nil, "unmeasured": {pt(0, nil), pt(1, nil)}} {
		if ch := newUtilChart(s, 0.8, box); ch != nil {
			t.Errorf("newUtilChart(%s) = %+v, want nil", name, ch)
		}
	}
}

// TestUtilChartStaysInBox feeds the chart hostile values: every point
// must stay inside its box.
func TestUtilChartStaysInBox(t *testing.T) {
	box := chartPlot
	var series []apitype.ScalingPoint
	for i, u := range []float64{-1e300, 0, 1e300, 2.5, -0.1, 0.999, 4.0001} {
		series = append(series, apitype.ScalingPoint{At: scalingT0.Add(time.Duration(i*7%5) * time.Hour), Utilization: fptr(u)})
	}
	ch := newUtilChart(series, 3, box)
	coord := regexp.MustCompile(`^(-?[0-9.]+),(-?[0-9.]+)$`)
	for _, l := range ch.Lines {
		for _, p := range strings.Fields(l) {
			m := coord.FindStringSubmatch(p)
			if m == nil {
				t.Fatalf("point %q is not x,y", p)
			}
			x, _ := strconv.ParseFloat(m[1], 64)
			y, _ := strconv.ParseFloat(m[2], 64)
			if x < box.X || x > box.X+box.W || y < box.Y || y > box.Y+box.H {
				t.Errorf("point %s is outside %+v", p, box)
			}
		}
	}
}

func TestSparkline(t *testing.T) {
	if s := newSparkline(nil, 0.8); s != nil {
		t.Errorf("newSparkline(nil) = %+v, want nil", s)
	}
	for _, c := range []struct {
		in          []float64
		target      float64
		points, txt string
		targetY     float64
	}{
		{[]float64{0, 0.5, 1}, 0.75, "0,16 30,8 60,0", "0% 50% 100%", 4},
		{[]float64{0.5}, 0.5, "60,8", "50%", 8},
		{[]float64{0, 2}, 1, "0,16 60,0", "0% 200%", 8},
		{[]float64{0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8}, 0.8, "0,14.4 8.57,12.8 17.14,11.2 25.71,9.6 34.29,8 42.86,6.4 51.43,4.8 60,3.2", "10% 20% 30% … 60% 70% 80%", 3.2},
	} {
		s := newSparkline(c.in, c.target)
		if s.Points != c.points || s.Text != c.txt || s.TargetY != c.targetY {
			t.Errorf("newSparkline(%v, %v) = %q, %q, %v, want %q, %q, %v", c.in, c.target, s.Points, s.Text, s.TargetY, c.points, c.txt, c.targetY)
		}
	}
}

// FuzzScalingDetailID renders the detail for any id: it never panics,
// and either refuses the id with 400 before calling the API or looks up
// exactly that id.
func FuzzScalingDetailID(f *testing.F) {
	for _, seed := range []string{"scl_a", "scl_other", "", "../x", "a/b", "%2F", "é", strings.Repeat("a", 65)} {
		f.Add(seed)
	}
	u, api := newScalingUI(f)
	f.Fuzz(func(t *testing.T, id string) {
		api.calls = nil
		w := get(t, u, UIPrefix+"scaling?id="+url.QueryEscape(id), apitype.RoleViewer)
		if !validScalingID(id) {
			if w.Code != http.StatusBadRequest || len(api.calls) != 0 {
				t.Fatalf("id %q = %d with API calls %q, want 400 and none", id, w.Code, api.calls)
			}
			return
		}
		if want := "GET /aperio/api/scaling/" + id + " csrf="; len(api.calls) != 1 || api.calls[0] != want {
			t.Fatalf("id %q: API calls %q, want [%q]", id, api.calls, want)
		}
		if w.Code != http.StatusOK && w.Code != http.StatusNotFound {
			t.Fatalf("id %q = %d, want 200 or 404", id, w.Code)
		}
	})
}
