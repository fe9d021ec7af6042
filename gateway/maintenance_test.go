package gateway_test

import (
	"net/http"
	"testing"
	"time"
)

// TestMaintenanceThroughAPI turns maintenance on and off through the admin
// API: the router follows the store's change feed.
func TestMaintenanceThroughAPI(t *testing.T) {
	st := startStack(t, inspectHandler(), nil)
	api := func(method string) int {
		req := newRequest(t, t.Context(), st.server, method, "admin.test", "/aperio/api/maintenance/"+appHost, nil)
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
