package tunnel

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func TestDatagramRoundTrip(t *testing.T) {
	var b bytes.Buffer
	msgs := [][]byte{{}, []byte("a"), bytes.Repeat([]byte("x"), 1500), bytes.Repeat([]byte("y"), MaxDatagram)}
	for _, m := range msgs {
		if err := WriteDatagram(&b, m); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, MaxDatagram)
	for i, m := range msgs {
		n, err := ReadDatagram(&b, buf)
		if err != nil || !bytes.Equal(buf[:n], m) {
			t.Fatalf("datagram %d: n=%d err=%v", i, n, err)
		}
	}
	if _, err := ReadDatagram(&b, buf); err != io.EOF {
		t.Fatalf("after the last datagram: %v, want io.EOF", err)
	}
}

func TestDatagramRefusals(t *testing.T) {
	if err := WriteDatagram(io.Discard, make([]byte, MaxDatagram+1)); !errors.Is(err, ErrDatagramTooLarge) {
		t.Fatalf("oversize write: %v", err)
	}
	// A datagram longer than the buffer is skipped; the next one reads.
	var b bytes.Buffer
	WriteDatagram(&b, bytes.Repeat([]byte("z"), 100))
	WriteDatagram(&b, []byte("ok"))
	buf := make([]byte, 10)
	if _, err := ReadDatagram(&b, buf); !errors.Is(err, ErrDatagramTooLarge) {
		t.Fatalf("long datagram: %v", err)
	}
	if n, err := ReadDatagram(&b, buf); err != nil || string(buf[:n]) != "ok" {
		t.Fatalf("after a skipped datagram: %q %v", buf[:n], err)
	}
	// Truncations.
	for _, in := range [][]byte{{0}, {0, 5, 'a'}} {
		if _, err := ReadDatagram(bytes.NewReader(in), make([]byte, 10)); err != io.ErrUnexpectedEOF {
			t.Fatalf("truncated %v: %v, want io.ErrUnexpectedEOF", in, err)
		}
	}
	if _, err := ReadDatagram(bytes.NewReader([]byte{0, 50, 'a'}), make([]byte, 10)); err != io.ErrUnexpectedEOF {
		t.Fatalf("truncated long datagram: %v", err)
	}
}

func FuzzReadDatagram(f *testing.F) {
	f.Add([]byte{0, 2, 'h', 'i'})
	f.Add([]byte{255, 255})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		buf := make([]byte, 512)
		for {
			n, err := ReadDatagram(r, buf)
			if n > len(buf) {
				t.Fatalf("n=%d over the buffer", n)
			}
			if err != nil && !errors.Is(err, ErrDatagramTooLarge) {
				return
			}
		}
	})
}
