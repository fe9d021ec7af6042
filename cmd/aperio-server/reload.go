package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/aperio-dev/aperio/cmd/aperio-server/serverconfig"
	"github.com/aperio-dev/aperio/internal/logging"
	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/internal/recovery"
	"github.com/aperio-dev/aperio/internal/reload"
	"github.com/aperio-dev/aperio/internal/server"
)

// processKeys are the keys main applies itself, outside server.Config,
// and whether a reload changes them live. Together with
// server.ReloadKeys they are every key of the server (a test says so).
var processKeys = []server.ReloadKey{
	{Name: "log_level", Live: true},
	{Name: "log_format", Live: false},       // the handler is built once
	{Name: "otel_sample_rate", Live: false}, // the tracer provider is built once
}

// reloader re-reads the server's configuration when internal/reload says
// so and applies it to the running gateway. reload runs on Watch's
// goroutine, one call at a time; Files may be called from any.
type reloader struct {
	opts  serverconfig.Options
	g     *server.Gateway
	log   *slog.Logger
	level *slog.LevelVar // the diagnostic log's level: log_level is live

	mu      sync.Mutex          // guards the following fields
	running serverconfig.Config // the process settings in force
	files   []string            // what the last load read, and the certificate files
}

// newReloader returns the reloader of a server started with cfg, which
// loading with opts read from files.
func newReloader(opts serverconfig.Options, cfg serverconfig.Config, files []string, g *server.Gateway, log *slog.Logger, level *slog.LevelVar) *reloader {
	r := &reloader{opts: opts, g: g, log: log, level: level, running: cfg}
	r.files = r.watched(cfg, files, nil)
	return r
}

// start watches until ctx ends or the returned stop is called, which
// waits for the watch to end. It returns once a SIGHUP reloads rather
// than ends the process.
func (r *reloader) start(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	started, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		r.watch(ctx, started)
	}()
	<-started
	return func() { cancel(); <-done }
}

// watch runs reload.Watch until ctx ends; started is closed once SIGHUP
// no longer ends the process. When the files cannot be watched (no
// inotify instance left), it says so and reloads on SIGHUP alone.
func (r *reloader) watch(ctx context.Context, started chan<- struct{}) {
	var once sync.Once
	start := func() { once.Do(func() { close(started) }) }
	err := reload.Watch(ctx, reload.Options{
		Files:    r.Files,
		Signal:   true,
		Log:      r.log,
		OnChange: func(reason string) { r.reload(ctx, reason) },
		Started:  start,
	})
	if err == nil {
		start()
		return
	}
	r.log.Error("configuration files not watched; reloading on SIGHUP only", logkey.Err, err)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	start()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			r.reload(ctx, "SIGHUP")
		}
	}
}

// Files lists what a change of reloads: the configuration file (even
// while it does not exist, so that creating it counts), every file it
// includes, and the TLS certificate and key.
func (r *reloader) Files() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.files)
}

// watched returns the files to watch for cfg, whose load read files;
// keep are files watched before, kept when the load failed (the file
// that broke it must stay watched, so that fixing it reloads).
func (r *reloader) watched(cfg serverconfig.Config, files, keep []string) []string {
	var out []string
	add := func(f string) {
		if f == "" {
			return
		}
		if abs, err := filepath.Abs(f); err == nil {
			f = abs
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	add(r.opts.File)
	for _, f := range files {
		add(f)
	}
	add(cfg.TLSCert)
	add(cfg.TLSKey)
	for _, f := range keep {
		add(f)
	}
	return out
}

// reload loads the configuration again with the options the server
// started with and applies it whole, or not at all: on any problem the
// server runs on as it was, and the failure is logged at ERROR and
// audited. reason says what triggered it ("SIGHUP", "file changed: PATH").
func (r *reloader) reload(ctx context.Context, reason string) {
	// A defect reached by one edit must not end the server: the old
	// configuration keeps running, as after any refused reload.
	defer recovery.Recover(r.log, "config reload")
	cfg, src, err := serverconfig.Load(r.opts)
	if err != nil {
		r.mu.Lock()
		r.files = r.watched(r.running, src.Files(), r.files)
		r.mu.Unlock()
		r.failed(ctx, reason, err)
		return
	}
	lv, err := logging.ParseLevel(cfg.LogLevel)
	if err != nil { // Load validated it; a second opinion costs nothing
		r.failed(ctx, reason, err)
		return
	}
	applied, restart, err := r.g.Reload(cfg.Config)
	if err != nil {
		r.failed(ctx, reason, err)
		return
	}
	r.mu.Lock()
	if cfg.LogLevel != r.running.LogLevel {
		r.level.Set(lv)
		r.running.LogLevel = cfg.LogLevel
		applied = append(applied, "log_level")
	}
	if cfg.LogFormat != r.running.LogFormat {
		restart = append(restart, "log_format")
	}
	if cfg.OTelSampleRate != r.running.OTelSampleRate {
		restart = append(restart, "otel_sample_rate")
	}
	r.files = r.watched(cfg, src.Files(), nil)
	r.mu.Unlock()
	for _, w := range src.Warnings() {
		r.log.Warn("configuration warning", logkey.Problem, w)
	}
	for _, w := range serverconfig.Warnings(cfg) {
		r.log.Warn("weak configuration", logkey.Problem, w)
	}
	// A change that waits for a restart is a warning: until then the
	// server runs on something other than its file.
	level := slog.LevelInfo
	if len(restart) > 0 {
		level = slog.LevelWarn
	}
	r.log.Log(ctx, level, "configuration reloaded", logkey.Reason, reason,
		logkey.Applied, listOrNone(applied), logkey.RestartNeeded, listOrNone(restart))
	r.g.AuditReload(ctx, reason, applied, restart, nil)
}

// failed logs and audits a reload that changed nothing.
func (r *reloader) failed(ctx context.Context, reason string, err error) {
	r.log.Error("configuration reload failed; running on the previous configuration", logkey.Reason, reason, logkey.Err, err)
	r.g.AuditReload(ctx, reason, nil, nil, err)
}

// listOrNone joins keys with commas, or says none.
func listOrNone(keys []string) string {
	if len(keys) == 0 {
		return "none"
	}
	return strings.Join(keys, ", ")
}
