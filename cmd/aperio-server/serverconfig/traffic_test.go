package serverconfig

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/aperio-dev/aperio/router"
)

const tokenLine = "server.token: token-0123456789abcdef\n"

func loadFile(t *testing.T, yml string) (Config, error) {
	t.Helper()
	c, _, err := Load(Options{ReadFile: filesOf(map[string]string{File: tokenLine + yml})})
	return c, err
}

func TestTrafficKeysLoad(t *testing.T) {
	c, err := loadFile(t, `
fallbacks:
  - hostname: "*"
    url: https://status.example.com/
  - hostname: "*.shop.example.com"
    url: https://mirror.example.com
    preserve_path: true
    permanent: true
error_pages:
  - status: 503
    hostname: "*.example.com"
    html: "<h1>{hostname} is resting</h1><p>{reason}</p><style>p { color: red }</style>"
  - status: 502
    html: "<p>{request_id}</p>"
maintenance_windows:
  - hostname: app.example.com
    weekdays: [sat, Sunday]
    start: "22:00"
    end: "02:30"
    time_zone: Europe/Berlin
    reason: weekly backup
`)
	if err != nil {
		t.Fatalf("Load() = %v", err)
	}
	wantFallbacks := []router.Fallback{
		{Hostname: "*", URL: "https://status.example.com/"},
		{Hostname: "*.shop.example.com", URL: "https://mirror.example.com", PreservePath: true, Permanent: true},
	}
	if diff := cmp.Diff(wantFallbacks, c.Router.Fallbacks); diff != "" {
		t.Errorf("Router.Fallbacks mismatch (-want +got):\n%s", diff)
	}
	if len(c.Router.ErrorPages) != 2 || c.Router.ErrorPages[0].Hostname != "*.example.com" || c.Router.ErrorPages[1].Status != 502 {
		t.Errorf("Router.ErrorPages = %+v, want the two pages", c.Router.ErrorPages)
	}
	if len(c.Router.MaintenanceWindows) != 1 {
		t.Fatalf("Router.MaintenanceWindows = %+v, want one", c.Router.MaintenanceWindows)
	}
	w := c.Router.MaintenanceWindows[0]
	if w.Location.String() != "Europe/Berlin" || w.Start != 22*time.Hour || w.End != 2*time.Hour+30*time.Minute ||
		!cmp.Equal(w.Weekdays, []time.Weekday{time.Saturday, time.Sunday}) || w.Reason != "weekly backup" {
		t.Errorf("window = %+v, want Sat/Sun 22:00-02:30 Europe/Berlin", w)
	}
	if _, err := router.New(c.Router); err != nil {
		t.Errorf("router.New(loaded config) = %v", err)
	}
}

func TestTrafficKeysErrors(t *testing.T) {
	tests := []struct {
		name, yml string
		want      []string
	}{
		{"unknown template field", "error_pages:\n  - status: 503\n    html: |\n      <p>{hostname}</p>\n      <p>{client}</p>\n",
			[]string{"config: error_pages (aperio-server.yaml:2): entry 0 (line 3): unknown field {client} on line 2 of the template (fields: {hostname}, {reason}, {until}, {request_id})"}},
		{"page status", "error_pages:\n  - status: 404\n    html: x\n",
			[]string{"config: error_pages (aperio-server.yaml:2): entry 0 (line 3): status 404 is not one of 429, 502, 503, 504"}},
		{"page too large", "error_pages:\n  - status: 502\n    html: " + strings.Repeat("x", router.MaxErrorPageBytes+1) + "\n",
			[]string{"config: error_pages (aperio-server.yaml:2): entry 0 (line 3): template of 65537 bytes is larger than 65536"}},
		{"duplicate page", "error_pages:\n  - {status: 502, html: a}\n  - {status: 502, html: b}\n",
			[]string{"config: error_pages (aperio-server.yaml:2): entry 1 (line 4): the same status and hostname as entry 0"}},
		{"unknown page key", "error_pages:\n  - status: 502\n    body: x\n",
			[]string{`config: error_pages (aperio-server.yaml:2): line 4: unknown key "body" (want one of hostname, html, status)`}},
		{"bad time zone", "maintenance_windows:\n  - {hostname: a.example.com, start: \"01:00\", end: \"02:00\", time_zone: Mars/Olympus}\n",
			[]string{`config: maintenance_windows (aperio-server.yaml:2): entry 0 (line 3): time_zone "Mars/Olympus" is not an IANA time zone name`}},
		{"local time zone", "maintenance_windows:\n  - {hostname: a.example.com, start: \"01:00\", end: \"02:00\", time_zone: Local}\n",
			[]string{`config: maintenance_windows (aperio-server.yaml:2): entry 0 (line 3): time_zone "Local" is not an IANA time zone name`}},
		{"bad window", "maintenance_windows:\n  - hostname: a.example.com\n    weekdays: [someday]\n    start: \"25:00\"\n    end: \"1:00\"\n",
			[]string{`config: maintenance_windows (aperio-server.yaml:2): entry 0 (line 3): "someday" is not a day of the week (mon, tue, wed, thu, fri, sat, sun); start: "25:00" is not a time of day from 00:00 to 23:59; end: "1:00" is not a time of day HH:MM`}},
		{"empty window", "maintenance_windows:\n  - {hostname: a.example.com, start: \"01:00\", end: \"01:00\"}\n",
			[]string{`config: maintenance_windows (aperio-server.yaml:2): entry 0 (line 3): start and end are the same time: the window is empty`}},
		{"duplicate fallback", "fallbacks:\n  - {hostname: a.example.com, url: \"https://x.example.com\"}\n  - {hostname: a.example.com, url: \"https://y.example.com\"}\n",
			[]string{`config: fallbacks (aperio-server.yaml:2): entry 1 (line 4): a.example.com already has a fallback (entry 0)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadFile(t, tt.yml)
			diffLines(t, "Load() errors", problems(t, err), tt.want)
		})
	}
}

func TestTrafficKeysFromEnv(t *testing.T) {
	_, _, err := Load(Options{Env: envOf(map[string]string{"APERIO_SERVER_TOKEN": "token-0123456789abcdef", "APERIO_ERROR_PAGES": "503=x"})})
	diffLines(t, "Load() errors", problems(t, err), []string{"config: error_pages (env APERIO_ERROR_PAGES): has no one-line form: set it in the config file"})
}
