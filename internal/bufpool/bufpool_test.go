package bufpool

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// sizes records the length of every Write.
type sizes struct {
	bytes.Buffer
	writes []int
}

func (s *sizes) Write(p []byte) (int, error) {
	s.writes = append(s.writes, len(p))
	return s.Buffer.Write(p)
}

func TestCopyGrowsForBulk(t *testing.T) {
	src := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	var dst sizes
	n, err := Copy(&dst, bytes.NewReader(src))
	if err != nil || n != int64(len(src)) || !bytes.Equal(dst.Bytes(), src) {
		t.Fatalf("Copy = %d, %v; copied %d bytes equal=%v", n, err, dst.Len(), bytes.Equal(dst.Bytes(), src))
	}
	if dst.writes[0] != Size || dst.writes[1] != Large {
		t.Errorf("writes %v, want %d then %d each", dst.writes[:2], Size, Large)
	}
}

func TestCopyTrickleStaysSmall(t *testing.T) {
	src := bytes.Repeat([]byte("x"), 3*Size)
	var dst sizes
	// OneByteReader never fills the buffer: the copy never grows.
	if _, err := Copy(&dst, iotest.HalfReader(iotest.OneByteReader(bytes.NewReader(src)))); err != nil {
		t.Fatal(err)
	}
	b := NewBuf()
	defer b.Release()
	b.Filled(Size - 1)
	if len(b.Bytes()) != Size {
		t.Errorf("a read short of the buffer grew it to %d", len(b.Bytes()))
	}
	b.Filled(Size)
	if len(b.Bytes()) != Large {
		t.Errorf("a full read left the buffer at %d, want %d", len(b.Bytes()), Large)
	}
	if !bytes.Equal(dst.Bytes(), src) {
		t.Fatal("the trickle arrived changed")
	}
}

func TestCopyErrors(t *testing.T) {
	boom := errors.New("boom")
	if _, err := Copy(io.Discard, iotest.ErrReader(boom)); !errors.Is(err, boom) {
		t.Errorf("read error = %v, want boom", err)
	}
	var short shortWriter
	if _, err := Copy(short, bytes.NewReader([]byte("abc"))); !errors.Is(err, io.ErrShortWrite) {
		t.Errorf("short write = %v, want io.ErrShortWrite", err)
	}
}

type shortWriter struct{}

func (shortWriter) Write(p []byte) (int, error) { return len(p) - 1, nil }
