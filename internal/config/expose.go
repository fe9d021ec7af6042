package config

import (
	"fmt"
	"net"
	"strings"

	"github.com/aperio-dev/aperio/tunnel"
)

// Expose is one public TCP or UDP port the client asks its servers for
// (an entry of expose:). Visitors' connections to the port reach the
// client as raw streams, which it connects to Target. The embedded
// tunnel.Expose is the entry as the server reads it (name, protocol,
// remote_port, allowed_ips), checked by tunnel.CheckExpose here and on
// the server alike. The loader defaults Name to PROTOCOL-REMOTE_PORT
// (tcp-2222), or PROTOCOL-auto-N for the N-th entry (from 1) that lets
// the server pick its port.
type Expose struct {
	tunnel.Expose
	// Target is where visitors' connections go, host:port (target). The
	// loader turns a bare port (22) into 127.0.0.1:22: an address, not
	// localhost, so that a UDP target is reached on the family it
	// listens on.
	Target string
	// ProxyProtocol is "v2" to send the target a PROXY protocol v2 header
	// with the visitor's address before the connection's bytes
	// (proxy_protocol); empty sends none. TCP only.
	ProxyProtocol string
}

// The protocols of an expose entry.
const (
	ExposeTCP = "tcp"
	ExposeUDP = "udp"
)

var exposeProtocols = []string{ExposeTCP, ExposeUDP}

// ProxyProtocolV2 is the one proxy_protocol value.
const ProxyProtocolV2 = "v2"

// exposeSettings is the table of the keys of one entry of expose:. Like
// a service's keys they are file-only.
func exposeSettings() []setting[Expose] {
	type E = Expose
	tab := []setting[E]{
		stringSetting("name", "handle of the port in logs, status and the server's port list (default PROTOCOL-PORT)", func(c *E) *string { return &c.Name }),
		enumSetting("protocol", "tcp or udp", func(c *E) *string { return &c.Protocol }).oneOf(exposeProtocols),
		scalarSetting("target", "local address visitors reach: a port (127.0.0.1:PORT) or host:port", func(c *E) *string { return &c.Target }, normalizeRawTarget, identity),
		intSetting("remote_port", "public port asked for (0 = the server picks one from its tcp_port_range)", func(c *E) *int { return &c.RemotePort }),
		listSetting("allowed_ips", "visitor addresses or CIDRs admitted (others refused)", func(c *E) *[]string { return &c.AllowedIPs }, nil),
		enumSetting("proxy_protocol", "v2: send the target a PROXY protocol v2 header with the visitor's address (tcp only)", func(c *E) *string { return &c.ProxyProtocol }).oneOf([]string{"", ProxyProtocolV2}),
	}
	for i := range tab {
		tab[i].Env, tab[i].Flag = "", ""
	}
	return tab
}

// DefaultExpose is an entry before its keys apply.
func DefaultExpose() Expose { return Expose{Expose: tunnel.Expose{Protocol: ExposeTCP}} }

// normalizeRawTarget turns a bare port into 127.0.0.1:PORT and checks
// that anything else is host:port.
func normalizeRawTarget(s string) (string, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return "", nil
	}
	if isPort(t) {
		return "127.0.0.1:" + t, nil
	}
	if msg := checkRawTarget(t); msg != "" {
		return "", fmt.Errorf("%s", msg)
	}
	return t, nil
}

// checkRawTarget returns what is wrong with t as a host:port, or "".
func checkRawTarget(t string) string {
	host, port, err := net.SplitHostPort(t)
	if err != nil || host == "" || !isPort(port) {
		return fmt.Sprintf("%q is not a port or host:port (a TCP or UDP address, no scheme)", t)
	}
	if strings.ContainsFunc(host, func(r rune) bool { return r <= ' ' || r == 0x7f || r == '/' }) {
		return fmt.Sprintf("%q: the host holds spaces, control characters or /", t)
	}
	return ""
}

// defaultExposeNames names the entries that have no name.
func defaultExposeNames(list []Expose) {
	auto := 0
	for i := range list {
		e := &list[i]
		if e.Name != "" {
			continue
		}
		if e.RemotePort > 0 {
			e.Name = fmt.Sprintf("%s-%d", e.Protocol, e.RemotePort)
			continue
		}
		auto++
		e.Name = fmt.Sprintf("%s-auto-%d", e.Protocol, auto)
	}
}

// expose checks the expose entries of c: what the server reads of them
// by the server's own rules (tunnel.CheckExpose), then what stays here
// (target, proxy_protocol).
func (v *checker) expose(list []Expose) {
	entries := make([]tunnel.Expose, len(list))
	for i, e := range list {
		entries[i] = e.Expose
	}
	for _, p := range tunnel.CheckExpose(entries) {
		if p.Field == "" {
			v.add("expose", "%s", p.Msg)
			continue
		}
		v.add(fmt.Sprintf("expose[%d].%s", p.Index, p.Field), "%s", p.Msg)
	}
	if len(list) > tunnel.MaxExpose {
		return
	}
	for i, e := range list {
		p := fmt.Sprintf("expose[%d].", i)
		if e.Target == "" {
			v.add(p+"target", "required: the local address visitors reach (a port or host:port)")
		} else if msg := checkRawTarget(e.Target); msg != "" {
			v.add(p+"target", "%s", msg)
		}
		if e.ProxyProtocol != "" {
			v.oneOf(p+"proxy_protocol", e.ProxyProtocol, []string{ProxyProtocolV2})
			if e.Protocol == ExposeUDP {
				v.add(p+"proxy_protocol", "applies to tcp entries only")
			}
		}
	}
}

// exposeEntries builds expose: from the file, or else from the home
// file; a file's list and its includes' concatenate.
func (l *loader) exposeEntries(tab []setting[Expose], sch *schema, local layer, localFile *yamlFile, home layer, homeFile *yamlFile) []Expose {
	v, from := local["expose"]
	f := localFile
	if !from {
		if v, from = home["expose"]; !from {
			return nil
		}
		f = homeFile
	}
	items := l.listItems("expose", "expected a mapping of port settings (protocol, target, remote_port, ...)", v, f, sch)
	out := make([]Expose, len(items))
	for i, it := range items {
		out[i] = DefaultExpose()
		apply(l, &out[i], tab, []layer{it}, func() *Expose { return &Expose{} }, fmt.Sprintf("expose[%d].", i))
	}
	defaultExposeNames(out)
	return out
}

// quickExpose is the entry of quick mode, its target normalized as a
// file's would be; a bad target is reported under expose[0].target.
func quickExpose(l *loader, e Expose) Expose {
	if e.Protocol == "" {
		e.Protocol = ExposeTCP
	}
	t, err := normalizeRawTarget(e.Target)
	if err != nil {
		l.fail("expose[0].target", Source{Kind: SourceArg, Name: "PORT"}, err.Error())
	}
	e.Target = t
	list := []Expose{e}
	defaultExposeNames(list)
	return list[0]
}
