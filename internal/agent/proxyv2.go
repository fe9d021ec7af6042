package agent

import (
	"net"
	"net/netip"

	"github.com/pires/go-proxyproto"
)

// proxyV2Header returns the PROXY protocol v2 header that tells a
// backend the visitor's address (src) and the public address it reached
// (dst), for a stream (tcp) or datagram (udp) connection. When either
// address is missing or unparsable, it is the LOCAL form: the backend
// then uses the connection's own addresses. A v4 address paired with a
// v6 one is sent v4-mapped, so both are of one family. The encoding is
// go-proxyproto's, the library the server reads PROXY headers with.
func proxyV2Header(udp bool, src, dst string) []byte {
	var sa, da net.Addr
	s, serr := netip.ParseAddrPort(src)
	d, derr := netip.ParseAddrPort(dst)
	if serr == nil && derr == nil {
		s = netip.AddrPortFrom(s.Addr().Unmap(), s.Port())
		d = netip.AddrPortFrom(d.Addr().Unmap(), d.Port())
		if udp {
			sa, da = net.UDPAddrFromAddrPort(s), net.UDPAddrFromAddrPort(d)
		} else {
			sa, da = net.TCPAddrFromAddrPort(s), net.TCPAddrFromAddrPort(d)
		}
	}
	hdr, err := proxyproto.HeaderProxyFromAddrs(2, sa, da).Format()
	if err != nil {
		// Only a header the library cannot encode gets here: send LOCAL.
		hdr, _ = (&proxyproto.Header{Version: 2, Command: proxyproto.LOCAL, TransportProtocol: proxyproto.UNSPEC}).Format()
	}
	return hdr
}
