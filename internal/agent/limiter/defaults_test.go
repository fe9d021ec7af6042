package limiter

import (
	"strings"
	"testing"
)

// TestDefaultConfigValidates proves the dynamic defaults are valid, that a
// limiter built from them starts at DefaultMin under DefaultMax, and that
// impossible bounds are refused by Validate and New alike.
func TestDefaultConfigValidates(t *testing.T) {
	def := DefaultConfig()
	if err := def.Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v, want nil", err)
	}
	l, err := New(def)
	if err != nil {
		t.Fatalf("New(DefaultConfig()) = %v", err)
	}
	if s := l.Snapshot(); s.Mode != ModeAIMD || s.Min != DefaultMin || s.Max != DefaultMax || s.Desired != DefaultMin {
		t.Errorf("New(DefaultConfig()).Snapshot() = %+v, want aimd %d..%d starting at %d", s, DefaultMin, DefaultMax, DefaultMin)
	}
	for _, bad := range []Config{{Mode: "guess"}, {Mode: ModeAIMD, Min: 5, Max: 3}} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v.Validate() = nil, want an error", bad)
		}
		if _, err := New(bad); err == nil || !strings.HasPrefix(err.Error(), "concurrency: ") {
			t.Errorf("New(%+v) error = %v, want a concurrency error", bad, err)
		}
	}
}
