package tunnel

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scalingWireJSON is a scaling block in the wire format every release
// has spoken: durations as whole milliseconds under *_ms keys.
const scalingWireJSON = `{"url":"https://hook.test/scale","secret":"s3","min":1,"max":8,"cold_start_ms":45000,"target_utilization":0.8,"window_ms":15000,"cooldown_ms":60000}`

// scalingWireValue is scalingWireJSON as a Scaling.
var scalingWireValue = Scaling{URL: "https://hook.test/scale", Secret: "s3", Min: 1, Max: 8,
	ColdStart: 45 * time.Second, TargetUtilization: 0.8, Window: 15 * time.Second, Cooldown: time.Minute}

// TestScalingWireFormat pins the bytes of a scaling block both ways, so
// that a client and a server of different releases read each other.
func TestScalingWireFormat(t *testing.T) {
	b, err := json.Marshal(scalingWireValue)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != scalingWireJSON {
		t.Errorf("json.Marshal(%+v) =\n%s\nwant\n%s", scalingWireValue, b, scalingWireJSON)
	}
	var got Scaling
	if err := json.Unmarshal([]byte(scalingWireJSON), &got); err != nil {
		t.Fatal(err)
	}
	if got != scalingWireValue {
		t.Errorf("json.Unmarshal(%s) = %+v, want %+v", scalingWireJSON, got, scalingWireValue)
	}

	// Inside a frame, behind the announcement's pointer, as a hello carries it.
	var buf bytes.Buffer
	ann := &Announcement{Name: "n", InstanceID: "i", Scaling: &scalingWireValue}
	if err := writeMessage(&buf, &message{Type: msgHello, Version: Version, Announcement: ann}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(buf.Bytes(), []byte(`"scaling":`+scalingWireJSON)) {
		t.Errorf("hello frame %s does not carry %s", buf.Bytes()[4:], scalingWireJSON)
	}
	m, err := readMessage(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if s := m.Announcement.Scaling; s == nil || *s != scalingWireValue {
		t.Errorf("decoded hello scaling = %+v, want %+v", s, scalingWireValue)
	}

	// The wire keeps whole milliseconds: a finer part is dropped, as the
	// client always did, and a block without secret omits the key.
	fine := Scaling{URL: "https://h.test", ColdStart: 1500 * time.Microsecond, Window: time.Second + time.Nanosecond, Cooldown: -2500 * time.Microsecond}
	const fineJSON = `{"url":"https://h.test","min":0,"max":0,"cold_start_ms":1,"target_utilization":0,"window_ms":1000,"cooldown_ms":-2}`
	if b, err := json.Marshal(fine); err != nil || string(b) != fineJSON {
		t.Errorf("json.Marshal(%+v) = %s, %v, want %s", fine, b, err, fineJSON)
	}
}

// TestScalingWireRange: a count of milliseconds that has no Duration is
// refused with an error that names the key, never wrapped around into
// another value; the largest and smallest that fit decode exactly, and
// negatives decode as they are for Validate to judge.
func TestScalingWireRange(t *testing.T) {
	const limit = math.MaxInt64 / int64(time.Millisecond)
	block := func(key string, ms int64) []byte {
		s := strings.Replace(scalingWireJSON, `"`+key+`":`, `"`+key+`":`+strconv.FormatInt(ms, 10)+`,"x":`, 1)
		return []byte(s)
	}
	for _, key := range []string{"cold_start_ms", "window_ms", "cooldown_ms"} {
		for _, ms := range []int64{limit + 1, -limit - 1, math.MaxInt64, math.MinInt64, 9223372036854776} {
			var s Scaling
			err := json.Unmarshal(block(key, ms), &s)
			if err == nil || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "out of range") {
				t.Errorf("json.Unmarshal(%s %d) = %+v, %v; want an out of range error naming %s", key, ms, s, err, key)
			}
		}
		for _, ms := range []int64{limit, -limit, -1, 0} {
			var s Scaling
			if err := json.Unmarshal(block(key, ms), &s); err != nil {
				t.Errorf("json.Unmarshal(%s %d) = %v, want nil", key, ms, err)
				continue
			}
			got := map[string]time.Duration{"cold_start_ms": s.ColdStart, "window_ms": s.Window, "cooldown_ms": s.Cooldown}[key]
			if want := time.Duration(ms) * time.Millisecond; got != want || got.Milliseconds() != ms {
				t.Errorf("json.Unmarshal(%s %d) gives %v, want %v", key, ms, got, want)
			}
		}
	}
	// A hostile hello is refused as a malformed frame.
	hello := `{"type":"hello","version":1,"announcement":{"name":"n","instance_id":"i","services":[],"scaling":` + string(block("window_ms", math.MaxInt64)) + `}}`
	if _, err := decodeMessage([]byte(hello)); err == nil || !strings.Contains(err.Error(), "window_ms") {
		t.Errorf("decodeMessage(hello with window_ms MaxInt64) = %v, want an error naming window_ms", err)
	}
	if err := json.Unmarshal([]byte(`{"cold_start_ms":"45s"}`), new(Scaling)); err == nil {
		t.Error(`json.Unmarshal({"cold_start_ms":"45s"}) = nil, want a type error`)
	}
}

// FuzzScalingJSON decodes arbitrary bytes as a scaling block: it never
// panics, and a block it accepts encodes and decodes again to itself.
func FuzzScalingJSON(f *testing.F) {
	f.Add([]byte(scalingWireJSON))
	f.Add([]byte(`{"url":"https://h.test","cold_start_ms":-1,"window_ms":9223372036854,"cooldown_ms":-9223372036854}`))
	f.Add([]byte(`{"cold_start_ms":9223372036855}`))
	f.Add([]byte(`{"window_ms":1e30}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var s Scaling
		if err := json.Unmarshal(b, &s); err != nil {
			return
		}
		enc, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("json.Marshal(%+v) = %v", s, err)
		}
		var again Scaling
		if err := json.Unmarshal(enc, &again); err != nil {
			t.Fatalf("json.Unmarshal(%s) = %v, want nil", enc, err)
		}
		if again != s {
			t.Fatalf("round trip of %s = %+v, want %+v", b, again, s)
		}
	})
}
