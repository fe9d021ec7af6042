package stale

import (
	"net/http"
	"strings"
	"time"
)

// storableStatus reports whether a response with this status may be kept.
// RFC 9110 §15.1 makes 200, 203, 204, 206, 300, 301, 308, 404, 405, 410,
// 414 and 501 heuristically cacheable; of those we keep the ones worth
// showing a visitor while the origin is down: pages (200, 203), moved
// resources (301) and known absences (404, 410). 204 and 300 almost never
// answer a GET worth serving stale, and 206 would need range bookkeeping.
func storableStatus(code int) bool {
	switch code {
	case http.StatusOK, http.StatusNonAuthoritativeInfo, http.StatusMovedPermanently,
		http.StatusNotFound, http.StatusGone:
		return true
	}
	return false
}

// maxDelta is the largest delta-seconds value used; larger ones are
// clamped to it, as RFC 9111 §1.2.2 asks.
const maxDelta = 1 << 31

// directives are the Cache-Control directives the cache acts on. Names are
// matched case-insensitively; unknown directives are ignored. A duplicated
// delta-seconds directive keeps its smallest value, and an invalid one
// counts as 0: both err on the side of serving less.
type directives struct {
	noStore, public, private             bool
	mustRevalidate, proxyRevalidate      bool
	privateFields, noCacheFields         []string // the qualified forms' field lists, unsplit
	maxAge, sMaxAge, staleIfError        int64    // seconds, set when the has flag is
	hasMaxAge, hasSMaxAge, hasStaleIfErr bool
}

// parseCacheControl parses the Cache-Control field lines vv. It allocates
// only for qualified private or no-cache directives.
func parseCacheControl(vv []string) directives {
	var d directives
	for _, line := range vv {
		for line != "" {
			var name, value string
			var quoted bool
			name, value, quoted, line = nextDirective(line)
			switch {
			case strings.EqualFold(name, "no-store"):
				d.noStore = true
			case strings.EqualFold(name, "no-cache"):
				// Allowed (see forbidsStale); only the fields it names
				// are dropped.
				if value != "" {
					d.noCacheFields = append(d.noCacheFields, value)
				}
			case strings.EqualFold(name, "private"):
				// An empty field list names nothing to strip, so it is
				// taken as the unqualified, stricter form.
				if quoted && value != "" {
					d.privateFields = append(d.privateFields, value)
				} else {
					d.private = true
				}
			case strings.EqualFold(name, "public"):
				d.public = true
			case strings.EqualFold(name, "must-revalidate"):
				d.mustRevalidate = true
			case strings.EqualFold(name, "proxy-revalidate"):
				d.proxyRevalidate = true
			case strings.EqualFold(name, "max-age"):
				d.maxAge, d.hasMaxAge = minDelta(d.maxAge, d.hasMaxAge, value), true
			case strings.EqualFold(name, "s-maxage"):
				d.sMaxAge, d.hasSMaxAge = minDelta(d.sMaxAge, d.hasSMaxAge, value), true
			case strings.EqualFold(name, "stale-if-error"):
				d.staleIfError, d.hasStaleIfErr = minDelta(d.staleIfError, d.hasStaleIfErr, value), true
			}
		}
	}
	return d
}

// minDelta folds the delta-seconds value v into cur, keeping the smaller.
func minDelta(cur int64, seen bool, v string) int64 {
	n, ok := parseDelta(v)
	if !ok {
		n = 0
	}
	if seen && cur < n {
		return cur
	}
	return n
}

// parseDelta parses delta-seconds: one or more digits, clamped to
// maxDelta.
func parseDelta(v string) (int64, bool) {
	if v == "" {
		return 0, false
	}
	var n int64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if n < maxDelta {
			n = n*10 + int64(c-'0')
		}
	}
	return min(n, maxDelta), true
}

// nextDirective splits the first directive off a Cache-Control line:
// name, its value (unquoted, escapes left as they are; nothing the cache
// reads uses them), whether the value was quoted, and the rest of the
// line. Malformed input yields odd names, never a panic.
func nextDirective(s string) (name, value string, quoted bool, rest string) {
	s = trimOWS(s)
	i := 0
	for i < len(s) && s[i] != ',' && s[i] != '=' {
		i++
	}
	name = trimOWS(s[:i])
	if i == len(s) || s[i] == ',' {
		return name, "", false, skipComma(s[i:])
	}
	s = trimOWS(s[i+1:]) // after '='
	if s != "" && s[0] == '"' {
		j := 1
		for j < len(s) && s[j] != '"' {
			if s[j] == '\\' {
				j++
			}
			j++
		}
		j = min(j, len(s))
		value = s[1:j]
		if j < len(s) {
			j++ // the closing quote
		}
		rest = s[j:]
		if k := strings.IndexByte(rest, ','); k >= 0 {
			rest = rest[k:]
		} else {
			rest = ""
		}
		return name, value, true, skipComma(rest)
	}
	j := strings.IndexByte(s, ',')
	if j < 0 {
		j = len(s)
	}
	return name, trimOWS(s[:j]), false, skipComma(s[j:])
}

func skipComma(s string) string {
	if s != "" && s[0] == ',' {
		return s[1:]
	}
	return s
}

// trimOWS trims HTTP optional whitespace (spaces and tabs).
func trimOWS(s string) string {
	for s != "" && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for s != "" && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// forbidsStale reports whether the response's directives forbid storing
// it for serve-stale. An entry is only ever served when the origin cannot
// be reached, so the question for each directive is whether it allows a
// disconnected shared cache to answer with a stale copy:
//
//   - no-store and (unqualified) private forbid keeping it at all
//     (RFC 9111 §5.2.2.5, §5.2.2.7).
//   - must-revalidate and proxy-revalidate say exactly that a disconnected
//     cache must answer with an error instead (§5.2.2.2, §5.2.2.8). We
//     honor them by not storing: a copy that may never be served would
//     only take room.
//   - s-maxage carries proxy-revalidate's meaning for a shared cache
//     (§5.2.2.10) unless the same response grants stale-if-error, which
//     RFC 5861 §4 lets override other freshness information.
//   - no-cache is still stored and served. It asks for revalidation
//     before reuse, which cannot happen while the origin is down, and
//     RFC 9111 §4.2.4 allows a stale answer when the cache is disconnected
//     or an out-of-band contract permits it. The operator's
//     `resilience: true` on the service is that contract, and no-cache is
//     the default on most dynamic pages, the ones an outage page most
//     needs.
func (d *directives) forbidsStale() bool {
	return d.noStore || d.private || d.mustRevalidate || d.proxyRevalidate ||
		(d.hasSMaxAge && !d.hasStaleIfErr)
}

// staleLimit is how long after the response was generated it may be
// served, per its own directives: its freshness lifetime plus
// stale-if-error (RFC 5861 §4), or ok=false when it sets no such limit.
// The freshness lifetime is s-maxage, else max-age, else 0; Expires is not
// consulted, which can only make the limit shorter.
func (d *directives) staleLimit() (time.Duration, bool) {
	if !d.hasStaleIfErr {
		return 0, false
	}
	fresh := int64(0)
	switch {
	case d.hasSMaxAge:
		fresh = d.sMaxAge
	case d.hasMaxAge:
		fresh = d.maxAge
	}
	return time.Duration(fresh+d.staleIfError) * time.Second, true
}

// hopHeaders are the fields that describe one connection rather than the
// response (RFC 9110 §7.6.1), plus Trailer: stored responses carry no
// trailers.
var hopHeaders = []string{
	"Connection",
	"Keep-Alive",
	"Proxy-Connection",
	"Proxy-Authenticate",
	"Proxy-Authorization",
	"Te",
	"Trailer",
	"Transfer-Encoding",
	"Upgrade",
}

// storedHeader returns a copy of h fit for storing: without hop-by-hop
// fields (including those Connection names), the fields named by
// qualified private and no-cache directives, Age (recomputed when served)
// and StaleHeader (set when served). The copy's value slices have no spare
// capacity, so appending to them when served cannot write into the entry.
func storedHeader(h http.Header, d *directives) http.Header {
	out := h.Clone() // Clone's value slices are full (s[:n:n])
	for _, v := range h["Connection"] {
		deleteFields(out, v)
	}
	for _, k := range hopHeaders {
		delete(out, k)
	}
	for _, v := range d.privateFields {
		deleteFields(out, v)
	}
	for _, v := range d.noCacheFields {
		deleteFields(out, v)
	}
	delete(out, "Age")
	delete(out, StaleHeader)
	return out
}

// deleteFields deletes from h every field named in the comma-separated
// list.
func deleteFields(h http.Header, list string) {
	for f := range strings.SplitSeq(list, ",") {
		if f = trimOWS(f); f != "" {
			delete(h, http.CanonicalHeaderKey(f))
		}
	}
}

// variedFields returns the request header values of req that a response
// with the Vary field lines vv depends on, or ok=false for "Vary: *",
// which no other request can match.
func variedFields(vv []string, req http.Header) (fields []variedField, ok bool) {
	for _, line := range vv {
		for f := range strings.SplitSeq(line, ",") {
			f = trimOWS(f)
			switch f {
			case "":
				continue
			case "*":
				return nil, false
			}
			name := http.CanonicalHeaderKey(f)
			if containsField(fields, name) {
				continue
			}
			var values []string
			if vals := req[name]; len(vals) > 0 {
				values = append([]string(nil), vals...)
			}
			fields = append(fields, variedField{name: name, values: values})
		}
	}
	return fields, true
}

func containsField(fields []variedField, name string) bool {
	for _, f := range fields {
		if f.name == name {
			return true
		}
	}
	return false
}

// parseAge reads the Age a response arrived with (RFC 9111 §5.1); an
// absent or invalid value counts as 0.
func parseAge(vv []string) time.Duration {
	if len(vv) == 0 {
		return 0
	}
	n, ok := parseDelta(trimOWS(vv[0]))
	if !ok {
		return 0
	}
	return time.Duration(n) * time.Second
}

// Size estimates, in bytes, of what the Go runtime holds for a stored
// entry beyond its strings and body. They need not be exact; they keep
// many small entries from escaping the byte bound unnoticed.
const (
	entryOverhead = 256 // the entry struct, its map slot and list links
	fieldOverhead = 64  // per header field: map slot and value slice
	valueOverhead = 16  // per header value: string header
)

// headerSize estimates the memory h holds.
func headerSize(h http.Header) int64 {
	n := int64(0)
	for k, vv := range h {
		n += fieldOverhead + int64(len(k))
		for _, v := range vv {
			n += valueOverhead + int64(len(v))
		}
	}
	return n
}

// variedSize estimates the memory fields hold.
func variedSize(fields []variedField) int64 {
	n := int64(0)
	for _, f := range fields {
		n += fieldOverhead + int64(len(f.name))
		for _, v := range f.values {
			n += valueOverhead + int64(len(v))
		}
	}
	return n
}
