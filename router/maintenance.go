package router

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aperio-dev/aperio/internal/hostname"
)

// Maintenance has two sources: the entries an operator turns on through
// the admin API (stored, so that every server applies them; each may end
// by itself at its Until), and the recurring windows of the server's
// configuration. A hostname is in maintenance while either says so. An
// exact entry wins over a wildcard entry; a window applies only when no
// entry does.

// Maintenance is one hostname in maintenance as the router applies it.
type Maintenance struct {
	// Hostname is an exact hostname or a "*." wildcard.
	Hostname string
	// Reason is shown to visitors; "" for none.
	Reason string
	// Until is when the entry ends by itself; zero means when it is
	// cleared.
	Until time.Time
}

// maintenanceEntry is a Maintenance in the router's snapshot.
type maintenanceEntry struct {
	reason string
	until  time.Time // zero: no end
}

func (e *maintenanceEntry) activeAt(now time.Time) bool {
	return e.until.IsZero() || now.Before(e.until)
}

// defaultRetryAfter is Retry-After of a maintenance without an end, in
// seconds.
const defaultRetryAfter = 300

// retryAfter is the Retry-After of a maintenance ending at until: the
// whole seconds left, at least 1, or defaultRetryAfter without an end.
func retryAfter(now, until time.Time) string {
	if until.IsZero() {
		return strconv.Itoa(defaultRetryAfter)
	}
	return strconv.FormatInt(max(1, int64(math.Ceil(until.Sub(now).Seconds()))), 10)
}

// SetMaintenance replaces the entries of maintenance mode (the admin
// API's); the configured windows stay. Safe for concurrent use.
func (rg *Registry) SetMaintenance(ms []Maintenance) {
	m := &hostMap[*maintenanceEntry]{}
	for _, x := range ms {
		m.set(hostname.Normalize(x.Hostname), &maintenanceEntry{reason: x.Reason, until: x.Until})
	}
	rg.maintenance.Store(m)
}

// inMaintenance returns the maintenance host is in at now, or nil: an
// active exact entry, else the most specific active wildcard entry, else
// an open window of set.
func (rt *Router) inMaintenance(set *settings, host string, now time.Time) *maintenanceEntry {
	m := rt.reg.maintenance.Load()
	if e, ok := m.exact[host]; ok && e.activeAt(now) {
		return e
	}
	if len(m.wildcard) > 0 {
		for i := 1; i < len(host); i++ {
			if host[i] != '.' {
				continue
			}
			if e, ok := m.wildcard[host[i:]]; ok && e.activeAt(now) {
				return e
			}
		}
	}
	windows := set.windows
	for i := range windows {
		w := &windows[i]
		if !hostname.Match(w.Hostname, host) {
			continue
		}
		if end, ok := w.openAt(now); ok {
			return &maintenanceEntry{reason: w.Reason, until: end}
		}
	}
	return nil
}

// Bounds of maintenance entries and windows.
const (
	// MaxMaintenanceReasonBytes bounds a maintenance reason, in bytes.
	MaxMaintenanceReasonBytes = 500
	// MaxMaintenanceTTL bounds a maintenance entry's time to live.
	MaxMaintenanceTTL = 30 * 24 * time.Hour
	// MaxMaintenanceWindows bounds maintenance_windows.
	MaxMaintenanceWindows = 256
)

// MaintenanceWindow is a recurring maintenance (an entry of
// maintenance_windows): on each of Weekdays, from Start to End in
// Location. A window whose End is not after its Start runs past midnight
// into the next day.
type MaintenanceWindow struct {
	// Hostname is an exact hostname or a "*." wildcard.
	Hostname string
	// Weekdays are the days a window starts on; empty means every day.
	Weekdays []time.Weekday
	// Start and End are times of day, as durations since midnight
	// (00:00 to 23:59).
	Start, End time.Duration
	// Location is the IANA time zone Start and End are in; nil means UTC.
	Location *time.Location
	// Reason is shown to visitors; "" for none.
	Reason string
}

// Check reports what is wrong with w, or nil.
func (w MaintenanceWindow) Check() error {
	var errs []error
	if err := hostname.Validate(w.Hostname); err != nil {
		errs = append(errs, err)
	}
	for _, d := range []time.Duration{w.Start, w.End} {
		if d < 0 || d >= 24*time.Hour || d%time.Minute != 0 {
			errs = append(errs, fmt.Errorf("time of day %s is not from 00:00 to 23:59", d))
		}
	}
	if w.Start == w.End {
		errs = append(errs, errors.New("start and end are the same time: the window is empty"))
	}
	for _, d := range w.Weekdays {
		if d < time.Sunday || d > time.Saturday {
			errs = append(errs, fmt.Errorf("weekday %d is not a day of the week", d))
		}
	}
	if len(w.Reason) > MaxMaintenanceReasonBytes {
		errs = append(errs, fmt.Errorf("reason of %d bytes is longer than %d", len(w.Reason), MaxMaintenanceReasonBytes))
	}
	return errors.Join(errs...)
}

// openAt reports whether w is open at now, and when the open window ends.
// Times of day are wall-clock times in w's zone on the day itself, so a
// window keeps its hours across a change of daylight saving time; a start
// or end that falls in a skipped hour moves as time.Date normalizes it.
func (w *MaintenanceWindow) openAt(now time.Time) (time.Time, bool) {
	loc := w.Location
	if loc == nil {
		loc = time.UTC
	}
	t := now.In(loc)
	// The window that started today, or the one that started yesterday
	// and runs past midnight.
	for back := 0; back <= 1; back++ {
		day := time.Date(t.Year(), t.Month(), t.Day()-back, 0, 0, 0, 0, loc)
		if len(w.Weekdays) > 0 && !slices.Contains(w.Weekdays, day.Weekday()) {
			continue
		}
		start := atTimeOfDay(day, w.Start)
		endDay := day
		if w.End <= w.Start {
			endDay = time.Date(day.Year(), day.Month(), day.Day()+1, 0, 0, 0, 0, loc)
		}
		end := atTimeOfDay(endDay, w.End)
		if !now.Before(start) && now.Before(end) {
			return end, true
		}
	}
	return time.Time{}, false
}

// atTimeOfDay returns the wall-clock time d after midnight on day, in
// day's zone.
func atTimeOfDay(day time.Time, d time.Duration) time.Time {
	return time.Date(day.Year(), day.Month(), day.Day(), int(d/time.Hour), int(d%time.Hour/time.Minute), 0, 0, day.Location())
}

// ParseTimeOfDay parses "HH:MM" (00:00 to 23:59) into the time since
// midnight.
func ParseTimeOfDay(s string) (time.Duration, error) {
	h, m, ok := strings.Cut(s, ":")
	if !ok || len(h) != 2 || len(m) != 2 {
		return 0, fmt.Errorf("%q is not a time of day HH:MM", s)
	}
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if err1 != nil || err2 != nil || hh < 0 || hh > 23 || mm < 0 || mm > 59 {
		return 0, fmt.Errorf("%q is not a time of day from 00:00 to 23:59", s)
	}
	return time.Duration(hh)*time.Hour + time.Duration(mm)*time.Minute, nil
}

// ParseWeekday parses a day of the week: its English name or its first
// three letters, in any case.
func ParseWeekday(s string) (time.Weekday, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	for d := time.Sunday; d <= time.Saturday; d++ {
		name := strings.ToLower(d.String())
		if s == name || s == name[:3] {
			return d, nil
		}
	}
	return 0, fmt.Errorf("%q is not a day of the week (mon, tue, wed, thu, fri, sat, sun)", s)
}

// checkWindows reports every problem of ws, joined.
func checkWindows(ws []MaintenanceWindow) error {
	var errs []error
	if len(ws) > MaxMaintenanceWindows {
		errs = append(errs, fmt.Errorf("router: %d maintenance windows, more than %d", len(ws), MaxMaintenanceWindows))
	}
	for i, w := range ws {
		if err := w.Check(); err != nil {
			errs = append(errs, fmt.Errorf("router: maintenance window %d: %w", i, err))
		}
	}
	return errors.Join(errs...)
}
