package server

import (
	"fmt"
	"strings"
)

// limitsInEffect is the startup log's summary of the limits a visitor can
// meet whether or not the operator set them (docs/limits.md): each as
// setting=value, 0 meaning off where the setting says so. A newcomer's
// first 429 from a default they never wrote then has a line to point to.
func limitsInEffect(cfg Config) string {
	rc := cfg.Router
	ip := "0 (off)"
	if rc.IPLimitMax > 0 {
		ip = fmt.Sprintf("%d ip_limit_refill=%g/s", rc.IPLimitMax, rc.IPLimitRefill)
	}
	off := func(n int) string {
		if n <= 0 {
			return "0 (off)"
		}
		return fmt.Sprint(n)
	}
	return strings.Join([]string{
		"ip_limit_max=" + ip,
		"max_concurrent_requests=" + off(rc.MaxConcurrentRequests),
		"max_streams_per_ip=" + off(rc.MaxStreamsPerIP),
		"max_connections_per_ip=" + off(cfg.MaxConnectionsPerIP),
		"max_body_size=" + byteSize(rc.MaxBodyBytes),
		"gateway_timeout=" + rc.GatewayTimeout.String(),
		"gateway_response_timeout=" + cfg.Tunnel.ResponseHeaderTimeout.String(),
	}, " ")
}

// byteSize writes n in the largest binary unit that divides it.
func byteSize(n int64) string {
	for _, u := range []struct {
		unit string
		size int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d%s", n/u.size, u.unit)
		}
	}
	return fmt.Sprintf("%dB", n)
}
