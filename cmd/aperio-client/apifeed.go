package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/aperio-dev/aperio/internal/control/admin/apiclient"
	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/exitcode"
)

// The traffic commands of `aperio-client api`: stats, tail, and the audit
// log's filters and verification.

func (a *apiCLI) statsCommand() *cobra.Command {
	var hostname string
	cmd := &cobra.Command{
		Use:   "stats [--hostname H]",
		Short: "Show each hostname's traffic of the last minute: requests/s, error rate, p50 and p99",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return callAPI(a, cmd, func(c *apiclient.Client, ctx context.Context) (apitype.Stats, error) {
				return c.Stats(ctx, hostname)
			}, statsTable)
		},
	}
	cmd.Flags().StringVar(&hostname, "hostname", "", "only this hostname")
	return cmd
}

func statsTable(w io.Writer, st apitype.Stats) {
	fmt.Fprintf(w, "clients %d, hostnames %d, held now %d, scaling events in the last hour %d\n\n", st.Clients, st.Hostnames, st.Held, st.ScalingEvents1h)
	fmt.Fprintln(w, "HOSTNAME\tRPS\tERRORS\tP50\tP99\tREQUESTS 1M\tREQUESTS 1H")
	for _, h := range st.Hosts {
		m := h.Windows[apitype.Window1m]
		fmt.Fprintf(w, "%s\t%.2f\t%.1f%%\t%s\t%s\t%d\t%d\n", cell(apitype.StatsLabel(h.Hostname)), m.RPS, 100*m.ErrorRate, ms(m.P50MS), ms(m.P99MS), m.Requests, h.Windows[apitype.Window1h].Requests)
	}
}

// ms renders milliseconds for a table: "-" for none, else three
// significant figures.
func ms(v float64) string {
	if v <= 0 {
		return "-"
	}
	return strconv.FormatFloat(v, 'g', 3, 64) + "ms"
}

func (a *apiCLI) tailCommand() *cobra.Command {
	var (
		hostname string
		types    []string
	)
	cmd := &cobra.Command{
		Use:   "tail [--hostname H] [--type access,scaling,client]",
		Short: "Follow the server's live events, one line each, until interrupted",
		Long: "Follow GET /aperio/api/stream: each proxied request (access), scaling call (scaling) and\n" +
			"client connect or disconnect (client), one line each, or one JSON object a line with --json.\n" +
			"Interrupt (Ctrl-C) to stop; it exits 1 when the server ends the stream or it fails.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, t := range types {
				if !slices.Contains(apitype.StreamTypes(), t) {
					fmt.Fprintf(a.stderr, "aperio-client: --type %q is not one of %s\n", t, strings.Join(apitype.StreamTypes(), ", "))
					return exitcode.ErrUsage
				}
			}
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			err = c.Stream(ctx, types, hostname, func(e apiclient.StreamEvent) error {
				if a.json {
					line, err := json.Marshal(struct {
						Event string          `json:"event"`
						Data  json.RawMessage `json:"data"`
					}{e.Type, e.Data})
					if err != nil {
						return fmt.Errorf("event %s: %w", e.Type, err)
					}
					_, err = fmt.Fprintf(a.stdout, "%s\n", line)
					return err
				}
				_, err := fmt.Fprintln(a.stdout, eventLine(e))
				return err
			})
			var re *apiclient.ResponseError
			switch {
			case ctx.Err() != nil && errors.Is(err, ctx.Err()):
				return nil // interrupted
			case errors.As(err, &re):
				fmt.Fprintln(a.stderr, "aperio-client:", re.Message)
			default:
				fmt.Fprintln(a.stderr, "aperio-client: stream ended:", err)
			}
			return exitcode.ErrFailure
		},
	}
	cmd.Flags().StringVar(&hostname, "hostname", "", "only events on this hostname")
	cmd.Flags().StringSliceVar(&types, "type", nil, "only these event types: access, scaling, client")
	return cmd
}

// eventLine renders one stream event for people; an event it cannot
// decode is shown as its JSON.
func eventLine(e apiclient.StreamEvent) string {
	raw := e.Type + " " + string(e.Data)
	switch e.Type {
	case apitype.StreamAccess:
		var v apitype.StreamAccessEvent
		if json.Unmarshal(e.Data, &v) != nil {
			return raw
		}
		line := fmt.Sprintf("%s access %s %s %s %d %s", v.At.Local().Format(time.TimeOnly), cell(v.Hostname), cell(v.Method), cell(v.Path), v.Status, ms(v.DurationMS))
		if v.QueueWaitMS > 0 {
			line += " queue=" + ms(v.QueueWaitMS)
		}
		if v.HoldMS > 0 {
			line += " hold=" + ms(v.HoldMS)
		}
		if v.Limit != "" {
			line += " limit=" + cell(v.Limit)
		}
		if v.Client != "" {
			line += " client=" + cell(v.Client)
		}
		return line
	case apitype.StreamScaling:
		var v apitype.StreamScalingEvent
		if json.Unmarshal(e.Data, &v) != nil {
			return raw
		}
		return fmt.Sprintf("%s scaling %s%s %s %s instances=%d", v.At.Local().Format(time.TimeOnly), cell(v.Hostname), v.Path, cell(v.Action), cell(v.Reason), v.Instances)
	case apitype.StreamClient:
		var v apitype.StreamClientEvent
		if json.Unmarshal(e.Data, &v) != nil {
			return raw
		}
		return fmt.Sprintf("%s client %s %s (%s) %s", time.Now().Format(time.TimeOnly), cell(v.Event), cell(v.Name), cell(v.ID), joined(v.Hostnames))
	case apitype.StreamDropped:
		var v apitype.StreamDroppedEvent
		if json.Unmarshal(e.Data, &v) != nil {
			return raw
		}
		now := time.Now().Format(time.TimeOnly)
		if lost := v.Count - v.Sampled; lost > 0 {
			return fmt.Sprintf("%s dropped %d events: this terminal fell behind", now, lost)
		}
		return fmt.Sprintf("%s sampled: %d requests not shown (at most %d a second are)", now, v.Sampled, apitype.StreamMaxAccessRate)
	}
	return cell(raw)
}

func (a *apiCLI) auditVerifyCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "verify",
		Short: "Verify the audit log's hash chain (role admin)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var v apitype.AuditVerify
			err := callAPI(a, cmd, func(c *apiclient.Client, ctx context.Context) (apitype.AuditVerify, error) {
				var err error
				v, err = c.VerifyAudit(ctx)
				return v, err
			}, func(w io.Writer, v apitype.AuditVerify) {
				if v.OK {
					fmt.Fprintf(w, "audit chain ok: %d entries\n", v.Entries)
					return
				}
				fmt.Fprintf(w, "audit chain BROKEN after %d entries: %s\n", v.Entries, cell(v.Error))
			})
			if err == nil && !v.OK {
				return exitcode.ErrFailure
			}
			return err
		},
	}
}
