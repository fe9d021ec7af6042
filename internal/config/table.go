package config

import (
	"io"
	"slices"
	"strconv"
	"time"
)

// A key table of a binary whose settings live outside this package (the
// server's, in config/serverconfig, bound to server.Config) is built from
// these: one Setting per key, bound to a field of the binary's config
// struct, then loaded, checked and printed with the same machinery, the
// same spellings and the same error shapes as the client's.

// The values of log_level and log_format, which both binaries take.
var (
	LogLevels  = []string{"debug", "info", "warn", "error"}
	LogFormats = []string{"text", "json"}
)

// Transports are the values of the client's server.transport, the tunnel
// package's TransportWebSocket (the default) and TransportTCP.
var Transports = []string{DefaultTransport, "tcp"}

// The values of the client's idle_action; IdleActionExit is the default.
const (
	IdleActionExit = "exit"
	IdleActionWait = "wait"
)

// IdleActions are the values of the client's idle_action.
var IdleActions = []string{IdleActionExit, IdleActionWait}

// DefaultTransport is server.transport's default.
const DefaultTransport = "websocket"

// The defaults of log_level and log_format, for both binaries.
const (
	DefaultLogLevel  = "info"
	DefaultLogFormat = "text"
)

// Setting is one key bound to one field of a C: how a yaml, environment or
// flag value sets it and how --print-config shows it.
type Setting[C any] struct{ s setting[C] }

// Secret marks the setting as a secret: printed as <set> or <unset>.
func (s Setting[C]) Secret() Setting[C] { return Setting[C]{s.s.secret()} }

// Alias adds environment variables read, in order, when Env is unset.
func (s Setting[C]) Alias(env ...string) Setting[C] { return Setting[C]{s.s.alias(env...)} }

// Values records the values an enum setting accepts, for --help and the
// schema (Key.Values); the table's check still compares with them
// (Checker.OneOf).
func (s Setting[C]) Values(set ...string) Setting[C] { return Setting[C]{s.s.oneOf(set)} }

// NoFlag drops the setting's command-line spelling (the server takes no
// per-key flags).
func (s Setting[C]) NoFlag() Setting[C] {
	s.s.Flag = ""
	return s
}

// StringSetting binds a string, trimmed of surrounding space.
func StringSetting[C any](name, usage string, field func(*C) *string) Setting[C] {
	return Setting[C]{stringSetting(name, usage, field)}
}

// EnumSetting binds a string that is lowercased; the table's check
// compares it with its set (Checker.OneOf).
func EnumSetting[C any](name, usage string, field func(*C) *string) Setting[C] {
	return Setting[C]{enumSetting(name, usage, field)}
}

// IntSetting binds an int.
func IntSetting[C any](name, usage string, field func(*C) *int) Setting[C] {
	return Setting[C]{intSetting(name, usage, field)}
}

// Int64Setting binds an int64 written as a plain integer, as IntSetting
// reads one.
func Int64Setting[C any](name, usage string, field func(*C) *int64) Setting[C] {
	return Setting[C]{scalarSetting(name, usage, field, func(s string) (int64, error) {
		n, err := parseInt(s)
		return int64(n), err
	}, func(n int64) string { return strconv.FormatInt(n, 10) }).kind(KindInt)}
}

// FloatSetting binds a float64.
func FloatSetting[C any](name, usage string, field func(*C) *float64) Setting[C] {
	return Setting[C]{floatSetting(name, usage, field)}
}

// BoolSetting binds a bool (1/0, true/false in any case).
func BoolSetting[C any](name, usage string, field func(*C) *bool) Setting[C] {
	return Setting[C]{boolSetting(name, usage, field)}
}

// DurationSetting binds a duration (ParseDuration).
func DurationSetting[C any](name, usage string, field func(*C) *time.Duration) Setting[C] {
	return Setting[C]{durationSetting(name, usage, field)}
}

// SizeSetting binds a size in bytes (ParseSize).
func SizeSetting[C any](name, usage string, field func(*C) *int64) Setting[C] {
	return Setting[C]{sizeSetting(name, usage, field)}
}

// ListSetting binds a list: a yaml sequence or a comma-separated value.
func ListSetting[C any](name, usage string, field func(*C) *[]string) Setting[C] {
	return Setting[C]{listSetting(name, usage, field, nil)}
}

// IntListSetting binds a list of integers: a yaml sequence or a
// comma-separated value; an item that is not an integer is an error.
func IntListSetting[C any](name, usage string, field func(*C) *[]int) Setting[C] {
	return Setting[C]{intListSetting(name, usage, field)}
}

// MapSetting binds a map of lowercased keys: a yaml mapping or "k=v,k2=v2".
func MapSetting[C any](name, usage string, field func(*C) *map[string]string) Setting[C] {
	return Setting[C]{mapSetting(name, usage, field)}
}

// KeysOf returns the keys of tab, in order, with no Default.
func KeysOf[C any](tab []Setting[C]) []Key { return keysOf(unwrap(tab), nil) }

// KeysWithDefaults returns the keys of tab, in order, each Default its
// field of def as --print-config prints it.
func KeysWithDefaults[C any](tab []Setting[C], def C) []Key { return keysOf(unwrap(tab), &def) }

func unwrap[C any](tab []Setting[C]) []setting[C] {
	out := make([]setting[C], len(tab))
	for i, s := range tab {
		out[i] = s.s
	}
	return out
}

// TableOptions says where LoadTable finds its surfaces.
type TableOptions struct {
	// File is the yaml file to read; a missing one is no error unless
	// FileMustExist.
	File string
	// FileMustExist makes a missing File an error (--config FILE).
	FileMustExist bool
	// Env is the environment; main passes os.LookupEnv. Nil is empty.
	Env Env
	// ReadFile reads a file; nil means os.ReadFile.
	ReadFile func(name string) ([]byte, error)
}

// LoadTable builds a configuration field by field: the yaml file wins over
// the environment, which wins over defaults(). ${VAR} and ${VAR:-default}
// in the file's values expand from o.Env. check reports the validation
// problems of the result on its Checker, which names each key's source.
//
// The error joins every problem, loading and validation alike, each an
// *Error; a value that failed to load is not reported again by check. The
// configuration and sources are returned even then, with the defaults in
// place of values that did not load.
func LoadTable[C any](tab []Setting[C], o TableOptions, defaults func() C, check func(C, *Checker)) (C, *Sources, error) {
	l := newLoader()
	inner := unwrap(tab)
	sch := newSchema()
	addSettings(sch, inner)
	fileLayer, _ := l.readYAML(o.ReadFile, o.File, o.FileMustExist, o.Env, sch)
	envVals := layer{}
	envLayer(envVals, inner, o.Env, nil)
	cfg := defaults()
	apply(l, &cfg, inner, []layer{fileLayer, envVals}, func() *C {
		s := defaults()
		return &s
	}, "")
	v := &Checker{v: &checker{src: l.src}}
	check(cfg, v)
	return cfg, l.src, l.result(v.v.errs)
}

// PrintTable writes a configuration for --print-config: one key a line,
// "key = value  # source", in tab's order. Secrets print as <set> or
// <unset>, empty values as "". It returns the first write error.
func PrintTable[C any](w io.Writer, c *C, tab []Setting[C], src *Sources) error {
	p := &printer{w: w, src: src}
	printSettings(p, c, unwrap(tab), "")
	return p.err
}

// Checker collects validation problems, each an *Error naming its key and,
// when the checker has sources, where the value came from.
type Checker struct{ v *checker }

// NewChecker returns a Checker that names the sources in src; nil names
// none.
func NewChecker(src *Sources) *Checker { return &Checker{v: &checker{src: src}} }

// Err returns every problem added, joined; nil when there is none.
func (c *Checker) Err() error { return joinProblems(c.v.errs) }

// Add reports a problem of key.
func (c *Checker) Add(key, format string, args ...any) { c.v.add(key, format, args...) }

// Positive reports a duration that is not above zero.
func (c *Checker) Positive(key string, d time.Duration) { c.v.positive(key, d) }

// NonNegativeDuration reports a negative duration.
func (c *Checker) NonNegativeDuration(key string, d time.Duration) {
	c.v.nonNegativeDuration(key, d)
}

// NonNegative reports a negative number.
func (c *Checker) NonNegative(key string, n int64) { c.v.nonNegative(key, n) }

// OneOf reports a value that is not in set.
func (c *Checker) OneOf(key, got string, set []string) { c.v.oneOf(key, got, set) }

// CheckURL returns what is wrong with raw as a URL with a host and one of
// schemes, or "" when nothing is. The message quotes raw.
func CheckURL(raw string, schemes ...string) string { return checkURL(raw, schemes...) }

// ValidHostname reports whether h is a DNS name or a *. wildcard, as
// services' hostnames must be.
func ValidHostname(h string) bool { return validHostname(h) }

// ValidOutboundPattern reports whether p is a hostname, *.domain, IP
// address or CIDR prefix, as outbound_allowlist items must be.
func ValidOutboundPattern(p string) bool { return validOutboundPattern(p) }

// HookSchemes are the schemes of URLs the server calls or redirects to.
func HookSchemes() []string { return slices.Clone(hookSchemes) }
