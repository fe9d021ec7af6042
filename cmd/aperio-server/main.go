// Command aperio-server is Aperio's public server: visitors, tunnels and
// the admin API on one port. See docs/ and the README.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"
	// The zone database, so that maintenance_windows' time zones load on
	// a host (or a scratch image) without one: about 450 KB.
	_ "time/tzdata"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel"

	"github.com/aperio-dev/aperio/cmd/aperio-server/serverconfig"
	"github.com/aperio-dev/aperio/internal/buildinfo"
	"github.com/aperio-dev/aperio/internal/clidoc"
	"github.com/aperio-dev/aperio/internal/exitcode"
	"github.com/aperio-dev/aperio/internal/logging"
	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/internal/sdnotify"
	"github.com/aperio-dev/aperio/internal/server"
	"github.com/aperio-dev/aperio/internal/telemetry"
	"github.com/aperio-dev/aperio/store"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	var (
		file        string
		checkConfig bool
		printConfig bool
		verifyAudit bool
		healthcheck bool
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
			opts := serverconfig.Options{File: file, FileMustExist: file != "", Env: os.LookupEnv}
			if opts.File == "" {
				opts.File = serverconfig.File
			}
			cfg, src, err := serverconfig.Load(opts)
			if err != nil {
				fmt.Fprintln(stderr, err)
				return exitcode.ErrUsage
			}
			warnings := serverconfig.Warnings(cfg)
			if checkConfig {
				warnings = append(warnings, storeWarnings(cmd.Context(), cfg)...)
				for _, w := range append(src.Warnings(), warnings...) {
					fmt.Fprintln(stderr, "warning:", w)
				}
				fmt.Fprintln(stdout, "configuration OK")
				return nil
			}
			if printConfig {
				return serverconfig.Print(stdout, cfg, src)
			}
			if healthcheck {
				return selfCheck(cmd.Context(), cfg, stderr)
			}
			// log_level is live: a reload sets level.
			level := new(slog.LevelVar)
			lv, err := logging.ParseLevel(cfg.LogLevel)
			if err != nil {
				fmt.Fprintln(stderr, err)
				return exitcode.ErrUsage
			}
			level.Set(lv)
			log, err := logging.NewVar(stderr, level, cfg.LogFormat)
			if err != nil {
				fmt.Fprintln(stderr, err)
				return exitcode.ErrUsage
			}
			// The access log is a stream of its own: always at info, in
			// log_format, whatever log_level says of diagnostics. It is
			// written in batches (at least every 100 ms, and at exit)
			// rather than a write per request.
			accessOut := logging.NewBuffered(stderr, 64<<10, 100*time.Millisecond)
			defer accessOut.Close()
			access, err := logging.New(accessOut, "info", cfg.LogFormat)
			if err != nil {
				fmt.Fprintln(stderr, err)
				return exitcode.ErrUsage
			}
			for _, w := range src.Warnings() {
				log.Warn("configuration warning", logkey.Problem, w)
			}
			for _, w := range warnings {
				log.Warn("weak configuration", logkey.Problem, w)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if verifyAudit {
				return verifyAuditChain(ctx, cfg, stdout, stderr)
			}
			gopts := server.Options{Logger: log, AccessLog: access, Ready: func(addr net.Addr) {
				// What starting took (migrations, the configuration,
				// listeners) is garbage now: collect it and give its pages
				// back at once. The runtime's scavenger keeps what it
				// holds up to the next GC goal, so an idle server would
				// keep them for good (docs/performance.md, memory at idle).
				debug.FreeOSMemory()
				// Type=notify (the package's unit): systemd counts the
				// server started from here, and `systemctl restart`
				// returns when it serves.
				if sent, err := sdnotify.Notify(sdnotify.Ready + "\nSTATUS=serving on " + addr.String()); err != nil {
					log.Warn("could not tell systemd the server is ready", logkey.Err, err)
				} else if sent {
					log.Debug("told systemd the server is ready")
				}
			}}
			go func() {
				<-ctx.Done()
				sdnotify.Notify(sdnotify.Stopping) // best effort: systemd stops it either way
			}()
			if telemetry.TracingEnabled(os.Getenv) {
				// Export failures (a collector down) surface through
				// OpenTelemetry's global handler: send them to our log.
				otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
					log.Warn("telemetry export failed", logkey.Err, err)
				}))
				tr, err := telemetry.NewTracing(ctx, cfg.OTelSampleRate)
				if err != nil {
					log.Error("tracing failed to start", logkey.Err, err)
					return exitcode.ErrFailure
				}
				defer func() {
					sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					if err := tr.Shutdown(sctx); err != nil {
						log.Warn("spans not exported at shutdown", logkey.Err, err)
					}
				}()
				gopts.TracerProvider = tr.Provider()
				log.Info("tracing on", logkey.SampleRate, cfg.OTelSampleRate)
			}
			g, err := server.New(ctx, cfg.Config, gopts)
			if err != nil {
				log.Error("server failed to start", logkey.Err, err)
				return exitcode.ErrFailure
			}
			// Reload on SIGHUP and on a change of the files, from
			// before the port opens.
			defer newReloader(opts, cfg, src.Files(), g, log, level).start(ctx)()
			if err := g.ListenAndServe(ctx); err != nil {
				log.Error("server failed", logkey.Err, err)
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
	cmd.Flags().BoolVar(&verifyAudit, "verify-audit", false, "check the audit log's hash chain in the configured store, print the result, and exit 0 (intact) or 1 (broken or unreadable)")
	cmd.Flags().BoolVar(&healthcheck, "healthcheck", false, "ask the server this configuration describes for /aperio/readyz on this machine, and exit 0 (200 within 3s) or 1 (for a Docker HEALTHCHECK)")
	buildinfo.AddVersion(cmd, "aperio-server", stdout)
	clidoc.Add(cmd, "aperio-server", buildinfo.Version(), clidoc.Section{Title: "Settings", Text: serverconfig.HelpText()})
	addSettingsHelp(cmd, stdout)
	return exitcode.Execute(cmd, stderr, "aperio-server")
}

// verifyAuditChain opens the store cfg names read-only (no migrations, no
// backfill, no writes: what it checks is what is on disk) and checks the
// audit chain: "audit chain OK (N entries)" on stdout and nil, or the first
// broken entry on stderr and exitcode.ErrFailure.
func verifyAuditChain(ctx context.Context, cfg serverconfig.Config, stdout, stderr io.Writer) error {
	if cfg.Store.DatabaseURL == "" {
		// Opening would create an empty store: a mistyped data_dir must
		// not read as an intact chain.
		if _, err := os.Stat(filepath.Join(cfg.Store.DataDir, store.DBFile)); err != nil {
			fmt.Fprintln(stderr, "verify audit: no store in data_dir:", err)
			return exitcode.ErrFailure
		}
	}
	db, err := store.Open(ctx, store.Config{DataDir: cfg.Store.DataDir, DatabaseURL: cfg.Store.DatabaseURL, ReadOnly: true})
	if err != nil {
		fmt.Fprintln(stderr, "verify audit:", err)
		return exitcode.ErrFailure
	}
	n, err := db.VerifyAudit(ctx)
	if cerr := db.Close(); err == nil && cerr != nil {
		err = cerr
	}
	var broken *store.AuditChainError
	switch {
	case errors.As(err, &broken) && broken.Entry.ID == 0:
		// No entry to name: the head records entries of which none is left.
		fmt.Fprintf(stderr, "audit chain BROKEN: %s\n", broken.Reason)
		return exitcode.ErrFailure
	case errors.As(err, &broken):
		e := broken.Entry
		fmt.Fprintf(stderr, "audit chain BROKEN at entry id %d seq %d (at %s, event %s): %s (%d entries verified before it)\n",
			e.ID, e.Seq, e.At.UTC().Format(time.RFC3339Nano), e.Event, broken.Reason, n)
		return exitcode.ErrFailure
	case err != nil:
		fmt.Fprintln(stderr, "verify audit:", err)
		return exitcode.ErrFailure
	}
	fmt.Fprintf(stdout, "audit chain OK (%d entries)\n", n)
	return nil
}

// storeWarnings looks into an existing store, read-only and briefly, for
// what a configuration check should warn about: organizations other than
// the default one that own no hostname pattern (their keys may mint no
// token, their clients bind nothing), and, with a tcp_port_range, those
// that hold tokens for public ports but own no port (their clients open
// none). No store yet, or one that cannot be read, gives no warning but a
// note.
func storeWarnings(ctx context.Context, cfg serverconfig.Config) []string {
	if cfg.Store.DatabaseURL == "" {
		if _, err := os.Stat(filepath.Join(cfg.Store.DataDir, store.DBFile)); err != nil {
			return nil // nothing stored yet
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	db, err := store.Open(ctx, store.Config{DataDir: cfg.Store.DataDir, DatabaseURL: cfg.Store.DatabaseURL, ReadOnly: true})
	if err != nil {
		return []string{"cannot read the store to check organizations' hostname patterns: " + err.Error()}
	}
	defer db.Close()
	names, err := server.OrgsWithoutHostnames(ctx, db, "default")
	if err != nil {
		return []string{"cannot read the store to check organizations' hostname patterns: " + err.Error()}
	}
	var out []string
	if len(names) > 0 {
		slices.Sort(names)
		out = append(out, fmt.Sprintf("%d organization(s) own no hostname patterns (%s): they may mint no token and bind no hostname; the master token assigns them with PUT /aperio/api/orgs/{id}/hostnames",
			len(names), strings.Join(names, ", ")))
	}
	if len(cfg.TCPPortRange) == 0 {
		return out
	}
	names, err = server.OrgsWithoutPorts(ctx, db, "default")
	if err != nil {
		return append(out, "cannot read the store to check organizations' public ports: "+err.Error())
	}
	if len(names) > 0 {
		slices.Sort(names)
		out = append(out, fmt.Sprintf("%d organization(s) hold tokens with allow_tcp_ports but own no ports (%s): their clients may open no public port; the master token assigns them with PUT /aperio/api/orgs/{id}/ports",
			len(names), strings.Join(names, ", ")))
	}
	return out
}
