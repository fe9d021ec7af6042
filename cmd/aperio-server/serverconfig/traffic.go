package serverconfig

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/router"
)

// The structured keys of traffic policy that this file owns: error_pages,
// maintenance_windows and fallbacks. Each is written as yaml in the file
// (fallbacks also as host=URL pairs in APERIO_FALLBACKS), kept as written
// with the line of each entry so that a problem names it, and turned into
// the router's typed config once it checks (resolveTraffic).

// ErrorPageEntry is one entry of error_pages, as written.
type ErrorPageEntry struct {
	Line config.Line `yaml:"-"`
	// Status is 429, 502, 503 or 504.
	Status int `yaml:"status"`
	// Hostname is exact, "*." wildcard, or empty (or "*") for the default.
	Hostname string `yaml:"hostname,omitempty"`
	// HTML is the template; see router.ErrorPageFields.
	HTML string `yaml:"html"`
}

// WindowEntry is one entry of maintenance_windows, as written.
type WindowEntry struct {
	Line config.Line `yaml:"-"`
	// Hostname is exact or a "*." wildcard.
	Hostname string `yaml:"hostname"`
	// Weekdays are the days the window starts on (mon … sun); empty means
	// every day.
	Weekdays []string `yaml:"weekdays,omitempty"`
	// Start and End are HH:MM in TimeZone; an End not after Start runs
	// past midnight.
	Start string `yaml:"start"`
	End   string `yaml:"end"`
	// TimeZone is an IANA zone name ("Europe/Berlin"); empty means UTC.
	TimeZone string `yaml:"time_zone,omitempty"`
	// Reason is shown to visitors.
	Reason string `yaml:"reason,omitempty"`
}

// FallbackEntry is one entry of fallbacks, as written.
type FallbackEntry struct {
	Line config.Line `yaml:"-"`
	// Hostname is exact, a "*." wildcard, or "*" for every hostname.
	Hostname string `yaml:"hostname"`
	// URL is where visitors go.
	URL string `yaml:"url"`
	// PreservePath appends the request's path and query to URL.
	PreservePath bool `yaml:"preserve_path,omitempty"`
	// Permanent answers 301 instead of 302.
	Permanent bool `yaml:"permanent,omitempty"`
}

// FallbackEntries is fallbacks: a list of entries, or the mapping of
// hostname to URL it began as (each a 302 without the path).
type FallbackEntries []FallbackEntry

// UnmarshalYAML decodes the list form or the mapping form.
func (fs *FallbackEntries) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.MappingNode:
		out := make(FallbackEntries, 0, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if v.Kind != yaml.ScalarNode {
				return fmt.Errorf("line %d: the URL of %s must be a single value", v.Line, k.Value)
			}
			out = append(out, FallbackEntry{Line: config.Line(k.Line), Hostname: strings.ToLower(k.Value), URL: v.Value})
		}
		*fs = out
		return nil
	case yaml.SequenceNode:
		var list []FallbackEntry
		if err := n.Decode(&list); err != nil {
			return err
		}
		*fs = list
		return nil
	}
	return fmt.Errorf("line %d: want a list of {hostname, url, preserve_path, permanent} or a mapping of hostname to URL", n.Line)
}

// fallbacksFromText parses APERIO_FALLBACKS: host=URL pairs, comma
// separated.
func fallbacksFromText(s string) (FallbackEntries, error) {
	var out FallbackEntries
	for pair := range strings.SplitSeq(s, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		h, u, ok := strings.Cut(pair, "=")
		if !ok {
			return nil, fmt.Errorf("invalid entry %q (want host=url)", pair)
		}
		out = append(out, FallbackEntry{Hostname: strings.ToLower(strings.TrimSpace(h)), URL: strings.TrimSpace(u)})
	}
	return out, nil
}

// maxTimeZoneLen bounds a time_zone name; the longest IANA name is 32
// bytes.
const maxTimeZoneLen = 64

// window turns e into the router's window, or says what is wrong.
func (e WindowEntry) window() (router.MaintenanceWindow, error) {
	w := router.MaintenanceWindow{Hostname: strings.ToLower(e.Hostname), Reason: e.Reason, Location: time.UTC}
	var errs []error
	for _, d := range e.Weekdays {
		wd, err := router.ParseWeekday(d)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		w.Weekdays = append(w.Weekdays, wd)
	}
	var err error
	if w.Start, err = router.ParseTimeOfDay(e.Start); err != nil {
		errs = append(errs, fmt.Errorf("start: %w", err))
	}
	if w.End, err = router.ParseTimeOfDay(e.End); err != nil {
		errs = append(errs, fmt.Errorf("end: %w", err))
	}
	switch tz := e.TimeZone; {
	case tz == "":
	case len(tz) > maxTimeZoneLen || tz == "Local" || strings.Contains(tz, ".."):
		errs = append(errs, fmt.Errorf("time_zone %.64q is not an IANA time zone name", tz))
	default:
		if w.Location, err = time.LoadLocation(tz); err != nil {
			errs = append(errs, fmt.Errorf("time_zone %q is not an IANA time zone name", tz))
		}
	}
	if len(errs) == 0 {
		if err := w.Check(); err != nil {
			errs = append(errs, err)
		}
	}
	return w, errors.Join(errs...)
}

func (e ErrorPageEntry) page() router.ErrorPage {
	return router.ErrorPage{Status: e.Status, Hostname: strings.ToLower(e.Hostname), HTML: e.HTML}
}

func (e FallbackEntry) fallback() router.Fallback {
	return router.Fallback{Hostname: e.Hostname, URL: e.URL, PreservePath: e.PreservePath, Permanent: e.Permanent}
}

// at names an entry in a problem: its index and, from a file, its line.
func at(i int, line config.Line) string {
	if line > 0 {
		return fmt.Sprintf("entry %d (line %d)", i, line)
	}
	return fmt.Sprintf("entry %d", i)
}

// trafficProblems reports the problems of error_pages,
// maintenance_windows and fallbacks on v, each naming its key and entry.
func trafficProblems(s Config, v *config.Checker) {
	if n := len(s.ErrorPages); n > router.MaxErrorPages {
		v.Add("error_pages", "%d pages, more than %d", n, router.MaxErrorPages)
	}
	seenPage := map[string]int{}
	for i, e := range s.ErrorPages {
		if err := e.page().Check(); err != nil {
			v.Add("error_pages", "%s: %s", at(i, e.Line), oneLine(err))
		}
		key := fmt.Sprintf("%d %s", e.Status, strings.ToLower(e.Hostname))
		if j, dup := seenPage[key]; dup {
			v.Add("error_pages", "%s: the same status and hostname as entry %d", at(i, e.Line), j)
		}
		seenPage[key] = i
	}
	if n := len(s.MaintenanceWindows); n > router.MaxMaintenanceWindows {
		v.Add("maintenance_windows", "%d windows, more than %d", n, router.MaxMaintenanceWindows)
	}
	for i, e := range s.MaintenanceWindows {
		if _, err := e.window(); err != nil {
			v.Add("maintenance_windows", "%s: %s", at(i, e.Line), oneLine(err))
		}
	}
	if n := len(s.Fallbacks); n > router.MaxFallbacks {
		v.Add("fallbacks", "%d fallbacks, more than %d", n, router.MaxFallbacks)
	}
	seenHost := map[string]int{}
	for i, e := range s.Fallbacks {
		if e.Hostname != "*" && !config.ValidHostname(e.Hostname) {
			v.Add("fallbacks", "%s: %q is not a valid hostname", at(i, e.Line), e.Hostname)
		} else if err := e.fallback().Check(); err != nil {
			v.Add("fallbacks", "%s: %s", at(i, e.Line), oneLine(err))
		}
		if j, dup := seenHost[e.Hostname]; dup {
			v.Add("fallbacks", "%s: %s already has a fallback (entry %d)", at(i, e.Line), e.Hostname, j)
		}
		seenHost[e.Hostname] = i
	}
}

// oneLine joins a joined error's lines with "; ".
func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }

// resolveTraffic sets the router's error pages, windows and fallbacks
// from their entries. It is called on a checked configuration; an entry
// that does not check is left out.
func resolveTraffic(c *Config) {
	c.Router.ErrorPages = nil
	for _, e := range c.ErrorPages {
		if p := e.page(); p.Check() == nil {
			c.Router.ErrorPages = append(c.Router.ErrorPages, p)
		}
	}
	c.Router.MaintenanceWindows = nil
	for _, e := range c.MaintenanceWindows {
		if w, err := e.window(); err == nil {
			c.Router.MaintenanceWindows = append(c.Router.MaintenanceWindows, w)
		}
	}
	c.Router.Fallbacks = nil
	for _, e := range c.Fallbacks {
		if f := e.fallback(); (f.Hostname == "*" || config.ValidHostname(f.Hostname)) && f.Check() == nil {
			c.Router.Fallbacks = append(c.Router.Fallbacks, f)
		}
	}
}
