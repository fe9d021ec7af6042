package server_test

import (
	"github.com/aperio-dev/aperio/internal/server/servertest"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/server"
)

func TestMetricsEndpoint(t *testing.T) {
	t.Parallel()
	st := servertest.StartStack(t, servertest.InspectHandler(), func(c *server.Config) {
		c.MetricsToken = "m-token"
		c.ScalingEnabled = true
		c.Router.IPLimitMax = 2 // the client's tunnel handshake takes one token
		c.Router.IPLimitRefill = 0.0001
	})
	// The first request passes, the second is refused by the ip bucket.
	servertest.Get(t, st.Visitor, st.Server, servertest.AppHost, "/one")
	if status, _ := servertest.Get(t, st.Visitor, st.Server, servertest.AppHost, "/two"); status != http.StatusTooManyRequests {
		t.Fatalf("second request with ip_limit_max 2 after a handshake = %d, want 429", status)
	}
	scrape := func(token string) (int, string) {
		req := servertest.NewRequest(t, t.Context(), st.Server, "GET", "anything.test", "/aperio/metrics", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := st.Visitor.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	if code, _ := scrape(""); code != http.StatusUnauthorized {
		t.Fatalf("GET /metrics without a token = %d, want 401", code)
	}
	if code, _ := scrape("wrong"); code != http.StatusUnauthorized {
		t.Fatalf("GET /metrics with a wrong token = %d, want 401", code)
	}
	code, body := scrape("m-token")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics = %d, want 200", code)
	}
	for _, want := range []string{
		`aperio_rate_limited_total{limit="ip"} 1`,
		`aperio_rate_limited_total{limit="server-concurrency"} 0`,
		`aperio_rate_limited_total{limit="client-concurrency"} 0`,
		`aperio_rate_limited_total{limit="token-rate"} 0`,
		`aperio_connected_clients 1`,
		`aperio_webhook_events_dropped_total 0`,
		`aperio_scaling_declarations_late_total 0`,
		`aperio_scaling_declarations_coalesced_total 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
}

func TestMetricsOffWithoutToken(t *testing.T) {
	t.Parallel()
	st := servertest.StartStack(t, servertest.InspectHandler(), nil)
	status, _ := servertest.Get(t, st.Visitor, st.Server, servertest.AppHost, "/aperio/metrics")
	if status != http.StatusNotFound {
		t.Fatalf("GET /aperio/metrics with metrics_token unset = %d, want 404", status)
	}
}
