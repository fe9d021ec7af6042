package tunnel

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
)

// choppyReader hands out its data a few bytes at a time, with a timeout
// before every piece, as a control stream whose read deadline keeps
// passing mid-frame would.
type choppyReader struct {
	data    []byte
	piece   int
	timeout bool // the next call fails with yamux.ErrTimeout
}

func (r *choppyReader) Read(p []byte) (int, error) {
	if r.timeout = !r.timeout; r.timeout {
		return 0, yamux.ErrTimeout
	}
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), r.piece)], r.data)
	r.data = r.data[n:]
	return n, nil
}

// TestFrameReaderResumes: frames cut by timeouts at every few bytes, in
// header and body alike, come out whole and in order; the end of the
// stream between frames is io.EOF, inside one io.ErrUnexpectedEOF.
func TestFrameReaderResumes(t *testing.T) {
	ann := testAnnouncement()
	var stream bytes.Buffer
	var want [][]byte
	for seq := uint64(1); seq <= 5; seq++ {
		f := frame(t, &message{Type: msgHeartbeat, Seq: seq, Announcement: &ann})
		stream.Write(f)
		want = append(want, f[4:])
	}
	stream.Write(frame(t, &message{Type: msgAck})[:2]) // half a header
	for _, piece := range []int{1, 3, 7, 1 << 20} {
		r := &choppyReader{data: bytes.Clone(stream.Bytes()), piece: piece}
		var fr frameReader
		var got [][]byte
		timeouts := 0
		for {
			body, err := fr.next(r)
			if errors.Is(err, yamux.ErrTimeout) {
				timeouts++
				continue
			}
			if err != nil {
				if !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("piece %d: end inside a header = %v, want io.ErrUnexpectedEOF", piece, err)
				}
				break
			}
			got = append(got, body)
		}
		if len(got) != len(want) {
			t.Fatalf("piece %d: %d frames, want %d", piece, len(got), len(want))
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("piece %d: frame %d = %q, want %q", piece, i, got[i], want[i])
			}
		}
		if piece == 1 && timeouts < stream.Len() {
			t.Fatalf("piece 1: %d timeouts over %d bytes: the reader did not cut the frames", timeouts, stream.Len())
		}
	}

	var fr frameReader
	if _, err := fr.next(bytes.NewReader(nil)); err != io.EOF {
		t.Fatalf("empty stream = %v, want io.EOF", err)
	}
	fr = frameReader{}
	if _, err := fr.next(bytes.NewReader([]byte("\x7f\xff\xff\xff"))); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("2 GiB length prefix = %v, want ErrFrameTooLarge", err)
	}
	fr = frameReader{}
	if _, err := fr.next(bytes.NewReader([]byte("\x00\x00\x00\x09abc"))); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("end inside a body = %v, want io.ErrUnexpectedEOF", err)
	}
}

// The two tests below pace a client's writes with real sleeps: the pauses
// are what they test (a frame still unfinished when a deadline passes),
// and testing/synctest cannot host yamux (handshake_test.go says why).

// TestHeldHeartbeatAppliedMidFrame: the control loop reads the stream
// itself, its deadline cut short by a held heartbeat's time. A held
// heartbeat is applied on time while the next frame is half sent, and
// that frame, finished later, is read whole: the session stays up and
// acks it.
func TestHeldHeartbeatAppliedMidFrame(t *testing.T) {
	const interval = 300 * time.Millisecond
	_, reg, sess, _, ctrl := startHostile(t, func(c *ServerConfig) { c.AnnounceInterval = interval }, nil)
	acks := make(chan uint64, 8)
	go func() {
		defer close(acks)
		for {
			m, err := readMessage(ctrl)
			if err != nil {
				return
			}
			if m.Type == msgAck {
				acks <- m.Seq
			}
		}
	}()
	send := func(b []byte) {
		t.Helper()
		if _, err := ctrl.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	send(frame(t, &message{Type: msgHeartbeat, Seq: 1, Announcement: flip(false)}))
	if seq := waitFor(t, acks, 5*time.Second, "ack 1"); seq != 1 {
		t.Fatalf("first ack = %d, want 1", seq)
	}
	held := time.Now()
	send(frame(t, &message{Type: msgHeartbeat, Seq: 2, Announcement: flip(true)}))
	third := frame(t, &message{Type: msgHeartbeat, Seq: 3, Announcement: flip(false)})
	send(third[:2]) // half of the length prefix
	time.Sleep(20 * time.Millisecond)
	send(third[2:10]) // the rest of it and a few bytes of the body

	if seq := waitFor(t, acks, 5*time.Second, "ack 2, held"); seq != 2 {
		t.Fatalf("ack = %d, want 2", seq)
	}
	if waited := time.Since(held); waited > interval+3*time.Second {
		t.Fatalf("held heartbeat applied after %v, want about %v", waited, interval)
	}
	if !sess.Announcement().Services[0].Healthy {
		t.Fatal("held heartbeat 2 (healthy) not applied by its ack")
	}
	time.Sleep(interval) // past the hold, still mid-frame
	send(third[10:])
	if seq := waitFor(t, acks, 5*time.Second, "ack 3"); seq != 3 {
		t.Fatalf("ack = %d, want 3", seq)
	}
	if sess.Announcement().Services[0].Healthy {
		t.Fatal("heartbeat 3 (unhealthy), sent in pieces, not applied by its ack")
	}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if reg.updates != 4 { // hello, 1, 2, 3
		t.Fatalf("registry updates = %d, want 4", reg.updates)
	}
}

// TestHeartbeatMissedMidFrame: a frame begun and never finished does not
// keep a session: the down threshold counts from the last whole frame,
// not from the last byte, and not from a held heartbeat's time.
func TestHeartbeatMissedMidFrame(t *testing.T) {
	const threshold = 900 * time.Millisecond
	_, reg, _, _, ctrl := startHostile(t, func(c *ServerConfig) {
		c.DownThreshold = threshold
		c.AnnounceInterval = 100 * time.Millisecond
	}, nil)
	go io.Copy(io.Discard, ctrl)
	start := time.Now()
	ctrl.Write(frame(t, &message{Type: msgHeartbeat, Seq: 1, Announcement: flip(false)}))
	ctrl.Write(frame(t, &message{Type: msgHeartbeat, Seq: 2, Announcement: flip(true)})) // held
	third := frame(t, &message{Type: msgHeartbeat, Seq: 3, Announcement: flip(false)})
	ctrl.Write(third[:len(third)/2])
	for i := 0; i < 4; i++ { // a byte now and then, never the whole frame
		time.Sleep(threshold / 4)
		ctrl.Write(third[len(third)/2+i : len(third)/2+i+1])
	}
	waitFor(t, reg.detached, 10*time.Second, "session with a stalled frame dropped")
	if d := time.Since(start); d < threshold {
		t.Fatalf("dropped after %v, want no sooner than the threshold %v", d, threshold)
	}
}

// FuzzFrameReader: frames read in pieces cut by timeouts come out as the
// same frames, or the same error, as one uninterrupted read gives.
func FuzzFrameReader(f *testing.F) {
	ann := testAnnouncement()
	var buf bytes.Buffer
	writeMessage(&buf, &message{Type: msgHeartbeat, Seq: 1, Announcement: &ann})
	f.Add(buf.Bytes(), uint8(1))
	f.Add([]byte("\x00\x00\x00\x03abc\x00\x00\x00\x00\x7f"), uint8(2))
	f.Add([]byte("\x7f\xff\xff\xff"), uint8(4))
	f.Fuzz(func(t *testing.T, data []byte, piece uint8) {
		whole := bytes.NewReader(data)
		chopped := &choppyReader{data: data, piece: int(piece)%16 + 1}
		var fr frameReader
		for range 64 {
			want, wantErr := readFrame(whole)
			got, err := fr.next(chopped)
			for errors.Is(err, yamux.ErrTimeout) {
				got, err = fr.next(chopped)
			}
			if (err == nil) != (wantErr == nil) || !bytes.Equal(got, want) {
				t.Fatalf("chopped read = %q, %v; whole read = %q, %v", got, err, want, wantErr)
			}
			if err != nil {
				return
			}
		}
	})
}
