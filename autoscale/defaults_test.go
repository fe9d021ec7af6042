package autoscale

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestDefaultConfigValidates proves the defaults are valid settings and
// that New fills every zero setting from DefaultConfig.
func TestDefaultConfigValidates(t *testing.T) {
	def := DefaultConfig()
	if err := def.Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v, want nil", err)
	}
	got := Config{}.withDefaults()
	if !strings.HasPrefix(got.Holder, "srv_") || len(got.Holder) < len("srv_")+16 {
		t.Errorf("Config{}.withDefaults().Holder = %q, want a random srv_ name", got.Holder)
	}
	// The holder is random per controller: not a default to compare.
	got.Events, got.Logger, got.Holder = nil, nil, ""
	// cmp, not ==: OnDecision makes Config incomparable (nil funcs are equal to cmp).
	if diff := cmp.Diff(def, got); diff != "" {
		t.Errorf("Config{}.withDefaults() = got, want DefaultConfig(); diff (-want +got):\n%s", diff)
	}
	if err := (Config{MaxQueued: -1}).Validate(); err == nil || !strings.Contains(err.Error(), "max queued -1") {
		t.Errorf("Config{MaxQueued: -1}.Validate() = %v, want the negative bound named", err)
	}
}
