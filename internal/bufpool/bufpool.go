// Package bufpool owns the copy buffers of the data path: 32 KiB slices
// reused through a sync.Pool so that moving a body allocates nothing.
package bufpool

import (
	"io"
	"sync"
)

// Size is the length of every pooled buffer.
const Size = 32 << 10

var pool = sync.Pool{New: func() any {
	b := make([]byte, Size)
	return &b
}}

// Get returns a buffer of Size bytes. Return it with Put.
func Get() *[]byte { return pool.Get().(*[]byte) }

// Put returns b to the pool; b must not be used afterwards.
func Put(b *[]byte) { pool.Put(b) }

// Copy is io.CopyBuffer with a pooled buffer.
func Copy(dst io.Writer, src io.Reader) (int64, error) {
	b := Get()
	defer Put(b)
	return io.CopyBuffer(dst, src, *b)
}
