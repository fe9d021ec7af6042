package tunnel

import (
	"strings"
	"testing"
)

func TestAnnouncementNamePrintable(t *testing.T) {
	svc := []Service{{ID: "s", Hostnames: []string{"app.test"}}}
	tests := []struct {
		name, ann, instance string
		ok                  bool
	}{
		{"plain", "web-1", "i-1", true},
		{"unicode letters", "café-ü", "インスタンス", true},
		{"escape sequence", "web\x1b[2J", "i-1", false},
		{"newline", "web\n2031-01-01 token_revoked", "i-1", false},
		{"nul in instance", "web", "i\x00", false},
		{"bidi override", "web\u202egnp.exe", "i-1", false},
		{"invalid utf-8", "web\xff", "i-1", false},
		{"c1 control", "web\u0085", "i-1", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := Announcement{Name: tt.ann, InstanceID: tt.instance, Services: svc}
			err := a.Validate()
			if (err == nil) != tt.ok {
				t.Fatalf("Validate(name %q, instance_id %q) = %v, want ok %v", tt.ann, tt.instance, err, tt.ok)
			}
			if err != nil && !strings.Contains(err.Error(), "not printable") {
				t.Errorf("Validate() = %q, want it to say the name is not printable", err)
			}
		})
	}
}
