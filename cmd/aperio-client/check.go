package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/aperio-dev/aperio/internal/agent"
	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/exitcode"
)

// newCheckCommand builds `aperio-client check`: it loads the client's
// configuration the way the client does (the same TARGET, --config and
// key flags), then checks each server, token and hostname, and each
// target and health endpoint, and prints a checklist.
func newCheckCommand(stdout, stderr io.Writer) *cobra.Command {
	var (
		file    string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "check [TARGET]",
		Short: "Check that the servers take the token and hostnames, and that the targets answer",
		Long: "Loads the configuration like the client (./aperio.yaml or --config, the environment,\n" +
			"the flags), then, without serving anything: for each server, a handshake with the token,\n" +
			"one per hostname and one per expose entry, announced draining so no visitor is routed\n" +
			"here; for each service, a GET of its target and its health check; for each expose entry,\n" +
			"a connection to its target. Prints one line per item (✓ passed, ⚠ passed with something\n" +
			"to read, ✗ failed) with what to do about each failure, and exits 0 when none failed,\n" +
			"1 otherwise (2 for a configuration that does not load).",
		Args:          cobra.MaximumNArgs(1),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	keyFlags := registerKeyFlags(cmd.Flags())
	cmd.Flags().StringVar(&file, "config", "", "configuration file (default ./aperio.yaml)")
	cmd.Flags().DurationVar(&timeout, "timeout", agent.DefaultCheckTimeout, "bound of each step: one handshake, one request, one probe")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		opts := clientOptions(file, keyFlags.changed(cmd.Flags()), args)
		cfg, _, err := config.LoadClient(opts)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return exitcode.ErrUsage
		}
		// The check opens no status socket and logs nothing: its answer
		// is the checklist.
		cfg.StatusSocket = config.StatusSocketOff
		a, err := agent.New(cfg, agent.Options{})
		if err != nil {
			fmt.Fprintln(stderr, err)
			return exitcode.ErrUsage
		}
		ctx := cmd.Context()
		if ctx == nil {
			ctx = context.Background()
		}
		items := a.Check(ctx, timeout)
		failed, warned := printChecklist(stdout, items)
		if failed > 0 {
			fmt.Fprintf(stdout, "%d of %d checks failed\n", failed, len(items))
			return exitcode.ErrFailure
		}
		if warned > 0 {
			fmt.Fprintf(stdout, "all %d checks passed, %d with a warning (⚠)\n", len(items), warned)
			return nil
		}
		fmt.Fprintf(stdout, "all %d checks passed\n", len(items))
		return nil
	}
	return cmd
}

// clientOptions are the options both the client and check load its
// configuration with: file (--config; ./aperio.yaml when empty), the key
// flags set, the environment, ~/.aperio.yaml and the TARGET argument.
func clientOptions(file string, flags map[string]string, args []string) config.ClientOptions {
	opts := config.ClientOptions{
		File:          file,
		FileMustExist: file != "",
		Flags:         flags,
		Env:           os.LookupEnv,
		Hostname:      os.Hostname,
	}
	if opts.File == "" {
		opts.File = config.ClientFile
	}
	if home, err := os.UserHomeDir(); err == nil {
		opts.HomeFile = filepath.Join(home, config.ClientHomeFile)
	}
	if len(args) == 1 {
		opts.Target = args[0]
	}
	return opts
}

// printChecklist writes one line per item, and under each failed one
// what to do; it returns the numbers of failed and warned items. A line
// is ✓ only for an item that passed with nothing to say.
func printChecklist(w io.Writer, items []agent.CheckItem) (failed, warned int) {
	for _, it := range items {
		mark := "✓"
		switch {
		case !it.OK:
			mark = "✗"
			failed++
		case it.Warn:
			mark = "⚠"
			warned++
		}
		line := mark + " " + it.What
		if it.Detail != "" {
			line += ": " + it.Detail
		}
		fmt.Fprintln(w, line)
		if !it.OK && it.Fix != "" {
			fmt.Fprintln(w, "    → "+it.Fix)
		}
	}
	return failed, warned
}
