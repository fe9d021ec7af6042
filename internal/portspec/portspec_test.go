package portspec

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Range
	}{{"2222", Range{2222, 2222}}, {"3000-3100", Range{3000, 3100}}, {" 1 - 65535 ", Range{1, 65535}}} {
		got, err := Parse(c.in)
		if err != nil || got != c.want {
			t.Errorf("Parse(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "0", "65536", "-1", "10-5", "a", "1-", "-", "1-2-3", "+5", "99999999999999", strings.Repeat("1", 100), "1e3", "0x10"} {
		if r, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) = %v, want an error", bad, r)
		}
	}
}

func TestRange(t *testing.T) {
	r := Range{3000, 3002}
	if !r.Contains(3000) || !r.Contains(3002) || r.Contains(2999) || r.Contains(3003) || r.Size() != 3 || r.String() != "3000-3002" {
		t.Fatalf("range %v misbehaves", r)
	}
	var zero Range
	if zero.Contains(0) || zero.Size() != 0 {
		t.Fatal("the zero range contains a port")
	}
	if (Range{80, 80}).String() != "80" {
		t.Fatal("single port string")
	}
}

func TestParseList(t *testing.T) {
	rs, err := ParseList([]string{"22", "3000-3100"})
	if err != nil || !AnyContains(rs, 22) || !AnyContains(rs, 3050) || AnyContains(rs, 23) {
		t.Fatalf("ParseList = %v, %v", rs, err)
	}
	if _, err := ParseList([]string{"22", "x", "0"}); err == nil || !strings.Contains(err.Error(), `"x"`) || !strings.Contains(err.Error(), `"0"`) {
		t.Fatalf("every bad entry named: %v", err)
	}
	if _, err := ParseList(make([]string, MaxSpecs+1)); err == nil {
		t.Fatal("too many entries accepted")
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"22", "1-65535", "10-5", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := Parse(s)
		if err == nil && (r.Lo < 1 || r.Hi > 65535 || r.Hi < r.Lo) {
			t.Fatalf("Parse(%q) = %v", s, r)
		}
	})
}
