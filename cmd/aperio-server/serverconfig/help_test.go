package serverconfig

import (
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/config/configtest"
)

// TestHelpTextListsEveryKey: --help lists each key once, under a section
// title, with its kind and its default.
func TestHelpTextListsEveryKey(t *testing.T) {
	text := HelpText()
	lines := map[string]string{}
	section := ""
	sectionOf := map[string]string{}
	for line := range strings.Lines(text) {
		line = strings.TrimSuffix(line, "\n")
		if strings.HasSuffix(line, ":") && !strings.HasPrefix(line, " ") {
			section = strings.TrimSuffix(line, ":")
			continue
		}
		if name, rest, ok := strings.Cut(strings.TrimPrefix(line, "  "), " "); ok && strings.HasPrefix(line, "  ") {
			if _, dup := lines[name]; dup {
				t.Errorf("%s listed twice", name)
			}
			lines[name], sectionOf[name] = strings.TrimSpace(rest), section
		}
	}
	for _, k := range Keys() {
		rest, ok := lines[k.Name]
		if !ok {
			t.Errorf("--help does not list %s", k.Name)
			continue
		}
		if sectionOf[k.Name] == "" {
			t.Errorf("%s is listed under no section", k.Name)
		}
		if !strings.HasPrefix(rest, kindName(k)+" ") || !strings.Contains(rest, k.Usage) {
			t.Errorf("%s: %q, want its kind %s and usage %q", k.Name, rest, kindName(k), k.Usage)
		}
		if d := helpDefault(k); d != "" && !strings.HasSuffix(rest, "(default "+d+")") {
			t.Errorf("%s: %q, want it to end with its default %s", k.Name, rest, d)
		}
	}
	if len(lines) != len(Keys()) {
		t.Errorf("--help lists %d keys, the table has %d", len(lines), len(Keys()))
	}
	for name, want := range map[string]string{"port": "Listener", "oidc.issuer": "Visitors and the edge", "scaling_max_held": "Scaling and outbound calls", "log_level": "Logs, metrics and tracing"} {
		if sectionOf[name] != want {
			t.Errorf("%s is under %q, want %q", name, sectionOf[name], want)
		}
	}
	for _, want := range []string{"(default 8080)", "(default 10MiB)", "\nRouting and failover:\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("--help settings lack %q", want)
		}
	}
}

// TestSchemaCoversKeys: the server's schema has every key at its dotted
// path, described, enums with their values, and the kinds' shared shapes.
func TestSchemaCoversKeys(t *testing.T) {
	b, err := Schema()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range Keys() {
		node := configtest.SchemaNode(t, b, k.Name)
		if node["description"] != k.Usage {
			t.Errorf("%s: description %v, want %q", k.Name, node["description"], k.Usage)
		}
		if k.Kind == config.KindEnum {
			if (len(k.Values) == 0) || len(node["enum"].([]any)) != len(k.Values) {
				t.Errorf("%s: enum %v, want %v", k.Name, node["enum"], k.Values)
			}
		}
	}
	if port := configtest.SchemaNode(t, b, "port"); port["default"] != float64(8080) || port["$ref"] != "#/$defs/integer" {
		t.Errorf("port = %v, want an integer defaulting to 8080", port)
	}
	if tok := configtest.SchemaNode(t, b, "server.token"); tok["writeOnly"] != true || tok["default"] != nil {
		t.Errorf("server.token = %v, want a secret with no default", tok)
	}
}

// TestHelpNamesFileOnlyKeys: --help's claim holds key by key: a key it
// names file only refuses its environment variable with a message that
// says so, and every other key's variable is read (a value of the wrong
// kind fails as that kind, not as a missing one-line form).
func TestHelpNamesFileOnlyKeys(t *testing.T) {
	help := HelpText()
	for _, k := range Keys() {
		if k.Env == "" || k.Name == "server.token" {
			continue
		}
		_, _, err := Load(Options{Env: envOf(map[string]string{"APERIO_SERVER_TOKEN": "0123456789abcdef0123456789abcdef", k.Env: "x"}), ReadFile: filesOf(nil)})
		refused := err != nil && strings.Contains(err.Error(), "no one-line form")
		if refused != k.FileOnly {
			t.Errorf("%s: FileOnly %v, but %s=x loads with %v", k.Name, k.FileOnly, k.Env, err)
		}
		listed := strings.Contains(help, " "+k.Name+",") || strings.Contains(help, " "+k.Name+". ") || strings.Contains(help, "\n"+k.Name+",")
		if k.FileOnly && !listed {
			t.Errorf("%s is file only, and --help does not say so:\n%s", k.Name, help[:strings.Index(help, "\n\n")])
		}
	}
}
