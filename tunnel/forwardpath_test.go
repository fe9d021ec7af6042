package tunnel

import (
	"errors"
	"testing"
)

// forwardedPathCases are the table of TestForwardedPath and the seeds of
// FuzzForwardedPath.
var forwardedPathCases = []struct {
	name       string
	bind       string
	trim       bool
	in         string
	want, pref string
	err        error
}{
	{name: "prefix and rest", bind: "/api", trim: true, in: "/api/x", want: "/x", pref: "/api"},
	{name: "prefix alone", bind: "/api", trim: true, in: "/api", want: "/", pref: "/api"},
	{name: "prefix with slash", bind: "/api", trim: true, in: "/api/", want: "/", pref: "/api"},
	{name: "bind with trailing slash", bind: "/api/", trim: true, in: "/api/x/y", want: "/x/y", pref: "/api"},
	{name: "deep bind", bind: "/a/b", trim: true, in: "/a/b/c", want: "/c", pref: "/a/b"},
	{name: "deep bind partial", bind: "/a/b", trim: true, in: "/a/bc", want: "/a/bc"},
	{name: "not a segment boundary", bind: "/api", trim: true, in: "/apix", want: "/apix"},
	{name: "encoded slash never ends the prefix", bind: "/api", trim: true, in: "/api%2Fx", want: "/api%2Fx"},
	{name: "encoded letter matches decoded", bind: "/api", trim: true, in: "/%61pi/x", want: "/x", pref: "/api"},
	{name: "rest keeps its encoding", bind: "/api", trim: true, in: "/api/a%2Fb%20c", want: "/a%2Fb%20c", pref: "/api"},
	{name: "empty segments collapse", bind: "/api", trim: true, in: "/api//x", want: "/x", pref: "/api"},
	{name: "leading empty segments collapse", bind: "/api", trim: true, in: "//api/x", want: "/x", pref: "/api"},
	{name: "empty segments collapse untrimmed", bind: "/api", trim: false, in: "///api//x/", want: "/api/x/"},
	{name: "parameter of the bind's segment goes with it", bind: "/api", trim: true, in: "/api;v=1/x", want: "/x", pref: "/api"},
	{name: "parameter of the bind alone", bind: "/app", trim: true, in: "/app;jsessionid=1", want: "/", pref: "/app"},
	{name: "parameter of the rest kept", bind: "/app", trim: true, in: "/app/page;jsessionid=1", want: "/page;jsessionid=1", pref: "/app"},
	{name: "guard/traversal/dotdot parameter", bind: "/api", trim: true, in: "/api/..;/admin", err: ErrDotSegment},
	{name: "guard/traversal/dot parameter", bind: "/api", trim: false, in: "/api/.;x/admin", err: ErrDotSegment},
	{name: "guard/traversal/encoded dotdot encoded semicolon", bind: "/api", trim: true, in: "/api/%2e%2e%3b/admin", err: ErrDotSegment},
	{name: "trim off", bind: "/api", trim: false, in: "/api/x", want: "/api/x"},
	{name: "no bind", bind: "", trim: true, in: "/api/x", want: "/api/x"},
	{name: "root bind", bind: "/", trim: true, in: "/x", want: "/x"},
	{name: "options star", bind: "/api", trim: true, in: "*", want: "*"},
	{name: "guard/traversal/dotdot", bind: "/api", trim: true, in: "/api/../admin", err: ErrDotSegment},
	{name: "guard/traversal/dot", bind: "/api", trim: true, in: "/api/./x", err: ErrDotSegment},
	{name: "guard/traversal/encoded dots", bind: "/api", trim: true, in: "/api/%2e%2e/admin", err: ErrDotSegment},
	{name: "guard/traversal/encoded slash dots", bind: "/api", trim: true, in: "/api/x%2F..%2F..", err: ErrDotSegment},
	{name: "guard/traversal/backslash", bind: "/api", trim: true, in: "/api/x\\..\\y", err: ErrDotSegment},
	{name: "guard/traversal/untrimmed too", bind: "/api", trim: false, in: "/../etc", err: ErrDotSegment},
	{name: "guard/syntax/bad escape", bind: "/api", trim: true, in: "/api/%zz", err: ErrDotSegment},
	{name: "guard/syntax/not origin form", bind: "/api", trim: true, in: "api/x", err: ErrDotSegment},
	{name: "guard/syntax/empty", bind: "/api", trim: true, in: "", err: ErrDotSegment},
}

func TestForwardedPath(t *testing.T) {
	for _, tc := range forwardedPathCases {
		t.Run(tc.name, func(t *testing.T) {
			s := &Service{Path: tc.bind, TrimBind: tc.trim}
			got, pref, err := s.ForwardedPath(tc.in)
			if !errors.Is(err, tc.err) {
				t.Fatalf("ForwardedPath(%q) error = %v, want %v", tc.in, err, tc.err)
			}
			if got != tc.want || pref != tc.pref {
				t.Errorf("ForwardedPath(%q) = %q, %q, want %q, %q", tc.in, got, pref, tc.want, tc.pref)
			}
		})
	}
}
