package main

import (
	"strings"

	"github.com/spf13/pflag"

	"github.com/aperio-dev/aperio/internal/config"
)

// keyFlag is the pflag.Value of one config key's flag. It keeps the text as
// given: the loader parses it, with the same errors and precedence as any
// other surface's value. Its Type is the key's kind, so --help names what
// the flag takes, and its default is the key's.
type keyFlag struct {
	raw  string
	kind config.Kind
	vals []string
}

func (f *keyFlag) String() string     { return f.raw }
func (f *keyFlag) Set(s string) error { f.raw = s; return nil }

// Type names the value in --help: pflag prints it after the flag (nothing
// for a bool, which may stand alone).
func (f *keyFlag) Type() string {
	switch f.kind {
	case config.KindEnum:
		if len(f.vals) > 0 {
			return strings.Join(f.vals, "|")
		}
		return "string"
	case config.KindList:
		return "strings"
	case config.KindIntList:
		return "ints"
	case config.KindMap:
		return "host=url,..."
	case config.KindInt, config.KindFloat, config.KindBool, config.KindDuration, config.KindSize:
		return string(f.kind)
	}
	return "string"
}

// newKeyFlag returns the flag of k. Its usage has no back-quotes, which
// pflag would take for the value's name; a secret's says to prefer the
// environment, since a command line is visible to every user of the
// machine (ps).
func newKeyFlag(k config.Key) *pflag.Flag {
	v := &keyFlag{raw: k.Default, kind: k.Kind, vals: k.Values}
	usage := strings.ReplaceAll(k.Usage, "`", "")
	if k.Secret && k.Env != "" {
		usage += " (a secret: set " + k.Env + " instead, a command line is visible to other users)"
	}
	fl := &pflag.Flag{
		Name:     k.Flag,
		Usage:    usage,
		Value:    v,
		DefValue: k.Default,
	}
	switch k.Default {
	case "0", "0s", "false":
		// The zero of its kind: --help prints no "(default 0s)".
		fl.DefValue = ""
	}
	if k.Bool {
		fl.NoOptDefVal = "true"
	}
	return fl
}
