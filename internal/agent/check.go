package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/tunnel"
)

// CheckItem is one line of `aperio-client check`: what was checked,
// whether it passed, and, when it did not, why and what to do.
type CheckItem struct {
	// What names the item: a server's token, one hostname a service binds
	// there, a service's target or health endpoint.
	What string
	// OK is the verdict.
	OK bool
	// Detail is what the server or the backend said: the refusal's
	// reason, the dial error, the status. It may name local addresses:
	// it is for the operator at the client, never for visitors.
	Detail string
	// Fix says what to do about a failed item; "" for a passed one.
	Fix string
	// Warn marks a passed item the operator should still read: the server
	// took it with a notice (a weight it clamped, say), or it could not
	// be fully checked (a UDP target). It is never set on a failed item.
	Warn bool
}

// DefaultCheckTimeout bounds each step of Check when the caller gives no
// bound: one handshake, one request to a target, one health probe.
const DefaultCheckTimeout = 10 * time.Second

// Check tells, without serving anything, whether the client would work:
// for each server, that it takes the token (a handshake announcing no
// service), each hostname of each service (a handshake per hostname,
// announcing the service as the client does, access settings included,
// but draining and unhealthy, so that no visitor is routed to it) and
// each expose entry (a handshake announcing it: the port in the server's
// tcp_port_range and allowed by the token); then, for each service, that
// its target answers a GET (any status: the app is up) and that its
// health endpoint, if it has one, passes, and for each expose entry that
// its target accepts TCP connections. A bind the server accepts with a
// notice that it routes nothing there fails; another notice passes with
// a warning. Each step is bounded by timeout (DefaultCheckTimeout when
// zero or less), so Check blocks for at most the number of steps times
// that. A server that refuses the token is not asked about hostnames.
func (a *Agent) Check(ctx context.Context, timeout time.Duration) []CheckItem {
	if timeout <= 0 {
		timeout = DefaultCheckTimeout
	}
	var items []CheckItem
	for _, tc := range a.tunnels {
		items = append(items, a.checkServer(ctx, tc, timeout)...)
	}
	for _, svc := range a.services() {
		items = append(items, svc.checkTarget(ctx, timeout))
		if svc.cfg.Probed() {
			ok, detail := newProber(svc).probe(ctx, timeout)
			it := CheckItem{What: fmt.Sprintf("service %s: health endpoint %s", svc.label(), svc.cfg.Health.Endpoint), OK: ok, Detail: terminalText(detail)}
			if svc.cfg.Health.Type == config.HealthGRPC {
				it.What = fmt.Sprintf("service %s: grpc health check", svc.label())
			}
			if !ok {
				it.Fix = "the health check fails, so the server would route nothing here: fix the app's health, or health.endpoint (health.type, health.success)"
			}
			items = append(items, it)
		}
	}
	for _, e := range a.state.Load().expose {
		items = append(items, checkExposeTarget(ctx, e, timeout))
	}
	return items
}

// checkServer checks the token at the server of tc, then each bind.
func (a *Agent) checkServer(ctx context.Context, tc *tunnel.Client, timeout time.Duration) []CheckItem {
	server := "server " + tc.URL()
	ann := tunnel.Announcement{Name: a.cfg.Name, InstanceID: a.instanceID + "-check", Draining: true, Services: []tunnel.Service{}}
	token := handshakeItem(ctx, tc, ann, timeout, server+": token")
	items := []CheckItem{token}
	if !token.OK {
		return items
	}
	st := a.state.Load()
	for _, svc := range a.services() {
		hosts := svc.cfg.Hostnames
		if len(hosts) == 0 {
			hosts = []string{""}
		}
		for _, h := range hosts {
			what := fmt.Sprintf("%s: service %s binds %s%s", server, svc.label(), h, svc.cfg.Path)
			if h == "" {
				what = fmt.Sprintf("%s: service %s binds the token's hostnames%s", server, svc.label(), svc.cfg.Path)
			}
			// The service as the client announces it (its access block
			// too: the server compares it with the pool's), one hostname
			// at a time, never routed to.
			bind := svc.announce(st.priority)
			bind.Hostnames, bind.Healthy, bind.Draining = nonEmpty(h), false, true
			one := ann
			one.Services = []tunnel.Service{bind}
			items = append(items, handshakeItem(ctx, tc, one, timeout, what))
		}
	}
	for _, e := range st.expose {
		port := "a port the server picks"
		if e.RemotePort != 0 {
			port = fmt.Sprintf("port %d", e.RemotePort)
		}
		// The entry admits no visitor: if the port is open already (this
		// client runs), the check's session joins its members for the
		// moment of the handshake and must never be picked for a
		// visitor's connection, which it would not serve.
		ex := announceExpose(e)
		ex.AllowedIPs = []string{checkNoVisitor}
		one := ann
		one.Expose = []tunnel.Expose{ex}
		items = append(items, exposeItem(ctx, tc, one, timeout, fmt.Sprintf("%s: expose %s (%s %s)", server, e.Name, e.Protocol, port)))
	}
	return items
}

// checkNoVisitor is the allowed_ips of the expose entries Check announces:
// the limited broadcast address, which is never the source of a TCP
// connection or a UDP datagram.
const checkNoVisitor = "255.255.255.255/32"

// exposeItem is the verdict of one handshake announcing one expose
// entry: the server's status of the entry.
func exposeItem(ctx context.Context, tc *tunnel.Client, ann tunnel.Announcement, timeout time.Duration, what string) CheckItem {
	it, answer := handshake(ctx, tc, ann, timeout, what)
	if !it.OK {
		return it
	}
	if len(answer.Exposed) != 1 {
		it.OK, it.Warn = false, false
		it.Detail = "the server did not answer the entry (a server older than expose: support)"
		it.Fix = "upgrade the server, or remove the expose entry"
		return it
	}
	st := answer.Exposed[0]
	if st.Error != "" {
		it.OK, it.Warn = false, false
		it.Detail = terminalText(st.Error)
		it.Fix = "pick a remote_port inside the server's tcp_port_range that the token allows (allow_tcp_ports), or ask the server's operator"
		return it
	}
	if it.Detail == "" {
		it.Detail = fmt.Sprintf("port %d", st.Port)
	}
	return it
}

// checkExposeTarget dials an expose entry's target: a TCP one must accept
// a connection; a UDP one cannot be told apart from a silent service
// without sending it data, so it passes with a warning.
func checkExposeTarget(ctx context.Context, e config.Expose, timeout time.Duration) CheckItem {
	it := CheckItem{What: fmt.Sprintf("expose %s: target %s", e.Name, e.Target)}
	if e.Protocol == config.ExposeUDP {
		it.OK, it.Warn, it.Detail = true, true, "not checked: a UDP target answers only to data its protocol expects"
		return it
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", e.Target)
	if err != nil {
		it.Detail, it.Fix = err.Error(), "nothing accepts TCP connections there: start the service, or fix the entry's target"
		return it
	}
	c.Close()
	it.OK, it.Detail = true, "accepts TCP connections"
	return it
}

func nonEmpty(h string) []string {
	if h == "" {
		return nil
	}
	return []string{h}
}

// handshakeItem is the verdict of one handshake announcing ann.
func handshakeItem(ctx context.Context, tc *tunnel.Client, ann tunnel.Announcement, timeout time.Duration, what string) CheckItem {
	it, _ := handshake(ctx, tc, ann, timeout, what)
	return it
}

// handshake runs one handshake announcing ann and judges it: a refusal
// or an unreachable server fails; a notice that the server routes nothing
// to a bind (tunnel.NotRouted) fails; another notice passes with a
// warning.
func handshake(ctx context.Context, tc *tunnel.Client, ann tunnel.Announcement, timeout time.Duration, what string) (CheckItem, tunnel.HandshakeAnswer) {
	hctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	answer, err := tc.HandshakeAnswer(hctx, ann)
	it := CheckItem{What: what, OK: err == nil}
	var refused *tunnel.RefusedError
	switch {
	case err == nil:
		it.Detail = terminalText(strings.Join(answer.Notices, "; "))
		it.Warn = len(answer.Notices) > 0
		for _, n := range answer.Notices {
			if strings.HasSuffix(n, tunnel.NotRouted) {
				it.OK, it.Warn = false, false
				it.Fix = "the server takes the token but would route nothing here: see its words above (a hostname the token may not bind, or access settings that differ from the other clients serving it)"
			}
		}
	case errors.As(err, &refused):
		it.Detail = terminalText(refused.Reason)
		it.Fix = RefusalHint(err)
		if it.Fix == "" {
			it.Fix = "the server refused for now: try again later, or ask its operator"
		}
	default:
		it.Detail = err.Error()
		it.Fix = "the server could not be reached: check server.url (and server.urls), and that this machine reaches it"
	}
	return it, answer
}

// maxDetail bounds the bytes of a server's words a check item shows.
const maxDetail = 1024

// terminalText makes a server's or an app's words (a reason, notices, a
// status) safe to print on a terminal: control and formatting characters,
// which could forge lines or recolour and reorder what the operator reads,
// become '?', and it is cut at maxDetail bytes.
func terminalText(s string) string {
	if len(s) > maxDetail {
		s = strings.ToValidUTF8(s[:maxDetail], "") + "…"
	}
	return strings.Map(func(r rune) rune {
		if r == utf8.RuneError || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return '?'
		}
		return r
	}, s)
}

// checkTarget sends one GET to the service's target: any answer passes,
// since it shows the app is listening; a transport error fails.
func (svc *service) checkTarget(ctx context.Context, timeout time.Duration) CheckItem {
	it := CheckItem{What: fmt.Sprintf("service %s: target %s", svc.label(), svc.cfg.Target)}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
	case svc.cfg.Serve != "":
		it.What = fmt.Sprintf("service %s: serve %s", svc.label(), svc.cfg.Serve)
		root, err := os.OpenRoot(svc.cfg.Serve)
		if err != nil {
			it.Detail, it.Fix = err.Error(), "the folder cannot be opened: create it, or fix the service's serve"
			return it
		}
		root.Close()
		it.OK, it.Detail = true, "folder readable"
		return it
	case svc.cfg.TLSPassthrough:
		d := net.Dialer{}
		c, err := d.DialContext(ctx, "tcp", hostPort(svc.target))
		if err != nil {
			it.Detail, it.Fix = err.Error(), "nothing accepts TCP connections there: start the TLS backend, or fix the service's target"
			return it
		}
		c.Close()
		it.OK, it.Detail = true, "accepts TCP connections (TLS is passed through, not checked)"
		return it
	}
	u := svc.dialURL()
	if u.Path == "" {
		u.Path = "/"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err == nil {
		req.Header.Set("User-Agent", probeAgent)
		if svc.cfg.HostHeader != "" {
			req.Host = svc.cfg.HostHeader
		}
		var resp *http.Response
		if resp, err = svc.transport.RoundTrip(req); err == nil {
			resp.Body.Close()
			it.OK, it.Detail = true, terminalText(resp.Status)
			return it
		}
	}
	it.Detail = err.Error()
	it.Fix = "nothing answers there: start the app, or fix the service's target"
	return it
}

// label names the service in check items: its name, else its index.
func (svc *service) label() string {
	if svc.cfg.Name != "" {
		return svc.cfg.Name
	}
	return "#" + svc.id
}
