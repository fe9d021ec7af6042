package agent

import (
	"encoding/binary"
	"net/netip"
)

// proxyV2Signature opens every PROXY protocol version 2 header.
var proxyV2Signature = [12]byte{0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a}

// proxyV2Header returns the PROXY protocol v2 header that tells a
// backend the visitor's address (src) and the public address it reached
// (dst), for a stream (tcp) or datagram (udp) connection. When either
// address is missing or unparsable, it is the LOCAL form: the backend
// then uses the connection's own addresses. A v4 address paired with a
// v6 one is sent v4-mapped, so both are of one family.
func proxyV2Header(udp bool, src, dst string) []byte {
	s, serr := netip.ParseAddrPort(src)
	d, derr := netip.ParseAddrPort(dst)
	hdr := make([]byte, 16, 16+36)
	copy(hdr, proxyV2Signature[:])
	if serr != nil || derr != nil {
		hdr[12] = 0x20 // version 2, LOCAL
		return hdr     // family UNSPEC, no address block
	}
	hdr[12] = 0x21 // version 2, PROXY
	sa, da := s.Addr().Unmap(), d.Addr().Unmap()
	transport := byte(0x1) // STREAM
	if udp {
		transport = 0x2 // DGRAM
	}
	if sa.Is4() && da.Is4() {
		hdr[13] = 0x10 | transport // AF_INET
		hdr = append(hdr, sa.AsSlice()...)
		hdr = append(hdr, da.AsSlice()...)
	} else {
		hdr[13] = 0x20 | transport // AF_INET6
		s16, d16 := sa.As16(), da.As16()
		hdr = append(hdr, s16[:]...)
		hdr = append(hdr, d16[:]...)
	}
	hdr = binary.BigEndian.AppendUint16(hdr, s.Port())
	hdr = binary.BigEndian.AppendUint16(hdr, d.Port())
	binary.BigEndian.PutUint16(hdr[14:16], uint16(len(hdr)-16))
	return hdr
}
