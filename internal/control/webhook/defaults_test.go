package webhook

import (
	"strings"
	"testing"
)

// TestDefaultConfigValidates proves the defaults are valid settings, that
// New fills zero settings from them and still requires its seams.
func TestDefaultConfigValidates(t *testing.T) {
	def := DefaultConfig()
	if err := def.Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v, want nil", err)
	}
	got := Config{}.withDefaults()
	if got.MaxQueue != def.MaxQueue || got.Workers != def.Workers || got.Backoff(3) != def.Backoff(3) {
		t.Errorf("Config{}.withDefaults() = %+v, want DefaultConfig's settings", got)
	}
	_, err := New(Config{Workers: -1})
	if err == nil {
		t.Fatal("New(Config{Workers: -1}) error = nil")
	}
	for _, want := range []string{"no subscription lister", "no fence client", "workers -1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("New error %q does not say %q", err, want)
		}
	}
}
