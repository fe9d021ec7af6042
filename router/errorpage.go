package router

import (
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aperio-dev/aperio/internal/hostname"
)

// Error pages. Every answer aperio-server itself gives a visitor (a
// refusal, a failed exchange) is written by writePage in the format the
// visitor accepts: an HTML page for a browser (text/html), a JSON object
// for an API client (application/json), plain text otherwise. The HTML
// page is the operator's template for the status and hostname when
// error_pages has one, else a built-in page. No format names a setting,
// an internal address or a client: the operator reads those in the log,
// in x-aperio-limit and in explain.

// Bounds of error_pages.
const (
	// MaxErrorPageBytes bounds one page's template, in bytes.
	MaxErrorPageBytes = 64 << 10
	// MaxErrorPages bounds the number of pages.
	MaxErrorPages = 256
)

// ErrorPageStatuses are the statuses an operator's page may be given.
var ErrorPageStatuses = []int{http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout}

// ErrorPageFields are the fields a template may use, each written
// HTML-escaped: {hostname} the visitor's hostname, {reason} why the
// request was refused, {until} when maintenance ends (RFC 3339, UTC; empty
// when unknown), {request_id} the request's X-Request-Id. "{{" writes a
// literal "{".
var ErrorPageFields = []string{"hostname", "reason", "until", "request_id"}

// ErrorPage is one operator page (an entry of error_pages): the HTML
// template answered with Status to the visitors of Hostname that accept
// text/html.
type ErrorPage struct {
	// Status is one of ErrorPageStatuses.
	Status int
	// Hostname is an exact hostname, a "*." wildcard, or "" (or "*") for
	// every hostname without a page of its own. An exact page wins over a
	// wildcard, the longest wildcard over shorter ones.
	Hostname string
	// HTML is the template: at most MaxErrorPageBytes, fields as
	// ErrorPageFields say.
	HTML string
}

// Check reports what is wrong with p, or nil.
func (p ErrorPage) Check() error {
	var errs []error
	if !slices.Contains(ErrorPageStatuses, p.Status) {
		errs = append(errs, fmt.Errorf("status %d is not one of 429, 502, 503, 504", p.Status))
	}
	if h := p.Hostname; h != "" && h != "*" {
		if err := hostname.Validate(h); err != nil {
			errs = append(errs, err)
		}
	}
	if len(p.HTML) > MaxErrorPageBytes {
		errs = append(errs, fmt.Errorf("template of %d bytes is larger than %d", len(p.HTML), MaxErrorPageBytes))
	} else if _, err := parsePage(p.HTML); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// checkErrorPages reports every problem of pages, joined.
func checkErrorPages(pages []ErrorPage) error {
	var errs []error
	if len(pages) > MaxErrorPages {
		errs = append(errs, fmt.Errorf("router: %d error pages, more than %d", len(pages), MaxErrorPages))
	}
	for i, p := range pages {
		if err := p.Check(); err != nil {
			errs = append(errs, fmt.Errorf("router: error page %d: %w", i, err))
		}
	}
	return errors.Join(errs...)
}

// pageField is a field of a template.
type pageField uint8

const (
	fieldNone pageField = iota
	fieldHostname
	fieldReason
	fieldUntil
	fieldRequestID
)

// pagePart is a literal, then a field (fieldNone for none).
type pagePart struct {
	lit   string
	field pageField
}

// pageTemplate is a parsed template.
type pageTemplate []pagePart

// parsePage parses a template: "{name}" is a field when name is made of
// lowercase letters and underscores (an unknown one is an error, with its
// line), "{{" is a literal "{", and every other "{" is itself, so that CSS
// needs no escaping.
func parsePage(s string) (pageTemplate, error) {
	var t pageTemplate
	var lit strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '{' {
			lit.WriteByte(c)
			continue
		}
		if i+1 < len(s) && s[i+1] == '{' {
			lit.WriteByte('{')
			i++
			continue
		}
		j := i + 1
		for j < len(s) && ('a' <= s[j] && s[j] <= 'z' || s[j] == '_') {
			j++
		}
		if j == i+1 || j >= len(s) || s[j] != '}' {
			lit.WriteByte(c)
			continue
		}
		name := s[i+1 : j]
		k := slices.Index(ErrorPageFields, name)
		if k < 0 {
			line := 1 + strings.Count(s[:i], "\n")
			return nil, fmt.Errorf("unknown field {%s} on line %d of the template (fields: {%s})", name, line, strings.Join(ErrorPageFields, "}, {"))
		}
		t = append(t, pagePart{lit: lit.String(), field: pageField(k + 1)})
		lit.Reset()
		i = j
	}
	if lit.Len() > 0 {
		t = append(t, pagePart{lit: lit.String()})
	}
	return t, nil
}

// pageData are a page's field values, unescaped.
type pageData struct {
	host, reason, until, requestID string
}

// render writes t with d's values HTML-escaped.
func (t pageTemplate) render(d *pageData) []byte {
	var b strings.Builder
	for _, p := range t {
		b.WriteString(p.lit)
		switch p.field {
		case fieldHostname:
			b.WriteString(html.EscapeString(d.host))
		case fieldReason:
			b.WriteString(html.EscapeString(d.reason))
		case fieldUntil:
			b.WriteString(html.EscapeString(d.until))
		case fieldRequestID:
			b.WriteString(html.EscapeString(d.requestID))
		}
	}
	return []byte(b.String())
}

// errorPages are the compiled operator pages by status.
type errorPages map[int]*hostMap[pageTemplate]

// compileErrorPages compiles checked pages.
func compileErrorPages(pages []ErrorPage) errorPages {
	out := errorPages{}
	for _, p := range pages {
		t, err := parsePage(p.HTML)
		if err != nil {
			panic("router: compileErrorPages of an unchecked page: " + err.Error())
		}
		m := out[p.Status]
		if m == nil {
			m = &hostMap[pageTemplate]{}
			out[p.Status] = m
		}
		m.set(hostname.Normalize(p.Hostname), t)
	}
	return out
}

// page returns the template for status and host: the operator's, else the
// built-in one; which says which ("" for the built-in, else the page's
// hostname pattern as configured, "*" for the default).
func (ep errorPages) page(status int, host string) (t pageTemplate, operator bool) {
	if m := ep[status]; m != nil {
		if t, ok := m.lookup(host); ok {
			return t, true
		}
	}
	return builtinPage(status), false
}

// builtinPageHTML is the built-in page; %[1]d is the status and %[2]s its
// text. It is self-contained (inline CSS, nothing fetched) so that it
// shows even when every backend is down.
const builtinPageHTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex">
<title>%[1]d %[2]s</title>
<style>
:root { color-scheme: light dark; }
body { margin: 0; min-height: 100vh; display: flex; align-items: center; justify-content: center;
  font: 16px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; background: #f6f7f9; color: #1f2328; }
main { max-width: 34rem; margin: 2rem; padding: 2rem 2.5rem; background: #fff; border-radius: 12px;
  box-shadow: 0 1px 3px rgba(0,0,0,.08), 0 8px 24px rgba(0,0,0,.06); }
h1 { margin: 0 0 .25rem; font-size: 1.5rem; }
.code { color: #8c959f; font-weight: 600; letter-spacing: .05em; }
p { margin: .75rem 0 0; }
.meta { margin-top: 1.5rem; font-size: .8rem; color: #6e7781; word-break: break-all; }
@media (prefers-color-scheme: dark) {
  body { background: #0d1117; color: #e6edf3; }
  main { background: #161b22; box-shadow: none; border: 1px solid #30363d; }
  .meta { color: #8b949e; }
}
</style>
</head>
<body>
<main>
<div class="code">%[1]d</div>
<h1>%[2]s</h1>
<p>{reason}</p>
<p class="meta">{hostname} · request {request_id}</p>
</main>
</body>
</html>
`

// builtinPages holds the built-in page of every status a refusal is
// answered with, parsed once.
var builtinPages = func() map[int]pageTemplate {
	out := map[int]pageTemplate{}
	for _, status := range []int{400, 403, 404, 405, 408, 413, 429, 500, 502, 503, 504} {
		out[status] = mustParsePage(fmt.Sprintf(builtinPageHTML, status, http.StatusText(status)))
	}
	return out
}()

func mustParsePage(s string) pageTemplate {
	t, err := parsePage(s)
	if err != nil {
		panic("router: built-in page: " + err.Error())
	}
	return t
}

// builtinPage returns the built-in page for status.
func builtinPage(status int) pageTemplate {
	if t, ok := builtinPages[status]; ok {
		return t
	}
	text := http.StatusText(status)
	if text == "" {
		text = "Error"
	}
	return mustParsePage(fmt.Sprintf(builtinPageHTML, status, html.EscapeString(text)))
}

// pageFormat is the form of an answer.
type pageFormat uint8

const (
	formatText pageFormat = iota
	formatHTML
	formatJSON
)

func (f pageFormat) String() string {
	switch f {
	case formatHTML:
		return "html"
	case formatJSON:
		return "json"
	}
	return "text"
}

// maxAcceptRanges bounds the media ranges of Accept looked at; the rest
// are ignored, so a hostile header costs at most this much.
const maxAcceptRanges = 32

// negotiate picks the format for an Accept header: HTML when text/html is
// accepted at least as much as JSON, JSON when application/json (or a
// +json type) is, text otherwise, wildcards included (curl's */*).
func negotiate(accept []string) pageFormat {
	var qHTML, qJSON float64
	n := 0
	for _, line := range accept {
		for r := range strings.SplitSeq(line, ",") {
			if n++; n > maxAcceptRanges {
				break
			}
			media, params, _ := strings.Cut(r, ";")
			media = strings.ToLower(strings.TrimSpace(media))
			q := acceptQ(params)
			switch {
			case media == "text/html" || media == "application/xhtml+xml":
				qHTML = max(qHTML, q)
			case media == "application/json" || strings.HasPrefix(media, "application/") && strings.HasSuffix(media, "+json"):
				qJSON = max(qJSON, q)
			}
		}
	}
	switch {
	case qHTML > 0 && qHTML >= qJSON:
		return formatHTML
	case qJSON > 0:
		return formatJSON
	}
	return formatText
}

// acceptQ returns the q parameter of a media range's parameters, 1 when
// absent, 0 when malformed.
func acceptQ(params string) float64 {
	for p := range strings.SplitSeq(params, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(k), "q") {
			continue
		}
		q, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || q < 0 || q > 1 {
			return 0
		}
		return q
	}
	return 1
}

// visitorAnswer is what writePage says: the status, the reason (a
// sentence for visitors: no setting, address or client name) and, for
// maintenance, when it ends.
type visitorAnswer struct {
	status int
	reason string
	until  time.Time
}

// errorJSON is the JSON form of an answer.
type errorJSON struct {
	Error     string `json:"error"`
	Status    int    `json:"status"`
	RequestID string `json:"request_id"`
}

// writePage writes ans to w in the format r accepts. Headers the caller
// set (Retry-After, Allow, x-aperio-limit) are kept. r may be nil (then
// plain text).
func (rt *Router) writePage(w http.ResponseWriter, r *http.Request, host string, ans visitorAnswer) {
	var format pageFormat
	var requestID string
	if r != nil {
		format = negotiate(r.Header["Accept"])
		requestID = r.Header.Get(HeaderRequestID)
	}
	h := w.Header()
	h.Del("Content-Length")
	h["X-Content-Type-Options"] = []string{"nosniff"}
	var body []byte
	switch format {
	case formatHTML:
		t, _ := rt.settingsOf(r).pages.page(ans.status, host)
		d := pageData{host: host, reason: ans.reason, requestID: requestID}
		if !ans.until.IsZero() {
			d.until = ans.until.UTC().Format(time.RFC3339)
		}
		body = t.render(&d)
		h["Content-Type"] = []string{"text/html; charset=utf-8"}
	case formatJSON:
		var err error
		body, err = json.Marshal(errorJSON{Error: ans.reason, Status: ans.status, RequestID: requestID})
		if err != nil {
			panic("router: encode an error answer: " + err.Error()) // strings and an int always encode
		}
		body = append(body, '\n')
		h["Content-Type"] = []string{"application/json"}
	default:
		body = []byte("aperio: " + ans.reason + "\n")
		h["Content-Type"] = []string{"text/plain; charset=utf-8"}
	}
	w.WriteHeader(ans.status)
	w.Write(body)
}
