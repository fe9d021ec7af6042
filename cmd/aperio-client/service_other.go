//go:build !windows

package main

import (
	"context"
	"log/slog"
)

// serviceContext returns ctx: outside Windows a service manager stops the
// client with a signal (systemd, launchd), which ctx already follows.
func serviceContext(ctx context.Context, _ *slog.Logger) (context.Context, func()) {
	return ctx, func() {}
}
