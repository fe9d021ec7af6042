package oidc

import (
	"encoding/binary"
	"errors"
	"time"
)

// The session cookie and the login cookie hold small binary payloads
// inside the seal: fixed fields, then strings prefixed by their length.
// A sealed value is authentic before it is decoded, so decoding guards
// against a bug or a stolen keyring, not the visitor; it still checks
// every length and never panics.

var errPayload = errors.New("oidc: malformed payload")

// writer appends a payload; it never fails, the caller bounds the fields.
type writer struct{ b []byte }

func (w *writer) byte(c byte)   { w.b = append(w.b, c) }
func (w *writer) int64(v int64) { w.b = binary.BigEndian.AppendUint64(w.b, uint64(v)) }
func (w *writer) raw(p []byte)  { w.b = append(w.b, p...) }
func (w *writer) str8(s string) { w.b = append(append(w.b, byte(len(s))), s...) }
func (w *writer) str16(s string) {
	w.b = append(binary.BigEndian.AppendUint16(w.b, uint16(len(s))), s...)
}
func (w *writer) time(t time.Time) { w.int64(t.Unix()) }

// reader consumes a payload; the first short read sets bad and every
// later read returns zero values.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) take(n int) []byte {
	if r.bad || n > len(r.b) {
		r.bad = true
		return nil
	}
	p := r.b[:n:n]
	r.b = r.b[n:]
	return p
}

func (r *reader) byte() byte {
	if p := r.take(1); p != nil {
		return p[0]
	}
	return 0
}

func (r *reader) int64() int64 {
	if p := r.take(8); p != nil {
		return int64(binary.BigEndian.Uint64(p))
	}
	return 0
}

func (r *reader) str8() string { return string(r.take(int(r.byte()))) }

func (r *reader) str16() string {
	p := r.take(2)
	if p == nil {
		return ""
	}
	return string(r.take(int(binary.BigEndian.Uint16(p))))
}

func (r *reader) time() time.Time { return time.Unix(r.int64(), 0) }

// done reports whether the payload was read whole and exactly.
func (r *reader) done() error {
	if r.bad || len(r.b) != 0 {
		return errPayload
	}
	return nil
}
