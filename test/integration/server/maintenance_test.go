package server_test

import (
	"github.com/aperio-dev/aperio/internal/server/servertest"
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
	st := servertest.StartStack(t, servertest.InspectHandler(), nil)
	api := func(method string) int {
		req := servertest.NewRequest(t, t.Context(), st.Server, method, "admin.localhost", "/aperio/api/maintenance/"+servertest.AppHost, nil)
		req.Header.Set("Authorization", "Bearer "+servertest.Token)
		resp, _ := servertest.Do(t, st.Visitor, req)
		return resp.StatusCode
	}
	if code := api("PUT"); code != http.StatusNoContent {
		t.Fatalf("PUT maintenance = %d, want 204", code)
	}
	servertest.Poll(t, 5*time.Second, func() (bool, string) {
		req := servertest.NewRequest(t, t.Context(), st.Server, "GET", servertest.AppHost, "/", nil)
		resp, body := servertest.Do(t, st.Visitor, req)
		return resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "",
			"GET during maintenance = " + resp.Status + " " + body + ", want 503 with Retry-After"
	})
	if code := api("DELETE"); code != http.StatusNoContent {
		t.Fatalf("DELETE maintenance = %d, want 204", code)
	}
	servertest.Poll(t, 5*time.Second, func() (bool, string) {
		status, body := servertest.Get(t, st.Visitor, st.Server, servertest.AppHost, "/")
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
	st := servertest.StartStack(t, servertest.InspectHandler(), func(c *server.Config) {
		c.Router.Now = func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			return now
		}
		c.Router.MaintenanceWindows = []router.MaintenanceWindow{{
			Hostname: "*." + strings.SplitN(servertest.AppHost, ".", 2)[1], Weekdays: []time.Weekday{time.Saturday},
			Start: 22 * time.Hour, End: 2 * time.Hour, Location: berlin, Reason: "weekly backup",
		}}
	})
	req := servertest.NewRequest(t, t.Context(), st.Server, "GET", servertest.AppHost, "/", nil)
	req.Header.Set("Accept", "application/json")
	resp, body := servertest.Do(t, st.Visitor, req)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "10800" || !strings.Contains(body, `"status":503`) || !strings.Contains(body, "weekly backup") {
		t.Fatalf("GET in the window = %s (Retry-After %q) %s, want 503 JSON with 3 h left and the reason", resp.Status, resp.Header.Get("Retry-After"), body)
	}
	mu.Lock()
	now = time.Date(2026, 12, 6, 2, 0, 0, 0, berlin)
	mu.Unlock()
	if status, body := servertest.Get(t, st.Visitor, st.Server, servertest.AppHost, "/"); status != http.StatusOK {
		t.Fatalf("GET after the window = %d %s, want 200", status, body)
	}
}
