package tunnel

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestConcurrencyOnTheWire: the snapshot survives a frame round trip, an
// announcement without it (an older client) decodes to nil, and a
// negative figure is refused.
func TestConcurrencyOnTheWire(t *testing.T) {
	cc := &Concurrency{Mode: "aimd", Desired: 7, Min: 1, Max: 20}
	in := Announcement{Name: "n", InstanceID: "i", Services: []Service{{ID: "0", Hostnames: []string{"a.test"}, MaxConcurrent: 7, Healthy: true, Concurrency: cc}}}
	var buf bytes.Buffer
	if err := writeMessage(&buf, &message{Type: msgHeartbeat, Announcement: &in}); err != nil {
		t.Fatal(err)
	}
	m, err := readMessage(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Announcement.Services[0].Concurrency; got == nil || *got != *cc {
		t.Fatalf("decoded concurrency = %+v, want %+v", got, cc)
	}

	old := []byte(`{"type":"heartbeat","announcement":{"name":"n","instance_id":"i","services":[{"id":"0","hostnames":["a.test"],"max_concurrent":3,"healthy":true}]}}`)
	m, err = decodeMessage(old)
	if err != nil {
		t.Fatal(err)
	}
	if s := m.Announcement.Services[0]; s.Concurrency != nil || s.MaxConcurrent != 3 {
		t.Fatalf("older announcement decoded to %+v, want max_concurrent 3 and no concurrency", s)
	}

	bad := in
	bad.Services = []Service{in.Services[0]}
	bad.Services[0].Concurrency = &Concurrency{Mode: "aimd", Desired: -1}
	if err := bad.Validate(); err == nil {
		t.Error("Validate() with a negative desired = nil, want an error")
	}
	if err := in.Validate(); err != nil {
		t.Errorf("Validate() = %v, want nil", err)
	}
	if b, err := json.Marshal(Service{ID: "0"}); err != nil || bytes.Contains(b, []byte("concurrency")) {
		t.Errorf("a service without a limiter encodes as %s, want no concurrency key", b)
	}
}
