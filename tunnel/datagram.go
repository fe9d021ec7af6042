package tunnel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// A RawUDP stream carries the datagrams of one UDP flow (one visitor
// address on one public port), both ways, each as a 2-byte big-endian
// length and that many bytes. A stream keeps them in order and whole;
// the length is never zero-padded or split across datagrams.

// MaxDatagram is the largest UDP payload a raw stream carries: the
// largest an IPv4 UDP datagram can hold.
const MaxDatagram = 65507

// ErrDatagramTooLarge is the refusal of a datagram over MaxDatagram or
// over the reader's buffer.
var ErrDatagramTooLarge = errors.New("tunnel: datagram too large")

// WriteDatagram writes p as one framed datagram in a single Write, so
// that concurrent writers on one stream never interleave within a frame
// as long as each writes whole frames.
func WriteDatagram(w io.Writer, p []byte) error {
	if len(p) > MaxDatagram {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrDatagramTooLarge, len(p), MaxDatagram)
	}
	buf := make([]byte, 2+len(p))
	binary.BigEndian.PutUint16(buf, uint16(len(p)))
	copy(buf[2:], p)
	_, err := w.Write(buf)
	return err
}

// ReadDatagram reads one framed datagram into buf and returns its
// length. A datagram longer than buf is consumed and refused with
// ErrDatagramTooLarge, so the stream stays in step and the caller may
// go on reading. io.EOF means the stream ended between datagrams;
// io.ErrUnexpectedEOF that it ended within one.
func ReadDatagram(r io.Reader, buf []byte) (int, error) {
	var hdr [2]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, err
	}
	n := int(binary.BigEndian.Uint16(hdr[:]))
	if n > len(buf) || n > MaxDatagram {
		if _, err := io.CopyN(io.Discard, r, int64(n)); err != nil {
			return 0, noEOF(err)
		}
		return 0, fmt.Errorf("%w: %d bytes, buffer %d", ErrDatagramTooLarge, n, len(buf))
	}
	if _, err := io.ReadFull(r, buf[:n]); err != nil {
		return 0, noEOF(err)
	}
	return n, nil
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
