package tunnel

import (
	"strings"
	"testing"
)

// TestValidateNoHostname: a service may name no hostname (the registry
// binds the token's exact hostnames or a catch-all, or refuses it), while
// a bad hostname, path or id is still refused.
func TestValidateNoHostname(t *testing.T) {
	ok := &Announcement{Name: "c", Services: []Service{{ID: "0", Healthy: true}, {ID: "1", Path: "/api"}}}
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate(no hostname) = %v, want nil", err)
	}
	for _, tt := range []struct {
		name string
		svc  Service
		want string
	}{
		{"bad hostname", Service{ID: "0", Hostnames: []string{"bad_host!"}}, "service 0"},
		{"bad path", Service{ID: "0", Path: "api"}, "must start with '/'"},
		{"empty id", Service{}, "empty or duplicate id"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := (&Announcement{Services: []Service{tt.svc}}).Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}
