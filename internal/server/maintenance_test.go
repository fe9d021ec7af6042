package server_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/server"
	"github.com/aperio-dev/aperio/router"
)

// TestMaintenanceThroughAPI turns maintenance on and off through the admin
// API: the router follows the store's change feed.
func TestMaintenanceThroughAPI(t *testing.T) {
	t.Parallel()
	st := startStack(t, inspectHandler(), nil)
	api := func(method string) int {
		req := newRequest(t, t.Context(), st.server, method, "admin.localhost", "/aperio/api/maintenance/"+appHost, nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, _ := do(t, st.visitor, req)
		return resp.StatusCode
	}
	if code := api("PUT"); code != http.StatusNoContent {
		t.Fatalf("PUT maintenance = %d, want 204", code)
	}
	poll(t, 5*time.Second, func() (bool, string) {
		req := newRequest(t, t.Context(), st.server, "GET", appHost, "/", nil)
		resp, body := do(t, st.visitor, req)
		return resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "",
			"GET during maintenance = " + resp.Status + " " + body + ", want 503 with Retry-After"
	})
	if code := api("DELETE"); code != http.StatusNoContent {
		t.Fatalf("DELETE maintenance = %d, want 204", code)
	}
	poll(t, 5*time.Second, func() (bool, string) {
		status, body := get(t, st.visitor, st.server, appHost, "/")
		return status == http.StatusOK, "GET after maintenance = " + http.StatusText(status) + " " + body + ", want 200"
	})
}

// TestMaintenanceWindowInProcess: a configured window, judged by the
// router's injected clock, answers 503 with the time left while it is
// open and lets requests through once the clock passes its end.
func TestMaintenanceWindowInProcess(t *testing.T) {
	t.Parallel()
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatalf("load zone: %v", err)
	}
	var mu sync.Mutex
	now := time.Date(2026, 12, 5, 23, 0, 0, 0, berlin) // a Saturday, an hour into the window
	st := startStack(t, inspectHandler(), func(c *server.Config) {
		c.Router.Now = func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			return now
		}
		c.Router.MaintenanceWindows = []router.MaintenanceWindow{{
			Hostname: "*." + strings.SplitN(appHost, ".", 2)[1], Weekdays: []time.Weekday{time.Saturday},
			Start: 22 * time.Hour, End: 2 * time.Hour, Location: berlin, Reason: "weekly backup",
		}}
	})
	req := newRequest(t, t.Context(), st.server, "GET", appHost, "/", nil)
	req.Header.Set("Accept", "application/json")
	resp, body := do(t, st.visitor, req)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "10800" || !strings.Contains(body, `"status":503`) || !strings.Contains(body, "weekly backup") {
		t.Fatalf("GET in the window = %s (Retry-After %q) %s, want 503 JSON with 3 h left and the reason", resp.Status, resp.Header.Get("Retry-After"), body)
	}
	mu.Lock()
	now = time.Date(2026, 12, 6, 2, 0, 0, 0, berlin)
	mu.Unlock()
	if status, body := get(t, st.visitor, st.server, appHost, "/"); status != http.StatusOK {
		t.Fatalf("GET after the window = %d %s, want 200", status, body)
	}
}
