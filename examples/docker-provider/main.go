// Command aperio-docker-provider is a reference scaling provider for
// Aperio: it receives the server's scaling calls and makes the number of
// running containers of a service equal to the call's desired count,
// through the Docker Engine API on the daemon's unix socket. It is meant to
// be copied and adapted; docs/docker.md walks through it.
//
//	POST /scale/{service}   Aperio's call (docs/autoscaling.md); 202 when
//	                        accepted, 200 for a repeated Idempotency-Key,
//	                        401 without the secret, 404 for an unknown
//	                        service, 400 for a bad body
//	GET  /calls             the recent calls as JSON (same secret)
//	GET  /healthz           "ok"
//
// Usage:
//
//	PROVIDER_SECRET=... aperio-docker-provider [--listen :9000]
//	    [--config /etc/aperio-docker-provider.json] [--docker-socket /var/run/docker.sock]
//
// The configuration is JSON, read from the PROVIDER_CONFIG variable when
// set, else from --config; ${VAR} in it expands from the environment:
//
//	{"owner": "shop",
//	 "services": {"web": {"image": "shop-web:1.4", "network": "shop_net",
//	   "env": ["APERIO_SERVER_TOKEN=${APERIO_SERVER_TOKEN}"], "max": 8, "stop_timeout": "35s"}}}
//
// Every container it creates carries the labels aperio.provider.owner and
// aperio.provider.service; it lists, starts and stops only containers with
// both, so it never touches anything else on the engine.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/aperio-dev/aperio/internal/logkey"
)

// options is the parsed command line and environment.
type options struct {
	Listen string
	Socket string
	Secret string
	Config Config
}

func main() {
	opts, err := parseOptions(os.Args[1:], os.Getenv, os.ReadFile, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "aperio-docker-provider: %v\n", err)
		os.Exit(2)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, opts, logger); err != nil {
		logger.Error("provider stopped", logkey.Err, err)
		stop()
		os.Exit(1)
	}
}

// parseOptions reads flags from args and the secret and configuration
// through getenv and readFile.
func parseOptions(args []string, getenv func(string) string, readFile func(string) ([]byte, error), usage io.Writer) (options, error) {
	fs := flag.NewFlagSet("aperio-docker-provider", flag.ContinueOnError)
	fs.SetOutput(usage)
	var o options
	var path string
	fs.StringVar(&o.Listen, "listen", ":9000", "TCP `address` to serve the scaling calls on")
	fs.StringVar(&o.Socket, "docker-socket", "/var/run/docker.sock", "`path` of the Docker daemon's unix socket")
	fs.StringVar(&path, "config", "/etc/aperio-docker-provider.json", "JSON configuration `file` (PROVIDER_CONFIG wins)")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	o.Secret = getenv("PROVIDER_SECRET")
	if o.Secret == "" {
		return options{}, errors.New("PROVIDER_SECRET is not set: Aperio's calls must be authenticated")
	}
	raw := []byte(getenv("PROVIDER_CONFIG"))
	if len(raw) == 0 {
		b, err := readFile(path)
		if err != nil {
			return options{}, fmt.Errorf("read config: %w", err)
		}
		raw = b
	}
	expanded := os.Expand(string(raw), getenv)
	dec := json.NewDecoder(strings.NewReader(expanded))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o.Config); err != nil {
		return options{}, fmt.Errorf("config: %w", err)
	}
	if err := o.Config.validate(); err != nil {
		return options{}, fmt.Errorf("config: %w", err)
	}
	return o, nil
}

// run serves until ctx is done, then shuts down.
func run(ctx context.Context, o options, logger *slog.Logger) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", o.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	p := newProvider(&o.Config, o.Secret, newEngine(o.Socket), logger)
	srv := &http.Server{Handler: p.routes(), ReadHeaderTimeout: 10 * time.Second}

	workCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	workers := make(chan struct{})
	go func() {
		defer close(workers)
		p.run(workCtx)
	}()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	logger.Info("provider listening", logkey.Addr, ln.Addr().String(), logkey.Owner, o.Config.Owner, logkey.Services, len(o.Config.Services))

	select {
	case err = <-errc:
		err = fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
		shutdownCtx, stop := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer stop()
		err = srv.Shutdown(shutdownCtx)
		if serveErr := <-errc; !errors.Is(serveErr, http.ErrServerClosed) {
			err = errors.Join(err, serveErr)
		}
	}
	cancel()
	<-workers
	return err
}
