package tunnel

import (
	"bytes"
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
)

// TestDrainOnTheWire: an ack encodes drain only when set, so a server
// that never drains sends exactly what it sent before; a drain ack
// decodes with Drain set, and one from an older server (no field) and one
// with fields this build does not know decode without it.
func TestDrainOnTheWire(t *testing.T) {
	b, err := json.Marshal(&message{Type: msgAck, Seq: 3})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("drain")) {
		t.Errorf("an ack without drain encodes as %s, want no drain key", b)
	}
	for _, tc := range []struct {
		name string
		body string
		want bool
	}{
		{"drain", `{"type":"ack","seq":3,"drain":true}`, true},
		{"old server", `{"type":"ack","seq":3}`, false},
		{"drain false", `{"type":"ack","seq":3,"drain":false}`, false},
		{"unknown fields", `{"type":"ack","seq":3,"future":{"x":1},"drain_v2":"soon"}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := decodeMessage([]byte(tc.body))
			if err != nil {
				t.Fatalf("decodeMessage(%s) error: %v", tc.body, err)
			}
			if m.Drain != tc.want || m.Seq != 3 {
				t.Fatalf("decodeMessage(%s) = drain %v seq %d, want drain %v seq 3", tc.body, m.Drain, m.Seq, tc.want)
			}
		})
	}
	if _, err := decodeMessage([]byte(`{"type":"ack","drain":"yes"}`)); err == nil {
		t.Error(`decodeMessage(drain "yes") = nil error, want a decode error`)
	}
}

// TestAskDrainReachesClient: until the server asks, acks do not call the
// client's OnDrain; after Session.AskDrain every ack does, over each conn
// kind, and asking twice changes nothing.
func TestAskDrainReachesClient(t *testing.T) {
	for _, kind := range connKinds {
		t.Run(kind, func(t *testing.T) {
			var drains atomic.Int32
			p := startPair(t, kind, newHandlerForwarder(t, echoHandler()), func(_ *ServerConfig, c *ClientConfig) {
				c.OnDrain = func() { drains.Add(1) }
			})
			ctx := context.Background()
			// AnnounceNow returns once its ack was handled, OnDrain
			// included.
			if err := p.client.AnnounceNow(ctx); err != nil {
				t.Fatalf("AnnounceNow() = %v, want nil", err)
			}
			if n := drains.Load(); n != 0 || p.session.DrainAsked() {
				t.Fatalf("before AskDrain: OnDrain called %d times, DrainAsked %v; want 0, false", n, p.session.DrainAsked())
			}
			p.session.AskDrain()
			p.session.AskDrain()
			if !p.session.DrainAsked() {
				t.Fatal("DrainAsked() = false after AskDrain")
			}
			if err := p.client.AnnounceNow(ctx); err != nil {
				t.Fatalf("AnnounceNow() = %v, want nil", err)
			}
			first := drains.Load()
			if first < 1 {
				t.Fatalf("after AskDrain and one ack: OnDrain called %d times, want at least 1", first)
			}
			if err := p.client.AnnounceNow(ctx); err != nil {
				t.Fatalf("AnnounceNow() = %v, want nil", err)
			}
			if n := drains.Load(); n <= first {
				t.Fatalf("OnDrain called %d times after another ack, want more than %d (every ack says drain)", n, first)
			}
		})
	}
}

// TestAckWithoutOnDrain: a client with no OnDrain (one that predates
// drain, in effect) keeps its session when the server asks it to drain.
func TestAckWithoutOnDrain(t *testing.T) {
	p := startPair(t, "pipe", newHandlerForwarder(t, echoHandler()), nil)
	p.session.AskDrain()
	for range 2 {
		if err := p.client.AnnounceNow(context.Background()); err != nil {
			t.Fatalf("AnnounceNow() = %v, want nil: the session must stay up", err)
		}
	}
	if !p.client.Connected() {
		t.Fatal("client disconnected after drain acks it does not handle")
	}
}
