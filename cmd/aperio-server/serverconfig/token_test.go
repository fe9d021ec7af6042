package serverconfig

import (
	"strings"
	"testing"
)

func TestMasterTokenLength(t *testing.T) {
	tests := []struct {
		name    string
		token   string
		wantErr string // substring of Validate's error; "" means valid
		warn    bool
	}{
		{"five characters", "s3cr3", "5 characters, at least 16", false},
		{"fifteen characters", strings.Repeat("x", 15), "15 characters, at least 16", false},
		{"sixteen characters", strings.Repeat("x", 16), "", true},
		{"sixteen multibyte characters", strings.Repeat("é", 16), "", true},
		{"thirty-one characters", strings.Repeat("x", 31), "", true},
		{"thirty-two characters", strings.Repeat("x", 32), "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Default()
			cfg.Token = tt.token
			err := cfg.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate(%d-character token) = %v, want nil", len(tt.token), err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "server.token")):
				t.Fatalf("Validate(%d-character token) = %v, want a server.token error containing %q", len(tt.token), err, tt.wantErr)
			}
			w := Warnings(cfg)
			if got := len(w) == 1 && strings.Contains(w[0], "server.token") && strings.Contains(w[0], "at least 32"); got != tt.warn {
				t.Errorf("Warnings(%q) = %q, want a weak-token warning %v", tt.token, w, tt.warn)
			}
		})
	}
}
