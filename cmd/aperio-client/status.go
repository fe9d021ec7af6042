package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/aperio-dev/aperio/internal/agent"
	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/exitcode"
)

// newStatusCommand builds `aperio-client status`: the concurrency snapshot
// of every client running on this machine, read from their status sockets
// (no server needed).
func newStatusCommand(stdout, stderr io.Writer) *cobra.Command {
	var (
		asJSON    bool
		socket    string
		file      string
		connected bool
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the services and concurrency limits of the clients running here",
		Long: "Reads the status socket of every aperio-client running on this machine\n" +
			"(" + config.StatusDir() + "/PID.sock), or the one --socket names, or else the\n" +
			"status_socket setting (./aperio.yaml or --config, APERIO_STATUS_SOCKET, ~/.aperio.yaml).\n" +
			"Exits 1 when no client answers, or with --require-connected when one has no tunnel up\n" +
			"(the check of the client's container image).",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if socket == "" {
				var err error
				if socket, err = configuredSocket(file); err != nil {
					fmt.Fprintln(stderr, "aperio-client:", err)
					return exitcode.ErrUsage
				}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Second)
			defer cancel()
			sts, err := agent.ReadStatuses(ctx, config.StatusDir(), socket)
			if err != nil {
				if errors.Is(err, agent.ErrNoClient) {
					fmt.Fprintln(stderr, "aperio-client: no running aperio-client answered; is one running (status_socket not off)?")
				} else {
					fmt.Fprintln(stderr, "aperio-client:", err)
				}
				return exitcode.ErrFailure
			}
			if asJSON {
				enc := json.NewEncoder(stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(sts); err != nil {
					return err
				}
			} else {
				tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
				statusTable(tw, sts)
				if err := tw.Flush(); err != nil {
					return err
				}
			}
			if connected {
				for _, st := range sts {
					if st.Connected() == 0 {
						fmt.Fprintf(stderr, "aperio-client: client %d (%s) has no tunnel up (0 of %d servers connected)\n", st.PID, st.Name, len(st.Tunnels))
						return exitcode.ErrFailure
					}
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	cmd.Flags().StringVar(&socket, "socket", "", "read only the client listening on this unix socket")
	cmd.Flags().BoolVar(&connected, "require-connected", false, "exit 1 unless every client answering has at least one tunnel up")
	cmd.Flags().StringVar(&file, "config", "", "configuration file whose status_socket to read (default ./aperio.yaml)")
	return cmd
}

// configuredSocket returns the status_socket the client configuration
// sets, "" when it sets none. Only that key matters here: problems with the
// rest of the configuration (no server, no service) are the running
// client's business, not status's, so they are not reported.
func configuredSocket(file string) (string, error) {
	opts := config.ClientOptions{File: file, FileMustExist: file != "", Env: os.LookupEnv, Hostname: os.Hostname}
	if home, err := os.UserHomeDir(); err == nil {
		opts.HomeFile = filepath.Join(home, config.ClientHomeFile)
	}
	// status_socket is a plain string: no value of it fails to load, so
	// the error can only be about other keys.
	cfg, src, _ := config.LoadClient(opts)
	if src.Of("status_socket").Kind == config.SourceDefault {
		return "", nil
	}
	if cfg.StatusSocket == config.StatusSocketOff {
		return "", errors.New("status_socket is off: the client opens no status socket")
	}
	return cfg.StatusSocket, nil
}

func statusTable(w io.Writer, sts []agent.Status) {
	fmt.Fprintln(w, "PID\tNAME\tTUNNELS\tSERVICE\tHOSTNAMES\tTARGET\tHEALTHY\tMODE\tDESIRED\tMIN\tMAX\tFIXED")
	for _, st := range sts {
		tunnels := fmt.Sprintf("%d/%d", st.Connected(), len(st.Tunnels))
		for _, s := range st.Services {
			mode, desired, lo, hi, fixed := "none", "-", "-", "-", "-"
			if c := s.Concurrency; c != nil {
				mode, desired, lo, hi, fixed = string(c.Mode), strconv.Itoa(c.Desired), strconv.Itoa(c.Min), strconv.Itoa(c.Max), yesNo(c.Fixed)
			}
			fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
				st.PID, cell(st.Name), tunnels, s.ID, joined(s.Hostnames), cell(s.Target), yesNo(s.Healthy), mode, desired, lo, hi, fixed)
		}
		// A client idle_timeout retired that waits for its signal
		// (idle_action wait) says so: no tunnel is up, by design.
		if st.Retired != "" {
			fmt.Fprintf(w, "%d\t%s\t%s\t(retired: %s, waiting for SIGTERM)\t-\t-\t-\t-\t-\t-\t-\t-\n", st.PID, cell(st.Name), tunnels, st.Retired)
		}
		// A public port: its entry, the address visitors reach (or why
		// the server refused it) and the protocol.
		for _, e := range st.Exposed {
			public := e.Public
			if public == "" {
				public = "refused: " + e.Error
			}
			fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t-\t-\t-\t-\t-\n",
				st.PID, cell(st.Name), tunnels, cell("port "+e.Name), cell(public), e.Protocol, yesNo(e.Public != ""))
		}
	}
}
