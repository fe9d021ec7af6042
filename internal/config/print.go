package config

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// PrintClient writes the effective client configuration for --print-config:
// one key a line, "key = value  # source" (secrets as <set> or <unset>,
// empty values as ""), the top-level keys, then each service's keys as
// services[N].KEY, then each expose entry's as expose[N].KEY, then the
// scaling block when one is declared.
func PrintClient(w io.Writer, c Client, s *Sources) error {
	p := &printer{w: w, src: s}
	printSettings(p, &c, clientSettings(), "")
	if c.Adaptive != nil {
		printSettings(p, c.Adaptive, adaptiveSettings(), "")
	}
	c.ResolveConcurrency()
	for i := range c.Services {
		prefix := fmt.Sprintf("services[%d].", i)
		printSettings(p, &c.Services[i], serviceSettings(), prefix)
		if a := c.Services[i].Adaptive; a != nil {
			printSettings(p, a, serviceAdaptiveSettings(), prefix)
		}
		p.concurrency(prefix, c.Services[i].Concurrency)
	}
	for i := range c.Expose {
		printSettings(p, &c.Expose[i], exposeSettings(), fmt.Sprintf("expose[%d].", i))
	}
	if c.Scaling != nil {
		printSettings(p, c.Scaling, scalingSettings(), "")
	}
	return p.err
}

type printer struct {
	w   io.Writer
	src *Sources
	err error
}

func printSettings[C any](p *printer, cfg *C, tab []setting[C], prefix string) {
	for _, s := range tab {
		key := prefix + s.Name
		val := s.format(cfg)
		switch {
		case s.Secret && val == "":
			val = "<unset>"
		case s.Secret:
			val = "<set>"
		case val == "" || needsQuote(val):
			val = strconv.Quote(val)
		}
		p.line(key, val)
	}
}

// needsQuote reports whether v would read ambiguously unquoted: surrounding
// spaces, control characters, or a " #" that looks like the source comment.
func needsQuote(v string) bool {
	if strings.TrimSpace(v) != v || strings.Contains(v, " #") {
		return true
	}
	for _, r := range v {
		if r < ' ' || r == 0x7f {
			return true
		}
	}
	return false
}

func (p *printer) line(key, val string) {
	if p.err != nil {
		return
	}
	_, p.err = fmt.Fprintf(p.w, "%s = %s  # %s\n", key, val, p.src.Of(key))
}
