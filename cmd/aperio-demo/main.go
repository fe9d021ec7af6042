// Command aperio-demo is a tiny HTTP origin for the README quick start and
// for bench/run.sh. It serves HTTP/1.1 and h2c (HTTP/2 with prior knowledge)
// on one plain TCP port:
//
//	GET  /              "Hello from Aperio!\n" as text/plain
//	GET  /echo          the request's method, path, host and headers as JSON
//	GET  /bytes?n=N     N bytes (default 1 MiB) with Content-Length set
//	POST /upload        reads and discards the body, answers {"bytes":N}
//	PUT  /upload        the same as POST
//	GET  /sse?n=5&interval=100ms
//	                    n server-sent events, one per interval
//	GET  /healthz       "ok"
//	POST /scale         with --provider-run: the demo's scaling provider
//	                    (provider.go), bearer secret $DEMO_PROVIDER_SECRET
//
// Usage:
//
//	aperio-demo [--listen 127.0.0.1:3000] [--log-level info] [--provider-run FILE]
//
// Without --listen, the PORT environment variable selects 127.0.0.1:$PORT.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/aperio-dev/aperio/internal/logkey"
)

const (
	defaultListen = "127.0.0.1:3000"

	// shutdownTimeout bounds how long in-flight requests may keep the process
	// alive after SIGINT or SIGTERM; after it, remaining connections are closed.
	shutdownTimeout = 10 * time.Second
)

// config is the parsed command line.
type config struct {
	Listen   string     // TCP address to listen on
	LogLevel slog.Level // minimum level logged to stderr
	// ProviderRun, when set, serves POST /scale, which runs this file for
	// each instance a scaling call asks for; ProviderSecret is the bearer
	// secret calls must carry ($DEMO_PROVIDER_SECRET, required then).
	ProviderRun, ProviderSecret string
}

func main() {
	cfg, err := parseConfig(os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "aperio-demo: %v\n", err)
		os.Exit(2)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	slog.SetDefault(logger)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, logger); err != nil {
		logger.Error("demo server stopped", logkey.Err, err)
		stop()
		os.Exit(1)
	}
}

// parseConfig reads flags from args and the PORT variable through getenv.
// --listen wins over PORT; with neither the address is 127.0.0.1:3000.
func parseConfig(args []string, getenv func(string) string, usage io.Writer) (config, error) {
	listen := defaultListen
	if port := getenv("PORT"); port != "" {
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil || n == 0 {
			return config{}, fmt.Errorf("invalid PORT %q", port)
		}
		listen = net.JoinHostPort("127.0.0.1", port)
	}

	fs := flag.NewFlagSet("aperio-demo", flag.ContinueOnError)
	fs.SetOutput(usage)
	cfg := config{}
	fs.StringVar(&cfg.Listen, "listen", listen, "TCP `address` to serve HTTP/1.1 and h2c on (env PORT sets 127.0.0.1:$PORT)")
	fs.TextVar(&cfg.LogLevel, "log-level", slog.LevelInfo, "minimum log `level`: debug, info, warn or error")
	fs.StringVar(&cfg.ProviderRun, "provider-run", "", "serve POST /scale, a scaling provider that runs this `file` for each instance asked for (bearer secret $DEMO_PROVIDER_SECRET)")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if cfg.ProviderRun != "" {
		cfg.ProviderSecret = getenv("DEMO_PROVIDER_SECRET")
		if len(cfg.ProviderSecret) < 16 {
			return config{}, errors.New("--provider-run needs DEMO_PROVIDER_SECRET, at least 16 characters")
		}
	}
	return cfg, nil
}

// run listens on cfg.Listen and serves until ctx is done, then shuts down
// gracefully. It returns nil after a clean shutdown.
func run(ctx context.Context, cfg config, logger *slog.Logger) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	var p *provider
	if cfg.ProviderRun != "" {
		p = &provider{run: cfg.ProviderRun, secret: cfg.ProviderSecret, log: logger}
		defer p.stop()
	}
	return serve(ctx, ln, logger, p)
}

// serve serves the demo endpoints on ln until ctx is done, then stops
// accepting, lets in-flight requests finish for up to shutdownTimeout and
// closes what is left. It closes ln. SSE streams end early on shutdown.
func serve(ctx context.Context, ln net.Listener, logger *slog.Logger, p *provider) error {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)

	d := newDemo()
	d.provider = p
	srv := &http.Server{
		Handler:           d.routes(),
		Protocols:         &protocols,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	srv.RegisterOnShutdown(d.shutdown)

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	logger.Info("demo server listening", logkey.Addr, ln.Addr().String())

	select {
	case err := <-errc:
		// Serve only returns early on a listener failure.
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}

	logger.Info("demo server shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	err := srv.Shutdown(shutdownCtx)
	if errors.Is(err, context.DeadlineExceeded) {
		logger.Warn("shutdown timed out, closing connections")
		err = srv.Close()
	}
	if serveErr := <-errc; !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", serveErr)
	}
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}
