package config

import (
	"fmt"
	"strings"
)

// Env looks up an environment variable the way os.LookupEnv does. The
// loaders read the environment only through it, so main passes
// os.LookupEnv and tests pass a map. A nil Env is an empty environment.
type Env func(key string) (string, bool)

// lookup reads key from e, treating nil as an empty environment.
func (e Env) lookup(key string) (string, bool) {
	if e == nil {
		return "", false
	}
	return e(key)
}

// maxExpandBytes bounds what one value may expand to: a variable's value
// is inserted as is, never expanded again (no recursion), so the result is
// at most the text plus the variables' values; this bound keeps a huge
// environment variable from making a huge setting.
const maxExpandBytes = 1 << 20

// expand replaces ${VAR} with VAR's value, ${VAR:-default} with VAR's
// value or, when VAR is unset or empty, default, and ${VAR:?message} with
// VAR's value or, when VAR is unset or empty, an error carrying message.
// An unset ${VAR} with no default is an error naming VAR: an unset secret
// must not silently become an empty one (set VAR="" or write ${VAR:-} for
// an empty value on purpose). "$$" is a literal "$"; a "$" followed by
// anything else is kept as is. Values are inserted as they are: a value
// holding "${X}" is not expanded again.
func expand(s string, env Env) (string, error) {
	if !strings.Contains(s, "$") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '$' || i+1 == len(s) {
			b.WriteByte(c)
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '{':
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				return "", fmt.Errorf("unterminated \"${\" in %q", s)
			}
			v, err := expandRef(s[i+2:i+2+end], env)
			if err != nil {
				return "", err
			}
			b.WriteString(v)
			if b.Len() > maxExpandBytes {
				return "", fmt.Errorf("value expands to more than %d bytes", maxExpandBytes)
			}
			i += 2 + end
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

// expandRef returns the value of one reference, the text between "${"
// and "}": NAME, NAME:-default or NAME:?message.
func expandRef(expr string, env Env) (string, error) {
	name, arg, op := expr, "", ""
	if i := strings.Index(expr, ":"); i >= 0 && i+1 < len(expr) && (expr[i+1] == '-' || expr[i+1] == '?') {
		name, op, arg = expr[:i], expr[i:i+2], expr[i+2:]
	}
	if !validVarName(name) {
		return "", fmt.Errorf("invalid variable reference \"${%s}\"", expr)
	}
	v, ok := env.lookup(name)
	switch op {
	case ":-":
		if !ok || v == "" {
			return arg, nil
		}
	case ":?":
		if !ok || v == "" {
			if arg == "" {
				arg = "required"
			}
			return "", fmt.Errorf("variable %s is unset or empty: %s", name, arg)
		}
	default:
		if !ok {
			return "", fmt.Errorf("variable %s is not set (write ${%s:-default} for a default, or ${%s:-} for empty)", name, name, name)
		}
	}
	return v, nil
}

func validVarName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		letter := c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}
