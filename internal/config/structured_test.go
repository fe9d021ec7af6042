package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

type ruleForTest struct {
	Line     Line              `yaml:"-"`
	Host     string            `yaml:"hostname"`
	Status   int               `yaml:"status"`
	Headers  map[string]string `yaml:"headers"`
	Redirect *struct {
		To string `yaml:"to"`
	} `yaml:"redirect"`
}

type tableForTest struct {
	Rules []ruleForTest
	Block struct {
		Name string `yaml:"name"`
	}
}

func structuredTable(fromText func(string) ([]ruleForTest, error)) []Setting[tableForTest] {
	return []Setting[tableForTest]{
		YAMLSetting("rules", "test rules", func(c *tableForTest) *[]ruleForTest { return &c.Rules }, fromText),
	}
}

func loadStructured(t *testing.T, yml string, env map[string]string, fromText func(string) ([]ruleForTest, error)) (tableForTest, *Sources, error) {
	t.Helper()
	return LoadTable(structuredTable(fromText), TableOptions{
		File: "s.yaml",
		Env: func(k string) (string, bool) {
			v, ok := env[k]
			return v, ok
		},
		ReadFile: func(string) ([]byte, error) { return []byte(yml), nil },
	}, func() tableForTest { return tableForTest{} }, func(tableForTest, *Checker) {})
}

func TestYAMLSettingDecodes(t *testing.T) {
	yml := "rules:\n  - hostname: a.example\n    status: 302\n    redirect: {to: \"https://${TARGET}/\"}\n  - hostname: '*.b.example'\n    headers: {X-One: \"1\"}\n"
	c, src, err := loadStructured(t, yml, map[string]string{"TARGET": "elsewhere.example"}, nil)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if len(c.Rules) != 2 {
		t.Fatalf("rules = %+v, want 2", c.Rules)
	}
	r0, r1 := c.Rules[0], c.Rules[1]
	if r0.Host != "a.example" || r0.Status != 302 || r0.Redirect == nil || r0.Redirect.To != "https://elsewhere.example/" {
		t.Errorf("rules[0] = %+v, want a.example 302 redirect to the expanded URL", r0)
	}
	if r0.Line != 2 || r1.Line != 5 {
		t.Errorf("lines = %d, %d, want 2, 5", r0.Line, r1.Line)
	}
	if r1.Headers["X-One"] != "1" {
		t.Errorf("rules[1].headers = %v, want X-One: 1", r1.Headers)
	}
	if got := src.Of("rules").String(); !strings.Contains(got, "s.yaml:1") {
		t.Errorf("source = %q, want s.yaml:1", got)
	}
	var b strings.Builder
	if err := PrintTable(&b, &c, structuredTable(nil), src); err != nil {
		t.Fatal(err)
	}
	if want := "rules = [{hostname: a.example, status: 302"; !strings.HasPrefix(b.String(), want) {
		t.Errorf("print = %q, want prefix %q", b.String(), want)
	}
}

func TestYAMLSettingRefuses(t *testing.T) {
	bomb := "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
	prev := "a"
	for i := range 8 {
		name := fmt.Sprintf("l%d", i)
		bomb += fmt.Sprintf("%s: &%s [*%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s]\n", name, name, prev, prev, prev, prev, prev, prev, prev, prev, prev, prev)
		prev = name
	}
	deep := "rules:\n  - headers: " + strings.Repeat("[", 40) + strings.Repeat("]", 40) + "\n"
	for _, tc := range []struct {
		name, yml string
		env       map[string]string
		want      string
	}{
		{"unknown-key", "rules:\n  - hostname: a.example\n    stauts: 302\n", nil, `line 3: unknown key "stauts"`},
		{"unknown-nested-key", "rules:\n  - redirect: {too: x}\n", nil, `unknown key "too"`},
		{"wrong-type", "rules:\n  - status: many\n", nil, "line 2: expected a number, got a string"},
		{"not-a-list", "rules: 5\n", nil, "line 1: expected a list, got a number"},
		{"merge-key", "base: &b {status: 1}\nrules:\n  - <<: *b\n", nil, "merge keys"},
		{"alias-bomb", "x:\n" + indent(bomb) + "rules:\n  - headers: {a: b}\n    hostname: *l7\n", nil, "yaml nodes"},
		{"too-deep", deep, nil, "nested deeper"},
		{"bad-var", "rules:\n  - hostname: ${NO PE}\n", nil, "line 2"},
		{"env-without-text-form", "", map[string]string{"APERIO_RULES": "x"}, "set it in the config file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := loadStructured(t, tc.yml, tc.env, nil)
			if err == nil {
				t.Fatalf("load = nil error, want one containing %q", tc.want)
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.Key != "rules" && tc.name != "alias-bomb" && tc.name != "merge-key" {
				t.Errorf("error %v is not a config error of key rules", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func indent(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		b.WriteString("  " + l + "\n")
	}
	return b.String()
}

func TestYAMLSettingFromText(t *testing.T) {
	parse := func(s string) ([]ruleForTest, error) {
		var out []ruleForTest
		for _, h := range strings.Split(s, ";") {
			if h == "" {
				return nil, errors.New("empty entry")
			}
			out = append(out, ruleForTest{Host: h})
		}
		return out, nil
	}
	c, _, err := loadStructured(t, "", map[string]string{"APERIO_RULES": "a.example;b.example"}, parse)
	if err != nil || len(c.Rules) != 2 || c.Rules[1].Host != "b.example" || c.Rules[1].Line != 0 {
		t.Fatalf("load = %+v, %v, want two rules from the environment", c.Rules, err)
	}
	if _, _, err := loadStructured(t, "", map[string]string{"APERIO_RULES": "a;;b"}, parse); err == nil || !strings.Contains(err.Error(), "APERIO_RULES") {
		t.Fatalf("bad env value: err = %v, want an error naming APERIO_RULES", err)
	}
	// The file wins over the environment, whole.
	c, _, err = loadStructured(t, "rules:\n  - hostname: f.example\n", map[string]string{"APERIO_RULES": "a;b"}, parse)
	if err != nil || len(c.Rules) != 1 || c.Rules[0].Host != "f.example" {
		t.Fatalf("file and env = %+v, %v, want the file's one rule", c.Rules, err)
	}
}
