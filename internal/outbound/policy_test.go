package outbound

import (
	"errors"
	"slices"
	"testing"
)

// badEntries returns the indices of the allowlist entries err reports.
func badEntries(tb testing.TB, err error) []int {
	tb.Helper()
	if err == nil {
		return nil
	}
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		tb.Fatalf("error %v is not a joined error", err)
	}
	var idx []int
	for _, e := range joined.Unwrap() {
		ee, ok := errors.AsType[*entryError](e)
		if !ok || !errors.Is(e, errBadEntry) {
			tb.Fatalf("error %v is not an allowlist entry error", e)
		}
		idx = append(idx, ee.index)
	}
	return idx
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name      string
		allowlist []string
		wantBad   []int
	}{
		{"nil", nil, nil},
		{"empty", []string{}, nil},
		{"every kind", []string{"hooks.example.com", "*.example.net", "8.8.8.8", "2606:4700::/32", "10.0.0.0/8", "::ffff:8.8.8.8"}, nil},
		{"spaces trimmed", []string{" hooks.example.com ", "\t10.0.0.0/8"}, nil},
		{"trailing dot and case", []string{"Hooks.Example.COM."}, nil},
		{"empty entry", []string{"hooks.example.com", ""}, []int{1}},
		{"blank entry", []string{"  "}, []int{0}},
		{"host bits set", []string{"10.0.0.1/8"}, []int{0}},
		{"prefix too long", []string{"10.0.0.0/33"}, []int{0}},
		{"mapped prefix", []string{"::ffff:10.0.0.0/104"}, []int{0}},
		{"zone", []string{"fe80::1%eth0"}, []int{0}},
		{"bare wildcard", []string{"*"}, []int{0}},
		{"inner wildcard", []string{"hooks.*.example.com"}, []int{0}},
		{"space inside", []string{"hooks example.com"}, []int{0}},
		{"url", []string{"https://hooks.example.com/"}, []int{0}},
		{"numeric host", []string{"127.1"}, []int{0}},
		{"hex host", []string{"0x7f000001"}, []int{0}},
		{"numeric wildcard", []string{"*.1"}, []int{0}},
		{"every problem", []string{"ok.example.com", "", "10.0.0.0/8", "bad host", "1.2.3.4/40"}, []int{1, 3, 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Policy{Allowlist: tt.allowlist}
			if got := badEntries(t, p.Validate()); !slices.Equal(got, tt.wantBad) {
				t.Errorf("Policy{Allowlist: %q}.Validate() reports entries %v, want %v", tt.allowlist, got, tt.wantBad)
			}
			_, err := New(p)
			if got := badEntries(t, err); !slices.Equal(got, tt.wantBad) {
				t.Errorf("New(Policy{Allowlist: %q}) reports entries %v, want %v", tt.allowlist, got, tt.wantBad)
			}
		})
	}
}

func TestNumericLike(t *testing.T) {
	tests := []struct {
		name string
		want bool
	}{
		{"2130706433", true},
		{"127.1", true},
		{"0177.0.0.1", true},
		{"0x7f000001", true},
		{"0X7F.1", true},
		{"a.0x", true},
		{"example.com", false},
		{"1.example.com", false},
		{"0xg", false},
		{"xn--80ak6aa92e.com", false},
		{"a1", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := numericLike(tt.name); got != tt.want {
				t.Errorf("numericLike(%q) = %v, want %v", tt.name, got, tt.want)
			}
		})
	}
}
