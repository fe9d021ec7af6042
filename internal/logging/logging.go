// Package logging owns how both binaries build their slog handler from the
// log_level and log_format settings.
package logging

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// New returns a logger writing to w. level is debug, info, warn or error;
// format is text or json. Unknown values are an error naming the value.
func New(w io.Writer, level, format string) (*slog.Logger, error) {
	lv, err := ParseLevel(level)
	if err != nil {
		return nil, err
	}
	return NewVar(w, lv, format)
}

// NewVar returns a logger writing to w at the level lv holds when each
// line is written, so that a reload may change log_level with Set while
// the logger (and every logger derived from it with With) is in use.
// format is text or json.
func NewVar(w io.Writer, lv slog.Leveler, format string) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "", "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("logging: unknown log_format %q (text, json)", format)
}

// ParseLevel parses a log_level value: debug, info (or empty), warn (or
// warning) or error, in any case. Any other value is an error naming it.
func ParseLevel(level string) (slog.Level, error) {
	switch strings.ToLower(level) {
	case "debug":
		return slog.LevelDebug, nil
	case "", "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return slog.LevelInfo, fmt.Errorf("logging: unknown log_level %q (debug, info, warn, error)", level)
}
