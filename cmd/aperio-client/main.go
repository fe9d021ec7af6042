// Command aperio-client runs beside a local app and publishes it through an
// aperio-server: it dials out, announces its services and forwards the
// requests it receives. `aperio-client api …` drives the admin API.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/aperio-dev/aperio/internal/agent"
	"github.com/aperio-dev/aperio/internal/buildinfo"
	"github.com/aperio-dev/aperio/internal/clidoc"
	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/exitcode"
	"github.com/aperio-dev/aperio/internal/logging"
	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/tunnel"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	root := newRootCommand(stdout, stderr)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	return exitcode.Execute(root, stderr, "aperio-client")
}

func newRootCommand(stdout, stderr io.Writer) *cobra.Command {
	var (
		file        string
		checkConfig bool
		printConfig bool
	)
	cmd := &cobra.Command{
		Use:   "aperio-client [TARGET]",
		Short: "Publish a local app through an aperio-server",
		Long: "TARGET is a port (3000), host:port, or a URL (http://, https://, h2c://).\n" +
			"Without TARGET the services come from ./aperio.yaml (or --config FILE).",
		Version:       buildinfo.Version(),
		Args:          cobra.MaximumNArgs(1),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	keyFlags := registerRunFlags(cmd.Flags(), &file, &checkConfig, &printConfig)
	cmd.AddCommand(newAPICommand(stdout, stderr))
	cmd.AddCommand(newStatusCommand(stdout, stderr))
	cmd.AddCommand(newHashPasswordCommand(stdinSource(), stdout, stderr))
	cmd.AddCommand(newCheckCommand(stdout, stderr))
	buildinfo.AddVersion(cmd, "aperio-client", stdout)
	clidoc.Add(cmd, "aperio-client", buildinfo.Version())
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		opts := clientOptions(file, keyFlags.changed(cmd.Flags()), args)
		return serveClient(opts, checkConfig, printConfig, stdout, stderr)
	}
	cmd.AddCommand(newQuickPortCommand(config.ExposeTCP, stdout, stderr))
	cmd.AddCommand(newQuickPortCommand(config.ExposeUDP, stdout, stderr))
	addPrintSchema(cmd, stdout)
	return cmd
}

// serveClient loads the configuration of opts and runs the client until
// a signal, idle_timeout or a server's drain; --check-config and
// --print-config stop after loading.
func serveClient(opts config.ClientOptions, checkConfig, printConfig bool, stdout, stderr io.Writer) error {
	cfg, src, err := config.LoadClient(opts)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitcode.ErrUsage
	}
	warnings := append(src.Warnings(), config.ClientWarnings(cfg)...)
	if checkConfig {
		for _, w := range warnings {
			fmt.Fprintln(stderr, "warning:", w)
		}
		fmt.Fprintln(stdout, "configuration OK")
		return nil
	}
	if printConfig {
		return config.PrintClient(stdout, cfg, src)
	}
	log, err := logging.New(stderr, cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitcode.ErrUsage
	}
	for _, w := range warnings {
		log.Warn("configuration warning", logkey.Problem, w)
	}
	a, err := agent.New(cfg, agent.Options{Logger: log})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitcode.ErrUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Under the Windows service manager, its stop and shutdown requests
	// end ctx as SIGTERM does elsewhere; running is closed once Run
	// returned, so that the service reports stopped only after the drain.
	ctx, running := serviceContext(ctx, log)
	defer running()
	defer watchConfig(ctx, log, a, opts, src)()
	err = a.Run(ctx)
	if err != nil && !errors.Is(err, agent.ErrIdle) {
		log.Error("client failed", logkey.Err, err)
		return exitcode.ErrFailure
	}
	return nil
}

// newQuickPortCommand is `aperio-client tcp|udp PORT`: one public port
// and nothing else, the server and token from the usual surfaces.
func newQuickPortCommand(protocol string, stdout, stderr io.Writer) *cobra.Command {
	var (
		file        string
		checkConfig bool
		printConfig bool
		e           = config.Expose{Expose: tunnel.Expose{Protocol: protocol}}
	)
	cmd := &cobra.Command{
		Use:   protocol + " PORT|HOST:PORT",
		Short: "Open one public " + strings.ToUpper(protocol) + " port on the server to a local address",
		Long: "PORT is a local port (22 means 127.0.0.1:22) or HOST:PORT. The server opens\n" +
			"--remote-port, or a port of its tcp_port_range when it is 0, and the client\n" +
			"logs the public address (\"port open ... public_url=HOST:PORT\"). Services and\n" +
			"expose: entries of the configuration files are left out; the server and\n" +
			"token come from them, the environment or the flags as usual.",
		Args:          cobra.ExactArgs(1),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	keyFlags := registerRunFlags(cmd.Flags(), &file, &checkConfig, &printConfig)
	cmd.Flags().IntVar(&e.RemotePort, "remote-port", 0, "public port asked for (0 = the server picks one)")
	cmd.Flags().StringSliceVar(&e.AllowedIPs, "allowed-ip", nil, "visitor address or CIDR admitted (repeatable; default all)")
	if protocol == config.ExposeTCP {
		cmd.Flags().StringVar(&e.ProxyProtocol, "proxy-protocol", "", "v2: send the target a PROXY protocol v2 header with the visitor's address")
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		opts := clientOptions(file, keyFlags.changed(cmd.Flags()), nil)
		q := e
		q.Target = args[0]
		opts.Quick = &q
		return serveClient(opts, checkConfig, printConfig, stdout, stderr)
	}
	return cmd
}

// registerRunFlags adds the flags of a command that runs the client:
// one per config key, --config, --check-config and --print-config.
func registerRunFlags(fs *pflag.FlagSet, file *string, checkConfig, printConfig *bool) keyFlagSet {
	kf := registerKeyFlags(fs)
	fs.StringVar(file, "config", "", "configuration file (default ./aperio.yaml)")
	fs.BoolVar(checkConfig, "check-config", false, "validate the configuration, print every problem, and exit 0 or 2")
	fs.BoolVar(printConfig, "print-config", false, "print the effective configuration with the source of each value")
	return kf
}

// keyFlagSet maps the flags registered for config keys back to their keys.
type keyFlagSet map[string]string // flag name → canonical key

// registerKeyFlags adds one --flag per client config key, typed by its kind
// (keyflags.go).
func registerKeyFlags(fs *pflag.FlagSet) keyFlagSet {
	out := keyFlagSet{}
	for _, k := range config.ClientKeys() {
		if k.Flag == "" {
			continue
		}
		fs.AddFlag(newKeyFlag(k))
		out[k.Flag] = k.Name
	}
	return out
}

// changed returns the values of the key flags the user set, by key.
func (kf keyFlagSet) changed(fs *pflag.FlagSet) map[string]string {
	out := map[string]string{}
	fs.Visit(func(f *pflag.Flag) {
		if key, ok := kf[f.Name]; ok {
			out[key] = f.Value.String()
		}
	})
	return out
}
