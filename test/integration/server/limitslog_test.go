package server_test

import (
	"github.com/aperio-dev/aperio/internal/server/servertest"
	"log/slog"
	"testing"

	"github.com/aperio-dev/aperio/internal/server"
)

// TestStartupLogsLimits: the server says at start which visitor limits
// are in force, the defaults included, by their setting names: a
// newcomer's 429 from a default they never wrote has a line to point to.
func TestStartupLogsLimits(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		set  func(*server.Config)
		want string
	}{
		{"defaults", func(*server.Config) {},
			"ip_limit_max=100 ip_limit_refill=5/s max_concurrent_requests=100 max_streams_per_ip=256 max_connections_per_ip=256 max_body_size=10MiB gateway_timeout=10s gateway_response_timeout=30s"},
		{"set and off", func(c *server.Config) {
			c.Router.IPLimitMax, c.Router.MaxConcurrentRequests, c.Router.MaxBodyBytes = 0, 0, 1500
		}, "ip_limit_max=0 (off) max_concurrent_requests=0 (off) max_streams_per_ip=256 max_connections_per_ip=256 max_body_size=1500B gateway_timeout=10s gateway_response_timeout=30s"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := servertest.Config(t)
			tt.set(&cfg)
			logs := &servertest.SyncBuffer{}
			srv := servertest.StartWith(t, cfg, nil, nil, server.Options{Logger: slog.New(slog.NewJSONHandler(logs, nil))})
			if err := srv.Stop(); err != nil {
				t.Fatal(err)
			}
			var got []any
			for _, l := range logs.Lines(t) {
				if l["msg"] == "limits in effect (docs/limits.md)" {
					got = append(got, l["limits"])
				}
			}
			if len(got) != 1 || got[0] != tt.want {
				t.Errorf("startup limits lines = %q, want one: %q", got, tt.want)
			}
		})
	}
}
