package store

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// The scanners of the columns whose Go type is not the driver's: times,
// days and lists. Each accepts what either driver yields for its column,
// and the two never overlap: pgx gives time.Time for timestamptz and date
// and a string in PostgreSQL's array syntax ({a,"b c"}) for text[];
// SQLite gives the TEXT that sqliteDialect stored (sqliteTime,
// time.DateOnly, a JSON array). Each is one pointer, so passing it to Scan
// allocates nothing.

// scanner is *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

// timeCol scans a NOT NULL time into *t, in UTC.
type timeCol struct{ t *time.Time }

func (c timeCol) Scan(src any) error {
	t, err := parseTime(src, sqliteTime)
	*c.t = t
	return err
}

// nullTimeCol scans a nullable time into *t: nil for NULL.
type nullTimeCol struct{ t **time.Time }

func (c nullTimeCol) Scan(src any) error {
	if src == nil {
		*c.t = nil
		return nil
	}
	t, err := parseTime(src, sqliteTime)
	if err != nil {
		return err
	}
	*c.t = &t
	return nil
}

// dayCol scans a day into *t: midnight UTC.
type dayCol struct{ t *time.Time }

func (c dayCol) Scan(src any) error {
	t, err := parseTime(src, time.DateOnly)
	*c.t = t
	return err
}

func parseTime(src any, layout string) (time.Time, error) {
	switch v := src.(type) {
	case time.Time:
		return v.UTC(), nil
	case string:
		t, err := time.Parse(layout, v)
		if err != nil {
			return time.Time{}, fmt.Errorf("stored time %q: %w", v, err)
		}
		return t, nil
	}
	return time.Time{}, fmt.Errorf("stored time: unexpected %T", src)
}

// listCol scans a list into *l, never nil.
type listCol struct{ l *[]string }

func (c listCol) Scan(src any) error {
	s, ok := src.(string)
	if !ok {
		return fmt.Errorf("stored list: unexpected %T", src)
	}
	var err error
	if strings.HasPrefix(s, "{") {
		*c.l, err = parseTextArray(s)
	} else {
		*c.l = []string{}
		err = json.Unmarshal([]byte(s), c.l)
	}
	if err != nil {
		return fmt.Errorf("stored list %q: %w", s, err)
	}
	return nil
}

var errTextArray = errors.New("not a one-dimensional array of text")

// parseTextArray parses PostgreSQL's text output of a one-dimensional
// text[] without NULL elements, the only lists the store writes: elements
// between braces, separated by commas, double-quoted (with \" and \\
// inside) when empty or holding a comma, brace, quote, backslash or white
// space, or spelling NULL.
func parseTextArray(s string) ([]string, error) {
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
		return nil, errTextArray
	}
	body := s[1 : len(s)-1]
	out := []string{}
	if body == "" {
		return out, nil
	}
	for i := 0; ; {
		var elem string
		if i < len(body) && body[i] == '"' {
			var b strings.Builder
			for i++; ; i++ {
				if i >= len(body) {
					return nil, errTextArray // unterminated quote
				}
				c := body[i]
				if c == '"' {
					i++
					break
				}
				if c == '\\' {
					if i++; i >= len(body) {
						return nil, errTextArray
					}
					c = body[i]
				}
				b.WriteByte(c)
			}
			elem = b.String()
		} else {
			end := strings.IndexByte(body[i:], ',')
			if end < 0 {
				end = len(body) - i
			}
			elem = body[i : i+end]
			if elem == "" || strings.EqualFold(elem, "NULL") || strings.ContainsAny(elem, `{}"\`) {
				return nil, errTextArray // a NULL, a nested array or a stray quote
			}
			i += end
		}
		out = append(out, elem)
		if i == len(body) {
			return out, nil
		}
		if body[i] != ',' {
			return nil, errTextArray
		}
		i++
	}
}

// collect scans every row with scan and closes rows; err is the query's.
// The result is never nil.
func collect[T any](d *dialect, rows *sql.Rows, err error, scan func(scanner) (T, error)) ([]T, error) {
	if err != nil {
		return nil, d.mapErr(err)
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, d.mapErr(err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, d.mapErr(err)
	}
	return out, nil
}
