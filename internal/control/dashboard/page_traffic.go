package dashboard

import (
	"strings"
	"unicode/utf8"

	"github.com/aperio-dev/aperio/internal/hostname"
)

func init() {
	register(&page{
		Name: "traffic", Title: "traffic.title", Order: 20,
		Scripts: []string{"traffic.js"},
		Load:    loadTraffic,
	})
}

// trafficView is the traffic page's data: the filter from the query (the
// script applies it to the live tail and keeps the query in step) and
// the hostnames' figures from GET /stats, which the page shows as a table
// without JavaScript and as charts with it.
type trafficView struct {
	Filter trafficFilter
	// StatsOK is false when /stats did not answer.
	StatsOK bool
	Hosts   []hostRow
	// Known are the hostnames to offer in the hostname filter.
	Known []string
}

// trafficFilter narrows the tail: an exact hostname (also sent to the
// stream, so the server filters), a status class, a path substring.
type trafficFilter struct {
	Hostname, Status, Path string
}

// statusClasses are the status filter's choices besides "all".
var statusClasses = []string{"2xx", "3xx", "4xx", "5xx", "aborted"}

// maxPathFilter bounds the path substring of the filter.
const maxPathFilter = 256

// parseTrafficFilter reads and checks the filter's query parameters. A
// bad one is refused whole (400 with the reason), so a hostile link
// cannot reach the API with it.
func parseTrafficFilter(c *Ctx) (trafficFilter, error) {
	q := c.R.URL.Query()
	f := trafficFilter{Status: q.Get("status"), Path: q.Get("path")}
	if h := q.Get("hostname"); h != "" {
		if len(h) > hostname.MaxLen {
			return trafficFilter{}, &FormError{Message: c.T("traffic.bad_hostname")}
		}
		h = hostname.Normalize(h)
		if strings.HasPrefix(h, "*") || hostname.Validate(h) != nil {
			return trafficFilter{}, &FormError{Message: c.T("traffic.bad_hostname")}
		}
		f.Hostname = h
	}
	if f.Status != "" {
		ok := false
		for _, s := range statusClasses {
			ok = ok || s == f.Status
		}
		if !ok {
			return trafficFilter{}, &FormError{Message: c.T("traffic.bad_status")}
		}
	}
	if len(f.Path) > maxPathFilter || !utf8.ValidString(f.Path) || strings.ContainsFunc(f.Path, isControl) {
		return trafficFilter{}, &FormError{Message: c.T("traffic.bad_path", maxPathFilter)}
	}
	return f, nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

func loadTraffic(c *Ctx) (any, error) {
	f, err := parseTrafficFilter(c)
	if err != nil {
		return trafficView{}, err
	}
	v := trafficView{Filter: f}
	all := readStats(c)
	if all != nil {
		v.StatsOK = true
		for _, h := range all.Hosts {
			if !strings.HasPrefix(h.Hostname, "__") {
				v.Known = append(v.Known, h.Hostname)
			}
		}
		v.Hosts = hostRows(all)
		if f.Hostname != "" {
			v.Hosts = v.Hosts[:0]
			for _, r := range hostRows(all) {
				if r.Hostname == f.Hostname {
					v.Hosts = append(v.Hosts, r)
				}
			}
		}
	}
	return v, nil
}

// Classes are the status filter's choices besides "all".
func (trafficView) Classes() []string { return statusClasses }
