package dashboard

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/hostname"
	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/internal/visitor/inspect"
)

func init() {
	register(&page{
		Name: "inspect", Title: "inspect.title", Order: 40,
		Scripts: []string{"inspect.js"},
		Load:    loadInspect,
		Actions: map[string]func(*Ctx) (any, error){
			"start":  startInspect,
			"stop":   stopInspect,
			"replay": replayInspect,
		},
	})
}

// The start form's bounds that are the page's own: the inspector's
// bounds on the values themselves (inspect.Max*) are checked here too,
// so a bad field is refused in the user's language before any call.
const (
	// maxNumberField bounds a numeric field's text.
	maxNumberField = 12
	// maxRedactField bounds the redact headers field: 32 names of at
	// most 128 bytes with a separator each.
	maxRedactField = inspect.MaxRedactHeaders * 130
	// maxHeaderName bounds one header name, as the inspector does.
	maxHeaderName = 128
	// maxEntryIDDigits bounds the number of an entry id ("req_" and the
	// digits of a uint64).
	maxEntryIDDigits = 20
	// hexPreviewBytes is how much of a binary body the detail shows.
	hexPreviewBytes = 512
)

// inspectData is the inspector page's data: the captures, and for a
// selected hostname its capture and requests, and for a selected id the
// entry in full.
type inspectData struct {
	Captures []captureRow
	// Host is the selected hostname ("" for the list of captures);
	// Capture is its capture when the list has it.
	Host     string
	Capture  *captureRow
	Requests []summaryRow
	Entry    *entryView
	// Replayed is the answer of a replay just made.
	Replayed *apitype.InspectReplay
	// Form is the start form's values: the defaults, or what was posted
	// when it was refused.
	Form startForm
}

// captureRow is a capture with the time it has left, written for people.
type captureRow struct {
	apitype.InspectCapture
	Left      string
	BodyKiB   int
	Recording bool
}

// summaryRow is a captured request in the list.
type summaryRow struct {
	apitype.InspectSummary
	Duration string
}

// entryView is a captured request in full, ready for the template.
type entryView struct {
	apitype.InspectEntry
	// Messages are the request and the response, in that order.
	Messages []messageView
	Timeline timelineView
}

// messageView is a head and body: headers sorted, the body as text or a
// hex preview.
type messageView struct {
	// Key is the catalog key of its heading; ID prefixes its elements'
	// ids.
	Key, ID   string
	Headers   []headerLine
	Truncated bool
	// Text is the body when it is UTF-8 (IsText); Hex a hex dump of its
	// first hexPreviewBytes otherwise. Kept is how many bytes were kept,
	// Size how many passed.
	IsText        bool
	Text          string
	Hex           string
	HexShown      int
	Kept          int
	Size          int64
	BodyTruncated bool
}

// headerLine is one header value; Redacted marks the inspector's
// placeholder.
type headerLine struct {
	Name, Value string
	Redacted    bool
}

// timelineView is the timeline as a bar of segments (SVG coordinates in
// a 0..timelineWidth viewBox) and as a list of stages with their ms.
type timelineView struct {
	Received time.Time
	Segments []segment
	Stages   []stage
	Done     string
}

// timelineWidth is the SVG bar's width in its own units.
const timelineWidth = 600

// segment is one part of the timeline's bar.
type segment struct {
	Key      string // catalog key of its name
	X, W     string // SVG coordinates
	Fill     string
	Duration string
}

// stage is one line of the timeline's list.
type stage struct {
	Key, MS string
}

// startForm is what the start form shows.
type startForm struct {
	Hostname, Duration, MaxRequests, BodyKiB, Redact string
	StopWhenFull                                     bool
}

// param returns a parameter of the request: a posted form's field (an
// action's page re-rendered after a refusal shows what it acted on), else
// the query's.
func param(c *Ctx, name string) string {
	if c.R.Method == http.MethodPost {
		if v := c.R.PostForm.Get(name); v != "" {
			return v
		}
	}
	return c.R.URL.Query().Get(name)
}

// loadInspect reads the captures, and the selected hostname's requests and
// entry. It answers what it read beside an error, so a refused part still
// shows the rest.
func loadInspect(c *Ctx) (any, error) {
	d := &inspectData{Form: startForm{Duration: strconv.Itoa(int(inspect.DefaultDuration / time.Second)),
		MaxRequests: strconv.Itoa(inspect.DefaultMaxRequests), BodyKiB: strconv.Itoa(inspect.DefaultBodyBytes >> 10)}}
	if c.R.Method == http.MethodPost && c.R.URL.Path == UIPrefix+"inspect/start" {
		f := c.R.PostForm
		d.Form = startForm{Hostname: f.Get("hostname"), Duration: f.Get("duration"), MaxRequests: f.Get("max_requests"),
			BodyKiB: f.Get("body_kib"), Redact: f.Get("redact_headers"), StopWhenFull: f.Get("stop_when_full") != ""}
	}
	var caps []apitype.InspectCapture
	if err := c.Get("/inspect", &caps); err != nil {
		return d, err
	}
	now := c.u.now()
	for _, cp := range caps {
		d.Captures = append(d.Captures, newCaptureRow(cp, now))
	}
	h := param(c, "hostname")
	if h == "" || c.R.URL.Path == UIPrefix+"inspect/start" {
		return d, nil
	}
	host, err := captureHost(c, h)
	if err != nil {
		return d, err
	}
	d.Host = host
	for i := range d.Captures {
		if d.Captures[i].Hostname == host {
			d.Capture = &d.Captures[i]
		}
	}
	var reqs []apitype.InspectSummary
	if err := c.Get("/inspect/"+host+"/requests", &reqs); err != nil {
		return d, err
	}
	for _, s := range reqs {
		d.Requests = append(d.Requests, summaryRow{InspectSummary: s, Duration: ms(s.DurationMS)})
	}
	id := param(c, "id")
	if id == "" {
		return d, nil
	}
	if !validEntryID(id) {
		return d, &FormError{Message: c.T("inspect.bad.id")}
	}
	var e apitype.InspectEntry
	if err := c.Get("/inspect/"+host+"/requests/"+id, &e); err != nil {
		return d, err
	}
	d.Entry = newEntryView(e)
	return d, nil
}

func newCaptureRow(cp apitype.InspectCapture, now time.Time) captureRow {
	r := captureRow{InspectCapture: cp, BodyKiB: cp.BodyBytes >> 10, Recording: cp.State == apitype.InspectRecording}
	if r.Recording {
		r.Left = left(cp.EndsAt.Sub(now))
	}
	return r
}

// left writes a time left as minutes and seconds.
func left(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	s := int64(d.Round(time.Second) / time.Second)
	if s >= 60 {
		return fmt.Sprintf("%dm %02ds", s/60, s%60)
	}
	return fmt.Sprintf("%ds", s)
}

// ms writes milliseconds for a cell: to a tenth, to a hundredth below
// one, where a tenth would round most stages to zero.
func ms(v float64) string {
	prec := 1
	if v < 1 {
		prec = 2
	}
	return strconv.FormatFloat(v, 'f', prec, 64) + " ms"
}

// captureHost is the hostname of a capture named by a form or the query:
// an exact hostname (a capture has no wildcard), lowercased, so that the
// API's path carries nothing but a name.
func captureHost(c *Ctx, h string) (string, error) {
	h = strings.ToLower(strings.TrimSpace(h))
	if strings.HasPrefix(h, "*") || hostname.Validate(h) != nil {
		return "", &FormError{Message: c.T("inspect.bad.hostname")}
	}
	return h, nil
}

// validEntryID reports whether id is the inspector's form of an entry id:
// "req_" and a decimal number.
func validEntryID(id string) bool {
	n, ok := strings.CutPrefix(id, "req_")
	if !ok || n == "" || len(n) > maxEntryIDDigits {
		return false
	}
	for i := 0; i < len(n); i++ {
		if n[i] < '0' || n[i] > '9' {
			return false
		}
	}
	return true
}

// number parses a numeric field: "" is 0 (the inspector's default),
// anything else a decimal integer from 1 to max.
func number(c *Ctx, field, key string, max int64) (int64, error) {
	s := strings.TrimSpace(c.Form(field))
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if len(s) > maxNumberField || err != nil || n < 1 || n > max {
		return 0, &FormError{Message: c.T(key, max)}
	}
	return n, nil
}

// redactNames splits the redact headers field (commas, spaces or lines)
// into header names.
func redactNames(c *Ctx) ([]string, error) {
	s := c.Form("redact_headers")
	if len(s) > maxRedactField {
		return nil, &FormError{Message: c.T("inspect.bad.redact", inspect.MaxRedactHeaders)}
	}
	names := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\r' || r == '\n' })
	if len(names) > inspect.MaxRedactHeaders {
		return nil, &FormError{Message: c.T("inspect.bad.redact", inspect.MaxRedactHeaders)}
	}
	for _, n := range names {
		if !headerToken(n) {
			return nil, &FormError{Message: c.T("inspect.bad.redact", inspect.MaxRedactHeaders)}
		}
	}
	return names, nil
}

// headerToken reports whether s may be a header name: an HTTP token of at
// most maxHeaderName bytes.
func headerToken(s string) bool {
	if s == "" || len(s) > maxHeaderName {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// startInspect starts (or replaces) a capture: PUT /inspect/{hostname}.
func startInspect(c *Ctx) (any, error) {
	host, err := captureHost(c, c.Form("hostname"))
	if err != nil {
		return nil, err
	}
	dur, err := number(c, "duration", "inspect.bad.duration", int64(inspect.MaxDuration/time.Second))
	if err != nil {
		return nil, err
	}
	maxReq, err := number(c, "max_requests", "inspect.bad.max_requests", inspect.MaxMaxRequests)
	if err != nil {
		return nil, err
	}
	kib, err := number(c, "body_kib", "inspect.bad.body_kib", inspect.MaxBodyBytes>>10)
	if err != nil {
		return nil, err
	}
	redact, err := redactNames(c)
	if err != nil {
		return nil, err
	}
	req := apitype.InspectRequest{DurationSeconds: dur, MaxRequests: int(maxReq), BodyBytes: int(kib << 10),
		RedactHeaders: redact, StopWhenFull: c.Form("stop_when_full") != ""}
	return nil, c.Send(http.MethodPut, "/inspect/"+host, req, nil)
}

// stopInspect stops a capture and frees its entries: DELETE
// /inspect/{hostname}.
func stopInspect(c *Ctx) (any, error) {
	host, err := captureHost(c, c.Form("hostname"))
	if err != nil {
		return nil, err
	}
	return nil, c.Send(http.MethodDelete, "/inspect/"+host, nil, nil)
}

// replayInspect re-sends a captured request through the pipeline, then
// shows the capture with a link to the new entry.
func replayInspect(c *Ctx) (any, error) {
	host, err := captureHost(c, c.Form("hostname"))
	if err != nil {
		return nil, err
	}
	id := c.Form("id")
	if !validEntryID(id) {
		return nil, &FormError{Message: c.T("inspect.bad.id")}
	}
	var rep apitype.InspectReplay
	if err := c.Send(http.MethodPost, "/inspect/"+host+"/requests/"+id+"/replay", nil, &rep); err != nil {
		return nil, err
	}
	if !validEntryID(rep.ID) {
		return nil, errors.New("dashboard: the replay answered no entry id")
	}
	d, err := loadInspect(c)
	data := d.(*inspectData)
	data.Replayed = &rep
	if err != nil {
		// The replay was made: say so, with what could be read.
		c.u.log.Warn("dashboard inspector read after replay failed", logkey.Err, err)
	}
	return data, nil
}

func newEntryView(e apitype.InspectEntry) *entryView {
	return &entryView{InspectEntry: e, Timeline: newTimeline(e.Timeline), Messages: []messageView{
		newMessageView("inspect.request", "request", e.Request), newMessageView("inspect.response", "response", e.Response)}}
}

func newMessageView(key, id string, m apitype.InspectMessage) messageView {
	v := messageView{Key: key, ID: id, Truncated: m.HeadersTruncated, Kept: len(m.Body), Size: m.BodySize, BodyTruncated: m.BodyTruncated}
	if m.Text != nil {
		v.IsText, v.Text = true, *m.Text
	}
	names := make([]string, 0, len(m.Header))
	for k := range m.Header {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		for _, val := range m.Header[k] {
			v.Headers = append(v.Headers, headerLine{Name: k, Value: val, Redacted: val == inspect.Redacted})
		}
	}
	if m.Text == nil && len(m.Body) > 0 {
		b := m.Body[:min(len(m.Body), hexPreviewBytes)]
		v.Hex, v.HexShown = hex.Dump(b), len(b)
	}
	return v
}

// The timeline's colours: presentation attributes of the SVG, so the
// page needs no style attribute.
const (
	fillHold    = "#8a5a00"
	fillQueue   = "#b3261e"
	fillServer  = "#5b5f6b"
	fillBackend = "#2454c5"
	fillBody    = "#1c7c3c"
)

func newTimeline(t apitype.InspectTimeline) timelineView {
	v := timelineView{Received: t.Received, Done: ms(t.DoneMS)}
	total := t.DoneMS
	for _, p := range []*float64{t.DispatchMS, t.ResponseHeadMS} {
		if p != nil && *p > total {
			total = *p
		}
	}
	if h := t.HoldMS + t.QueueWaitMS; h > total {
		total = h
	}
	add := func(key, fill string, from, to float64) {
		if to <= from {
			return
		}
		x, w := 0.0, float64(timelineWidth)
		if total > 0 {
			x, w = from/total*timelineWidth, (to-from)/total*timelineWidth
		}
		w = max(w, 1)
		v.Segments = append(v.Segments, segment{Key: key, X: coord(x), W: coord(w), Fill: fill, Duration: ms(to - from)})
	}
	add("inspect.tl.hold", fillHold, 0, t.HoldMS)
	add("inspect.tl.queue", fillQueue, t.HoldMS, t.HoldMS+t.QueueWaitMS)
	v.Stages = append(v.Stages, stage{"inspect.tl.hold", ms(t.HoldMS)}, stage{"inspect.tl.queue", ms(t.QueueWaitMS)})
	head := t.DoneMS
	if t.DispatchMS != nil {
		add("inspect.tl.server", fillServer, t.HoldMS+t.QueueWaitMS, *t.DispatchMS)
		v.Stages = append(v.Stages, stage{"inspect.tl.dispatch", ms(*t.DispatchMS)})
		if t.ResponseHeadMS != nil {
			head = *t.ResponseHeadMS
		}
		add("inspect.tl.backend", fillBackend, *t.DispatchMS, head)
	} else {
		// Answered by the server itself: no client was asked.
		if t.ResponseHeadMS != nil {
			head = *t.ResponseHeadMS
		}
		add("inspect.tl.server", fillServer, t.HoldMS+t.QueueWaitMS, head)
	}
	if t.ResponseHeadMS != nil {
		v.Stages = append(v.Stages, stage{"inspect.tl.head", ms(*t.ResponseHeadMS)})
	}
	add("inspect.tl.body", fillBody, head, t.DoneMS)
	v.Stages = append(v.Stages, stage{"inspect.tl.done", ms(t.DoneMS)})
	return v
}

// coord writes an SVG coordinate.
func coord(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) }
