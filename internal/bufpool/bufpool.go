// Package bufpool owns the copy buffers of the data path: slices reused
// through sync.Pools so that moving a body allocates nothing. A copy starts
// with a Size buffer and moves to a Large one once a read fills it (a bulk
// transfer), so a long-lived trickle (SSE, a chat WebSocket, an idle TCP
// tunnel) holds 32 KiB while a bulk body moves in fewer, larger writes:
// fewer yamux frames, WebSocket messages and syscalls per byte.
package bufpool

import (
	"io"
	"sync"
)

// Size is the length of the buffer every copy starts with.
const Size = 32 << 10

// Large is the length of the buffer a copy moves to once a read fills
// the Size one.
const Large = 128 << 10

var pool = sync.Pool{New: func() any {
	b := make([]byte, Size)
	return &b
}}

var large = sync.Pool{New: func() any {
	b := make([]byte, Large)
	return &b
}}

// Get returns a buffer of Size bytes. Return it with Put.
func Get() *[]byte { return pool.Get().(*[]byte) }

// Put returns b to the pool; b must not be used afterwards.
func Put(b *[]byte) { pool.Put(b) }

// Buf is a copy buffer that grows from Size to Large once a read fills it.
// Use Bytes for each read, Filled after it, and Release at the end. The
// zero Buf is not ready: use NewBuf.
type Buf struct {
	p     *[]byte
	large bool
}

// NewBuf returns a Size buffer.
func NewBuf() Buf { return Buf{p: Get()} }

// Bytes returns the buffer to read into.
func (b *Buf) Bytes() []byte { return *b.p }

// Filled records that a read returned n bytes; when that filled a Size
// buffer, the next Bytes is a Large one. Call it after the bytes were
// written on: the old buffer goes back to its pool.
func (b *Buf) Filled(n int) {
	if b.large || n < Size {
		return
	}
	pool.Put(b.p)
	b.p, b.large = large.Get().(*[]byte), true
}

// Release returns the buffer to its pool; b must not be used afterwards.
func (b *Buf) Release() {
	if b.large {
		large.Put(b.p)
	} else {
		pool.Put(b.p)
	}
	b.p = nil
}

// Copy copies src to dst until EOF or an error, with a pooled Buf. Unlike
// io.Copy it always uses its buffer (no WriterTo or ReaderFrom), so the
// reads and writes have the sizes above.
func Copy(dst io.Writer, src io.Reader) (int64, error) {
	b := NewBuf()
	defer b.Release()
	var written int64
	for {
		n, rerr := src.Read(b.Bytes())
		if n > 0 {
			w, werr := dst.Write(b.Bytes()[:n])
			written += int64(w)
			if werr != nil {
				return written, werr
			}
			if w != n {
				return written, io.ErrShortWrite
			}
			b.Filled(n)
		}
		if rerr == io.EOF {
			return written, nil
		}
		if rerr != nil {
			return written, rerr
		}
	}
}
