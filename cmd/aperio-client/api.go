package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/control/admin/apiclient"
	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/exitcode"
)

// apiCLI is what every `aperio-client api` command shares: its flags and
// where it writes.
type apiCLI struct {
	stdout, stderr io.Writer
	file           string // --config
	json           bool
	timeout        time.Duration
}

// newAPICommand returns `aperio-client api` and its subcommands (contract
// §3). Each prints a table, or the API's JSON with --json, and fails with
// exit code 1 when the API refuses and 2 on bad usage or configuration.
func newAPICommand(stdout, stderr io.Writer) *cobra.Command {
	a := &apiCLI{stdout: stdout, stderr: stderr}
	cmd := group("api", "Drive the server's admin API")
	cmd.Long = "Drive the server's admin API with an admin key (apk_…) or the master token.\n" +
		"The server and key come from --server-url and --api-key, then ./aperio.yaml (or --config),\n" +
		"then APERIO_SERVER_URL and APERIO_SERVER_API_KEY (or APERIO_API_KEY), then ~/.aperio.yaml."
	pf := cmd.PersistentFlags()
	pf.String("server-url", "", "URL of the server (server.url)")
	pf.String("api-key", "", "admin key or master token (server.api_key)")
	pf.StringVar(&a.file, "config", "", "configuration file (default ./aperio.yaml)")
	pf.BoolVar(&a.json, "json", false, "print the API's JSON instead of a table")
	pf.DurationVar(&a.timeout, "timeout", 30*time.Second, "how long one API call may take")
	cmd.AddCommand(
		a.scalingCommand(),
		a.clientsCommand(),
		a.portsCommand(),
		a.tokensCommand(),
		a.adminKeysCommand(),
		a.webhooksCommand(),
		a.maintenanceCommand(),
		a.shareCommand(),
		a.auditCommand(),
		a.usageCommand(),
		a.explainCommand(),
		a.orgsCommand(),
		a.statsCommand(),
		a.tailCommand(),
	)
	return cmd
}

func (a *apiCLI) scalingCommand() *cobra.Command {
	cmd := group("scaling", "List, show, create and disarm scaling records")
	list := &cobra.Command{
		Use:   "list",
		Short: "List scaling records with their live pool, most recently declared first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return callAPI(a, cmd, (*apiclient.Client).Scaling, scalingTable)
		},
	}
	disarm := &cobra.Command{
		Use:   "disarm ID",
		Short: "Remove a scaling record; a client still declaring it arms it again",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return callAPI(a, cmd, func(c *apiclient.Client, ctx context.Context) (done, error) {
				return done("scaling record " + args[0] + " disarmed"), c.DisarmScaling(ctx, args[0])
			}, printDone)
		},
	}
	show := &cobra.Command{
		Use:   "show ID",
		Short: "Show a scaling record, its latest decisions and its pool's utilization over the last two minutes",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return callAPI(a, cmd, func(c *apiclient.Client, ctx context.Context) (apitype.ScalingRecordDetail, error) {
				return c.ScalingRecord(ctx, args[0])
			}, scalingDetail)
		},
	}
	cmd.AddCommand(list, show, a.scalingCreateCommand(), disarm)
	return cmd
}

// scalingCreateCommand is `api scaling create`: POST /scaling, which arms
// autoscaling for a hostname before any client has connected for it.
func (a *apiCLI) scalingCreateCommand() *cobra.Command {
	var (
		req                         apitype.CreateScalingRequest
		secretStdin                 bool
		secretFile                  string
		coldStart, window, coolDown time.Duration
	)
	create := &cobra.Command{
		Use: "create HOSTNAME --url URL [--path PREFIX] [--secret-stdin | --secret-file PATH | --secret SECRET] " +
			"[--min N] [--max N] [--cold-start D] [--target-utilization F] [--window D] [--cooldown D]",
		Short: "Arm autoscaling for a hostname before any client connected: its first visitor cold starts it",
		Long: "Arm autoscaling for a hostname (and path prefix) the organization may bind, as a client's scaling: block would,\n" +
			"so that the first visitor is held and the provider called (reason cold_start) with no instance ever run by hand.\n" +
			"An existing record of the bind is updated and re-armed. Unset flags take a client's defaults.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			req.Secret, err = flagSecret(cmd.InOrStdin(), secretStdin, secretFile, req.Secret)
			if err != nil {
				fmt.Fprintln(a.stderr, "aperio-client:", err)
				return exitcode.ErrUsage
			}
			req.Hostname = args[0]
			for _, d := range []struct {
				flag string
				v    time.Duration
				dst  *string
			}{{"cold-start", coldStart, &req.ColdStart}, {"window", window, &req.Window}, {"cooldown", coolDown, &req.Cooldown}} {
				if cmd.Flags().Changed(d.flag) {
					*d.dst = d.v.String()
				}
			}
			return callAPI(a, cmd, func(c *apiclient.Client, ctx context.Context) (apitype.ScalingRecordDetail, error) {
				return c.CreateScaling(ctx, req)
			}, scalingDetail)
		},
	}
	f := create.Flags()
	f.StringVar(&req.URL, "url", "", "the provider's hook (https unless the server allows http)")
	f.StringVar(&req.Path, "path", "", "path prefix of the bind (default: the whole hostname)")
	f.BoolVar(&secretStdin, "secret-stdin", false, "read the hook's bearer secret from the first line of standard input")
	f.StringVar(&secretFile, "secret-file", "", "read the hook's bearer secret from the first line of this file")
	f.StringVar(&req.Secret, "secret", "", "the hook's bearer secret (visible in the process list: prefer --secret-stdin or --secret-file; default: none)")
	f.IntVar(&req.Min, "min", 0, "lowest capacity asked for (0 lets the service sleep)")
	f.IntVar(&req.Max, "max", 0, "highest capacity asked for (default: min, at least 1)")
	f.DurationVar(&coldStart, "cold-start", 0, "how long a visitor may be held while a cold start runs (default 45s, at most 5m)")
	f.Float64Var(&req.TargetUtilization, "target-utilization", 0, "scale out at or above this fraction of capacity, in (0,1] (default 0.8)")
	f.DurationVar(&window, "window", 0, "how long utilization must stay at or above target before a scale out (default 15s)")
	f.DurationVar(&coolDown, "cooldown", 0, "minimum gap between two calls (default 60s)")
	f.StringVar(&req.OrgID, "org-id", "", "organization of the record (master token only; default: default)")
	create.MarkFlagsMutuallyExclusive("secret", "secret-stdin", "secret-file")
	mustRequire(create, "url")
	return create
}

func (a *apiCLI) clientsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "clients",
		Short: "List the clients connected to the server; disable, enable or drain one",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return callAPI(a, cmd, (*apiclient.Client).Clients, clientsTable)
		},
	}
	toggle := func(verb string, disabled bool, short string) *cobra.Command {
		return &cobra.Command{
			Use:   verb + " ID",
			Short: short,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return callAPI(a, cmd, func(c *apiclient.Client, ctx context.Context) (done, error) {
					return done("client " + args[0] + " " + verb + "d"), c.SetClientDisabled(ctx, args[0], disabled)
				}, printDone)
			},
		}
	}
	cmd.AddCommand(
		toggle("disable", true, "Stop routing new requests to a client; in-flight ones finish, its tunnel stays up"),
		toggle("enable", false, "Route new requests to a disabled client again"),
		&cobra.Command{
			Use:   "drain ID",
			Short: "Ask a client to retire: it finishes in-flight requests, leaves every server and exits",
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return callAPI(a, cmd, func(c *apiclient.Client, ctx context.Context) (done, error) {
					return done("client " + args[0] + " asked to drain"), c.DrainClient(ctx, args[0])
				}, printDone)
			},
		},
	)
	return cmd
}

func (a *apiCLI) portsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "ports",
		Short: "List the public TCP and UDP ports open on the server, with the clients' entries serving them",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return callAPI(a, cmd, (*apiclient.Client).Ports, portsTable)
		},
	}
}

func portsTable(w io.Writer, ps []apitype.PortInfo) {
	fmt.Fprintln(w, "PORT\tPROTOCOL\tORG\tENTRIES\tOPEN\tBYTES IN\tBYTES OUT\tREFUSED\tDROPPED")
	for _, p := range ps {
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\n",
			p.Port, p.Protocol, cell(p.OrgID), joined(p.Names), p.Open, p.BytesIn, p.BytesOut, p.Refused, p.Dropped)
	}
}

func (a *apiCLI) tokensCommand() *cobra.Command {
	cmd := group("tokens", "Mint, list, edit, rotate and revoke client tokens")

	var (
		req       apitype.CreateTokenRequest
		expiresIn spanFlag
		expiresAt string
	)
	create := &cobra.Command{
		Use:   "create --name NAME --hostname HOST [--hostname HOST…] [--allow-catch-all] [--allowed-ip CIDR…] [--expires-in 30d | --expires-at TIME]",
		Short: "Mint a client token; its secret is shown once",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case cmd.Flags().Changed("expires-in"):
				t := time.Now().Add(expiresIn.d)
				req.ExpiresAt = &t
			case expiresAt != "":
				t, err := time.Parse(time.RFC3339, expiresAt)
				if err != nil {
					return fmt.Errorf("--expires-at %q is not an RFC 3339 time (like 2030-01-02T15:04:05Z)", expiresAt)
				}
				req.ExpiresAt = &t
			}
			return callAPI(a, cmd, func(c *apiclient.Client, ctx context.Context) (apitype.MintedToken, error) {
				return c.CreateToken(ctx, req)
			}, func(w io.Writer, t apitype.MintedToken) {
				fmt.Fprintln(a.stderr, "The token is shown once: store it now.")
				tokenFields(w, t.Token)
				fmt.Fprintf(w, "token\t%s\n", t.Secret)
			})
		},
	}
	f := create.Flags()
	f.StringVar(&req.Name, "name", "", "name of the token, for people")
	f.StringSliceVar(&req.Hostnames, "hostname", nil, "hostname the token may bind, exact or *.wildcard (repeatable)")
	f.StringSliceVar(&req.AllowedIPs, "allowed-ip", nil, "CIDR or address of the visitors allowed (repeatable; default any)")
	spanVar(f, &expiresIn, "expires-in", "expire after this long, with a unit (45m, 12h, 30d)")
	f.StringVar(&expiresAt, "expires-at", "", "expire at this RFC 3339 time")
	f.StringVar(&req.OrgID, "org-id", "", "organization of the token (master token only; default: default)")
	f.BoolVar(&req.AllowCatchAll, "allow-catch-all", false, "let the token's services with no hostname serve what nobody else binds (servers with require_hostname_bind false); --hostname may then be left out")
	f.Float64Var(&req.MaxRPS, "max-rps", 0, "requests per second of the token's clients together; 0 = no limit")
	f.IntVar(&req.MaxConnections, "max-connections", 0, "tunnel sessions at once; 0 = no limit")
	f.Int64Var(&req.DailyMaxBytes, "daily-max-bytes", 0, "visitor bytes per UTC day; 0 = no limit")
	f.StringSliceVar(&req.Paths, "path", nil, "path prefix the token may bind (repeatable; default any)")
	f.StringSliceVar(&req.ClientAllowedIPs, "client-allowed-ip", nil, "CIDR the token's tunnels may connect from (repeatable; default anywhere)")
	f.StringSliceVar(&req.AllowTCPPorts, "allow-tcp-port", nil, "public port or range (2222, 20000-20010) the token's clients may expose over TCP/UDP, within the server's tcp_port_range (repeatable; default none)")
	create.MarkFlagsMutuallyExclusive("expires-in", "expires-at")
	create.MarkFlagsOneRequired("hostname", "allow-catch-all", "allow-tcp-port")
	mustRequire(create, "name")

	list := &cobra.Command{
		Use:   "list",
		Short: "List client tokens, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return callAPI(a, cmd, (*apiclient.Client).Tokens, tokensTable)
		},
	}
	revoke := &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke a client token",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return callAPI(a, cmd, func(c *apiclient.Client, ctx context.Context) (apitype.Token, error) {
				return c.RevokeToken(ctx, args[0])
			}, func(w io.Writer, t apitype.Token) { tokensTable(w, []apitype.Token{t}) })
		},
	}
	cmd.AddCommand(create, list, revoke, a.tokensUpdateCommand(), a.tokensRotateCommand())
	return cmd
}

func (a *apiCLI) adminKeysCommand() *cobra.Command {
	cmd := group("admin-keys", "Create, list and delete admin keys")

	var req apitype.CreateKeyRequest
	create := &cobra.Command{
		Use:   "create --name NAME --role viewer|operator|admin",
		Short: "Create an admin key; its secret is shown once",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !slices.Contains(apitype.Roles(), req.Role) {
				return fmt.Errorf("--role %q is not one of %s", req.Role, strings.Join(apitype.Roles(), ", "))
			}
			return callAPI(a, cmd, func(c *apiclient.Client, ctx context.Context) (apitype.MintedKey, error) {
				return c.CreateKey(ctx, req)
			}, func(w io.Writer, k apitype.MintedKey) {
				fmt.Fprintln(a.stderr, "The key is shown once: store it now.")
				keyFields(w, k.Key)
				fmt.Fprintf(w, "key\t%s\n", k.Secret)
			})
		},
	}
	f := create.Flags()
	f.StringVar(&req.Name, "name", "", "name of the key, for people")
	f.StringVar(&req.Role, "role", "", "viewer (reads), operator (also maintenance) or admin (also tokens and keys)")
	f.StringVar(&req.OrgID, "org-id", "", "organization of the key (master token only; default: default)")
	mustRequire(create, "name", "role")

	list := &cobra.Command{
		Use:   "list",
		Short: "List admin keys, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return callAPI(a, cmd, (*apiclient.Client).Keys, keysTable)
		},
	}
	del := &cobra.Command{
		Use:   "delete ID",
		Short: "Delete an admin key",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return callAPI(a, cmd, func(c *apiclient.Client, ctx context.Context) (done, error) {
				return done("admin key " + args[0] + " deleted"), c.DeleteKey(ctx, args[0])
			}, printDone)
		},
	}
	cmd.AddCommand(create, list, del)
	return cmd
}

func (a *apiCLI) webhooksCommand() *cobra.Command {
	cmd := group("webhooks", "Subscribe URLs to server events; list, delete and test subscriptions; read and redeliver their deliveries")

	var (
		req         apitype.CreateWebhookRequest
		secretStdin bool
		secretFile  string
	)
	create := &cobra.Command{
		Use:   "create --url URL --events EVENT[,EVENT…] [--secret-stdin | --secret-file PATH | --secret SECRET] [--format FORMAT]",
		Short: "Subscribe a URL to events: " + strings.Join(apitype.WebhookEvents(), ", "),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			req.Secret, err = flagSecret(cmd.InOrStdin(), secretStdin, secretFile, req.Secret)
			if err != nil {
				fmt.Fprintln(a.stderr, "aperio-client:", err)
				return exitcode.ErrUsage
			}
			return callAPI(a, cmd, func(c *apiclient.Client, ctx context.Context) (apitype.Webhook, error) {
				return c.CreateWebhook(ctx, req)
			}, func(w io.Writer, wh apitype.Webhook) { webhooksTable(w, []apitype.Webhook{wh}) })
		},
	}
	f := create.Flags()
	f.StringVar(&req.URL, "url", "", "URL receiving the deliveries (https unless the server allows http)")
	f.StringSliceVar(&req.Events, "events", nil, "events to deliver, comma-separated or repeated: "+strings.Join(apitype.WebhookEvents(), ", "))
	f.BoolVar(&secretStdin, "secret-stdin", false, "read the signing secret from the first line of standard input")
	f.StringVar(&secretFile, "secret-file", "", "read the signing secret from the first line of this file")
	f.StringVar(&req.Secret, "secret", "", "signing secret (visible in the process list: prefer --secret-stdin or --secret-file; default: deliveries unsigned)")
	f.StringVar(&req.Format, "format", "", "how bodies are written: "+strings.Join(apitype.WebhookFormats(), ", ")+" (default generic)")
	f.StringVar(&req.OrgID, "org-id", "", "organization whose events are delivered (master token only; default: default)")
	create.MarkFlagsMutuallyExclusive("secret", "secret-stdin", "secret-file")
	mustRequire(create, "url", "events")

	var limit int
	deliveries := &cobra.Command{
		Use:   "deliveries ID [--limit N]",
		Short: "List a webhook's latest deliveries, newest first",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return callAPI(a, cmd, func(c *apiclient.Client, ctx context.Context) ([]apitype.WebhookDelivery, error) {
				return c.WebhookDeliveries(ctx, args[0], limit)
			}, deliveriesTable)
		},
	}
	deliveries.Flags().IntVar(&limit, "limit", 0, "how many, 1 to 100 (default 20)")
	test := &cobra.Command{
		Use:   "test ID",
		Short: "Send a ping to a webhook now and show the receiver's answer",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return callAPI(a, cmd, func(c *apiclient.Client, ctx context.Context) (apitype.WebhookDelivery, error) {
				return c.TestWebhook(ctx, args[0])
			}, func(w io.Writer, d apitype.WebhookDelivery) { deliveriesTable(w, []apitype.WebhookDelivery{d}) })
		},
	}
	redeliver := &cobra.Command{
		Use:   "redeliver ID DELIVERY",
		Short: "Send a logged delivery again: same webhook-id, fresh timestamp and signature",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return callAPI(a, cmd, func(c *apiclient.Client, ctx context.Context) (apitype.WebhookDelivery, error) {
				return c.RedeliverWebhook(ctx, args[0], args[1])
			}, func(w io.Writer, d apitype.WebhookDelivery) { deliveriesTable(w, []apitype.WebhookDelivery{d}) })
		},
	}

	list := &cobra.Command{
		Use:   "list",
		Short: "List webhook subscriptions, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return callAPI(a, cmd, (*apiclient.Client).Webhooks, webhooksTable)
		},
	}
	del := &cobra.Command{
		Use:   "delete ID",
		Short: "Delete a webhook subscription",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return callAPI(a, cmd, func(c *apiclient.Client, ctx context.Context) (done, error) {
				return done("webhook " + args[0] + " deleted"), c.DeleteWebhook(ctx, args[0])
			}, printDone)
		},
	}
	cmd.AddCommand(create, list, del, deliveries, test, redeliver)
	return cmd
}

func (a *apiCLI) maintenanceCommand() *cobra.Command {
	cmd := group("maintenance", "Turn maintenance mode on or off, or list it")
	var (
		req apitype.MaintenanceRequest
		ttl time.Duration
	)
	on := &cobra.Command{
		Use:   "on HOSTNAME",
		Short: "Answer 503 to the visitors of HOSTNAME (exact or *.wildcard)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if ttl < 0 {
				fmt.Fprintln(a.stderr, "aperio-client: --ttl", ttl, "is negative")
				return exitcode.ErrUsage
			}
			// Whole seconds, rounded up: a ttl never ends early.
			req.TTLSeconds = int64((ttl + time.Second - 1) / time.Second)
			return callAPI(a, cmd, func(c *apiclient.Client, ctx context.Context) (done, error) {
				return done("maintenance on for " + args[0]), c.SetMaintenance(ctx, args[0], req)
			}, printDone)
		},
	}
	on.Flags().StringVar(&req.OrgID, "org-id", "", "organization the hostname belongs to (master token only; default: default)")
	on.Flags().StringVar(&req.Reason, "reason", "", "what visitors are told (at most 500 bytes)")
	on.Flags().DurationVar(&ttl, "ttl", 0, "end maintenance by itself after this long (at most 720h); 0: when turned off")
	off := &cobra.Command{
		Use:   "off HOSTNAME",
		Short: "Serve the visitors of HOSTNAME again",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return callAPI(a, cmd, func(c *apiclient.Client, ctx context.Context) (done, error) {
				return done("maintenance off for " + args[0]), c.ClearMaintenance(ctx, args[0])
			}, printDone)
		},
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List the hostnames in maintenance",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return callAPI(a, cmd, (*apiclient.Client).Maintenance, maintenanceTable)
		},
	}
	cmd.AddCommand(on, off, list)
	return cmd
}

func (a *apiCLI) shareCommand() *cobra.Command {
	cmd := group("share", "Create share links and rotate their key")
	var (
		req apitype.CreateShareRequest
		ttl time.Duration
	)
	create := &cobra.Command{
		Use:   "create --hostname H [--path P] --ttl 1h",
		Short: "Print a URL that opens HOSTNAME (under PATH) past its access control until it expires",
		Long: "Print a URL that opens one hostname, under a path prefix, to whoever holds it, until\n" +
			"--ttl has passed (at most 720h). Anyone with the URL gets in: hand it out like a password.\n" +
			"The server does not keep it; `share rotate --revoke` run twice revokes every link of the organization.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ttl <= 0 {
				return fmt.Errorf("--ttl %s is not a positive duration", ttl)
			}
			req.TTL = ttl.String()
			return callAPI(a, cmd, func(c *apiclient.Client, ctx context.Context) (apitype.ShareLink, error) {
				return c.CreateShare(ctx, req)
			}, func(w io.Writer, l apitype.ShareLink) {
				fmt.Fprintf(w, "url\t%s\n", l.URL)
				fmt.Fprintf(w, "expires\t%s\n", l.ExpiresAt.UTC().Format(time.RFC3339))
			})
		},
	}
	f := create.Flags()
	f.StringVar(&req.Hostname, "hostname", "", "the exact hostname the link opens")
	f.StringVar(&req.Path, "path", "", "the path prefix it opens, whole segments (default /)")
	f.DurationVar(&ttl, "ttl", 0, "how long the link works, at most 720h")
	f.StringVar(&req.OrgID, "org-id", "", "organization owning the hostname (master token only; default: default)")
	mustRequire(create, "hostname", "ttl")
	var rot apitype.RotateShareKeyRequest
	rotate := &cobra.Command{
		Use:   "rotate [--revoke]",
		Short: "Give the organization a new share key; with --revoke, refuse the links of the key it replaces",
		Long: "Sign the organization's new share links with a new key. Links signed by the key it replaces\n" +
			"keep working until the next rotation, unless --revoke: then every server refuses them (and the\n" +
			"cookies they set) from its next request on. Other organizations' links are never touched.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return callAPI(a, cmd, func(c *apiclient.Client, ctx context.Context) (apitype.ShareKey, error) {
				return c.RotateShareKey(ctx, rot)
			}, func(w io.Writer, k apitype.ShareKey) {
				fmt.Fprintf(w, "key\t%s\n", k.ID)
				fmt.Fprintf(w, "generation\t%d\n", k.Generation)
				fmt.Fprintf(w, "previous\t%s\n", map[bool]string{true: "revoked", false: "still valid"}[k.RevokedPrevious])
			})
		},
	}
	rf := rotate.Flags()
	rf.BoolVar(&rot.RevokePrevious, "revoke", false, "refuse every link signed by the replaced key")
	rf.StringVar(&rot.OrgID, "org-id", "", "organization whose key to rotate (master token only; default: default)")
	cmd.AddCommand(create, rotate)
	return cmd
}

func (a *apiCLI) auditCommand() *cobra.Command {
	var (
		q            apiclient.AuditQuery
		since, until string
	)
	cmd := &cobra.Command{
		Use:   "audit [--limit N] [--event E] [--actor A] [--hostname H] [--since TIME] [--until TIME]",
		Short: "Show the audit log, newest first; audit verify checks its hash chain",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, f := range []struct {
				name, v string
				dst     *time.Time
			}{{"since", since, &q.Since}, {"until", until, &q.Until}} {
				if f.v == "" {
					continue
				}
				t, err := time.Parse(time.RFC3339, f.v)
				if err != nil {
					fmt.Fprintf(a.stderr, "aperio-client: --%s %q is not an RFC 3339 time (like 2030-01-02T15:04:05Z)\n", f.name, f.v)
					return exitcode.ErrUsage
				}
				*f.dst = t
			}
			return callAPI(a, cmd, func(c *apiclient.Client, ctx context.Context) ([]apitype.AuditEntry, error) {
				return c.QueryAudit(ctx, q)
			}, auditTable)
		},
	}
	f := cmd.Flags()
	f.IntVar(&q.Limit, "limit", 0, "how many entries, 1 to 1000 (default 100)")
	f.StringVar(&q.Event, "event", "", "only entries of this event")
	f.StringVar(&q.Actor, "actor", "", "only entries by this actor (master, key:ID, oidc:USER)")
	f.StringVar(&q.Hostname, "hostname", "", "only entries on this hostname (exact)")
	f.StringVar(&since, "since", "", "only entries at or after this RFC 3339 time")
	f.StringVar(&until, "until", "", "only entries before this RFC 3339 time")
	cmd.AddCommand(a.auditVerifyCommand())
	return cmd
}

func (a *apiCLI) explainCommand() *cobra.Command {
	var ip string
	cmd := &cobra.Command{
		Use:   "explain URL [--ip IP]",
		Short: "Say what the server would do with a request for URL, step by step, without sending it",
		Long: "Ask the server what it would do now with a visitor's request for URL (its hostname and path;\n" +
			"the scheme, port and query are ignored): maintenance, limits, the pool's clients, cold start,\n" +
			"fallbacks, and the verdict. Nothing is sent to the app and no limit is spent.\n" +
			"tcp://HOST:PORT or udp://HOST:PORT asks about a public port instead: whether a client holds it\n" +
			"and which of its entries would take a visitor from --ip.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if proto, num, ok := portTarget(args[0]); ok {
				if num == 0 {
					fmt.Fprintf(a.stderr, "aperio-client: %q names no port (like tcp://tunnel.example.com:2222)\n", args[0])
					return exitcode.ErrUsage
				}
				return callAPI(a, cmd, func(c *apiclient.Client, ctx context.Context) (apitype.PortExplanation, error) {
					return c.ExplainPort(ctx, num, proto, ip)
				}, portExplainTable)
			}
			host, path, err := explainTarget(args[0])
			if err != nil {
				fmt.Fprintln(a.stderr, "aperio-client:", err)
				return exitcode.ErrUsage
			}
			return callAPI(a, cmd, func(c *apiclient.Client, ctx context.Context) (apitype.Explanation, error) {
				return c.Explain(ctx, host, path, ip)
			}, explainTable)
		},
	}
	cmd.Flags().StringVar(&ip, "ip", "", "the visitor's IP address (default: none; the per-visitor limit and allowed_ips are then skipped)")
	return cmd
}

// explainTarget splits a URL (a scheme is optional) into the hostname and
// path a visitor's request would carry.
// portTarget reads tcp://HOST:PORT or udp://HOST:PORT; ok is false for
// any other scheme, num 0 when the port is missing or out of range.
func portTarget(raw string) (proto string, num int, ok bool) {
	scheme, rest, found := strings.Cut(raw, "://")
	if !found || (scheme != "tcp" && scheme != "udp") {
		return "", 0, false
	}
	_, port, err := net.SplitHostPort(strings.TrimSuffix(rest, "/"))
	if n, perr := strconv.Atoi(port); err == nil && perr == nil && n >= 1 && n <= 65535 {
		num = n
	}
	return scheme, num, true
}

func portExplainTable(w io.Writer, ex apitype.PortExplanation) {
	fmt.Fprintf(w, "PORT\t%d/%s from %s\nOPEN\t%s\nENTRIES\t%s\nADMITTING\t%s\nVERDICT\t%s\n",
		ex.Port, ex.Protocol, cell(ex.IP), yesNo(ex.Open), joined(ex.Names), joined(ex.Admitting), ex.Verdict)
}

func explainTarget(raw string) (host, path string, err error) {
	s := raw
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil || u.Hostname() == "" {
		return "", "", fmt.Errorf("%q is not a URL with a hostname (like https://app.example.com/path)", raw)
	}
	path = u.Path
	if path == "" {
		path = "/"
	}
	return u.Hostname(), path, nil
}

func (a *apiCLI) orgsCommand() *cobra.Command {
	cmd := group("orgs", "Create and list organizations and assign their hostnames and ports")
	var name string
	create := &cobra.Command{
		Use:   "create --name NAME",
		Short: "Create an organization (master token only)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return callAPI(a, cmd, func(c *apiclient.Client, ctx context.Context) (apitype.Org, error) {
				return c.CreateOrg(ctx, name)
			}, func(w io.Writer, o apitype.Org) { orgsTable(w, []apitype.Org{o}) })
		},
	}
	create.Flags().StringVar(&name, "name", "", "name of the organization, unique")
	mustRequire(create, "name")
	list := &cobra.Command{
		Use:   "list",
		Short: "List organizations",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return callAPI(a, cmd, (*apiclient.Client).Orgs, orgsTable)
		},
	}
	hostnames := ownedCommand(a, "hostnames ORG_ID [PATTERN...]", "patterns",
		"Show the hostname patterns an organization owns, or replace them (master token only)",
		"With only ORG_ID, show the patterns the organization owns. With patterns (exact hostnames\n"+
			"or *. wildcards), replace its set with them; --clear replaces it with none. A pattern\n"+
			"overlapping another organization's is refused, naming the owner.",
		(*apiclient.Client).OrgHostnames, (*apiclient.Client).SetOrgHostnames, orgHostnamesTable)
	ports := ownedCommand(a, "ports ORG_ID [PORTS...]", "ports",
		"Show the public ports an organization owns, or replace them (master token only)",
		"With only ORG_ID, show the port ranges the organization owns. With ports (2222 or\n"+
			"20000-20099), replace its set with them; --clear replaces it with none. Its tokens'\n"+
			"allow_tcp_ports and its clients' ports must lie inside them; the default organization\n"+
			"without ports takes any port nobody owns. A range overlapping another organization's is\n"+
			"refused, naming the owner.",
		(*apiclient.Client).OrgPorts, (*apiclient.Client).SetOrgPorts, orgPortsTable)
	cmd.AddCommand(create, list, hostnames, ports, a.orgsUpdateCommand())
	return cmd
}

// ownedCommand returns the command that shows (ORG_ID alone) or replaces
// (ORG_ID and items, or --clear) what an organization owns: its hostname
// patterns or its ports.
func ownedCommand[T any](a *apiCLI, use, items, short, long string,
	get func(*apiclient.Client, context.Context, string) (T, error),
	set func(*apiclient.Client, context.Context, string, []string) (T, error),
	render func(io.Writer, T)) *cobra.Command {
	var clear bool
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			orgID, values := args[0], args[1:]
			if clear && len(values) > 0 {
				fmt.Fprintf(a.stderr, "aperio-client: --clear takes no %s\n", items)
				return exitcode.ErrUsage
			}
			return callAPI(a, cmd, func(c *apiclient.Client, ctx context.Context) (T, error) {
				if len(values) == 0 && !clear {
					return get(c, ctx, orgID)
				}
				return set(c, ctx, orgID, values)
			}, render)
		},
	}
	cmd.Flags().BoolVar(&clear, "clear", false, "replace the organization's "+items+" with none")
	return cmd
}

// group returns a command that only holds subcommands. Alone it prints its
// help; with an argument that is no subcommand it is a usage error (cobra
// checks that only for the root command).
func group(use, short string) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			return fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())
		},
	}
}

// done is the outcome of a call whose answer has no body: a line for
// people, nothing with --json.
type done string

func printDone(w io.Writer, d done) { fmt.Fprintln(w, string(d)) }

// callAPI loads the configuration, makes one call and prints its result with
// render, or as indented JSON with --json. A configuration problem exits 2
// and a failed call 1, each after printing why.
func callAPI[T any](a *apiCLI, cmd *cobra.Command, call func(*apiclient.Client, context.Context) (T, error), render func(io.Writer, T)) error {
	c, err := a.client(cmd)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), a.timeout)
	defer cancel()
	v, err := call(c, ctx)
	if err != nil {
		var re *apiclient.ResponseError
		if errors.As(err, &re) {
			fmt.Fprintln(a.stderr, "aperio-client:", re.Message)
		} else {
			fmt.Fprintln(a.stderr, "aperio-client:", err)
		}
		return exitcode.ErrFailure
	}
	if d, ok := any(v).(done); ok {
		if !a.json {
			printDone(a.stdout, d)
		}
		return nil
	}
	if a.json {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	render(tw, v)
	return tw.Flush()
}

// client returns the API client the configuration describes.
func (a *apiCLI) client(cmd *cobra.Command) (*apiclient.Client, error) {
	opts := config.ClientOptions{
		File:          a.file,
		FileMustExist: a.file != "",
		Flags:         map[string]string{},
		Env:           os.LookupEnv,
	}
	if home, err := os.UserHomeDir(); err == nil {
		opts.HomeFile = filepath.Join(home, config.ClientHomeFile)
	}
	for _, name := range []string{"server-url", "api-key"} {
		if f := cmd.Flags().Lookup(name); f != nil && f.Changed {
			opts.Flags[name] = f.Value.String()
		}
	}
	cfg, src, err := config.LoadAPIClient(opts)
	if err != nil {
		fmt.Fprintln(a.stderr, err)
		return nil, exitcode.ErrUsage
	}
	for _, w := range src.Warnings() {
		fmt.Fprintln(a.stderr, "warning:", w)
	}
	return &apiclient.Client{URL: cfg.ServerURL, Key: cfg.APIKey}, nil
}

// mustRequire marks flags of cmd required; the names are this file's own.
func mustRequire(cmd *cobra.Command, names ...string) {
	for _, n := range names {
		if err := cmd.MarkFlagRequired(n); err != nil {
			panic("aperio-client: " + err.Error())
		}
	}
}

func clientsTable(w io.Writer, cs []apitype.ClientInfo) {
	fmt.Fprintln(w, "ID\tNAME\tVERSION\tORG\tHOSTNAMES\tPATH\tPRIORITY\tINFLIGHT\tMAX\tLIMIT\tHEALTHY\tDRAINING\tDISABLED\tREFUSED\tCONNECTED\tREMOTE")
	for _, c := range cs {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			c.ID, cell(c.Name), cell(c.Version), cell(c.OrgID), joined(c.Hostnames), cell(c.Path), c.Priority, c.Inflight,
			orNone(c.MaxConcurrent), limitCell(c.Concurrency), yesNo(c.Healthy), yesNo(c.Draining), yesNo(c.Disabled), joined(c.RefusedBinds), when(&c.ConnectedAt), cell(c.RemoteAddr))
	}
}

func scalingTable(w io.Writer, rs []apitype.ScalingRecord) {
	fmt.Fprintln(w, "ID\tHOSTNAME\tPATH\tINSTANCES\tCAPACITY\tINFLIGHT\tUTILIZATION\tSTATE\tLAST CALL\tERROR")
	for _, r := range rs {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n",
			cell(r.ID), cell(r.Hostname), cell(r.Path), r.Instances, r.Capacity, r.Inflight,
			percent(r.Utilization), scalingState(r), lastCall(r), cell(scalingError(r)))
	}
}

// scalingDetail prints one record as name/value lines, its pool's
// utilization as a sparkline with the samples at or above target marked
// under it, then its decisions, newest first.
func scalingDetail(w io.Writer, d apitype.ScalingRecordDetail) {
	r := d.ScalingRecord
	target := r.TargetUtilization
	fmt.Fprintf(w, "id\t%s\nhostname\t%s\npath\t%s\norg_id\t%s\nstate\t%s\n",
		cell(r.ID), cell(r.Hostname), cell(r.Path), cell(r.OrgID), scalingState(r))
	fmt.Fprintf(w, "pool\t%d instances, %d in flight of %d, utilization %s\n", r.Instances, r.Inflight, r.Capacity, percent(r.Utilization))
	fmt.Fprintf(w, "rules\tmin %d, max %d, target %s, window %s, cooldown %s, cold_start %s\n",
		r.Min, r.Max, percent(&target), r.Window, r.Cooldown, r.ColdStart)
	fmt.Fprintf(w, "last call\t%s\nnext call\t%s\nerror\t%s\n", lastCall(r), when(r.NextCallAt), cell(scalingError(r)))
	if len(d.Series) > 0 {
		line, marks := sparkline(d.Series, target, sparkWidth)
		span := d.Series[len(d.Series)-1].At.Sub(d.Series[0].At).Round(time.Second)
		fmt.Fprintf(w, "utilization\t%s  %s over %s\n", line, percent(d.Series[len(d.Series)-1].Utilization), span)
		fmt.Fprintf(w, "\t%s  ^ at or above the %s target\n", marks, percent(&target))
	} else {
		fmt.Fprintf(w, "utilization\t-\n")
	}
	fmt.Fprintln(w)
	if len(d.Decisions) == 0 {
		fmt.Fprintln(w, "no decisions remembered by this server")
		return
	}
	fmt.Fprintln(w, "AT\tACTION\tOUTCOME\tINSTANCES\tSTATUS\tSAMPLES\tREASON\tERROR")
	for _, dec := range d.Decisions {
		outcome := dec.Outcome
		if dec.Repeats > 0 {
			outcome += " x" + strconv.Itoa(dec.Repeats+1)
		}
		if dec.Disarmed {
			outcome += ",disarmed"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d->%d\t%s\t%s\t%s\t%s\n", when(&dec.At), cell(dec.Action), cell(outcome),
			dec.Current, dec.Desired, orNone(dec.Status), sampleRange(dec), cell(dec.Reason), cell(dec.Error))
	}
}

// sparkWidth is the most characters a utilization sparkline takes.
const sparkWidth = 60

// sparkBlocks are the sparkline's eight levels, lowest first.
var sparkBlocks = []rune("▁▂▃▄▅▆▇█")

// sparkline draws the utilization of ps, oldest first, in at most width
// characters (each the highest of the samples it stands for; a blank for
// samples with no measurable utilization), and under it a line marking
// with ^ the characters at or above target.
func sparkline(ps []apitype.ScalingPoint, target float64, width int) (line, marks string) {
	cols := min(len(ps), width)
	var lb, mb strings.Builder
	for c := range cols {
		lo, hi := c*len(ps)/cols, (c+1)*len(ps)/cols
		u, seen := 0.0, false
		for _, p := range ps[lo:hi] {
			if p.Utilization != nil && (!seen || *p.Utilization > u) {
				u, seen = *p.Utilization, true
			}
		}
		if !seen {
			lb.WriteRune(' ')
			mb.WriteRune(' ')
			continue
		}
		level := int(min(max(u, 0), 1)*float64(len(sparkBlocks)-1) + 0.5)
		lb.WriteRune(sparkBlocks[level])
		if u >= target {
			mb.WriteRune('^')
		} else {
			mb.WriteRune(' ')
		}
	}
	return lb.String(), mb.String()
}

// sampleRange shows a decision's samples as their count and the range of
// those kept ("16 0.85..0.9"); "-" for none.
func sampleRange(d apitype.ScalingDecision) string {
	if len(d.Samples) == 0 {
		return "-"
	}
	lo, hi := slices.Min(d.Samples), slices.Max(d.Samples)
	f := func(u float64) string { return strconv.FormatFloat(u, 'f', -1, 64) }
	return strconv.Itoa(d.SampleCount) + " " + f(lo) + ".." + f(hi)
}

// percent shows a utilization as a whole percentage, "-" when it cannot be
// measured.
func percent(u *float64) string {
	if u == nil {
		return "-"
	}
	return strconv.FormatFloat(*u*100, 'f', 0, 64) + "%"
}

// scalingState is "armed" or "disarmed" (the breaker tripped), with
// ",conflict" when live clients declare different blocks.
func scalingState(r apitype.ScalingRecord) string {
	s := "armed"
	if r.Disarmed {
		s = "disarmed"
	}
	if r.Conflict {
		s += ",conflict"
	}
	if r.Refused != "" {
		s += ",refused"
	}
	return s
}

// scalingError is why the latest declaration was refused, else why the
// last call failed; "" when neither.
func scalingError(r apitype.ScalingRecord) string {
	if r.Refused != "" {
		return "declaration refused: " + r.Refused
	}
	return r.LastError
}

// lastCall shows the last hook call as its reason, the HTTP status
// ("failed" when there was none and the server knows why, which ERROR
// shows; "no-response" when it does not) and its time; "-" when the hook
// was never called.
func lastCall(r apitype.ScalingRecord) string {
	if r.LastCallAt == nil {
		return "-"
	}
	status := "no-response"
	if r.LastError != "" {
		status = "failed" // ERROR says why
	}
	if r.LastStatus != 0 {
		status = strconv.Itoa(r.LastStatus)
	}
	return cell(r.LastReason) + " " + status + " " + when(r.LastCallAt)
}

func tokensTable(w io.Writer, ts []apitype.Token) {
	fmt.Fprintln(w, "ID\tNAME\tSTATUS\tPREFIX\tHOSTNAMES\tALLOWED IPS\tEXPIRES\tORG\tCREATED")
	for _, t := range ts {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			t.ID, cell(t.Name), t.Status, t.Prefix, joined(t.Hostnames), joined(t.AllowedIPs), when(t.ExpiresAt), t.OrgID, when(&t.CreatedAt))
	}
}

// tokenFields prints one token as name/value lines.
func tokenFields(w io.Writer, t apitype.Token) {
	fmt.Fprintf(w, "id\t%s\nname\t%s\norg_id\t%s\nstatus\t%s\nhostnames\t%s\nallowed_ips\t%s\nexpires_at\t%s\n",
		t.ID, cell(t.Name), t.OrgID, t.Status, joined(t.Hostnames), joined(t.AllowedIPs), when(t.ExpiresAt))
}

func keysTable(w io.Writer, ks []apitype.Key) {
	fmt.Fprintln(w, "ID\tNAME\tROLE\tPREFIX\tORG\tCREATED BY\tCREATED")
	for _, k := range ks {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, cell(k.Name), k.Role, k.Prefix, k.OrgID, cell(k.CreatedBy), when(&k.CreatedAt))
	}
}

// keyFields prints one admin key as name/value lines.
func keyFields(w io.Writer, k apitype.Key) {
	fmt.Fprintf(w, "id\t%s\nname\t%s\nrole\t%s\norg_id\t%s\n", k.ID, cell(k.Name), k.Role, k.OrgID)
}

func webhooksTable(w io.Writer, ws []apitype.Webhook) {
	fmt.Fprintln(w, "ID\tURL\tEVENTS\tSIGNED\tFORMAT\tORG\tCREATED")
	for _, wh := range ws {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", wh.ID, cell(wh.URL), joined(wh.Events), yesNo(wh.Authenticated), cell(wh.Format), wh.OrgID, when(&wh.CreatedAt))
	}
}

func deliveriesTable(w io.Writer, ds []apitype.WebhookDelivery) {
	fmt.Fprintln(w, "ID\tEVENT\tSTATUS\tATTEMPTS\tCODE\tTIME\tUPDATED\tERROR")
	for _, d := range ds {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%dms\t%s\t%s\n", d.ID, d.Event, d.Status, d.Attempts, d.LastStatusCode, d.ResponseTimeMS, when(&d.UpdatedAt), cell(d.LastError))
	}
}

func maintenanceTable(w io.Writer, ms []apitype.Maintenance) {
	fmt.Fprintln(w, "HOSTNAME\tORG\tBY\tSINCE\tUNTIL\tREASON")
	for _, m := range ms {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", m.Hostname, m.OrgID, cell(m.By), when(&m.Since), when(m.ExpiresAt), cell(m.Reason))
	}
}

func auditTable(w io.Writer, es []apitype.AuditEntry) {
	fmt.Fprintln(w, "SEQ\tAT\tEVENT\tACTOR\tORG\tHOSTNAME\tDETAIL")
	for _, e := range es {
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Seq, when(&e.At), e.Event, cell(e.Actor), cell(e.OrgID), cell(e.Hostname), cell(e.Detail))
	}
}

// explainTable prints an explanation: the request, the steps, the bind's
// clients and the verdict, in blocks that align on their own.
func explainTable(w io.Writer, ex apitype.Explanation) {
	fmt.Fprintf(w, "REQUEST\t%s%s from %s\nBIND\t%s\n\n", ex.Host, ex.Path, cell(ex.IP), cell(ex.Bind))
	fmt.Fprintln(w, "STEP\tOUTCOME\tDETAIL")
	for _, st := range ex.Steps {
		fmt.Fprintf(w, "%s\t%s\t%s\n", st.Name, st.Outcome, cell(st.Detail))
	}
	if len(ex.Clients) > 0 {
		fmt.Fprintln(w, "\nCLIENT\tID\tTIER\tHEALTHY\tDRAINING\tINFLIGHT\tLIMIT\tROUTABLE\tADMITS\tFREE")
		for _, c := range ex.Clients {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", cell(c.Name), c.ID, c.Tier, yesNo(c.Healthy), yesNo(c.Draining),
				c.Inflight, orNone(int(c.Limit)), yesNo(c.Routable), yesNo(c.Admits), yesNo(c.Free))
		}
	}
	status := "-"
	switch {
	case ex.Status != 0:
		status = strconv.Itoa(ex.Status)
	case ex.AfterWait != "":
		status = "- (the request waits: see AFTER WAIT)"
	case strings.HasPrefix(ex.Verdict, "dispatch to "):
		status = "- (the app answers)"
	}
	fmt.Fprintf(w, "\nVERDICT\t%s\nSTATUS\t%s\n", ex.Verdict, status)
	if ex.AfterWait != "" {
		fmt.Fprintf(w, "AFTER WAIT\t%s\n", ex.AfterWait)
	}
	if ex.Setting != "" {
		fmt.Fprintf(w, "SETTING\t%s\n", ex.Setting)
	}
	if ex.ErrorPage != "" {
		fmt.Fprintf(w, "PAGE\t%s\n", ex.ErrorPage)
	}
}

func orgsTable(w io.Writer, orgs []apitype.Org) {
	fmt.Fprintln(w, "ID\tNAME\tCREATED")
	for _, o := range orgs {
		fmt.Fprintf(w, "%s\t%s\t%s\n", o.ID, cell(o.Name), when(&o.CreatedAt))
	}
}

func orgPortsTable(w io.Writer, p apitype.OrgPorts) { ownedTable(w, "PORTS", p.OrgID, p.Ports) }

func orgHostnamesTable(w io.Writer, h apitype.OrgHostnames) {
	ownedTable(w, "PATTERN", h.OrgID, h.Patterns)
}

// ownedTable lists what organization orgID owns, one item a row, under
// column; "(none)" when it owns nothing.
func ownedTable(w io.Writer, column, orgID string, items []string) {
	fmt.Fprintf(w, "ORG\t%s\n", column)
	for _, it := range items {
		fmt.Fprintf(w, "%s\t%s\n", orgID, cell(it))
	}
	if len(items) == 0 {
		fmt.Fprintf(w, "%s\t%s\n", orgID, "(none)")
	}
}

// cell shows s in a table: "-" when empty, and never a tab or newline that
// would break the columns.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return strings.Map(func(r rune) rune {
		if r == '\t' || r == '\n' || r == '\r' {
			return ' '
		}
		return r
	}, s)
}

func joined(l []string) string { return cell(strings.Join(l, ",")) }

func when(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func orNone(n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

// limitCell shows how a service's limit is set: "fixed", "aimd 1..40" or
// "load-signal 2..64" (the learnt limit's bounds), "-" for none announced.
func limitCell(c *apitype.Concurrency) string {
	switch {
	case c == nil:
		return "-"
	case c.Fixed:
		return "fixed"
	}
	return fmt.Sprintf("%s %d..%d", cell(c.Mode), c.Min, c.Max)
}
