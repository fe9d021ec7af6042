package dashboard

import (
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// opsAPI is the admin API as the overview, clients and traffic pages
// call it: the cookie "s=<role>" is a session of that role (csrf
// "tok-<role>"); POSTs need the operator role, as the real API's
// disable and enable do.
type opsAPI struct {
	clients []apitype.ClientInfo
	// ports is GET /ports's answer; nil answers 404.
	ports []apitype.PortInfo
	// stats is GET /stats's answer (JSON); "" answers 404, as a server
	// without the stats endpoint would.
	stats string
	// refuse, when set, is the status and message POSTs are refused with.
	refuseStatus int
	refuseMsg    string
	// calls records every call: method, path and query, CSRF header.
	calls []string
}

func (f *opsAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	role, done := fakeSession(w, r, "")
	if done {
		return
	}
	f.calls = append(f.calls, r.Method+" "+r.URL.RequestURI()+" csrf="+r.Header.Get(apitype.CSRFHeader))
	if r.Method != http.MethodGet {
		if csrfRefused(w, r, role) || roleRefused(w, role, apitype.RoleOperator, "this needs the operator role") {
			return
		}
		switch {
		case f.refuseStatus != 0:
			apiError(w, f.refuseStatus, f.refuseMsg)
		case regexp.MustCompile(`^/aperio/api/clients/[^/]+/(disable|enable|drain)$`).MatchString(r.URL.Path):
			w.WriteHeader(http.StatusNoContent)
		default:
			apiError(w, http.StatusNotFound, "no such endpoint")
		}
		return
	}
	switch r.URL.Path {
	case apitype.Prefix + "/clients":
		json.NewEncoder(w).Encode(f.clients)
	case apitype.Prefix + "/ports":
		if f.ports == nil {
			apiError(w, http.StatusNotFound, "no such endpoint")
			return
		}
		json.NewEncoder(w).Encode(f.ports)
	case apitype.Prefix + "/stats":
		if f.stats == "" {
			apiError(w, http.StatusNotFound, "no such endpoint")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(f.stats))
	default:
		apiError(w, http.StatusNotFound, "no such endpoint")
	}
}

// posts returns the recorded calls other than GETs.
func (f *opsAPI) posts() []string {
	var out []string
	for _, c := range f.calls {
		if !strings.HasPrefix(c, "GET ") {
			out = append(out, c)
		}
	}
	return out
}

var opsNow = time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)

// opsClients are two connections: web-1 with two services (one with an
// AIMD limiter, one ejected), and a disabled worker with a fixed limit.
func opsClients() []apitype.ClientInfo {
	ejected := opsNow.Add(30 * time.Second)
	return []apitype.ClientInfo{
		{ID: "c2", Name: "worker", Hostnames: []string{"jobs.test"}, Path: "/queue", MaxConcurrent: 4, Healthy: false,
			Disabled: true, Weight: 1, RemoteAddr: "10.0.0.9:4242", ConnectedAt: opsNow.Add(-time.Hour),
			Concurrency: &apitype.Concurrency{Mode: "fixed", Desired: 4, Min: 4, Max: 4, Fixed: true}},
		{ID: "c1", Name: "web-1", Hostnames: []string{"app.test", "www.app.test"}, MaxConcurrent: 12, Inflight: 3, Healthy: true,
			Weight: 5, RemoteAddr: "192.0.2.7:5555", ConnectedAt: opsNow.Add(-2 * time.Minute),
			Concurrency: &apitype.Concurrency{Mode: "aimd", Desired: 12, Min: 1, Max: 50}, RefusedBinds: []string{"other.test"}},
		{ID: "c1", Name: "web-1", Hostnames: []string{"api.test"}, Inflight: 0, Healthy: true, Draining: true,
			Weight: 1, RemoteAddr: "192.0.2.7:5555", ConnectedAt: opsNow.Add(-2 * time.Minute), EjectedUntil: &ejected},
	}
}

// opsStats is a /stats answer with two hostnames and the unrouted
// requests.
const opsStats = `{"at":"2026-12-02T04:00:00Z","clients":2,"hostnames":4,"held":7,"scaling_events_1h":3,"hosts":[
 {"hostname":"app.test","windows":{"1m":{"requests":180,"rps":3,"errors":2,"error_rate":0.0111,"p50_ms":4.2,"p99_ms":85,"queue_wait_p99_ms":1.5},
   "5m":{"requests":900},"1h":{"requests":5000,"2xx":4900,"3xx":40,"4xx":50,"5xx":9,"aborted":1}},
   "series":[{"at":1796184000,"requests":30,"2xx":30}]},
 {"hostname":"jobs.test","windows":{"1m":{"requests":30,"rps":0.5,"errors":0,"error_rate":0,"p50_ms":12,"p99_ms":240}},"series":[]},
 {"hostname":"__unrouted","windows":{"1m":{"requests":6,"rps":0.1,"errors":6,"error_rate":1},"1h":{"requests":9,"5xx":9}},"series":[]}
]}`

func newOpsUI(t testing.TB) (*UI, *opsAPI) {
	t.Helper()
	api := &opsAPI{clients: opsClients(), stats: opsStats}
	u, err := New(Config{API: api, Login: &fakeLogin{}, Now: func() time.Time { return opsNow }})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	return u, api
}

// cell returns the text of the element with id in body ("" when none).
func cell(body, id string) string {
	m := regexp.MustCompile(`id="` + regexp.QuoteMeta(id) + `">([^<]*)<`).FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return m[1]
}

func TestOverviewCards(t *testing.T) {
	u, api := newOpsUI(t)
	w := get(t, u, Root, apitype.RoleViewer)
	if w.Code != http.StatusOK {
		t.Fatalf("GET / = %d, body %s", w.Code, w.Body)
	}
	b := w.Body.String()
	// Two connections (web-1's two services are one), four hostnames
	// from /clients; rates summed over the hostnames' last minute, the
	// error rate over their requests (2 of 210: the 6 unrouted ones are
	// visitors' misses, left out), the slowest hostname's latencies.
	for id, want := range map[string]string{
		"clients-count": "2", "hostnames-count": "4", "stat-rps": "3.6", "stat-errors": "1.0%",
		"stat-p50": "12 ms", "stat-p99": "240 ms", "stat-held": "7", "stat-scaling": "3",
	} {
		if got := cell(b, id); got != want {
			t.Errorf("overview card %s = %q, want %q", id, got, want)
		}
	}
	contains(t, "overview", b, "app.test", "jobs.test", "(no route)", "4.2 ms", "85 ms", "1.1%", "<td class=\"num\">0.50</td>", "<td class=\"num\">3.0</td>", `src="/aperio/ui/assets/overview.js"`, "web-1", "worker")
	if strings.Contains(b, "__unrouted") {
		t.Errorf("overview shows the API's pseudo-hostname __unrouted rather than its name")
	}
	if got := strings.Join(api.calls, "; "); got != "GET /aperio/api/clients csrf=; GET /aperio/api/stats csrf=" {
		t.Errorf("overview's API calls = %s", got)
	}
}

func TestOverviewWithoutStats(t *testing.T) {
	u, api := newOpsUI(t)
	api.stats = ""
	w := get(t, u, Root, apitype.RoleViewer)
	if w.Code != http.StatusOK {
		t.Fatalf("GET / with /stats refused = %d, want 200 (the figures are optional); body %s", w.Code, w.Body)
	}
	b := w.Body.String()
	for _, id := range []string{"stat-rps", "stat-errors", "stat-p50", "stat-p99", "stat-held", "stat-scaling"} {
		if got := cell(b, id); got != noFigure {
			t.Errorf("card %s without stats = %q, want %q", id, got, noFigure)
		}
	}
	if got := cell(b, "clients-count"); got != "2" {
		t.Errorf("clients-count without stats = %q, want 2 (from /clients)", got)
	}
	if strings.Contains(b, `role="alert"`) {
		t.Errorf("a missing /stats is shown as an error")
	}
	// /clients refused: the page says so.
	api.clients = nil
	u2, err := New(Config{API: &refusingAPI{opsAPI: api, path: apitype.Prefix + "/clients"}, Login: &fakeLogin{}})
	if err != nil {
		t.Fatal(err)
	}
	w = get(t, u2, Root, apitype.RoleViewer)
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "registry unavailable") {
		t.Errorf("GET / with /clients failing = %d, want 503 and the API's message; body %s", w.Code, w.Body)
	}
}

// refusingAPI answers path with 503 and passes the rest to opsAPI.
type refusingAPI struct {
	*opsAPI
	path string
}

func (f *refusingAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == f.path {
		apiError(w, http.StatusServiceUnavailable, "registry unavailable")
		return
	}
	f.opsAPI.ServeHTTP(w, r)
}

func TestClientsPageRoles(t *testing.T) {
	u, _ := newOpsUI(t)
	vb := render(t, u, "clients", apitype.RoleViewer)
	contains(t, "clients page", vb,
		"web-1", "worker", "app.test, www.app.test", "<code>/queue</code>", "12 <span class=\"muted\">(aimd 1–50)</span>",
		"4 <span class=\"muted\">(fixed)</span>", "192.0.2.7:5555", "other.test", `datetime="2026-12-02T04:00:30Z"`,
		`datetime="2026-12-02T03:58:00Z"`, `src="/aperio/ui/assets/clients.js"`,
	)
	for _, bad := range []string{`data-action="disable"`, `data-action="enable"`, "/aperio/ui/clients/disable", "/aperio/ui/clients/enable"} {
		if strings.Contains(vb, bad) {
			t.Errorf("a viewer's clients page has a write control: %q", bad)
		}
	}
	op := get(t, u, UIPrefix+"clients", apitype.RoleOperator).Body.String()
	// One action per connection: web-1's two services share one
	// disable button; the disabled worker offers enable.
	if n := strings.Count(op, `data-action="disable"`); n != 1 {
		t.Errorf("operator's page has %d disable buttons, want 1 (one per connection)", n)
	}
	if n := strings.Count(op, `data-action="enable"`); n != 1 {
		t.Errorf("operator's page has %d enable buttons, want 1", n)
	}
	contains(t, "operator's clients page", op,
		`action="/aperio/ui/clients/disable"`, `<input type="hidden" name="id" value="c1">`, `name="csrf" value="tok-operator"`,
		`data-confirm="Disable web-1?`, `aria-label="Enable worker"`,
	)
	// A service whose ejection ended shows as not ejected.
	later, api := newOpsUI(t)
	past := opsNow.Add(-time.Second)
	api.clients = []apitype.ClientInfo{{ID: "c3", Name: "late", EjectedUntil: &past}}
	if b := get(t, later, UIPrefix+"clients", apitype.RoleViewer).Body.String(); strings.Contains(b, "until <time") {
		t.Errorf("an ejection that ended shows as current")
	}
}

// TestClientsPagePorts: the clients page lists the public ports GET
// /ports answers (the API scopes them to the caller), and shows no ports
// section when the server has none or cannot say.
func TestClientsPagePorts(t *testing.T) {
	u, api := newOpsUI(t)
	if b := render(t, u, "clients", apitype.RoleViewer); strings.Contains(b, `id="ports-table"`) {
		t.Fatal("a ports table without ports (GET /ports answered 404)")
	}
	api.ports = []apitype.PortInfo{{Port: 2222, Protocol: "tcp", Names: []string{"ssh", "ssh-2"}, Open: 3, BytesIn: 1200, BytesOut: 3400, Refused: 1},
		{Port: 5353, Protocol: "udp", Names: []string{"<dns>"}, Dropped: 7}}
	b := render(t, u, "clients", apitype.RoleViewer)
	contains(t, "clients page with ports", b, `id="ports-table"`, `data-port="2222/tcp"`, "ssh, ssh-2", `<td class="num">3</td>`,
		`<td class="num">3400</td>`, `data-port="5353/udp"`, "&lt;dns&gt;", `<td class="num">7</td>`, "Public ports")
	if strings.Contains(b, "<dns>") {
		t.Error("an entry name is not escaped")
	}
}

func TestClientsActions(t *testing.T) {
	for _, verb := range []string{"disable", "enable", "drain"} {
		t.Run(verb, func(t *testing.T) {
			u, api := newOpsUI(t)
			w := post(t, u, UIPrefix+"clients/"+verb, apitype.RoleOperator, url.Values{"csrf": {"tok-operator"}, "id": {"c1"}})
			if w.Code != http.StatusSeeOther || w.Header().Get("Location") != UIPrefix+"clients?done="+verb {
				t.Fatalf("POST %s = %d %q, want 303 back to the page", verb, w.Code, w.Header().Get("Location"))
			}
			if got, want := strings.Join(api.posts(), "; "), "POST /aperio/api/clients/c1/"+verb+" csrf=tok-operator"; got != want {
				t.Errorf("API calls = %q, want %q", got, want)
			}
			done := get(t, u, UIPrefix+"clients?done="+verb, apitype.RoleOperator).Body.String()
			if want := map[string]string{"disable": "The client is disabled", "enable": "The client is enabled again", "drain": "The client was asked to drain"}[verb]; !strings.Contains(done, want) {
				t.Errorf("page after %s lacks %q", verb, want)
			}
		})
	}
}

func TestClientsActionHostileID(t *testing.T) {
	u, api := newOpsUI(t)
	for _, id := range []string{"", "a/b", "..", "../tokens", "c1/../../tokens", "a%2Fb", "a b", "a?x=1", "a#b", ".", "c1\n", strings.Repeat("a", maxClientID+1), "ü"} {
		w := post(t, u, UIPrefix+"clients/disable", apitype.RoleOperator, url.Values{"csrf": {"tok-operator"}, "id": {id}})
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "That is not a client id.") {
			t.Errorf("disable id %.40q = %d, want 400 with the message", id, w.Code)
		}
	}
	if p := api.posts(); len(p) != 0 {
		t.Errorf("refused ids reached the API: %v", p)
	}
	for _, id := range []string{"c1", "0123456789abcdef", "a.b", "node-1_x:2"} {
		if !validClientID(id) {
			t.Errorf("validClientID(%q) = false, want true", id)
		}
	}
}

func TestClientsActionRefused(t *testing.T) {
	u, api := newOpsUI(t)
	// A viewer has no button, and a forged form is refused by the API.
	w := post(t, u, UIPrefix+"clients/disable", apitype.RoleViewer, url.Values{"csrf": {"tok-viewer"}, "id": {"c1"}})
	if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "this needs the operator role") {
		t.Errorf("viewer disable = %d, want 403 with the API's message; body %s", w.Code, w.Body)
	}
	api.refuseStatus, api.refuseMsg = http.StatusNotFound, `client "c9" not found`
	w = post(t, u, UIPrefix+"clients/disable", apitype.RoleOperator, url.Values{"csrf": {"tok-operator"}, "id": {"c9"}})
	if w.Code != http.StatusNotFound || !strings.Contains(w.Body.String(), "client &#34;c9&#34; not found") {
		t.Errorf("disable of a gone client = %d, want 404 with the API's message; body %s", w.Code, w.Body)
	}
	if !strings.Contains(w.Body.String(), "web-1") {
		t.Errorf("the page after a refusal does not list the clients again")
	}
}

func TestTrafficPage(t *testing.T) {
	u, api := newOpsUI(t)
	b := render(t, u, "traffic?hostname=App.Test&status=5xx&path=%2Fapi", apitype.RoleViewer)
	contains(t, "traffic page", b,
		`id="f-hostname" name="hostname"`, `value="app.test"`, `<option value="5xx" selected>`, `value="/api"`,
		`<option value="app.test">`, `<option value="jobs.test">`, `id="chart-rps" role="img" aria-label=`,
		`id="chart-status" role="img" aria-label=`, `<tbody id="tail">`, `id="tail-pause"`, `aria-pressed="false"`,
		`src="/aperio/ui/assets/traffic.js"`, "4900", "85 ms", "900",
	)
	// The table shows the filtered hostname only; the datalist offers
	// every named one, not the pseudo-hostnames.
	if strings.Contains(b, "<td>jobs.test</td>") || strings.Contains(b, `<option value="__unrouted">`) {
		t.Errorf("traffic page's table ignores the hostname filter or offers a pseudo-hostname")
	}
	if got := strings.Join(api.calls, "; "); got != "GET /aperio/api/stats csrf=" {
		t.Errorf("traffic's API calls = %s", got)
	}
	api.stats = ""
	if b := get(t, u, UIPrefix+"traffic", apitype.RoleViewer); b.Code != http.StatusOK || !strings.Contains(b.Body.String(), "not available right now") {
		t.Errorf("traffic without /stats = %d, want 200 saying the figures are missing", b.Code)
	}
}

func TestTrafficHostileFilter(t *testing.T) {
	for name, c := range map[string]struct{ query, msg string }{
		"long-hostname": {"hostname=" + strings.Repeat("a", 300), "not a hostname"},
		"wildcard":      {"hostname=*.app.test", "not a hostname"},
		"ip":            {"hostname=127.0.0.1", "not a hostname"},
		"slash":         {"hostname=a%2Fb", "not a hostname"},
		"status":        {"status=6xx", "must be 2xx"},
		"status-inject": {"status=%3Cscript%3E", "must be 2xx"},
		"long-path":     {"path=" + strings.Repeat("x", maxPathFilter+1), "at most 256"},
		"control-path":  {"path=%2Fa%0Db", "at most 256"},
		"bad-utf8":      {"path=%ff", "at most 256"},
	} {
		t.Run(name, func(t *testing.T) {
			u, api := newOpsUI(t)
			w := get(t, u, UIPrefix+"traffic?"+c.query, apitype.RoleViewer)
			if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), c.msg) {
				t.Errorf("GET traffic?%.40s = %d, want 400 with %q", c.query, w.Code, c.msg)
			}
			if len(api.calls) != 0 {
				t.Errorf("a refused filter reached the API: %v", api.calls)
			}
			if strings.Contains(w.Body.String(), "<script>") {
				t.Errorf("the refused filter is echoed unescaped")
			}
		})
	}
}

func TestOpsPagesInGerman(t *testing.T) {
	u, _ := newOpsUI(t)
	for p, want := range map[string][]string{
		Root:                 {"Übersicht", "Anfragen/s", "(keine Route)"},
		UIPrefix + "clients": {"Verbunden seit", "Deaktivieren", "worker aktivieren", "(fest)"},
		UIPrefix + "traffic": {"Verkehr", "Live-Protokoll", "Anhalten", "abgebrochen"},
	} {
		w := get(t, u, p, apitype.RoleOperator, "Accept-Language", "de")
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `lang="de"`) {
			t.Errorf("German GET %s = %d", p, w.Code)
		}
		for _, s := range want {
			if !strings.Contains(w.Body.String(), s) {
				t.Errorf("German %s lacks %q", p, s)
			}
		}
	}
}

// TestOpsMenu checks the pages' places in the menu: overview, clients,
// traffic, in that order, for every role.
func TestOpsMenu(t *testing.T) {
	u, _ := newOpsUI(t)
	b := get(t, u, UIPrefix+"traffic", apitype.RoleViewer).Body.String()
	i, j, k := strings.Index(b, `href="/aperio/"`), strings.Index(b, `href="/aperio/ui/clients"`), strings.Index(b, `href="/aperio/ui/traffic" aria-current="page"`)
	if i < 0 || j < i || k < j {
		t.Errorf("menu order: overview at %d, clients at %d, traffic (current) at %d", i, j, k)
	}
}

// TestOpsScriptsBuildNoMarkup keeps the ops pages' scripts from parsing
// markup: they build the DOM with el() and textContent only.
func TestOpsScriptsBuildNoMarkup(t *testing.T) {
	for _, f := range []string{"overview.js", "clients.js", "traffic.js", "chart.js", "figures.js"} {
		b, err := os.ReadFile(filepath.Join("assets", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", ".style."} {
			if strings.Contains(string(b), bad) {
				t.Errorf("assets/%s uses %s", f, bad)
			}
		}
	}
}

// FuzzClientsActionID: any id in the disable form is either refused (400,
// no call) or one POST to /clients/{id}/disable whose id is a single path
// segment equal to the form's.
func FuzzClientsActionID(f *testing.F) {
	for _, s := range []string{"c1", "0123456789abcdef", "a/b", "..", "../tokens", "a%2Fb", "a?x", "", "a.b", "ü"} {
		f.Add(s)
	}
	u, api := newOpsUI(f)
	seg := regexp.MustCompile(`^POST /aperio/api/clients/([^/?#]+)/disable csrf=tok-operator$`)
	f.Fuzz(func(t *testing.T, id string) {
		api.calls = nil
		w := post(t, u, UIPrefix+"clients/disable", apitype.RoleOperator, url.Values{"csrf": {"tok-operator"}, "id": {id}})
		posts := api.posts()
		switch w.Code {
		case http.StatusBadRequest:
			if len(posts) != 0 {
				t.Fatalf("id %q refused but reached the API: %v", id, posts)
			}
		case http.StatusSeeOther:
			if len(posts) != 1 {
				t.Fatalf("id %q: API calls %v, want one", id, posts)
			}
			m := seg.FindStringSubmatch(posts[0])
			if m == nil {
				t.Fatalf("id %q: call %q is not one POST to /clients/{id}/disable", id, posts[0])
			}
			if got, err := url.PathUnescape(m[1]); err != nil || got != id {
				t.Fatalf("id %q: the call names %q", id, got)
			}
		default:
			t.Fatalf("id %q: POST = %d, want 303 or 400", id, w.Code)
		}
	})
}

// FuzzTrafficFilter: any filter is either a 400 with no API call, or the
// page with its one /stats call.
func FuzzTrafficFilter(f *testing.F) {
	f.Add("app.test", "5xx", "/api")
	f.Add("*.x", "", "")
	f.Add("", "6xx", "")
	f.Add("", "", "a\x00b")
	f.Add(strings.Repeat("a", 300), "aborted", "")
	u, api := newOpsUI(f)
	f.Fuzz(func(t *testing.T, host, status, path string) {
		api.calls = nil
		q := url.Values{"hostname": {host}, "status": {status}, "path": {path}}.Encode()
		w := get(t, u, UIPrefix+"traffic?"+q, apitype.RoleViewer)
		switch w.Code {
		case http.StatusBadRequest:
			if len(api.calls) != 0 {
				t.Fatalf("filter %q refused but reached the API: %v", q, api.calls)
			}
		case http.StatusOK:
			if len(api.calls) != 1 || api.calls[0] != "GET /aperio/api/stats csrf=" {
				t.Fatalf("filter %q: API calls %v, want one GET /stats", q, api.calls)
			}
		default:
			t.Fatalf("filter %q: GET = %d, want 200 or 400", q, w.Code)
		}
	})
}

// TestTrafficTailWaiting: the live tail is not an empty table: the server
// renders a row saying it waits for requests and that only the ones after
// the page loaded show (traffic.js replaces it with the first).
func TestTrafficTailWaiting(t *testing.T) {
	u, _ := newOpsUI(t)
	contains(t, "traffic page", render(t, u, "traffic", apitype.RoleViewer),
		`<tbody id="tail">
      <tr id="tail-waiting"><td colspan="10" class="muted">Waiting for requests… Only requests that arrive after this page loaded are shown.</td></tr>`)
	contains(t, "German traffic page", render(t, u, "traffic", apitype.RoleViewer, "Accept-Language", "de"), `id="tail-waiting"`, "Warten auf Anfragen")
}

// TestTrafficWindowsAndUnrouted: the hostnames' table names its windows
// over its columns (last minute, last hour), and the requests no bind
// matched show no error rate (a dash), with a note saying why, on the
// traffic page and the overview.
func TestTrafficWindowsAndUnrouted(t *testing.T) {
	u, _ := newOpsUI(t)
	b := render(t, u, "traffic", apitype.RoleViewer)
	contains(t, "traffic page", b,
		`<th scope="colgroup" colspan="5" class="window" id="win-1m">Last minute</th>`,
		`<th scope="colgroup" colspan="5" class="window" id="win-1h">Last hour</th>`,
		`<span class="muted">(no route)</span></td>
        <td class="num">0.10</td><td class="num">—</td>`,
		`id="unrouted-note"`, "left out of the error rates")
	lacks(t, "traffic page", b, "100.0%")
	o := get(t, u, Root, apitype.RoleViewer).Body.String()
	contains(t, "overview", o, `<span class="muted">(no route)</span></td><td class="num">0.10</td><td class="num">—</td>`)
	lacks(t, "overview", o, "100.0%")
}
