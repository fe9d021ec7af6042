package access

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

func digest(key string) string {
	s := sha256.Sum256([]byte(key))
	return hex.EncodeToString(s[:])
}

func TestBearer(t *testing.T) {
	const ci, deploy = "ci-key-0123456789abcdef", "deploy-key-fedcba9876543210"
	m, err := NewBearer(BearerConfig{Keys: map[string]string{"ci": digest(ci), "deploy": strings.ToUpper(digest(deploy))}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		auth      []string
		want      Outcome
		user      string
		challenge string
	}{
		{"first key", []string{"Bearer " + ci}, Admit, "ci", ""},
		{"second key, upper-case digest", []string{"bearer " + deploy}, Admit, "deploy", ""},
		{"no header", nil, Absent, "", "Bearer"},
		{"basic scheme", []string{basicAuth("a", "b")}, Absent, "", "Bearer"},
		{"unknown key", []string{"Bearer " + ci + "x"}, Invalid, "", `Bearer error="invalid_token"`},
		{"the digest itself", []string{"Bearer " + digest(ci)}, Invalid, "", `Bearer error="invalid_token"`},
		{"short", []string{"Bearer short"}, Invalid, "", `Bearer error="invalid_token"`},
		{"huge", []string{"Bearer " + strings.Repeat("k", 5000)}, Invalid, "", `Bearer error="invalid_token"`},
		{"two headers", []string{"Bearer " + ci, "Bearer " + deploy}, Absent, "", "Bearer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRequest(t, "/")
			for _, a := range tt.auth {
				r.Header.Add("Authorization", a)
			}
			got := m.Check(r, visitor("/"))
			if got.Outcome != tt.want || got.User != tt.user || got.Challenge != tt.challenge {
				t.Errorf("Check = %v %q %q (%s), want %v %q %q", got.Outcome, got.User, got.Challenge, got.Reason, tt.want, tt.user, tt.challenge)
			}
			if strings.Contains(got.Reason, ci) {
				t.Errorf("Reason %q contains the key", got.Reason)
			}
		})
	}
}

func TestNewBearerRefuses(t *testing.T) {
	_, err := NewBearer(BearerConfig{Keys: map[string]string{"ci": "ci-key-0123456789abcdef", "ok": digest("x"), "short": "abcd"}})
	if err == nil {
		t.Fatal("NewBearer(plain keys) = nil error")
	}
	for _, w := range []string{`bearer key "ci"`, `bearer key "short"`} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	if strings.Contains(err.Error(), "ci-key-0123456789abcdef") {
		t.Errorf("error %q quotes a key", err)
	}
	if _, err := NewBearer(BearerConfig{}); err == nil {
		t.Error("NewBearer(no keys) = nil error")
	}
}
