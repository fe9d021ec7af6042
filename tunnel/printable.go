package tunnel

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// printable reports whether s is valid UTF-8 without control or Unicode
// formatting characters: a name the server logs, audits and lists must not
// be able to forge lines or reorder what a terminal shows.
func printable(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool {
		return unicode.IsControl(r) || unicode.Is(unicode.Cf, r)
	})
}
