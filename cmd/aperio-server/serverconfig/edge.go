package serverconfig

import (
	"net"
	"strconv"

	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/debughttp"
	"github.com/aperio-dev/aperio/internal/server"
)

// edgeProblems checks the keys of the edge: address lists, the real-ip
// header's name, the metrics listener's address and the debug
// listener's (loopback only).
func edgeProblems(s Config, v *config.Checker) {
	lists := []struct {
		key  string
		list []string
	}{{"trusted_proxies", s.TrustedProxies}, {"denied_ips", s.DeniedIPs}, {"admin_allowed_ips", s.AdminAllowedIPs}}
	for _, l := range lists {
		if _, err := config.ParsePrefixes(l.list); err != nil {
			v.Add(l.key, "%v", err)
		}
	}
	if err := server.CheckAdminHosts(s.AdminHosts); err != nil {
		v.Add("admin_hosts", "%v", err)
	}
	// Empty means X-Forwarded-For, as in server.DefaultConfig.
	if s.RealIPHeader != "" && !validHeaderName(s.RealIPHeader) {
		v.Add("real_ip_header", "%q is not an HTTP header name", s.RealIPHeader)
	}
	if s.ProxyProtocol && len(s.TrustedProxies) == 0 {
		v.Add("proxy_protocol", "needs trusted_proxies: PROXY headers are accepted only from them")
	}
	if s.MetricsListen != "" {
		_, port, err := net.SplitHostPort(s.MetricsListen)
		if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 0 || n > 65535 {
			v.Add("metrics_listen", "%q is not a host:port address", s.MetricsListen)
		}
	}
	if s.DebugListen != "" {
		if err := debughttp.CheckAddr(s.DebugListen); err != nil {
			v.Add("debug_listen", "%v", err)
		}
	}
}

// validHeaderName reports whether h is a non-empty HTTP field name (an
// RFC 9110 token) of sane length.
func validHeaderName(h string) bool {
	if h == "" || len(h) > 64 {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-' || c == '_' || c == '.' || c == '!' || c == '#' || c == '$' || c == '%' || c == '&' ||
			c == '\'' || c == '*' || c == '+' || c == '^' || c == '`' || c == '|' || c == '~':
		default:
			return false
		}
	}
	return true
}
