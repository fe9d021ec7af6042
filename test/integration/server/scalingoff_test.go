package server_test

import (
	"github.com/aperio-dev/aperio/internal/server/servertest"
	"net/http"
	"strings"
	"testing"
)

// TestScalingAPIWithScalingOff: with autoscaling off the gateway has no
// controller, and the admin API must treat that as "off" (an empty list,
// 404 on disarm) rather than call a nil controller.
func TestScalingAPIWithScalingOff(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t, servertest.Config(t), nil, nil)
	visitor := servertest.NewVisitor(t, srv)
	api := func(method, path string) (int, string) {
		req := servertest.NewRequest(t, t.Context(), srv, method, "admin.localhost", "/aperio/api"+path, nil)
		req.Header.Set("Authorization", "Bearer "+servertest.Token)
		resp, body := servertest.Do(t, visitor, req)
		return resp.StatusCode, body
	}
	if code, body := api("GET", "/scaling"); code != http.StatusOK || strings.TrimSpace(body) != "[]" {
		t.Errorf("GET /scaling = %d %q, want 200 []", code, body)
	}
	if code, body := api("DELETE", "/scaling/scl_x"); code != http.StatusNotFound {
		t.Errorf("DELETE /scaling/scl_x = %d %q, want 404", code, body)
	}
}
