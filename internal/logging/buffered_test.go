package logging

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// lockedBuffer is a bytes.Buffer safe for the flusher goroutine and the
// test to share; it also counts the writes it received.
type lockedBuffer struct {
	mu     sync.Mutex
	b      bytes.Buffer
	writes int
	fail   error
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail != nil {
		return 0, l.fail
	}
	l.writes++
	return l.b.Write(p)
}

func (l *lockedBuffer) state() (string, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String(), l.writes
}

func TestBufferedBatchesUntilIntervalOrClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		out := &lockedBuffer{}
		b := NewBuffered(out, 1024, 100*time.Millisecond)
		for i := range 3 {
			fmt.Fprintf(b, "line %d\n", i)
		}
		if got, _ := out.state(); got != "" {
			t.Fatalf("written before the interval: %q, want nothing yet", got)
		}
		time.Sleep(100 * time.Millisecond) // fake time: the interval passes
		synctest.Wait()
		if got, writes := out.state(); got != "line 0\nline 1\nline 2\n" || writes != 1 {
			t.Fatalf("after the interval: %q in %d writes, want the 3 lines in 1 write", got, writes)
		}
		fmt.Fprintln(b, "last")
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		if got, _ := out.state(); !strings.HasSuffix(got, "last\n") {
			t.Fatalf("after Close: %q, want the last line flushed", got)
		}
		if err := b.Close(); err != nil {
			t.Fatalf("second Close = %v, want nil", err)
		}
	})
}

func TestBufferedNeverSplitsAWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		out := &lockedBuffer{}
		b := NewBuffered(out, 16, time.Hour)
		defer b.Close()
		b.Write([]byte("0123456789\n")) // 11 bytes
		b.Write([]byte("abcdefghij\n")) // does not fit: the first goes out whole
		if got, _ := out.state(); got != "0123456789\n" {
			t.Fatalf("after a write that did not fit: %q, want exactly the first line", got)
		}
		long := strings.Repeat("x", 40) + "\n" // larger than the buffer
		b.Write([]byte(long))
		if got, _ := out.state(); got != "0123456789\nabcdefghij\n"+long {
			t.Fatalf("after a write larger than the buffer: %q, want every line in order", got)
		}
	})
}

func TestBufferedRecoversFromWriteErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		out := &lockedBuffer{fail: errors.New("disk full")}
		b := NewBuffered(out, 64, time.Hour)
		defer b.Close()
		b.Write([]byte("lost\n"))
		if err := b.Flush(); err == nil || !strings.Contains(err.Error(), "disk full") {
			t.Fatalf("Flush with a failing writer = %v, want its error", err)
		}
		out.mu.Lock()
		out.fail = nil
		out.mu.Unlock()
		b.Write([]byte("kept\n"))
		if err := b.Flush(); err != nil {
			t.Fatalf("Flush after the writer recovered = %v", err)
		}
		if got, _ := out.state(); got != "kept\n" {
			t.Fatalf("after recovery: %q, want the new line", got)
		}
	})
}

func TestBufferedConcurrentLinesStayWhole(t *testing.T) {
	out := &lockedBuffer{}
	b := NewBuffered(out, 256, time.Millisecond)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				fmt.Fprintf(b, "g%d-%03d-%s\n", g, i, strings.Repeat("z", 20))
			}
		})
	}
	wg.Wait()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	got, _ := out.state()
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	if len(lines) != 8*200 {
		t.Fatalf("lines written = %d, want %d", len(lines), 8*200)
	}
	for _, l := range lines {
		if len(l) != len("g0-000-")+20 {
			t.Fatalf("a line was split or merged: %q", l)
		}
	}
}
