package serverconfig

import (
	"fmt"
	"unicode/utf8"

	"github.com/aperio-dev/aperio/internal/visitor/policy"
)

// Master token length rules. The master token (server.token) authorizes
// every tunnel and the whole admin API of every organization, and anyone
// who can reach the port may guess at it.
const (
	// MinMasterTokenLen is the fewest characters server.token may have:
	// a shorter one stops startup (exit 2) and fails --check-config.
	MinMasterTokenLen = 16
	// WeakMasterTokenLen is the fewest characters of a master token that
	// draws no warning: under it the server starts but Warnings
	// reports the token as weak.
	WeakMasterTokenLen = 32
)

// shortMasterToken describes token when it has fewer than min characters,
// and returns "" otherwise.
func shortMasterToken(token string, min int) string {
	n := utf8.RuneCountInString(token)
	if n >= min {
		return ""
	}
	return fmt.Sprintf("%d characters, at least %d", n, min)
}

// Warnings returns what is valid in s but weak, one line each, for
// --check-config to print and the server to log at startup: today a master
// token shorter than WeakMasterTokenLen characters, and route rules that
// partly overlap (the earlier wins). An empty result means
// nothing to warn about.
func Warnings(s Config) []string {
	var w []string
	if s.Token != "" {
		if msg := shortMasterToken(s.Token, WeakMasterTokenLen); msg != "" && utf8.RuneCountInString(s.Token) >= MinMasterTokenLen {
			w = append(w, fmt.Sprintf("server.token: %s recommended: generate one with `openssl rand -hex 32`", msg))
		}
	}
	if p, err := policy.New(s.Router.Policy); err == nil {
		overlaps, _ := p.Check()
		for _, o := range overlaps {
			w = append(w, "routes: "+o)
		}
	}
	return w
}
