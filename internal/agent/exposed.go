package agent

import (
	"net"
	"net/url"
	"slices"
	"strconv"
	"sync"

	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/tunnel"
)

// ExposedStatus is one expose entry as one server answered it.
type ExposedStatus struct {
	Server   string `json:"server"`
	Name     string `json:"name"`
	Protocol string `json:"protocol"`
	// Public is host:port visitors connect to, "" when refused.
	Public string `json:"public,omitempty"`
	// Error says why the server refused the entry.
	Error string `json:"error,omitempty"`
}

// exposedTable holds each server's last answer to the expose entries.
type exposedTable struct {
	mu  sync.Mutex
	per map[string][]tunnel.ExposeStatus // server URL → answer
}

// noteExposed records and logs a server's answer to the expose entries:
// one line per entry each time the answer changes (the tunnel calls it on
// the welcome and on each change).
func (a *Agent) noteExposed(server string, st []tunnel.ExposeStatus) {
	a.exposed.mu.Lock()
	if a.exposed.per == nil {
		a.exposed.per = make(map[string][]tunnel.ExposeStatus)
	}
	a.exposed.per[server] = slices.Clone(st)
	a.exposed.mu.Unlock()
	for _, e := range st {
		if e.Port > 0 {
			a.log.Info("port open", logkey.ServerURL, server, logkey.ExposeName, e.Name, logkey.Protocol, e.Protocol, logkey.PublicURL, publicAddr(server, e.Port))
		} else {
			a.log.Warn("port refused by the server", logkey.ServerURL, server, logkey.ExposeName, e.Name, logkey.Protocol, e.Protocol, logkey.Reason, e.Error)
		}
	}
}

// exposedStatus lists every server's answers, in server order.
func (a *Agent) exposedStatus() []ExposedStatus {
	a.exposed.mu.Lock()
	defer a.exposed.mu.Unlock()
	var out []ExposedStatus
	for _, tc := range a.tunnels {
		for _, e := range a.exposed.per[tc.URL()] {
			es := ExposedStatus{Server: tc.URL(), Name: e.Name, Protocol: e.Protocol, Error: e.Error}
			if e.Port > 0 {
				es.Public = publicAddr(tc.URL(), e.Port)
			}
			out = append(out, es)
		}
	}
	return out
}

// publicAddr is host:port of a port opened by the server at serverURL:
// the host visitors reach the server on.
func publicAddr(serverURL string, port int) string {
	host := serverURL
	if u, err := url.Parse(serverURL); err == nil && u.Hostname() != "" {
		host = u.Hostname()
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}
