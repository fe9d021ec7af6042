package config

import (
	"bytes"
	"errors"
	"io/fs"
	"strings"
	"testing"
)

// envOf returns an Env backed by m.
func envOf(m map[string]string) Env {
	return func(key string) (string, bool) {
		v, ok := m[key]
		return v, ok
	}
}

// filesOf returns a ReadFile backed by m; names not in m do not exist.
func filesOf(m map[string]string) func(string) ([]byte, error) {
	return func(name string) ([]byte, error) {
		if s, ok := m[name]; ok {
			return []byte(s), nil
		}
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
}

// problems returns the one-line messages of every *Error joined in err, and
// fails the test if err holds anything else.
func problems(tb testing.TB, err error) []string {
	tb.Helper()
	if err == nil {
		return nil
	}
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	out := make([]string, 0, len(errs))
	for _, e := range errs {
		var ce *Error
		if !errors.As(e, &ce) {
			tb.Fatalf("error %q (%T) is not a *config.Error", e, e)
		}
		out = append(out, ce.Error())
	}
	return out
}

// printedServer returns the --print-config lines of c by key.
func printedServer(tb testing.TB, c Server, s *Sources) map[string]string {
	tb.Helper()
	var b bytes.Buffer
	if err := PrintServer(&b, c, s); err != nil {
		tb.Fatalf("PrintServer: %v", err)
	}
	return linesByKey(b.String())
}

// printedClient returns the --print-config lines of c by key.
func printedClient(tb testing.TB, c Client, s *Sources) map[string]string {
	tb.Helper()
	var b bytes.Buffer
	if err := PrintClient(&b, c, s); err != nil {
		tb.Fatalf("PrintClient: %v", err)
	}
	return linesByKey(b.String())
}

func linesByKey(out string) map[string]string {
	m := make(map[string]string)
	for line := range strings.Lines(out) {
		line = strings.TrimSuffix(line, "\n")
		key, _, _ := strings.Cut(line, " = ")
		m[key] = line
	}
	return m
}

// diffLines compares got and want line by line and reports every mismatch.
func diffLines(tb testing.TB, what string, got, want []string) {
	tb.Helper()
	n := max(len(got), len(want))
	for i := range n {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			tb.Errorf("%s [%d] = %q, want %q", what, i, g, w)
		}
	}
}
