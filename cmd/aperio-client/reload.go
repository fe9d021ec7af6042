package main

import (
	"context"
	"errors"
	"log/slog"
	"slices"

	"github.com/aperio-dev/aperio/internal/agent"
	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/hangup"
	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/internal/reload"
)

// watchConfig reloads the configuration of opts into a on SIGHUP and once
// a change of the config file or a file it includes has settled, until
// the returned stop is called (after a.Run returned: a SIGHUP during the
// final drain must not kill the client either); stop returns once the
// watch has ended. A configuration that does not load, or that a refuses,
// keeps the running one and is logged at ERROR. Should the watch not
// start, SIGHUP is ignored instead, as before reloads existed.
func watchConfig(ctx context.Context, log *slog.Logger, a *agent.Agent, opts config.ClientOptions, src *config.Sources) (stop func()) {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	files := watchedFiles(opts, src) // read and written only by the watch's goroutine
	onChange := func(reason string) {
		cfg, next, err := config.LoadClient(opts)
		if err != nil {
			log.Error("config reload failed, the running configuration stays", logkey.Reason, reason, logkey.Err, err)
			return
		}
		files = watchedFiles(opts, next)
		err = a.Apply(cfg)
		switch {
		case errors.Is(err, agent.ErrStopped):
			log.Info("config reload skipped, the client is stopping", logkey.Reason, reason)
			return
		case err != nil:
			log.Error("config reload failed, the running configuration stays", logkey.Reason, reason, logkey.Err, err)
			return
		}
		for _, w := range append(next.Warnings(), config.ClientWarnings(cfg)...) {
			log.Warn("configuration warning", logkey.Problem, w)
		}
		log.Info("config reloaded", logkey.Reason, reason)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := reload.Watch(wctx, reload.Options{
			Files:    func() []string { return files },
			Signal:   true,
			Log:      log,
			OnChange: onChange,
		})
		if err != nil {
			log.Error("config watch failed, SIGHUP is ignored", logkey.Err, err)
			defer hangup.Ignore(log)()
			<-wctx.Done()
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// watchedFiles is what a reload watches: every file src read, and the
// config file even while it does not exist, so that creating it reloads.
func watchedFiles(opts config.ClientOptions, src *config.Sources) []string {
	files := src.Files()
	if opts.File != "" && !slices.Contains(files, opts.File) {
		files = append(files, opts.File)
	}
	return files
}
