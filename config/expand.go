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

// expand replaces ${VAR} with VAR's value (empty when unset) and
// ${VAR:-default} with VAR's value or, when VAR is unset or empty, default;
// "$$" is a literal "$". A "$" followed by anything else is kept as is.
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
			expr := s[i+2 : i+2+end]
			name, def, hasDef := strings.Cut(expr, ":-")
			if !validVarName(name) {
				return "", fmt.Errorf("invalid variable reference \"${%s}\"", expr)
			}
			v, ok := env.lookup(name)
			if hasDef && (!ok || v == "") {
				v = def
			}
			b.WriteString(v)
			i += 2 + end
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
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
