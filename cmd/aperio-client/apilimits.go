package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/aperio-dev/aperio/internal/control/admin/apiclient"
	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// tokensUpdateCommand is `api tokens update ID`: each flag given replaces
// that field of the token; the others stay.
func (a *apiCLI) tokensUpdateCommand() *cobra.Command {
	var (
		name, expiresAt              string
		hostnames, allowedIPs, paths []string
		clientIPs, tcpPorts          []string
		catchAll                     bool
		maxRPS                       float64
		dailyBytes                   int64
		maxConns                     int
	)
	cmd := &cobra.Command{
		Use:   "update ID [--name N] [--hostname H…] [--max-rps N] [--max-connections N] [--daily-max-bytes N] [--path P…] [--client-allowed-ip CIDR…] [--allow-tcp-port P…] [--allowed-ip CIDR…] [--expires-at TIME]",
		Short: "Edit a client token in place; connected clients follow within a heartbeat",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var req apitype.UpdateTokenRequest
			fl := cmd.Flags()
			if fl.Changed("name") {
				req.Name = &name
			}
			if fl.Changed("hostname") {
				req.Hostnames = &hostnames
			}
			if fl.Changed("allowed-ip") {
				req.AllowedIPs = &allowedIPs
			}
			if fl.Changed("expires-at") {
				req.ExpiresAt = &expiresAt
			}
			if fl.Changed("allow-catch-all") {
				req.AllowCatchAll = &catchAll
			}
			if fl.Changed("max-rps") {
				req.MaxRPS = &maxRPS
			}
			if fl.Changed("daily-max-bytes") {
				req.DailyMaxBytes = &dailyBytes
			}
			if fl.Changed("max-connections") {
				req.MaxConnections = &maxConns
			}
			if fl.Changed("path") {
				req.Paths = &paths
			}
			if fl.Changed("client-allowed-ip") {
				req.ClientAllowedIPs = &clientIPs
			}
			if fl.Changed("allow-tcp-port") {
				req.AllowTCPPorts = &tcpPorts
			}
			return callAPI(a, cmd, func(c *apiclient.Client, ctx context.Context) (apitype.Token, error) {
				return c.UpdateToken(ctx, args[0], req)
			}, func(w io.Writer, t apitype.Token) {
				tokenFields(w, t)
				tokenLimitFields(w, t.TokenLimits)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&name, "name", "", "new name")
	f.StringSliceVar(&hostnames, "hostname", nil, "hostnames the token may bind, replacing its list (repeatable)")
	f.StringSliceVar(&allowedIPs, "allowed-ip", nil, "visitor CIDRs, replacing the list (repeatable)")
	f.StringVar(&expiresAt, "expires-at", "", `expiry, an RFC 3339 time; "" clears it`)
	f.BoolVar(&catchAll, "allow-catch-all", false, "whether services with no hostname may serve the catch-all")
	f.Float64Var(&maxRPS, "max-rps", 0, "requests per second of the token's clients together; 0 = no limit")
	f.Int64Var(&dailyBytes, "daily-max-bytes", 0, "visitor bytes per UTC day; 0 = no limit")
	f.IntVar(&maxConns, "max-connections", 0, "tunnel sessions at once; 0 = no limit")
	f.StringSliceVar(&paths, "path", nil, "path prefixes the token may bind, replacing the list (repeatable)")
	f.StringSliceVar(&clientIPs, "client-allowed-ip", nil, "CIDRs the token's tunnels may connect from, replacing the list (repeatable)")
	f.StringSliceVar(&tcpPorts, "allow-tcp-port", nil, "public ports or ranges the token's clients may expose, replacing the list (repeatable; --allow-tcp-port= clears it)")
	return cmd
}

// tokensRotateCommand is `api tokens rotate ID --grace 1h`.
func (a *apiCLI) tokensRotateCommand() *cobra.Command {
	var (
		req   apitype.RotateTokenRequest
		grace spanFlag
	)
	cmd := &cobra.Command{
		Use:   "rotate ID [--grace 1h]",
		Short: "Give a client token a new secret (shown once); the old one works for the grace",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("grace") {
				req.Grace = grace.wire()
			}
			return callAPI(a, cmd, func(c *apiclient.Client, ctx context.Context) (apitype.MintedToken, error) {
				return c.RotateToken(ctx, args[0], req)
			}, func(w io.Writer, t apitype.MintedToken) {
				fmt.Fprintln(a.stderr, "The new secret is shown once: store it now.")
				tokenFields(w, t.Token)
				fmt.Fprintf(w, "token\t%s\n", t.Secret)
			})
		},
	}
	spanVar(cmd.Flags(), &grace, "grace", "how long the current secret keeps working, with a unit (1h, 2d; at most 30d); default: it stops now")
	return cmd
}

// orgsUpdateCommand is `api orgs update ID`: each flag given replaces
// that limit; the others stay.
func (a *apiCLI) orgsUpdateCommand() *cobra.Command {
	var (
		monthly               int64
		clients, tokens, keys int
	)
	cmd := &cobra.Command{
		Use:   "update ORG_ID [--max-clients N] [--max-tokens N] [--max-admin-keys N] [--monthly-max-bytes N]",
		Short: "Set an organization's limits (master token only); 0 = no limit",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var req apitype.UpdateOrgRequest
			fl := cmd.Flags()
			if fl.Changed("monthly-max-bytes") {
				req.MonthlyMaxBytes = &monthly
			}
			if fl.Changed("max-clients") {
				req.MaxClients = &clients
			}
			if fl.Changed("max-tokens") {
				req.MaxTokens = &tokens
			}
			if fl.Changed("max-admin-keys") {
				req.MaxAdminKeys = &keys
			}
			return callAPI(a, cmd, func(c *apiclient.Client, ctx context.Context) (apitype.Org, error) {
				return c.UpdateOrg(ctx, args[0], req)
			}, func(w io.Writer, o apitype.Org) {
				fmt.Fprintf(w, "id\t%s\nname\t%s\nmax_clients\t%d\nmax_tokens\t%d\nmax_admin_keys\t%d\nmonthly_max_bytes\t%d\n",
					o.ID, o.Name, o.MaxClients, o.MaxTokens, o.MaxAdminKeys, o.MonthlyMaxBytes)
			})
		},
	}
	f := cmd.Flags()
	f.Int64Var(&monthly, "monthly-max-bytes", 0, "visitor bytes per UTC month")
	f.IntVar(&clients, "max-clients", 0, "tunnel sessions of the organization at once")
	f.IntVar(&tokens, "max-tokens", 0, "live tokens")
	f.IntVar(&keys, "max-admin-keys", 0, "unexpired admin keys")
	return cmd
}

// tokenLimitFields prints a token's limits as name/value lines.
func tokenLimitFields(w io.Writer, l apitype.TokenLimits) {
	fmt.Fprintf(w, "max_rps\t%g\nmax_connections\t%d\ndaily_max_bytes\t%d\npaths\t%s\nclient_allowed_ips\t%s\nallow_tcp_ports\t%s\n",
		l.MaxRPS, l.MaxConnections, l.DailyMaxBytes, joined(l.Paths), joined(l.ClientAllowedIPs), joined(l.AllowTCPPorts))
}
