package config

import (
	"os"
	"strings"
	"testing"
)

// Each co3moz/aperio key Aperio does not take fails with a message naming
// the key, its line and what to use instead.
func TestCo3mozKeysRefused(t *testing.T) {
	for _, k := range co3mozKeys {
		if k.Where == "server" {
			continue // config/serverconfig tests these
		}
		t.Run(k.Key, func(t *testing.T) {
			file := k.Key + ": 1\nservices: [{target: 3000, hostname: a.example.com}]\n"
			shown := k.Key
			if k.Where == "service" {
				file = "services:\n  - target: 3000\n    " + k.Key + ": 1\n"
				shown = "services[0]." + k.Key
			}
			_, _, err := LoadClient(ClientOptions{Env: envOf(withBase(nil)), ReadFile: filesOf(map[string]string{ClientFile: file})})
			line := "1"
			if k.Where == "service" {
				line = "3"
			}
			want := "config: " + shown + " (aperio.yaml:" + line + "): a co3moz/aperio key that Aperio does not support: " + k.Instead
			diffLines(t, "LoadClient() errors", firstLines(problems(t, err), 1), []string{want + " (see docs/migrating-from-co3moz.md)"})
		})
	}
}

func firstLines(lines []string, n int) []string { return lines[:min(n, len(lines))] }

// The migration guide lists every row of the table.
func TestCo3mozKeysDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/migrating-from-co3moz.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range co3mozKeys {
		if row := "| `" + k.Key + "` | " + k.Where + " | " + k.Instead + " |"; !strings.Contains(string(doc), row) {
			t.Errorf("docs/migrating-from-co3moz.md lacks the row %q", row)
		}
	}
}
