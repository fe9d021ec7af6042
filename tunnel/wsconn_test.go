package tunnel

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/testkit/poll"
	"github.com/gorilla/websocket"
)

// wsPair returns a muxConn on the client end of a WebSocket connection and
// the raw server end, on which the test reads messages one by one.
func wsPair(t *testing.T) (*muxConn, *websocket.Conn) {
	t.Helper()
	peer := make(chan *websocket.Conn, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := upgrader.Upgrade(w, r, nil)
		if err != nil {
			t.Errorf("upgrade: %v", err)
			return
		}
		peer <- ws
	}))
	t.Cleanup(srv.Close)
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	c := newWSConn(ws)
	p := <-peer
	t.Cleanup(func() { c.Close(); p.Close() })
	return c, p
}

// yframe returns a yamux frame of the given type whose body (data frames
// only) is n bytes of seed.
func yframe(typ byte, id uint32, n int, seed byte) (hdr, body []byte) {
	hdr = make([]byte, yamuxHeaderSize)
	hdr[1] = typ
	binary.BigEndian.PutUint32(hdr[4:8], id)
	binary.BigEndian.PutUint32(hdr[8:12], uint32(n))
	if typ != yamuxTypeData {
		return hdr, nil
	}
	return hdr, bytes.Repeat([]byte{seed}, n)
}

// splitFrames parses msg as whole yamux frames and returns how many it
// holds, or -1 if a frame is cut at the message's end.
func splitFrames(msg []byte) int {
	n := 0
	for len(msg) > 0 {
		if len(msg) < yamuxHeaderSize {
			return -1
		}
		size := yamuxHeaderSize
		if msg[1] == yamuxTypeData {
			size += int(binary.BigEndian.Uint32(msg[8:12]))
		}
		if len(msg) < size {
			return -1
		}
		msg = msg[size:]
		n++
	}
	return n
}

// TestWSConnCoalesces writes a yamux-like sequence of small frames, data
// frames with small and large bodies, as yamux's send loop does (header
// and body in two calls), and reads the messages on the other end: the
// bytes arrive in order, no message cuts a frame, and the small frames
// share messages.
func TestWSConnCoalesces(t *testing.T) {
	c, peer := wsPair(t)
	rng := rand.New(rand.NewPCG(1, 2))
	var want bytes.Buffer
	const frames = 2000
	done := make(chan error, 1)
	go func() {
		for i := range frames {
			var hdr, body []byte
			switch k := rng.IntN(10); {
			case k < 5: // a window update or a stream's open or close
				hdr, body = yframe(1, uint32(i), 0, 0)
				binary.BigEndian.PutUint32(hdr[8:12], uint32(rng.IntN(1<<20)))
			case k < 9:
				hdr, body = yframe(yamuxTypeData, uint32(i), 1+rng.IntN(300), byte(i))
			default:
				hdr, body = yframe(yamuxTypeData, uint32(i), directMin+rng.IntN(32<<10), byte(i))
			}
			want.Write(hdr)
			want.Write(body)
			if _, err := c.Write(hdr); err != nil {
				done <- err
				return
			}
			if body != nil {
				if _, err := c.Write(body); err != nil {
					done <- err
					return
				}
			}
		}
		done <- nil
	}()
	var got bytes.Buffer
	messages, parsed := 0, 0
	peer.SetReadDeadline(time.Now().Add(20 * time.Second))
	for parsed < frames {
		typ, msg, err := peer.ReadMessage()
		if err != nil {
			t.Fatalf("read after %d frames in %d messages: %v", parsed, messages, err)
		}
		if typ != websocket.BinaryMessage {
			t.Fatalf("message type %d, want binary", typ)
		}
		n := splitFrames(msg)
		if n < 0 {
			t.Fatalf("message %d (%d bytes) cuts a frame in two", messages, len(msg))
		}
		parsed += n
		messages++
		got.Write(msg)
	}
	if err := <-done; err != nil {
		t.Fatalf("Write: %v", err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("the peer read %d bytes that differ from the %d written", got.Len(), want.Len())
	}
	if messages > frames/2 {
		t.Errorf("%d frames took %d messages; the small ones should share", frames, messages)
	}
	t.Logf("%d frames, %d bytes, %d messages", frames, want.Len(), messages)
}

// TestWSConnCloseSendsPending closes right after small writes: the peer
// still reads every byte before the close.
func TestWSConnCloseSendsPending(t *testing.T) {
	c, peer := wsPair(t)
	var want []byte
	for i := range 100 {
		hdr, body := yframe(yamuxTypeData, uint32(i), 40, byte(i))
		want = append(append(want, hdr...), body...)
		c.Write(hdr)
		c.Write(body)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := c.Write([]byte("late")); err == nil {
		t.Fatal("Write after Close succeeded")
	}
	peer.SetReadDeadline(time.Now().Add(10 * time.Second))
	var got []byte
	for {
		_, msg, err := peer.ReadMessage()
		if err != nil {
			break
		}
		got = append(got, msg...)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the peer read %d bytes before the close, want the %d written", len(got), len(want))
	}
}

// TestWSConnStalledPeer: a peer that stops reading makes Write wait (the
// pending bytes are bounded), and Close still returns promptly, failing
// the waiting Write, with no goroutine left (goleak checks).
func TestWSConnStalledPeer(t *testing.T) {
	c, _ := wsPair(t)
	blocked := make(chan error, 1)
	go func() {
		hdr, body := yframe(yamuxTypeData, 1, 200, 'x')
		for {
			if _, err := c.Write(hdr); err != nil {
				blocked <- err
				return
			}
			if _, err := c.Write(body); err != nil {
				blocked <- err
				return
			}
		}
	}()
	// The socket buffers fill and the writer waits; nothing returns.
	select {
	case err := <-blocked:
		t.Fatalf("Write to a peer that does not read returned %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	c.wmu.Lock()
	pending := len(c.pending)
	c.wmu.Unlock()
	if pending > maxPending+directMin {
		t.Errorf("%d bytes pending, bound %d", pending, maxPending+directMin)
	}
	start := time.Now()
	c.Close()
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close took %v with a stalled peer", d)
	}
	select {
	case err := <-blocked:
		if err == nil {
			t.Fatal("the waiting Write succeeded after Close")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting Write did not return after Close")
	}
}

// TestWSConnFlusherExitsWhenIdle: the flusher runs only while frames wait
// to be sent. Once the peer has read them no flusher goroutine is left
// (an idle session holds none), and the next small frame starts one again.
func TestWSConnFlusherExitsWhenIdle(t *testing.T) {
	c, peer := wsPair(t)
	peer.SetReadDeadline(time.Now().Add(10 * time.Second))
	for round := range 3 {
		var want []byte
		for i := range 20 {
			hdr, _ := yframe(1 /* window update */, uint32(round*100+i), 0, 0)
			want = append(want, hdr...)
			if _, err := c.Write(hdr); err != nil {
				t.Fatalf("round %d: Write: %v", round, err)
			}
		}
		var got []byte
		for len(got) < len(want) {
			_, msg, err := peer.ReadMessage()
			if err != nil {
				t.Fatalf("round %d: the peer read %d of %d bytes: %v", round, len(got), len(want), err)
			}
			got = append(got, msg...)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("round %d: the peer read other bytes than were written", round)
		}
		poll.Until(t, 5*time.Second, "the flusher exiting once nothing is pending", func() bool {
			return flushers() == 0
		})
	}
}

// flushers counts the goroutines running a muxConn's flusher.
func flushers() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return bytes.Count(buf, []byte("tunnel.(*muxConn).flush"))
}

// FuzzWSConnWrites drives a muxConn with a sequence of yamux-like writes
// decoded from the input (small frames, data frames with bodies below and
// above directMin, headers whose body comes in the next call): the peer
// reads every byte in order, and no message cuts a frame.
func FuzzWSConnWrites(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7})
	f.Add([]byte{3, 255, 3, 255, 1, 0, 2, 9})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 64 {
			ops = ops[:64]
		}
		c, peer := wsPair(t)
		var want bytes.Buffer
		var writes [][]byte // in yamux's order: a header, then its body
		for i := 0; i+1 < len(ops); i += 2 {
			var hdr, body []byte
			n := int(ops[i+1])
			switch ops[i] % 4 {
			case 0:
				hdr, body = yframe(1, uint32(i), 0, 0)
			case 1:
				hdr, body = yframe(yamuxTypeData, uint32(i), 1+n, byte(i))
			case 2:
				hdr, body = yframe(yamuxTypeData, uint32(i), directMin+n*64, byte(i))
			default:
				hdr, body = yframe(yamuxTypeData, uint32(i), maxPending/2+n*16, byte(i))
			}
			want.Write(hdr)
			want.Write(body)
			writes = append(writes, hdr)
			if body != nil {
				writes = append(writes, body)
			}
		}
		done := make(chan error, 1)
		go func() { // the peer reads meanwhile, so backpressure cannot stall it
			for _, w := range writes {
				if _, err := c.Write(w); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		var got bytes.Buffer
		peer.SetReadDeadline(time.Now().Add(10 * time.Second))
		for got.Len() < want.Len() {
			_, msg, err := peer.ReadMessage()
			if err != nil {
				t.Fatalf("read after %d of %d bytes: %v", got.Len(), want.Len(), err)
			}
			if splitFrames(msg) < 0 {
				t.Fatalf("a message of %d bytes cuts a frame", len(msg))
			}
			got.Write(msg)
		}
		if err := <-done; err != nil {
			t.Fatalf("Write: %v", err)
		}
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Fatal("the peer read other bytes than were written")
		}
	})
}
