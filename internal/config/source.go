package config

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// SourceKind says which surface a value came from.
type SourceKind int

// The surfaces a value can come from. The zero value is SourceDefault.
const (
	// SourceDefault is a built-in default, or a value the loader derives
	// (the client's name from the machine's hostname).
	SourceDefault SourceKind = iota
	// SourceFile is a yaml file; Source.Name is its path, Source.Line the line.
	SourceFile
	// SourceEnv is an environment variable; Source.Name is the variable.
	SourceEnv
	// SourceFlag is a client command-line flag; Source.Name is the flag
	// without its leading dashes.
	SourceFlag
	// SourceArg is a positional argument; Source.Name is its name (TARGET).
	SourceArg
)

// Source is where one value came from. The zero value means the default.
type Source struct {
	// Kind is the surface.
	Kind SourceKind
	// Name is the file path, environment variable, flag name (without
	// dashes) or argument name; empty for SourceDefault.
	Name string
	// Line is the 1-based line in the file; 0 when unknown or not a file.
	Line int
}

// String returns the source as --print-config shows it: "default",
// "file:PATH:LINE", "env APERIO_X", "flag --x" or "arg TARGET".
func (s Source) String() string {
	switch s.Kind {
	case SourceFile:
		return "file:" + s.location()
	case SourceEnv:
		return "env " + s.Name
	case SourceFlag:
		return "flag --" + s.Name
	case SourceArg:
		return "arg " + s.Name
	}
	return "default"
}

// location returns the source as error messages show it: "PATH:LINE" for a
// file, "" for a default, String otherwise.
func (s Source) location() string {
	switch s.Kind {
	case SourceDefault:
		return ""
	case SourceFile:
		if s.Line > 0 {
			return s.Name + ":" + strconv.Itoa(s.Line)
		}
		return s.Name
	}
	return s.String()
}

// Sources records, for every key of a loaded configuration, where its
// effective value came from. Service fields are recorded as
// services[N].KEY (services[0].hostname). A nil *Sources answers
// SourceDefault for every key. Sources is immutable once returned by a
// loader and then safe for concurrent use.
type Sources struct {
	m        map[string]Source // normalized key → source
	files    []string          // absolute paths of the files read, in order
	warnings []string          // see Warnings
}

// maxWarnings bounds the warnings one load keeps: one per key at most,
// and a config has a few hundred keys.
const maxWarnings = 256

// Warnings returns what the load noticed that is not an error but may
// surprise: a file value that overrides an environment variable set for
// the same key ("aperio.yaml:3 sets server.url, overriding
// APERIO_SERVER_URL"). Each is one line, naming sources, never values.
// Main logs them at WARN and --check-config prints them. A nil *Sources
// has none.
func (s *Sources) Warnings() []string {
	if s == nil {
		return nil
	}
	return slices.Clone(s.warnings)
}

func (s *Sources) warn(msg string) {
	if len(s.warnings) < maxWarnings && !slices.Contains(s.warnings, msg) {
		s.warnings = append(s.warnings, msg)
	}
}

// read records path as a file the load read.
func (s *Sources) read(path string) {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	if !slices.Contains(s.files, path) {
		s.files = append(s.files, path)
	}
}

func newSources() *Sources {
	return &Sources{m: make(map[string]Source)}
}

// Of returns the source of key, in any spelling that normalizes to it
// ("scaling.cold_start", "SCALING-COLD-START"). Unknown keys and keys left at
// their default answer the zero Source.
func (s *Sources) Of(key string) Source {
	if s == nil {
		return Source{}
	}
	return s.m[normalize(key)]
}

func (s *Sources) set(key string, src Source) {
	s.m[normalize(key)] = src
}

// Error is one configuration problem: a key, where its value came from, and
// what is wrong with it. Loaders and Validate return every problem, each as
// an *Error, joined with errors.Join; use errors.As to reach them.
type Error struct {
	// Key is the canonical key ("scaling.max", "services[1].hostname"), or
	// the key as written for an unknown key. Empty for a problem with a
	// whole file (unreadable, not yaml).
	Key string
	// Source is where the offending value came from; the zero Source for a
	// missing value.
	Source Source
	// Msg says what is wrong, in lowercase, on one line.
	Msg string
}

// Error returns the problem as one line:
// "config: scaling.max (aperio.yaml:12): 2 is below scaling.min 3".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("config: ")
	loc := e.Source.location()
	// An unknown key is shown as written, and a file may write anything:
	// one that is not plain printable text is quoted, so that the problem
	// stays one line and cannot forge another.
	key := e.Key
	if strings.IndexFunc(key, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		key = strconv.Quote(key)
	}
	switch {
	case key == "":
		b.WriteString(loc)
	case loc == "":
		b.WriteString(key)
	default:
		b.WriteString(key)
		b.WriteString(" (")
		b.WriteString(loc)
		b.WriteString(")")
	}
	b.WriteString(": ")
	b.WriteString(oneLine.Replace(e.Msg))
	return b.String()
}

var oneLine = strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ")

// newError builds an *Error whose message is forced onto one line.
func newError(key string, src Source, msg string) *Error {
	msg = oneLine.Replace(strings.TrimSpace(msg))
	return &Error{Key: key, Source: src, Msg: msg}
}
