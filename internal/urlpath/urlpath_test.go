package urlpath

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// pathCases are the table of TestPathRule and the seeds of FuzzNormal.
var pathCases = []struct {
	in    string
	norm  string   // "" when refused
	key   string   // Key(norm)
	other []string // Readings(nil, norm, key)
}{
	{in: "/", norm: "/", key: "/"},
	{in: "/api/x", norm: "/api/x", key: "/api/x"},
	{in: "//admin", norm: "/admin", key: "/admin"},
	{in: "///admin//x/", norm: "/admin/x/", key: "/admin/x/"},
	{in: "/a/./b/../c", norm: "/a/c", key: "/a/c"},
	{in: "/a/%2e%2E/b", norm: "/b", key: "/b"},
	{in: "/%61dmin", norm: "/admin", key: "/admin"},
	{in: "/a%2fb", norm: "/a%2Fb", key: "/a%2Fb", other: []string{"/a/b"}},
	{in: "/admin;x", norm: "/admin;x", key: "/admin", other: []string{"/admin;x"}},
	{in: "/admin;/x", norm: "/admin;/x", key: "/admin/x", other: []string{"/admin;/x"}},
	{in: "/;x/admin", norm: "/;x/admin", key: "/admin", other: []string{"/;x/admin"}},
	{in: "/app/;jsessionid=1", norm: "/app/;jsessionid=1", key: "/app/", other: []string{"/app/;jsessionid=1"}},
	{in: "/a;p%2Fq/b", norm: "/a;p%2Fq/b", key: "/a/b", other: []string{"/a;p%2Fq/b", "/a;p/q/b"}},
	{in: "/x%2Fy;z", norm: "/x%2Fy;z", key: "/x%2Fy", other: []string{"/x%2Fy;z", "/x/y", "/x/y;z"}},
	{in: "/admin%3Bx", norm: "/admin%3Bx", key: "/admin;x"},
	{in: "/a;x/../b", norm: "/b", key: "/b"},
	{in: "/a/...", norm: "/a/...", key: "/a/..."},
	{in: "/..", norm: ""},
	{in: "/a/../..", norm: ""},
	{in: "/a/..;/b", norm: ""},
	{in: "/a/..;x/b", norm: ""},
	{in: "/a/.;/b", norm: ""},
	{in: "/a/%2e%2e;/b", norm: ""},
	{in: "/a/..%3B/b", norm: ""},
	{in: "/a/.%3bx/b", norm: ""},
	{in: "/a/x%2F..;/b", norm: ""},
	{in: "/a/x%5C..", norm: ""},
	{in: "/a/..%2Fb", norm: ""},
	{in: "/;x/..", norm: ""},
	{in: "/a%2Fb/..", norm: ""},
	{in: "/%7%30", norm: ""},
	{in: "/a%2", norm: ""},
	{in: "a/b", norm: ""},
	{in: "", norm: ""},
}

func TestPathRule(t *testing.T) {
	for _, tc := range pathCases {
		t.Run(tc.in, func(t *testing.T) {
			norm, err := Normal(tc.in)
			if tc.norm == "" {
				if !errors.Is(err, ErrBadPath) {
					t.Fatalf("Normal(%q) = %q, %v; want ErrBadPath", tc.in, norm, err)
				}
				return
			}
			if err != nil || norm != tc.norm {
				t.Fatalf("Normal(%q) = %q, %v; want %q", tc.in, norm, err, tc.norm)
			}
			key, err := Key(norm)
			if err != nil || key != tc.key {
				t.Errorf("Key(%q) = %q, %v; want %q", norm, key, err, tc.key)
			}
			other, err := Readings(nil, norm, key)
			if err != nil || !slices.Equal(other, tc.other) {
				t.Errorf("Readings(%q) = %q, %v; want %q", norm, other, err, tc.other)
			}
		})
	}
}

func TestPlain(t *testing.T) {
	for in, want := range map[string]bool{
		"/": true, "/api/x.json": true, "/a/b/": true, "/a-b_c~d": true,
		"//a": false, "/a//": false, "/.env": false, "/a/./b": false, "/a;x": false, "/a%20b": false, "/a\\b": false,
	} {
		if got := Plain(in); got != want {
			t.Errorf("Plain(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestPlainAllocatesNothing(t *testing.T) {
	p := "/api/v1/users/123/profile.json"
	if n := testing.AllocsPerRun(1000, func() {
		if !Plain(p) {
			t.Fatal("not plain")
		}
		if norm, err := Normal(p); err != nil || norm != p {
			t.Fatal("not its own normal form")
		}
	}); n != 0 {
		t.Errorf("Plain and Normal of a plain path allocate %v times, want 0", n)
	}
}

func TestDotSegment(t *testing.T) {
	for seg, want := range map[string]bool{
		".": true, "..": true, "..;": true, "..;x": true, ".;": true, ".%3B": true, "..%3bx": true,
		"a%2F..": true, "a%5C.": true, "..%2Fa": true, "a\\..": true, "x%2F..;y": true, "%2E": true, "%2e%2e;": true,
		"...": false, ".env": false, "a..": false, "a;..": false, ".well-known": false,
	} {
		if got := DotSegment(seg); got != want {
			t.Errorf("DotSegment(%q) = %v, want %v", seg, got, want)
		}
	}
}

// FuzzNormal checks the path rule's invariants on any path: the normal
// form is stable, holds no dot segment and no empty segment but a
// trailing one, keeps the path's parameters; its key holds no
// parameter, and its other readings differ from the key.
func FuzzNormal(f *testing.F) {
	for _, tc := range pathCases {
		f.Add(tc.in)
	}
	f.Fuzz(func(t *testing.T, in string) {
		norm, err := Normal(in)
		if err != nil {
			return
		}
		if again, err := Normal(norm); err != nil || again != norm {
			t.Fatalf("Normal(%q) = %q, but Normal of that = %q, %v", in, norm, again, err)
		}
		segs := strings.Split(norm, "/")[1:]
		for i, seg := range segs {
			if DotSegment(seg) || seg == "" && i != len(segs)-1 {
				t.Fatalf("Normal(%q) = %q: segment %q", in, norm, seg)
			}
		}
		key, err := Key(norm)
		if err != nil {
			return // an escape that does not decode
		}
		if strings.Contains(StripParams(norm), ";") || strings.Contains(key, "//") {
			t.Fatalf("Key(%q) = %q: a parameter or an empty segment left", norm, key)
		}
		other, err := Readings(nil, norm, key)
		if err != nil {
			return
		}
		if slices.Contains(other, key) {
			t.Fatalf("Readings(%q) = %q holds the key %q", norm, other, key)
		}
	})
}
