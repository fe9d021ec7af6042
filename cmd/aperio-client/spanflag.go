package main

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/aperio-dev/aperio/internal/config"
)

// spanFlag is a flag that takes a duration with its unit (30d, 12h, 90m,
// 1h30m): a bare number is refused while the flags are parsed, so the
// command exits 2 before calling anything.
type spanFlag struct {
	text string
	d    time.Duration
}

func (f *spanFlag) String() string { return f.text }
func (f *spanFlag) Type() string   { return "duration" }

func (f *spanFlag) Set(s string) error {
	d, err := config.ParseDurationUnit(s)
	if err != nil {
		return err
	}
	f.text, f.d = s, d
	return nil
}

// wire is the span as the admin API reads one (Go syntax, which has no
// days: 36h0m0s for 1d12h).
func (f *spanFlag) wire() string { return f.d.String() }

// spanVar registers a spanFlag named name on fs.
func spanVar(fs *pflag.FlagSet, f *spanFlag, name, usage string) {
	fs.Var(f, name, usage)
}
