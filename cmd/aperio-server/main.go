// Command aperio-server is Aperio's public server: visitors, tunnels and
// the admin API on one port. See docs/ and the README.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel"

	"github.com/aperio-dev/aperio/config"
	"github.com/aperio-dev/aperio/gateway"
	"github.com/aperio-dev/aperio/internal/buildinfo"
	"github.com/aperio-dev/aperio/internal/exitcode"
	"github.com/aperio-dev/aperio/internal/logging"
	"github.com/aperio-dev/aperio/telemetry"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	var (
		file        string
		checkConfig bool
		printConfig bool
	)
	cmd := &cobra.Command{
		Use:           "aperio-server",
		Short:         "Aperio's public server: visitors, tunnels and the admin API on one port",
		Version:       buildinfo.Version(),
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				file = os.Getenv("APERIO_SERVER_CONFIG")
			}
			opts := config.ServerOptions{File: file, FileMustExist: file != "", Env: os.LookupEnv}
			if opts.File == "" {
				opts.File = "aperio-server.yaml"
			}
			cfg, src, err := config.LoadServer(opts)
			if err != nil {
				fmt.Fprintln(stderr, err)
				return exitcode.ErrUsage
			}
			if checkConfig {
				fmt.Fprintln(stdout, "configuration OK")
				return nil
			}
			if printConfig {
				return config.PrintServer(stdout, cfg, src)
			}
			log, err := logging.New(stderr, cfg.LogLevel, cfg.LogFormat)
			if err != nil {
				fmt.Fprintln(stderr, err)
				return exitcode.ErrUsage
			}
			// The access log is a stream of its own: always at info, in
			// log_format, whatever log_level says of diagnostics.
			access, err := logging.New(stderr, "info", cfg.LogFormat)
			if err != nil {
				fmt.Fprintln(stderr, err)
				return exitcode.ErrUsage
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			gopts := gateway.Options{Logger: log, AccessLog: access}
			if telemetry.TracingEnabled(os.Getenv) {
				// Export failures (a collector down) surface through
				// OpenTelemetry's global handler: send them to our log.
				otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
					log.Warn("telemetry export failed", "err", err)
				}))
				tr, err := telemetry.NewTracing(ctx, cfg.OTelSampleRate)
				if err != nil {
					log.Error("tracing failed to start", "err", err)
					return exitcode.ErrFailure
				}
				defer func() {
					sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					if err := tr.Shutdown(sctx); err != nil {
						log.Warn("spans not exported at shutdown", "err", err)
					}
				}()
				gopts.TracerProvider = tr.Provider()
				log.Info("tracing on", "sample_rate", cfg.OTelSampleRate)
			}
			g, err := gateway.New(ctx, cfg, gopts)
			if err != nil {
				log.Error("server failed to start", "err", err)
				return exitcode.ErrFailure
			}
			if err := g.ListenAndServe(ctx); err != nil {
				log.Error("server failed", "err", err)
				return exitcode.ErrFailure
			}
			return nil
		},
	}
	cmd.SetArgs(args)
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	cmd.Flags().StringVar(&file, "config", "", "configuration file (default ./aperio-server.yaml; env APERIO_SERVER_CONFIG)")
	cmd.Flags().BoolVar(&checkConfig, "check-config", false, "validate the configuration, print every problem, and exit 0 or 2")
	cmd.Flags().BoolVar(&printConfig, "print-config", false, "print the effective configuration with the source of each value")
	return exitcode.Execute(cmd, stderr, "aperio-server")
}
