package dashboard

import (
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

func init() {
	register(&page{
		Name: "scaling", Title: "scaling.title", Order: 30,
		Scripts: []string{"scaling.js"},
		Load:    loadScaling,
		Actions: map[string]func(*Ctx) (any, error){
			"disarm": disarmScaling,
		},
	})
}

// maxScalingID bounds a scaling record's ID, as the admin API does (a
// record's is "scl_" and 26 characters).
const maxScalingID = 64

// validScalingID reports whether id can name a scaling record: 1 to 64
// of [A-Za-z0-9_-], the API's own rule. The page refuses anything else
// before it calls the API, so no other byte reaches a path.
func validScalingID(id string) bool {
	if id == "" || len(id) > maxScalingID {
		return false
	}
	for _, ch := range []byte(id) {
		switch {
		case ch >= 'a' && ch <= 'z', ch >= 'A' && ch <= 'Z', ch >= '0' && ch <= '9', ch == '_', ch == '-':
		default:
			return false
		}
	}
	return true
}

// scalingData is the Autoscaling page's data: the list of records, or
// one record's detail (?id=). Both are nil when the id was refused or
// the record could not be read.
type scalingData struct {
	List   []scalingRow
	Detail *scalingDetail
}

// scalingRow is a record with what its table row shows worked out.
type scalingRow struct {
	apitype.ScalingRecord
	// Provider is the host of the provider's hook URL: the path and query
	// may carry a token, so the page never shows them.
	Provider string
	// Util and Target are utilization and target as percentages; Util
	// is "" when the pool has no capacity to measure against.
	Util, Target string
	// LastReasonText is the last call's reason in the page's language.
	LastReasonText string
	// Badges are the record's state: armed or disarmed, a conflict, a
	// refused declaration (its reason as the title).
	Badges []badge
}

// badge is a small labelled state.
type badge struct{ Class, Text, Title string }

// scalingDetail is one record's detail: its row, the chart of its
// series and its latest decisions.
type scalingDetail struct {
	Row scalingRow
	// Chart is nil when no sample of the series has a utilization.
	Chart *utilChart
	// Samples counts the series' points; Samples > 0 with a nil Chart
	// means the pool had no capacity in any of them.
	Samples   int
	Decisions []decisionRow
	// NewestSeq is the newest decision's Seq, 0 for none: the script
	// reloads the page when a newer one appears.
	NewestSeq uint64
}

// decisionRow is a decision with its table cells worked out.
type decisionRow struct {
	apitype.ScalingDecision
	ActionText, OutcomeText string
	// OutcomeClass colours the outcome (ok, bad, warn, muted).
	OutcomeClass string
	// Spark is the sparkline of the samples; nil for none.
	Spark *sparkline
}

func loadScaling(c *Ctx) (any, error) {
	q := c.R.URL.Query()
	if !q.Has("id") {
		var recs []apitype.ScalingRecord
		if err := c.Get("/scaling", &recs); err != nil {
			return scalingData{}, err
		}
		rows := make([]scalingRow, len(recs))
		for i, r := range recs {
			rows[i] = newScalingRow(c, r)
		}
		return scalingData{List: rows}, nil
	}
	id := q.Get("id")
	if !validScalingID(id) {
		return scalingData{}, &FormError{Message: c.T("scaling.bad_id")}
	}
	var d apitype.ScalingRecordDetail
	if err := c.Get("/scaling/"+id, &d); err != nil {
		return scalingData{}, err
	}
	det := &scalingDetail{Row: newScalingRow(c, d.ScalingRecord), Samples: len(d.Series)}
	det.Chart = newUtilChart(d.Series, d.TargetUtilization, chartPlot)
	if det.Chart != nil {
		now := det.Row.Util
		if now == "" {
			now = "–" // the pool has no capacity now, though it had
		}
		det.Chart.Label = c.T("scaling.chart.label", len(d.Series), now, det.Row.Target)
	}
	if len(d.Decisions) > 0 {
		det.NewestSeq = d.Decisions[0].Seq
	}
	for _, dec := range d.Decisions {
		det.Decisions = append(det.Decisions, decisionRow{
			ScalingDecision: dec,
			ActionText:      textOr(c, "scaling.action."+dec.Action, dec.Action),
			OutcomeText:     textOr(c, "scaling.outcome."+dec.Outcome, dec.Outcome),
			OutcomeClass:    outcomeClass(dec.Outcome),
			Spark:           newSparkline(dec.Samples, d.TargetUtilization),
		})
	}
	return scalingData{Detail: det}, nil
}

// disarmScaling removes a record (DELETE /scaling/{id}); the API checks
// the role and the organization. The record is gone afterwards, so the
// browser goes back to the list.
func disarmScaling(c *Ctx) (any, error) {
	id := c.Form("id")
	if !validScalingID(id) {
		return nil, &FormError{Message: c.T("scaling.bad_id")}
	}
	return nil, c.Send(http.MethodDelete, "/scaling/"+id, nil, nil)
}

func newScalingRow(c *Ctx, r apitype.ScalingRecord) scalingRow {
	row := scalingRow{ScalingRecord: r, Target: percent(r.TargetUtilization)}
	if u, err := url.Parse(r.URL); err == nil {
		row.Provider = u.Host
	}
	if r.Utilization != nil {
		row.Util = percent(*r.Utilization)
	}
	if r.Disarmed {
		row.Badges = append(row.Badges, badge{Class: "bad", Text: c.T("scaling.disarmed")})
	} else {
		row.Badges = append(row.Badges, badge{Class: "ok", Text: c.T("scaling.armed")})
	}
	if r.Conflict {
		row.Badges = append(row.Badges, badge{Class: "warn", Text: c.T("scaling.conflict")})
	}
	if r.Refused != "" {
		row.Badges = append(row.Badges, badge{Class: "warn", Text: c.T("scaling.refused"), Title: r.Refused})
	}
	if r.LastReason != "" {
		row.LastReasonText = textOr(c, "scaling.action."+r.LastReason, r.LastReason)
	}
	return row
}

// textOr is the message key, or fallback when the catalog has no such
// key (an action or outcome a newer server added).
func textOr(c *Ctx, key, fallback string) string {
	if _, ok := c.u.msgs[c.Lang][key]; ok {
		return c.T(key)
	}
	return fallback
}

func outcomeClass(o string) string {
	switch o {
	case apitype.ScalingOutcomeAccepted:
		return "ok"
	case apitype.ScalingOutcomeFailed, apitype.ScalingOutcomeRefused:
		return "bad"
	case apitype.ScalingOutcomePending:
		return "warn"
	}
	return "muted"
}

// percent formats a fraction as a whole percentage.
func percent(f float64) string { return strconv.FormatFloat(math.Round(f*100), 'f', -1, 64) + "%" }

// num formats a coordinate to two decimals, without trailing zeros.
func num(v float64) string { return strconv.FormatFloat(round2(v), 'f', -1, 64) }

// round2 rounds a coordinate to two decimals: finer than a pixel, and the
// page stays short.
func round2(v float64) float64 { return math.Round(v*100) / 100 }

// plotBox is the rectangle of a chart's viewBox the values are drawn in.
type plotBox struct{ X, Y, W, H float64 }

// chartPlot is the detail chart's plot area within its 1200×180 viewBox
// (about the chart's size on a 1280 pixel wide screen, so its text is
// drawn near its own size): room on the left for the percentages, below
// for the times.
var chartPlot = plotBox{X: 44, Y: 10, W: 1140, H: 140}

// maxChartY caps the chart's vertical scale: a pool far beyond its
// capacity is drawn at the top rather than flattening the rest.
const maxChartY = 4

// utilChart is the detail's utilization chart, computed here so that the
// template only places numbers: one polyline per run of measured samples
// (a sample without capacity breaks the line), a dashed line at the
// target, and the axes' labels.
type utilChart struct {
	Box plotBox
	// Bottom and Right are the plot's lower and right edges.
	Bottom, Right float64
	// TickX is where the vertical axis' labels end; TargetLabelY is the
	// baseline of the target line's label, just above it.
	TickX, TargetLabelY float64
	// LabelY is the baseline of the horizontal axis' labels.
	LabelY float64
	// Lines are polylines' points attributes.
	Lines []string
	// LastX, LastY mark the latest measured sample.
	LastX, LastY float64
	// YMax is the utilization at the plot's top (1 or more).
	YMax    float64
	TargetY float64
	// Ticks are the vertical axis' labels.
	Ticks []chartTick
	// Start and End label the horizontal axis: the first and last
	// sample's time (UTC, to the second).
	Start, End string
	// Label describes the chart for screen readers.
	Label string
}

// chartTick is a label of a chart's vertical axis.
type chartTick struct {
	// Frac is the tick's place as a fraction of YMax (0, 0.5, 1).
	Frac, Y float64
	Text    string
}

// newUtilChart returns the chart of series (oldest first) against
// target in box, or nil when no sample has a utilization. The horizontal
// position follows the samples' times (a gap while the record was
// disarmed shows as one), clamped into the box; utilization is clamped
// to [0, YMax].
func newUtilChart(series []apitype.ScalingPoint, target float64, box plotBox) *utilChart {
	measured := 0
	yMax := math.Max(1, target)
	for _, p := range series {
		if p.Utilization != nil {
			measured++
			if u := *p.Utilization; u > yMax {
				yMax = u
			}
		}
	}
	if measured == 0 {
		return nil
	}
	yMax = math.Min(math.Ceil(yMax*4)/4, maxChartY)
	ch := &utilChart{Box: box, Bottom: box.Y + box.H, Right: box.X + box.W, YMax: yMax}
	y := func(u float64) float64 {
		u = math.Max(0, math.Min(u, yMax))
		return round2(box.Y + box.H*(1-u/yMax))
	}
	t0, tn := series[0].At, series[len(series)-1].At
	span := tn.Sub(t0)
	x := func(i int) float64 {
		if span <= 0 {
			if len(series) == 1 {
				return box.X + box.W
			}
			return round2(box.X + box.W*float64(i)/float64(len(series)-1))
		}
		f := float64(series[i].At.Sub(t0)) / float64(span)
		return round2(box.X + box.W*math.Max(0, math.Min(f, 1)))
	}
	var line strings.Builder
	for i, p := range series {
		if p.Utilization == nil {
			if line.Len() > 0 {
				ch.Lines = append(ch.Lines, line.String())
				line.Reset()
			}
			continue
		}
		if line.Len() > 0 {
			line.WriteByte(' ')
		}
		ch.LastX, ch.LastY = x(i), y(*p.Utilization)
		line.WriteString(num(ch.LastX) + "," + num(ch.LastY))
	}
	if line.Len() > 0 {
		ch.Lines = append(ch.Lines, line.String())
	}
	ch.TargetY = y(target)
	ch.TickX, ch.TargetLabelY, ch.LabelY = box.X-4, ch.TargetY-4, ch.Bottom+16
	for _, f := range []float64{0, 0.5, 1} {
		ch.Ticks = append(ch.Ticks, chartTick{Frac: f, Y: y(yMax * f), Text: percent(yMax * f)})
	}
	ch.Start, ch.End = clock(t0), clock(tn)
	return ch
}

// clock is a time of day for an axis label.
func clock(t time.Time) string { return t.UTC().Format("15:04:05") }

// sparkBox is a decision's sparkline's viewBox.
var sparkBox = plotBox{W: 60, H: 16}

// sparkline is the small chart of a decision's samples.
type sparkline struct {
	Points string
	// TargetY is the height of the record's target, for a dashed line.
	TargetY float64
	// Text lists the samples compactly (the first and last three when
	// there are more than six), for screen readers and the tooltip.
	Text string
}

// newSparkline returns the sparkline of samples (oldest first, each
// drawn at its index) against target, or nil for none. The scale is 0 to
// the larger of 1 and the highest sample, capped like the detail chart's.
func newSparkline(samples []float64, target float64) *sparkline {
	if len(samples) == 0 {
		return nil
	}
	top := math.Max(1, target)
	for _, s := range samples {
		top = math.Max(top, s)
	}
	top = math.Min(top, maxChartY)
	var pts, txt strings.Builder
	for i, s := range samples {
		x := sparkBox.W
		if len(samples) > 1 {
			x = sparkBox.W * float64(i) / float64(len(samples)-1)
		}
		yv := sparkBox.H * (1 - math.Max(0, math.Min(s, top))/top)
		if i > 0 {
			pts.WriteByte(' ')
		}
		pts.WriteString(num(x) + "," + num(yv))
		if len(samples) <= 6 || i < 3 || i >= len(samples)-3 {
			if txt.Len() > 0 {
				txt.WriteByte(' ')
			}
			txt.WriteString(percent(s))
			if len(samples) > 6 && i == 2 {
				txt.WriteString(" …")
			}
		}
	}
	ty := round2(sparkBox.H * (1 - math.Max(0, math.Min(target, top))/top))
	return &sparkline{Points: pts.String(), TargetY: ty, Text: txt.String()}
}
