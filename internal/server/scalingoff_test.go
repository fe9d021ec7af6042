package server_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestScalingAPIWithScalingOff: with autoscaling off the gateway has no
// controller, and the admin API must treat that as "off" (an empty list,
// 404 on disarm) rather than call a nil controller.
func TestScalingAPIWithScalingOff(t *testing.T) {
	t.Parallel()
	srv := startServer(t, serverConfig(t), nil, nil)
	visitor := newVisitor(t, srv)
	api := func(method, path string) (int, string) {
		req := newRequest(t, t.Context(), srv, method, "admin.localhost", "/aperio/api"+path, nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, body := do(t, visitor, req)
		return resp.StatusCode, body
	}
	if code, body := api("GET", "/scaling"); code != http.StatusOK || strings.TrimSpace(body) != "[]" {
		t.Errorf("GET /scaling = %d %q, want 200 []", code, body)
	}
	if code, body := api("DELETE", "/scaling/scl_x"); code != http.StatusNotFound {
		t.Errorf("DELETE /scaling/scl_x = %d %q, want 404", code, body)
	}
}
