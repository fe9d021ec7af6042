package dashboard

import (
	"net/netip"
	"net/url"
	"strings"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

func init() {
	register(&page{
		Name: "explain", Title: "explain.title", Order: 110,
		Load: loadExplain,
	})
}

// explainPage is the explain page's data.
type explainPage struct {
	// URL and IP are the form's values as given.
	URL, IP string
	// Explanation is the API's answer; nil before a URL is given.
	Explanation *apitype.Explanation
	// QueryIgnored says the URL had a query, which routing ignores.
	QueryIgnored bool
}

// loadExplain asks the API what the server would do with a request for
// the form's URL (GET ?url=&ip=, so the answer's address can be shared)
// from the form's visitor address.
func loadExplain(c *Ctx) (any, error) {
	f := c.R.URL.Query()
	d := &explainPage{URL: f.Get("url"), IP: f.Get("ip")}
	raw, err := fieldText(c, f, "url", "explain.field.url", maxFieldBytes, false)
	if err != nil || raw == "" {
		return d, err
	}
	ip, err := fieldText(c, f, "ip", "explain.field.ip", 64, false)
	if err != nil {
		return d, err
	}
	if !strings.Contains(raw, "://") {
		raw = "https://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil {
		return d, &FormError{Message: c.T("explain.bad_url")}
	}
	q := url.Values{"host": {u.Hostname()}, "path": {u.EscapedPath()}}
	if q.Get("path") == "" {
		q.Set("path", "/")
	}
	d.QueryIgnored = u.RawQuery != ""
	if ip != "" {
		a, err := netip.ParseAddr(ip)
		if err != nil || a.Zone() != "" {
			return d, &FormError{Message: c.T("explain.bad_ip", ip)}
		}
		q.Set("ip", a.String())
	}
	var ex apitype.Explanation
	if err := c.Get("/explain?"+q.Encode(), &ex); err != nil {
		return d, err
	}
	d.Explanation = &ex
	return d, nil
}
