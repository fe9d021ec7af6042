package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/aperio-dev/aperio/internal/server"
)

// BenchmarkProxyStream measures a proxied request through a real server,
// tunnel and client, with nobody following the live stream and with one
// follower reading every access event: what an open dashboard costs the
// request path. Run it with
//
//	go test -run XXX -bench ProxyStream -benchmem ./internal/server/
func BenchmarkProxyStream(b *testing.B) {
	for _, subs := range []int{0, 1} {
		b.Run(fmt.Sprintf("subscribers=%d", subs), func(b *testing.B) {
			st := startStack(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }), func(c *server.Config) {
				c.Router.IPLimitMax = 0 // one visitor sends every request
				c.AccessLog = false
			})
			for range subs {
				events := follow(b, st.server, "", true)
				go func() {
					for range events { // drained until the stream ends at cleanup
					}
				}()
			}
			ctx := context.Background()
			req := newRequest(b, ctx, st.server, http.MethodGet, appHost, "/bench", nil)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				status, body, err := fetch(st.visitor, req)
				if err != nil || status != http.StatusOK || body != "ok" {
					b.Fatalf("GET /bench = %d %q, %v; want 200 ok", status, body, err)
				}
			}
			b.StopTimer()
			if d := st.server.gw.StreamDroppedForTest(); d != 0 {
				b.Logf("%d stream events dropped", d)
			}
		})
	}
}
