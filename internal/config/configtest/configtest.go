// Package configtest holds the test helpers of the configuration loaders
// (config, config/serverconfig) and of the commands that print them: fake
// environments and files, the problems a load reports, and line-by-line
// comparison of --print-config output with golden files. It imports no
// aperio package, so package config's own tests can use it.
package configtest

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"
)

// EnvOf returns an environment lookup backed by m.
func EnvOf(m map[string]string) func(string) (string, bool) {
	return func(key string) (string, bool) {
		v, ok := m[key]
		return v, ok
	}
}

// FilesOf returns a ReadFile backed by m; names not in m do not exist.
func FilesOf(m map[string]string) func(string) ([]byte, error) {
	return func(name string) ([]byte, error) {
		if s, ok := m[name]; ok {
			return []byte(s), nil
		}
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
}

// LinesByKey returns the lines of --print-config output by key.
func LinesByKey(out string) map[string]string {
	m := make(map[string]string)
	for line := range strings.Lines(out) {
		line = strings.TrimSuffix(line, "\n")
		key, _, _ := strings.Cut(line, " = ")
		m[key] = line
	}
	return m
}

// DiffLines compares got and want line by line and reports every mismatch.
func DiffLines(tb testing.TB, what string, got, want []string) {
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

// Golden compares got with the file at path line by line, or rewrites the
// file when update is set.
func Golden(tb testing.TB, path string, got []byte, update bool) {
	tb.Helper()
	if update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			tb.Fatalf("write %s: %v", path, err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("read %s: %v (run go test -update to create it)", path, err)
	}
	DiffLines(tb, path, strings.Split(string(got), "\n"), strings.Split(string(want), "\n"))
}

// Problems returns the one-line messages of every error joined in err, and
// fails the test if one is not an E (the loaders' *config.Error) or spans
// several lines.
func Problems[E error](tb testing.TB, err error) []string {
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
		var ce E
		if !errors.As(e, &ce) {
			tb.Fatalf("error %q (%T) is not a %T", e, e, ce)
		}
		if strings.ContainsAny(ce.Error(), "\r\n") {
			tb.Fatalf("error %q spans several lines", ce.Error())
		}
		out = append(out, ce.Error())
	}
	return out
}
