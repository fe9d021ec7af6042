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

// TestAdminHostsWarning: TLS on (tls_cert or acme:) without admin_hosts
// warns, naming the key, at start and in --check-config; plain http, or
// admin_hosts set, does not. A bad admin_hosts entry is an error naming
// the key and the entry.
func TestAdminHostsWarning(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		warn bool
	}{
		{"plain http", func(*Config) {}, false},
		{"tls_cert", func(c *Config) { c.TLSCert, c.TLSKey = "c.pem", "k.pem" }, true},
		{"acme", func(c *Config) { c.ACME.Email = "ops@example.com" }, true},
		{"acme with admin_hosts", func(c *Config) { c.ACME.Email = "ops@example.com"; c.AdminHosts = []string{"admin.example.com"} }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Default()
			cfg.Token = strings.Repeat("x", 32)
			tc.edit(&cfg)
			var got bool
			for _, w := range Warnings(cfg) {
				got = got || strings.HasPrefix(w, "admin_hosts:")
			}
			if got != tc.warn {
				t.Errorf("Warnings() = %q, want an admin_hosts warning %v", Warnings(cfg), tc.warn)
			}
		})
	}
	cfg := Default()
	cfg.Token = strings.Repeat("x", 32)
	cfg.AdminHosts = []string{"admin.example.com", "https://admin.example.com/"}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "admin_hosts") || !strings.Contains(err.Error(), "https://admin.example.com/") {
		t.Errorf("Validate(bad admin_hosts) = %v, want an error naming admin_hosts and the entry", err)
	}
}
