package tunnel

import (
	"bytes"
	"encoding/json"
	"errors"
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

// TestScalingProblems pins each rule of a complete block: the field, the
// rule and the words the server sends its clients.
func TestScalingProblems(t *testing.T) {
	ok := Scaling{URL: "https://p.example/scale", Max: 4}.WithDefaults()
	if err := ok.Validate(); err != nil {
		t.Fatalf("Validate(%+v) = %v, want nil", ok, err)
	}
	tests := []struct {
		name  string
		edit  func(*Scaling)
		field string
		rule  ScalingRule
		msg   string
	}{
		{"no url", func(s *Scaling) { s.URL = "" }, "url", ScalingRequired, "url is required"},
		{"long url", func(s *Scaling) { s.URL = "https://p.example/" + strings.Repeat("a", MaxScalingURLBytes) }, "url", ScalingTooLong, "url is longer than 2048 bytes"},
		{"bad url", func(s *Scaling) { s.URL = "https://p.example/%zz" }, "url", ScalingUnparsable, "url does not parse"},
		{"ftp url", func(s *Scaling) { s.URL = "ftp://p.example/" }, "url", ScalingScheme, "url must be https (or http where the server allows it)"},
		{"relative url", func(s *Scaling) { s.URL = "/scale" }, "url", ScalingScheme, "url must be https (or http where the server allows it)"},
		{"no host", func(s *Scaling) { s.URL = "https:///scale" }, "url", ScalingNoHost, "url has no host"},
		{"credentials", func(s *Scaling) { s.URL = "https://u:pw@p.example/" }, "url", ScalingCredentials, "url must not carry credentials: set secret instead"},
		{"long secret", func(s *Scaling) { s.Secret = strings.Repeat("s", MaxScalingSecretBytes+1) }, "secret", ScalingTooLong, "secret is longer than 4096 bytes"},
		{"negative min", func(s *Scaling) { s.Min = -1 }, "min", ScalingNegative, "min -1 is negative"},
		{"max below min", func(s *Scaling) { s.Min = 5 }, "max", ScalingBelowMin, "max 4 is below min 5"},
		{"negative cold start", func(s *Scaling) { s.ColdStart = -time.Second }, "cold_start", ScalingNegative, "cold_start -1s is negative"},
		{"cold start above max", func(s *Scaling) { s.ColdStart = MaxColdStart + time.Millisecond }, "cold_start", ScalingAboveMax, "cold_start 5m0.001s is above the maximum of 5m0s"},
		{"zero target", func(s *Scaling) { s.TargetUtilization = 0 }, "target_utilization", ScalingOutOfRange, "target_utilization 0 is not in (0,1]"},
		{"target above one", func(s *Scaling) { s.TargetUtilization = 1.01 }, "target_utilization", ScalingOutOfRange, "target_utilization 1.01 is not in (0,1]"},
		{"NaN target", func(s *Scaling) { s.TargetUtilization = math.NaN() }, "target_utilization", ScalingOutOfRange, "target_utilization NaN is not in (0,1]"},
		{"short window", func(s *Scaling) { s.Window = 999 * time.Millisecond }, "window", ScalingTooShort, "window 999ms is below 1s"},
		{"zero cooldown", func(s *Scaling) { s.Cooldown = 0 }, "cooldown", ScalingTooShort, "cooldown 0s is below 1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := ok
			tt.edit(&s)
			ps := s.Problems()
			if len(ps) != 1 || ps[0].Field != tt.field || ps[0].Rule != tt.rule || ps[0].Error() != tt.msg {
				t.Fatalf("Problems(%+v) = %v, want one %s %s %q", s, ps, tt.field, tt.rule, tt.msg)
			}
			var se *ScalingError
			if err := s.Validate(); !errors.As(err, &se) || err.Error() != tt.msg {
				t.Errorf("Validate() = %v, want %q as a *ScalingError", err, tt.msg)
			}
		})
	}
	// A negative max is below any min of 0 or more, and both are said.
	s := ok
	s.Max = -1
	if got, want := s.Validate().Error(), "max -1 is negative\nmax -1 is below min 0"; got != want {
		t.Errorf("Validate(max -1) = %q, want %q", got, want)
	}
}

// TestScalingDefaults: DefaultScaling is the documented defaults, a block
// with only a URL gets them from WithDefaults and is then valid, and
// WithDefaults keeps what a block sets.
func TestScalingDefaults(t *testing.T) {
	want := Scaling{ColdStart: 45 * time.Second, TargetUtilization: 0.8, Window: 15 * time.Second, Cooldown: time.Minute}
	if got := DefaultScaling(); got != want {
		t.Errorf("DefaultScaling() = %+v, want %+v", got, want)
	}
	got := Scaling{URL: "https://p.example/"}.WithDefaults()
	want.URL, want.Max = "https://p.example/", 1
	if got != want {
		t.Errorf("WithDefaults() = %+v, want %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("Validate(%+v) = %v, want nil", got, err)
	}
	set := Scaling{URL: "https://p.example/", Min: 3, Max: 7, ColdStart: time.Second, TargetUtilization: 0.5, Window: 2 * time.Second, Cooldown: 3 * time.Second}
	if got := set.WithDefaults(); got != set {
		t.Errorf("WithDefaults(%+v) = %+v, want it unchanged", set, got)
	}
	for min, want := range map[int]int{0: 1, 1: 1, 5: 5, -1: 0} {
		if got := (Scaling{Min: min}).WithDefaults().Max; got != want {
			t.Errorf("WithDefaults(min %d).Max = %d, want %d", min, got, want)
		}
	}
}
