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
	doc, err := os.ReadFile("../../docs/migrating-from-co3moz.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range co3mozKeys {
		if row := "| `" + k.Key + "` | " + k.Where + " | " + k.Instead + " |"; !strings.Contains(string(doc), row) {
			t.Errorf("docs/migrating-from-co3moz.md lacks the row %q", row)
		}
	}
}

func TestServiceName(t *testing.T) {
	tests := []struct {
		name string
		file string
		want []string
	}{
		{"valid names", "services:\n  - {name: web-1, target: 3000, hostname: a.example.com}\n  - {name: api, target: 3001, hostname: b.example.com}\n", nil},
		{"duplicate", "services:\n  - {name: web, target: 3000, hostname: a.example.com}\n  - {name: web, target: 3001, hostname: b.example.com}\n",
			[]string{`config: services[1].name (aperio.yaml:3): "web" is already the name of services[0]`}},
		{"bad characters", "services:\n  - {name: Web_1, target: 3000, hostname: a.example.com}\n",
			[]string{`config: services[0].name (aperio.yaml:2): "Web_1" is not a handle: 1 to 63 of a-z, 0-9 and -, not starting or ending with -`}},
		{"too long", "services:\n  - {name: " + strings.Repeat("a", 64) + ", target: 3000, hostname: a.example.com}\n",
			[]string{`config: services[0].name (aperio.yaml:2): "` + strings.Repeat("a", 64) + `" is not a handle: 1 to 63 of a-z, 0-9 and -, not starting or ending with -`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, _, err := LoadClient(ClientOptions{Env: envOf(withBase(nil)), ReadFile: filesOf(map[string]string{ClientFile: tc.file})})
			diffLines(t, "LoadClient() errors", problems(t, err), tc.want)
			if tc.want == nil && cfg.Services[0].Name != "web-1" {
				t.Errorf("Services[0].Name = %q, want web-1", cfg.Services[0].Name)
			}
		})
	}
}
