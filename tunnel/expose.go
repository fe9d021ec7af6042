package tunnel

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"unicode"
)

// Bounds on a client's expose entries: the client's loader refuses a
// configuration past them, and the server an announcement.
const (
	MaxExpose           = 64 // entries of one client
	MaxExposeName       = 63 // bytes of an entry's name
	MaxExposeAllowedIPs = 64 // allowed_ips of one entry
)

// ExposeProblem is one thing wrong with an expose entry: Index is the
// entry's position, Field its key (name, protocol, remote_port,
// allowed_ips; "" for the list as a whole).
type ExposeProblem struct {
	Index int
	Field string
	Msg   string
}

// CheckExpose checks a client's expose entries, each on its own and
// together (names unique, no port asked for twice): the one set of rules
// the client's loader applies to expose: and the server to an
// announcement. Every message quotes at most a bounded part of what it
// read.
func CheckExpose(list []Expose) []ExposeProblem {
	if len(list) > MaxExpose {
		return []ExposeProblem{{Msg: fmt.Sprintf("%d entries, at most %d", len(list), MaxExpose)}}
	}
	var out []ExposeProblem
	add := func(i int, field, format string, args ...any) {
		out = append(out, ExposeProblem{Index: i, Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	names := make(map[string]int, len(list))
	ports := make(map[string]int, len(list)) // protocol/remote_port → index
	for i, e := range list {
		switch {
		case e.Name == "":
			add(i, "name", "required")
		case len(e.Name) > MaxExposeName:
			add(i, "name", "longer than %d bytes", MaxExposeName)
		case strings.ContainsFunc(e.Name, func(r rune) bool { return !unicode.IsPrint(r) || r == ' ' }) || !printable(e.Name):
			add(i, "name", "%q holds spaces or control characters", e.Name)
		default:
			if j, dup := names[e.Name]; dup {
				add(i, "name", "%q is already the name of expose[%d]: give each entry a name of its own", e.Name, j)
			} else {
				names[e.Name] = i
			}
		}
		if e.Protocol != ExposeTCP && e.Protocol != ExposeUDP {
			add(i, "protocol", "%.16q is not tcp or udp", e.Protocol)
		}
		if e.RemotePort < 0 || e.RemotePort > 65535 {
			add(i, "remote_port", "must be within 0..65535, got %d", e.RemotePort)
		} else if e.RemotePort > 0 {
			k := e.Protocol + "/" + strconv.Itoa(e.RemotePort)
			if j, dup := ports[k]; dup {
				add(i, "remote_port", "%.16s port %d is already asked for by expose[%d]", e.Protocol, e.RemotePort, j)
			} else {
				ports[k] = i
			}
		}
		if len(e.AllowedIPs) > MaxExposeAllowedIPs {
			add(i, "allowed_ips", "%d entries, at most %d", len(e.AllowedIPs), MaxExposeAllowedIPs)
			continue
		}
		for _, a := range e.AllowedIPs {
			if _, err := netip.ParsePrefix(a); err == nil {
				continue
			}
			if _, err := netip.ParseAddr(a); err != nil {
				add(i, "allowed_ips", "%.64q is neither an address nor a CIDR prefix", a)
			}
		}
	}
	return out
}
