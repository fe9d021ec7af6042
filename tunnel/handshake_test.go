package tunnel

import (
	"bytes"
	"context"
	"encoding/binary"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gorilla/websocket"
	"github.com/hashicorp/yamux"

	"github.com/aperio-dev/aperio/internal/testkit/memnet"
)

// These tests run on real time with short timeouts. They cannot use
// testing/synctest: yamux keeps its write timers in a package-level
// sync.Pool, and a timer created in one bubble and reused in another is a
// fatal error.

// testHandshake is the handshake bound in these tests.
const testHandshake = 300 * time.Millisecond

// within fails unless got is at least want and less than want plus a
// generous scheduling margin.
func within(t *testing.T, what string, got, want time.Duration) {
	t.Helper()
	if got < want || got > want+3*time.Second {
		t.Fatalf("%s after %v, want %v (plus scheduling slack)", what, got, want)
	}
}

// rawClient speaks the tunnel protocol by hand so tests can misbehave.
type rawClient struct {
	mux *yamux.Session
}

// dialRaw performs the upgrade against srv (inside the caller's bubble) and
// returns a yamux client session on it.
func dialRaw(t *testing.T, srv *Server) *rawClient {
	t.Helper()
	ln := memnet.Listen()
	hs := &http.Server{Handler: srv}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close(); ln.Close() })
	d := &websocket.Dialer{NetDialContext: ln.Dial, Subprotocols: []string{Subprotocol}}
	ws, _, err := d.DialContext(context.Background(), "ws://memnet"+Path, http.Header{"Authorization": {"Bearer " + testToken}})
	if err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	mux, err := yamux.Client(newWSConn(ws), yamuxConfig(clientAcceptBacklog))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mux.Close() })
	return &rawClient{mux: mux}
}

// hello opens the control stream, sends the test announcement's hello
// and returns the stream and the server's welcome.
func (rc *rawClient) hello(t *testing.T) (*yamux.Stream, *message) {
	t.Helper()
	ctrl, err := rc.mux.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	ann := testAnnouncement()
	if err := writeMessage(ctrl, &message{Type: msgHello, Version: Version, Announcement: &ann}); err != nil {
		t.Fatal(err)
	}
	welcome, err := readMessage(ctrl)
	if err != nil || welcome.Type != msgWelcome {
		t.Fatalf("welcome = %+v, %v, want welcome", welcome, err)
	}
	return ctrl, welcome
}

func TestClientSilentAfterUpgradeIsDropped(t *testing.T) {
	reg := newFakeRegistry()
	srv, err := NewServer(ServerConfig{Auth: tokenAuth{}, Registry: reg, HandshakeTimeout: testHandshake})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rc := dialRaw(t, srv)
	<-rc.mux.CloseChan() // the client never opens the control stream
	within(t, "silent client dropped", time.Since(start), testHandshake)
	if n := len(srv.Sessions()); n != 0 {
		t.Fatalf("Sessions() = %d, want 0", n)
	}
}

func TestClientStopsMidHello(t *testing.T) {
	reg := newFakeRegistry()
	srv, err := NewServer(ServerConfig{Auth: tokenAuth{}, Registry: reg, HandshakeTimeout: testHandshake})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rc := dialRaw(t, srv)
	ctrl, err := rc.mux.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	// Half a frame: a length prefix promising 100 bytes, then 10.
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], 100)
	ctrl.Write(hdr[:])
	ctrl.Write(bytes.Repeat([]byte("{"), 10))
	<-rc.mux.CloseChan()
	within(t, "client stuck mid-hello dropped", time.Since(start), testHandshake)
	select {
	case s := <-reg.attached:
		t.Fatalf("registry attached session %s, want none", s.ID())
	default:
	}
}

func TestGarbageHelloRefused(t *testing.T) {
	// Only the wrong version is refused for good (code and permanent):
	// the others are a broken client, not a setting to fix.
	tests := []struct {
		name  string
		frame []byte
		code  string
	}{
		{"not json", []byte("\x00\x00\x00\x05hello"), ""},
		{"oversized", []byte("\x7f\xff\xff\xff"), ""},
		{"wrong type", frame(t, &message{Type: msgAck}), ""},
		{"wrong version", frame(t, &message{Type: msgHello, Version: 99, Announcement: &Announcement{}}), RefusalVersion},
		{"no announcement", []byte("\x00\x00\x00\x10{\"type\":\"hello\"}"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, err := NewServer(ServerConfig{Auth: tokenAuth{}, Registry: newFakeRegistry()})
			if err != nil {
				t.Fatal(err)
			}
			rc := dialRaw(t, srv)
			ctrl, err := rc.mux.OpenStream()
			if err != nil {
				t.Fatal(err)
			}
			ctrl.Write(tt.frame)
			m, err := readMessage(ctrl)
			if err != nil {
				t.Fatalf("read answer to %s: %v", tt.name, err)
			}
			if m.Type != msgRefused || m.Reason == "" || m.Code != tt.code || m.Permanent != (tt.code != "") {
				t.Fatalf("answer to %s = %+v, want refused with a reason, code %q", tt.name, m, tt.code)
			}
			start := time.Now()
			<-rc.mux.CloseChan()
			if d := time.Since(start); d > time.Second {
				t.Fatalf("session closed %v after the refusal, want at once", d)
			}
		})
	}
}

func frame(t *testing.T, m *message) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := writeMessage(&buf, m); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestMissedHeartbeatsDropClient(t *testing.T) {
	const threshold = 600 * time.Millisecond
	reg := newFakeRegistry()
	srv, err := NewServer(ServerConfig{Auth: tokenAuth{}, Registry: reg, DownThreshold: threshold})
	if err != nil {
		t.Fatal(err)
	}
	rc := dialRaw(t, srv)
	ctrl, welcome := rc.hello(t)
	ann := testAnnouncement()
	if got := time.Duration(welcome.HeartbeatMS) * time.Millisecond; got != threshold/3 {
		t.Fatalf("heartbeat interval = %v, want %v (a third of the down threshold)", got, threshold/3)
	}
	<-reg.attached
	// One heartbeat keeps it; then silence. The clock starts before the
	// heartbeat is sent: the server sees it later, so the drop comes no
	// sooner than threshold after beat.
	beat := time.Now()
	if err := writeMessage(ctrl, &message{Type: msgHeartbeat, Announcement: &ann, Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if ack, err := readMessage(ctrl); err != nil || ack.Type != msgAck || ack.Seq != 1 {
		t.Fatalf("ack = %+v, %v, want ack 1", ack, err)
	}
	<-reg.detached
	within(t, "client dropped after its last heartbeat", time.Since(beat), threshold)
}

func FuzzDecodeMessage(f *testing.F) {
	ann := testAnnouncement()
	gated := accessAnnouncement(&accessWireValue)
	for _, m := range []*message{
		{Type: msgHello, Version: 1, Announcement: &ann},
		{Type: msgHello, Version: 1, Announcement: &gated},
		{Type: msgHeartbeat, Seq: 3, Announcement: &ann},
		{Type: msgAck, Seq: 3, Notices: []string{"x"}},
		{Type: msgRefused, Reason: "no"},
	} {
		var buf bytes.Buffer
		if err := writeMessage(&buf, m); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	f.Add([]byte("\x7f\xff\xff\xff"))
	for _, raw := range []string{
		`{"type":"heartbeat","seq":1,"announcement":{"name":"a","instance_id":"i","services":[{"id":"0","hostnames":["app.test"],"healthy":true,"concurrency":{"mode":"aimd","desired":4,"min":1,"max":8}}],"scaling":{"url":"https://hook.test/x","min":0,"max":2}}}`,
		`{"type":"hello","version":1,"announcement":{"name":"a\u0000b","instance_id":"i","services":[{"id":"0","hostnames":["*.app.test"],"path":"/api","healthy":false}]}}`,
	} {
		var buf bytes.Buffer
		binary.Write(&buf, binary.BigEndian, uint32(len(raw)))
		buf.WriteString(raw)
		f.Add(buf.Bytes())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := readMessage(bytes.NewReader(data))
		if err != nil {
			return
		}
		if m.Announcement == nil || m.Announcement.Validate() != nil {
			return
		}
		// A valid announcement survives the trip the server's ack and the
		// client's next heartbeat make: encoded again, it decodes the same.
		var buf bytes.Buffer
		if err := writeMessage(&buf, m); err != nil {
			t.Fatalf("re-encode a valid %s: %v", m.Type, err)
		}
		again, err := readMessage(&buf)
		if err != nil {
			t.Fatalf("decode a re-encoded valid %s: %v", m.Type, err)
		}
		if diff := cmp.Diff(m, again); diff != "" {
			t.Fatalf("valid %s changed across a re-encoding (-first +again):\n%s", m.Type, diff)
		}
	})
}
