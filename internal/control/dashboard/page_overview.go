package dashboard

import (
	"fmt"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/logkey"
)

func init() {
	register(&page{
		Name: "overview", Title: "overview.title", Order: 0,
		Scripts: []string{"overview.js"},
		Load:    loadOverview,
	})
}

// overview is the overview page's data: the connected clients from GET
// /clients, and the traffic figures from GET /stats when it answered
// (nil otherwise: the cards show a dash until the script fills them).
type overview struct {
	Clients []apitype.ClientInfo
	// Connections counts the distinct client connections (Clients has one
	// entry per connection and service).
	Connections int
	Hostnames   int
	Stats       *apitype.Stats
	Summary     statsSummary
	Hosts       []hostRow
}

func loadOverview(c *Ctx) (any, error) {
	var clients []apitype.ClientInfo
	if err := c.Get("/clients", &clients); err != nil {
		return overview{Summary: summarize(nil)}, err
	}
	sortClients(clients)
	ov := overview{Clients: clients, Connections: countConnections(clients), Hostnames: countHostnames(clients)}
	ov.Stats = readStats(c)
	ov.Summary = summarize(ov.Stats)
	ov.Hosts = hostRows(ov.Stats)
	return ov, nil
}

// countConnections counts the distinct connections among clients.
func countConnections(clients []apitype.ClientInfo) int {
	ids := map[string]bool{}
	for _, ci := range clients {
		ids[ci.ID] = true
	}
	return len(ids)
}

// countHostnames counts the distinct hostnames clients serve.
func countHostnames(clients []apitype.ClientInfo) int {
	hosts := map[string]bool{}
	for _, ci := range clients {
		for _, h := range ci.Hostnames {
			hosts[h] = true
		}
	}
	return len(hosts)
}

// readStats reads GET /stats. The figures are an addition to the pages,
// not their substance: when the API cannot answer them, the page renders
// without (a dash in each card) and the failure is logged, not shown.
func readStats(c *Ctx) *apitype.Stats {
	var st apitype.Stats
	if err := c.Get("/stats", &st); err != nil {
		c.u.log.Warn("dashboard could not read the stats", logkey.Path, c.R.URL.Path, logkey.Err, err)
		return nil
	}
	return &st
}

// noFigure is what a card or cell shows for a figure it does not have.
const noFigure = "—"

// statsSummary is the overview's cards, formatted: the last minute over
// every hostname the caller sees.
type statsSummary struct {
	RPS, ErrorRate, P50, P99, Held, Scaling string
}

// summarize sums the hostnames' last minute: request rates add up, the
// error rate is errors over requests, and the latency quantiles are the
// slowest hostname's (quantiles of different hostnames do not combine).
func summarize(st *apitype.Stats) statsSummary {
	if st == nil {
		return statsSummary{noFigure, noFigure, noFigure, noFigure, noFigure, noFigure}
	}
	var rps, p50, p99 float64
	var reqs, errs int64
	for _, h := range st.Hosts {
		w := h.Windows[apitype.Window1m]
		rps += w.RPS
		if h.Hostname == apitype.StatsUnrouted {
			continue // visitors' misses, not a service's errors: out of the error rate
		}
		reqs += w.Requests
		errs += w.Errors
		p50 = max(p50, w.P50MS)
		p99 = max(p99, w.P99MS)
	}
	rate := 0.0
	if reqs > 0 {
		rate = float64(errs) / float64(reqs)
	}
	return statsSummary{
		RPS: fmtRate(rps), ErrorRate: fmtPct(rate), P50: fmtMS(p50), P99: fmtMS(p99),
		Held: fmt.Sprint(st.Held), Scaling: fmt.Sprint(st.ScalingEvents1h),
	}
}

// hostRow is one hostname's line of the overview's and the traffic
// page's tables, formatted.
type hostRow struct {
	Hostname string
	// Special is "other" or "unrouted" for the API's pseudo-hostnames
	// (the hostnames past its bound, the requests no bind matched).
	Special                            string
	RPS, ErrorRate, P50, P99, QueueP99 string
	Requests5m                         int64
	Hour                               apitype.StatsWindow
}

// hostRows formats st's hostnames, in the API's order (by hostname).
func hostRows(st *apitype.Stats) []hostRow {
	if st == nil {
		return nil
	}
	out := make([]hostRow, 0, len(st.Hosts))
	for _, h := range st.Hosts {
		m := h.Windows[apitype.Window1m]
		r := hostRow{
			Hostname: h.Hostname, RPS: fmtRate(m.RPS), ErrorRate: fmtPct(m.ErrorRate),
			P50: fmtMS(m.P50MS), P99: fmtMS(m.P99MS), QueueP99: fmtMS(m.QueueWaitP99MS),
			Requests5m: h.Windows[apitype.Window5m].Requests, Hour: h.Windows[apitype.Window1h],
		}
		switch h.Hostname {
		case apitype.StatsOther:
			r.Special = "other"
		case apitype.StatsUnrouted:
			r.Special = "unrouted"
			r.ErrorRate = noFigure // visitors' misses: no error rate
		}
		out = append(out, r)
	}
	return out
}

// The figures' formats; assets/figures.js formats the same way, so a
// live update does not change how a number looks.
func fmtRate(f float64) string {
	if f > 0 && f < 1 {
		return fmt.Sprintf("%.2f", f) // a few requests a minute is not 0.0
	}
	return fmt.Sprintf("%.1f", f)
}
func fmtPct(f float64) string { return fmt.Sprintf("%.1f%%", f*100) }
func fmtMS(f float64) string {
	if f < 10 {
		return fmt.Sprintf("%.1f ms", f)
	}
	return fmt.Sprintf("%.0f ms", f)
}
