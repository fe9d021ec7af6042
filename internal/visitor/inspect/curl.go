package inspect

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"unicode/utf8"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// curlSkip are headers curl sets itself from the command line, or that
// describe one connection's framing.
var curlSkip = map[string]bool{
	"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Connection": true,
	"Keep-Alive": true, "Te": true, "Trailer": true, "Upgrade": true, "Proxy-Connection": true,
}

// curl returns e as a curl command line for a POSIX shell: every
// argument in single quotes (a quote inside written '\”), headers in
// name order, the redacted ones left out. A printable text body goes in
// --data-raw, which curl sends as written: --data and --data-binary read
// a body that starts with @ as the name of a local file, so a visitor
// posting "@~/.aws/credentials" would have the command send the file of
// whoever pastes it (#38). A body that is not printable text is fed on
// stdin by printf with octal escapes (a shell argument cannot carry a
// NUL byte), as --data-binary @-, the only @ argument ever written.
func (c *Capture) curl(e *apitype.InspectEntry) string {
	var b strings.Builder
	body := e.Request.Body
	binary := len(body) > 0 && !printable(body)
	if binary {
		b.WriteString("printf ")
		b.WriteString(quote(octal(body)))
		b.WriteString(" | ")
	}
	b.WriteString("curl")
	if e.Method != http.MethodGet || len(body) > 0 {
		b.WriteString(" -X ")
		b.WriteString(quote(e.Method))
	}
	names := make([]string, 0, len(e.Request.Header))
	for k := range e.Request.Header {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		ck := http.CanonicalHeaderKey(k)
		if c.redact[ck] || curlSkip[ck] {
			continue
		}
		for _, v := range e.Request.Header[k] {
			b.WriteString(" -H ")
			b.WriteString(quote(k + ": " + v))
		}
	}
	switch {
	case binary:
		b.WriteString(" --data-binary @-")
	case len(body) > 0:
		b.WriteString(" --data-raw ")
		b.WriteString(quote(string(body)))
	}
	b.WriteString(" ")
	b.WriteString(quote(e.Scheme + "://" + c.host + e.URL))
	return b.String()
}

// quote returns s as one single-quoted POSIX shell word: nothing inside
// single quotes is special but the quote itself, which ends the quoting,
// is escaped, and starts it again.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// printable reports whether b is text a shell argument carries as is:
// UTF-8 without NUL or other control bytes but tab, CR and LF.
func printable(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, c := range b {
		if c < 0x20 && c != '\t' && c != '\n' && c != '\r' || c == 0x7f {
			return false
		}
	}
	return true
}

// octal writes b as a printf format that prints exactly b: printable
// ASCII as itself (with % and \ escaped), every other byte as \ooo.
func octal(b []byte) string {
	var s strings.Builder
	for _, c := range b {
		switch {
		case c == '%':
			s.WriteString("%%")
		case c == '\\':
			s.WriteString(`\\`)
		case c >= 0x20 && c < 0x7f:
			s.WriteByte(c)
		default:
			fmt.Fprintf(&s, `\%03o`, c)
		}
	}
	return s.String()
}

// ReplayHeader marks a replayed request in its captured head. The router
// removes it, as every X-Aperio-* header, before the backend: a replay
// reaches the backend as the original did.
const ReplayHeader = "X-Aperio-Replay"

// ReplayRequest builds the request that replays entry id of the capture,
// on ctx marked by WithReplay: same method, Host, path, query, headers
// (without the redacted ones, whose values were never kept) and body,
// plus ReplayHeader. It refuses with ErrNoReplay an entry whose body was
// not captured whole, or that switched protocols or was a CONNECT, and
// with ErrInactive when the capture no longer records.
func (c *Capture) ReplayRequest(ctx context.Context, id string) (*http.Request, *ReplayMark, error) {
	e, ok := c.find(id)
	if !ok {
		return nil, nil, ErrNoEntry
	}
	if !c.recording(c.in.now()) {
		return nil, nil, fmt.Errorf("%w for %s", ErrInactive, c.host)
	}
	switch {
	case e.Request.BodyTruncated:
		return nil, nil, fmt.Errorf("%w: its body was not captured whole (%d bytes passed, body_bytes %d)", ErrNoReplay, e.Request.BodySize, c.bodyBytes)
	case e.Method == http.MethodConnect || e.Response.Status == http.StatusSwitchingProtocols || len(e.Request.Header["Upgrade"]) > 0:
		return nil, nil, fmt.Errorf("%w: a CONNECT or protocol upgrade is not replayed", ErrNoReplay)
	}
	u, err := url.ParseRequestURI(e.URL)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrNoReplay, err)
	}
	ctx, mark := WithReplay(ctx, e.ID)
	r, err := http.NewRequestWithContext(ctx, e.Method, e.Scheme+"://"+c.host+u.RequestURI(), bytes.NewReader(e.Request.Body))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrNoReplay, err)
	}
	if len(e.Request.Body) == 0 {
		r.Body = http.NoBody
	}
	r.RequestURI = u.RequestURI()
	r.Host = c.host
	for k, vv := range e.Request.Header {
		ck := http.CanonicalHeaderKey(k)
		if c.redact[ck] || curlSkip[ck] || ck == "Content-Length" {
			continue
		}
		r.Header[k] = slices.Clone(vv)
	}
	r.Header.Del(ReplayHeader)
	r.Header.Set(ReplayHeader, e.ID)
	return r, mark, nil
}
