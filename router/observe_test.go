package router

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/aperio-dev/aperio/internal/telemetry"
)

// TestProxyRecordsFacts: Proxy fills the request's record with what it
// went through, for metrics, the access log and spans.
func TestProxyRecordsFacts(t *testing.T) {
	rt := newRouter(t, Config{IPLimitMax: 2, IPLimitRefill: 0.0001})
	rt.reg.update(newConn("c1", 1), limited(10, "app.example.com"))
	proxy := func(host, remote string) (telemetry.Request, int) {
		var rec telemetry.Request
		req := httptest.NewRequest("GET", "http://"+host+"/x", nil)
		req.RemoteAddr = remote
		w := httptest.NewRecorder()
		rt.Proxy(w, req, &rec)
		return rec, w.Code
	}
	// In order: the visitor's bucket holds two tokens, so the third and
	// fourth requests are refused.
	tests := []struct {
		name         string
		host, remote string
		status       int
		want         telemetry.Request
	}{
		{"served", "APP.example.com:8080", "192.0.2.1:1", http.StatusOK,
			telemetry.Request{Hostname: "app.example.com", Routed: true, ClientID: "c1"}},
		{"no bind", "other.example.com", "192.0.2.1:1", http.StatusBadGateway,
			telemetry.Request{Hostname: "other.example.com"}},
		{"ip limit, bound host", "app.example.com", "192.0.2.1:1", http.StatusTooManyRequests,
			telemetry.Request{Hostname: "app.example.com", Routed: true, Limit: "ip"}},
		{"ip limit, unbound host", "nobody.example.com", "192.0.2.1:1", http.StatusTooManyRequests,
			telemetry.Request{Hostname: "nobody.example.com", Limit: "ip"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec, status := proxy(tc.host, tc.remote)
			if status != tc.status || rec != tc.want {
				t.Fatalf("Proxy(%s) = %d, %+v; want %d, %+v", tc.host, status, rec, tc.status, tc.want)
			}
		})
	}
}
