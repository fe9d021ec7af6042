package dashboard

import (
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/aperio-dev/aperio/internal/hostname"
)

// The bounds the admin pages put on their fields before anything reaches
// the API (which checks again, with its own messages).
const (
	// maxFieldBytes bounds a one-line field: a name, a URL, a reason.
	maxFieldBytes = 1 << 10
	// maxListBytes bounds a list field (hostnames, allowed IPs), whole.
	maxListBytes = 32 << 10
	// maxListItems bounds the entries of a list field, as the API bounds
	// a token's hostnames and allowed_ips.
	maxListItems = 100
	// maxNameBytes is the API's bound on the names of organizations,
	// tokens and keys.
	maxNameBytes = 200
	// maxIDBytes bounds an ID a form names (a token's, a key's).
	maxIDBytes = 200
	// maxReasonBytes is the bound on a maintenance reason
	// (router.MaxMaintenanceReasonBytes: visitors are shown it).
	maxReasonBytes = 500
	// maxMaintenanceTTL is the longest maintenance the API takes
	// (router.MaxMaintenanceTTL).
	maxMaintenanceTTL = 30 * 24 * time.Hour
	// maxTokenLifetime bounds a token's expiry given as a duration.
	maxTokenLifetime = 10 * 366 * 24 * time.Hour
)

// fieldText returns the trimmed value of the one-line form field name,
// or a *FormError in the request's language: required and empty, longer
// than max bytes, not UTF-8, or holding a control character. label is
// the catalog key of the field's name.
func fieldText(c *Ctx, v url.Values, name, label string, max int, required bool) (string, error) {
	s := strings.TrimSpace(v.Get(name))
	switch {
	case s == "" && required:
		return "", &FormError{Message: c.T("form.required", c.T(label))}
	case len(s) > max:
		return "", &FormError{Message: c.T("form.too_long", c.T(label), max)}
	case !utf8.ValidString(s) || strings.ContainsFunc(s, unicode.IsControl):
		return "", &FormError{Message: c.T("form.control", c.T(label))}
	}
	return s, nil
}

// fieldList splits the list field name on commas and line breaks, trims
// the entries and drops empty ones; at most maxListItems entries of at
// most itemMax bytes, in maxListBytes, with no control character.
func fieldList(c *Ctx, name, label string, itemMax int) ([]string, error) {
	raw := c.R.PostForm.Get(name)
	if len(raw) > maxListBytes {
		return nil, &FormError{Message: c.T("form.too_long", c.T(label), maxListBytes)}
	}
	if !utf8.ValidString(raw) {
		return nil, &FormError{Message: c.T("form.control", c.T(label))}
	}
	var out []string
	for _, s := range strings.FieldsFunc(raw, func(r rune) bool { return r == ',' || r == '\n' || r == '\r' }) {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if len(s) > itemMax {
			return nil, &FormError{Message: c.T("form.item_too_long", c.T(label), itemMax)}
		}
		if strings.ContainsFunc(s, unicode.IsControl) {
			return nil, &FormError{Message: c.T("form.control", c.T(label))}
		}
		if len(out) == maxListItems {
			return nil, &FormError{Message: c.T("form.too_many", c.T(label), maxListItems)}
		}
		out = append(out, s)
	}
	return out, nil
}

// checkHostnames lowercases patterns and refuses one that is not an
// exact hostname or a "*." wildcard (hostname.Validate).
func checkHostnames(c *Ctx, label string, patterns []string) ([]string, error) {
	out := make([]string, len(patterns))
	for i, p := range patterns {
		p = strings.ToLower(p)
		if hostname.Validate(p) != nil {
			return nil, &FormError{Message: c.T("form.hostname", c.T(label), p)}
		}
		out[i] = p
	}
	return out, nil
}

// checkID refuses an ID a form names that cannot be one: empty, too
// long, or holding anything but ASCII letters, digits, "_" and "-" (the
// store's IDs are "tok_…" in lowercase base32). IDs go into API paths,
// escaped anyway; refusing dots keeps "." and ".." out of them.
func checkID(c *Ctx, id string) error {
	if id == "" || len(id) > maxIDBytes || strings.IndexFunc(id, func(r rune) bool {
		return !(r < utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' || r == '-'))
	}) >= 0 {
		return &FormError{Message: c.T("form.bad_id")}
	}
	return nil
}

// parseDuration reads a duration as people write it: one or more
// <number><unit> parts, units d (24h), h, m and s ("30d", "12h",
// "1h30m"). A bare number is refused (seconds or days?), and so is zero,
// a part of more than 9 digits, or a total above max.
func parseDuration(s string, max time.Duration) (time.Duration, bool) {
	if s == "" || len(s) > 64 {
		return 0, false
	}
	var total time.Duration
	for s != "" {
		i := 0
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
		if i == 0 || i > 9 || i == len(s) {
			return 0, false
		}
		n, err := strconv.ParseInt(s[:i], 10, 64)
		if err != nil {
			return 0, false
		}
		var unit time.Duration
		switch s[i] {
		case 'd':
			unit = 24 * time.Hour
		case 'h':
			unit = time.Hour
		case 'm':
			unit = time.Minute
		case 's':
			unit = time.Second
		default:
			return 0, false
		}
		// n < 1e9 and unit <= 1 day: n*unit < 8.7e22 ns would overflow,
		// so check against max before multiplying.
		if time.Duration(n) > max/unit {
			return 0, false
		}
		total += time.Duration(n) * unit
		if total > max {
			return 0, false
		}
		s = s[i+1:]
	}
	return total, total > 0
}

// timeLayouts are the times a form field takes: RFC 3339, and what a
// datetime-local input sends (read as UTC), with or without seconds, or
// a bare date (midnight UTC).
var timeLayouts = []string{time.RFC3339, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02 15:04", "2006-01-02"}

// parseTime reads a time in one of timeLayouts.
func parseTime(s string) (time.Time, bool) {
	if len(s) > 64 {
		return time.Time{}, false
	}
	for _, l := range timeLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t.UTC(), true
		}
	}
	return time.Time{}, false
}
