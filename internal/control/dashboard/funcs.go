package dashboard

import (
	"errors"
	"fmt"
	"html/template"
	"strings"
	"time"
)

// funcs are the templates' helpers beside the view's methods (T, Can).
var funcs = template.FuncMap{
	// when formats a time for a table cell: UTC, to the second; "" for
	// the zero time or nil.
	"when": func(v any) string {
		var t time.Time
		switch x := v.(type) {
		case time.Time:
			t = x
		case *time.Time:
			if x != nil {
				t = *x
			}
		}
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	// iso is a time in RFC 3339, for <time datetime> and scripts.
	"iso": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339)
	},
	// deref is the time a pointer points to; the zero time for nil.
	"deref": func(t *time.Time) time.Time {
		if t == nil {
			return time.Time{}
		}
		return *t
	},
	// join joins a list for a table cell.
	"join": func(xs []string, sep string) string { return strings.Join(xs, sep) },
	// pct formats a fraction as a percentage.
	"pct": func(f float64) string { return fmt.Sprintf("%.1f%%", f*100) },
	// path is the path of the page called name.
	"path": pagePath,
	// args passes several values to a partial (parts.html):
	// {{template "rowaction" args "view" $ "action" "/aperio/ui/..."}}.
	"args": args,
}

// maxArgs bounds an args call: a partial takes a handful of values.
const maxArgs = 32

// args makes a map of alternating string keys and values. An odd count,
// a key that is not a string, a repeated key or more than maxArgs pairs
// is an error, which stops the template rather than rendering half a
// form.
func args(kv ...any) (map[string]any, error) {
	if len(kv)%2 != 0 {
		return nil, errors.New("dashboard: args: odd number of arguments")
	}
	if len(kv)/2 > maxArgs {
		return nil, fmt.Errorf("dashboard: args: more than %d pairs", maxArgs)
	}
	m := make(map[string]any, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		k, ok := kv[i].(string)
		if !ok {
			return nil, fmt.Errorf("dashboard: args: key %d is a %T, not a string", i/2, kv[i])
		}
		if _, dup := m[k]; dup {
			return nil, fmt.Errorf("dashboard: args: key %q repeated", k)
		}
		m[k] = kv[i+1]
	}
	return m, nil
}
