//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// tcpPortInfo is the part of GET /aperio/api/ports the step reads.
type tcpPortInfo struct {
	Port     int      `json:"port"`
	Protocol string   `json:"protocol"`
	Names    []string `json:"names"`
	Open     int64    `json:"open"`
	BytesIn  int64    `json:"bytes_in"`
}

// tcpPortThroughTwoServers is the step tcp_port_through_two_servers:
// tcp-app, one client connected to both servers, asks each for public
// TCP port 20022 to its echo; each server lists the port as the entry
// "echo", and a visitor of either gets an interactive exchange and a
// 1 MiB echo with a half-close, counted in the port's bytes.
func tcpPortThroughTwoServers(tp *topology, figs *figures) func(t *testing.T) {
	return func(t *testing.T) {
		tp.t = t
		for _, s := range []string{"server-a", "server-b"} {
			took := tp.waitFor(s+" lists tcp-app's port 20022", 60*time.Second, func() bool {
				p, ok := tp.tcpPort(s, 20022)
				return ok && len(p.Names) == 1 && p.Names[0] == "echo"
			})
			figs.add(t, "tcp port: %s listed 20022/tcp %v into the step", s, took.Round(100*time.Millisecond))
		}
		bulk := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
		for _, s := range []string{"server-a", "server-b"} {
			addr := tp.port(s, 20022)
			conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
			if err != nil {
				t.Fatalf("dial %s's public port (%s): %v", s, addr, err)
			}
			conn.SetDeadline(time.Now().Add(60 * time.Second))
			buf := make([]byte, 64)
			for i := range 5 {
				line := fmt.Sprintf("%s line %d\n", s, i)
				io.WriteString(conn, line)
				if _, err := io.ReadFull(conn, buf[:len(line)]); err != nil || string(buf[:len(line)]) != line {
					conn.Close()
					t.Fatalf("%s: line %d echoed %q, %v; want %q", s, i, buf[:len(line)], err, line)
				}
			}
			start := time.Now()
			go func() {
				conn.Write(bulk)
				conn.(*net.TCPConn).CloseWrite()
			}()
			back, err := io.ReadAll(conn)
			conn.Close()
			if err != nil || !bytes.Equal(back, bulk) {
				t.Fatalf("%s: 1 MiB echo returned %d bytes, %v", s, len(back), err)
			}
			figs.add(t, "tcp port: 1 MiB echoed through %s in %v", s, time.Since(start).Round(time.Millisecond))
			tp.waitFor(s+" counts the port's bytes", 30*time.Second, func() bool {
				p, ok := tp.tcpPort(s, 20022)
				return ok && p.BytesIn >= int64(len(bulk))
			})
		}
		// tcp-app holds its tunnels over the tcp transport
		// (docker-compose.yml), and says so as each connects.
		var connected []string
		for _, l := range strings.Split(docker(t, "logs", tp.containerID("tcp-app")), "\n") {
			if strings.Contains(l, "tunnel connected") {
				connected = append(connected, l)
			}
		}
		tcp := 0
		for _, l := range connected {
			if strings.Contains(l, "transport=tcp") {
				tcp++
			}
		}
		if len(connected) < 2 || tcp != len(connected) {
			t.Fatalf("tcp-app logged %d tunnel connections, %d of them over transport=tcp; want both servers over tcp:\n%s", len(connected), tcp, strings.Join(connected, "\n"))
		}
	}
}

// tcpPort returns server's entry of GET /ports for port/tcp.
func (tp *topology) tcpPort(server string, port int) (tcpPortInfo, bool) {
	var list []tcpPortInfo
	if _, err := tp.api(server, "GET", "/ports", nil, &list); err != nil {
		return tcpPortInfo{}, false
	}
	for _, p := range list {
		if p.Port == port && strings.EqualFold(p.Protocol, "tcp") {
			return p, true
		}
	}
	return tcpPortInfo{}, false
}
