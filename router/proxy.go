package router

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/aperio-dev/aperio/internal/bufpool"
	"github.com/aperio-dev/aperio/internal/hostname"
	"github.com/aperio-dev/aperio/tunnel"
)

// ServeHTTP proxies a visitor's request to a client serving its hostname.
func (rt *Router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	host := hostname.Normalize(r.Host)
	b := rt.table.Load().match(host, r.URL.Path)
	if b == nil {
		rt.writeError(w, r, host, errNoRoute)
		return
	}
	m := b.pick()
	if m == nil {
		rt.writeError(w, r, host, errNoRoutable)
		return
	}
	if rt.cfg.MaxBodyBytes > 0 && r.ContentLength > rt.cfg.MaxBodyBytes {
		rt.writeError(w, r, host, &http.MaxBytesError{Limit: rt.cfg.MaxBodyBytes})
		return
	}
	if rt.cfg.MaxBodyBytes > 0 && r.Body != nil && r.Body != http.NoBody {
		r.Body = http.MaxBytesReader(w, r.Body, rt.cfg.MaxBodyBytes)
	}
	upgrade := tunnel.IsUpgrade(r.Header)
	prepareOutbound(r, upgrade)

	resp, err := m.conn.RoundTrip(r, m.service)
	if err != nil {
		rt.writeError(w, r, host, err)
		return
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		rt.relayUpgrade(w, r, resp)
		return
	}
	defer resp.Body.Close()
	copyResponse(w, resp)
}

// prepareOutbound turns the visitor's request into the one the backend
// sees: hop-by-hop headers go, forwarding headers come, the Host stays.
func prepareOutbound(r *http.Request, upgrade bool) {
	h := r.Header
	tunnel.RemoveHopHeaders(h, upgrade)
	delete(h, "Expect") // answered here already; the backend must not wait for it
	delete(h, tunnel.ServiceHeader)
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		if prior, ok := h["X-Forwarded-For"]; ok && len(prior) > 0 {
			h["X-Forwarded-For"] = []string{strings.Join(prior, ", ") + ", " + ip}
		} else {
			h["X-Forwarded-For"] = []string{ip}
		}
	}
	if r.TLS != nil {
		h["X-Forwarded-Proto"] = protoHTTPS
	} else {
		h["X-Forwarded-Proto"] = protoHTTP
	}
	h["X-Forwarded-Host"] = []string{r.Host}
}

// Shared, never-modified header values: setting them allocates nothing.
var (
	protoHTTP  = []string{"http"}
	protoHTTPS = []string{"https"}
)

// copyResponse writes resp to the visitor. A body of unknown length (SSE,
// gRPC, chunked) is flushed after every read; trailers follow the body.
func copyResponse(w http.ResponseWriter, resp *http.Response) {
	dst := w.Header()
	for k, vv := range resp.Header {
		dst[k] = vv
	}
	if resp.ContentLength >= 0 && resp.Header.Get("Content-Length") == "" && resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusNotModified {
		dst["Content-Length"] = []string{strconv.FormatInt(resp.ContentLength, 10)}
	}
	w.WriteHeader(resp.StatusCode)
	streaming := resp.ContentLength < 0
	bp := bufpool.Get()
	buf := *bp
	flusher, _ := w.(http.Flusher)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				break
			}
			if streaming && flusher != nil {
				flusher.Flush()
			}
		}
		if err != nil {
			break
		}
	}
	bufpool.Put(bp)
	for k, vv := range resp.Trailer {
		dst[http.TrailerPrefix+k] = vv
	}
}

// relayUpgrade hands a switched-protocol connection (WebSocket) to the
// visitor and copies bytes both ways until either side closes.
func (rt *Router) relayUpgrade(w http.ResponseWriter, r *http.Request, resp *http.Response) {
	backend := resp.Body.(io.ReadWriteCloser)
	defer backend.Close()
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		rt.log.Debug("upgrade without hijack", "host", r.Host, "err", err)
		return
	}
	defer conn.Close()
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\n")
	resp.Header.Write(brw)
	brw.WriteString("\r\n")
	if err := brw.Flush(); err != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Bytes the visitor sent after its request are already buffered.
		bufpool.Copy(backend, brw.Reader)
		backend.Close()
	}()
	bufpool.Copy(conn, backend)
	conn.Close()
	<-done
}

// writeError answers a request that could not be proxied, choosing the
// status in one place.
func (rt *Router) writeError(w http.ResponseWriter, r *http.Request, host string, err error) {
	var mbe *http.MaxBytesError
	switch {
	case errors.Is(err, context.Canceled):
		return // the visitor left; nobody reads an answer
	case errors.Is(err, errNoRoute):
		http.Error(w, "aperio: no client is serving "+host, http.StatusBadGateway)
	case errors.Is(err, errNoRoutable):
		http.Error(w, "aperio: no client of "+host+" can take requests now", http.StatusBadGateway)
	case errors.As(err, &mbe):
		http.Error(w, "aperio: request body larger than max_body_size ("+strconv.FormatInt(mbe.Limit, 10)+" bytes)", http.StatusRequestEntityTooLarge)
	case errors.Is(err, tunnel.ErrResponseTimeout):
		http.Error(w, "aperio: "+host+" did not answer within gateway_response_timeout", http.StatusGatewayTimeout)
	case errors.Is(err, tunnel.ErrSessionClosed):
		rt.log.Debug("client went away mid-request", "host", host, "err", err)
		http.Error(w, "aperio: the client serving "+host+" disconnected", http.StatusBadGateway)
	default:
		rt.log.Warn("proxy error", "host", host, "err", err)
		http.Error(w, "aperio: bad gateway", http.StatusBadGateway)
	}
}
