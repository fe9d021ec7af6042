package server

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/aperio-dev/aperio/internal/logkey"
)

// serveMetrics starts the metrics listener when metrics_listen is set; it
// serves metrics at /metrics and /aperio/metrics to the peers
// admin_allowed_ips allows (everyone when empty) and denied_ips does not
// deny, with metrics_token required when set. Its peers are taken as they
// connect: no proxy speaks for them there. The returned stop closes it and waits for its serve
// loop; it is a no-op when there is none.
func (g *Gateway) serveMetrics() (stop func(), err error) {
	if g.cfg.MetricsListen == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", g.cfg.MetricsListen)
	if err != nil {
		return nil, fmt.Errorf("gateway: metrics_listen %s: %w", g.cfg.MetricsListen, err)
	}
	g.metricsAddr.Store(ln.Addr().String())
	h := g.metrics.Handler(g.cfg.MetricsToken)
	if g.cfg.MetricsToken == "" {
		// The listener is the operator's own choice of exposure: without
		// a token it is open to the addresses admin_allowed_ips allows.
		h = g.metrics.Exposition()
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			peer, _ := netip.ParseAddrPort(r.RemoteAddr)
			addr := peer.Addr().Unmap()
			switch {
			case inAny(g.edge.Load().denied, addr) || !g.edge.Load().adminAllowedFor(addr):
				http.Error(w, "aperio: forbidden", http.StatusForbidden)
			case r.URL.Path != "/metrics" && r.URL.Path != metricsPath:
				http.NotFound(w, r)
			default:
				h.ServeHTTP(w, r)
			}
		}),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    16 << 10,
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			g.log.Error("metrics listener stopped", logkey.Err, err)
		}
	}()
	g.log.Info("metrics listening", logkey.Addr, ln.Addr().String())
	return func() {
		srv.Close()
		<-done
	}, nil
}
