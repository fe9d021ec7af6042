package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/aperio-dev/aperio/internal/control/admin/apiclient"
	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/exitcode"
)

// usageCommand is `api usage`: the stored usage rows, newest day first.
func (a *apiCLI) usageCommand() *cobra.Command {
	var q apiclient.UsageQuery
	cmd := &cobra.Command{
		Use:   "usage [--token ID] [--org ID] [--hostname H] [--from YYYY-MM-DD] [--to YYYY-MM-DD]",
		Short: "Show visitor bytes and requests per day, token, organization and bind hostname",
		Long: "Show the usage the servers have flushed (every usage_flush_interval), newest day first:\n" +
			"bytes are the visitors' both ways, the figure daily_max_bytes and monthly_max_bytes count.\n" +
			"Days are UTC; --to defaults to today, --from to 30 days before --to, at most 366 days apart.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, f := range []struct{ name, v string }{{"from", q.From}, {"to", q.To}} {
				if f.v == "" {
					continue
				}
				if _, err := time.Parse(time.DateOnly, f.v); err != nil {
					fmt.Fprintf(a.stderr, "aperio-client: --%s %q is not a date (like 2030-01-02)\n", f.name, f.v)
					return exitcode.ErrUsage
				}
			}
			return callAPI(a, cmd, func(c *apiclient.Client, ctx context.Context) ([]apitype.UsageRow, error) {
				return c.Usage(ctx, q)
			}, usageTable)
		},
	}
	f := cmd.Flags()
	f.StringVar(&q.TokenID, "token", "", "only this token's rows (its ID)")
	f.StringVar(&q.OrgID, "org", "", "only this organization's rows (master token; a key sees its own)")
	f.StringVar(&q.Hostname, "hostname", "", "only this bind hostname's rows (exact)")
	f.StringVar(&q.From, "from", "", "first day, YYYY-MM-DD (UTC)")
	f.StringVar(&q.To, "to", "", "last day, YYYY-MM-DD (UTC); default today")
	return cmd
}

// usageTable prints usage rows; the master token's rows show its name.
func usageTable(w io.Writer, rows []apitype.UsageRow) {
	fmt.Fprintln(w, "DAY\tTOKEN\tORG\tHOSTNAME\tREQUESTS\tBYTES")
	for _, r := range rows {
		tok := r.TokenID
		if tok == "" {
			tok = apitype.Master
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%d\n", r.Day, tok, cell(r.OrgID), cell(r.Hostname), r.Requests, r.Bytes)
	}
}
