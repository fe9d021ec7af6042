package config

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Line is the yaml line a structured value's entry was written on. A
// struct decoded by a YAMLSetting that has a field of this type tagged
// `yaml:"-"` gets the line of its mapping, so that the owning package's
// checks can name it ("routes[2] (line 14): ..."). 0 when the value came
// from the environment.
type Line int

// maxStructuredDepth bounds how deep a structured value may nest, and
// maxStructuredNodes how many yaml nodes it may expand to: a deeply nested
// document or a yaml alias bomb stops here instead of exhausting memory.
const (
	maxStructuredDepth = 32
	maxStructuredNodes = 200_000
)

// YAMLSetting binds a structured value whose shape T defines with yaml
// tags: an ordered list of rules, or one block of a feature's settings.
// A file value is decoded into T with yaml.v3's rules, after ${VAR} is
// expanded in its scalars; every mapping key must name a field of T (an
// unknown one is refused with its line and the keys it may be), and Line
// fields are filled. An environment value is handed to fromText, which
// parses the setting's one-line spelling; nil fromText means the setting
// has none, and a value from the environment is refused with a message
// that says to write it in the config file. --print-config shows the
// value in yaml's flow style.
//
// The setting replaces a lower layer's value whole: lists are not merged.
// Checking the entries (bounds, references between them) is the owning
// table's job, in its check function.
func YAMLSetting[C, T any](name, usage string, field func(*C) *T, fromText func(string) (T, error)) Setting[C] {
	s := newSetting(name, usage, func(c *C, v value) error {
		if v.node == nil {
			if fromText == nil {
				return errors.New("has no one-line form: set it in the config file")
			}
			x, err := fromText(v.text)
			if err != nil {
				return err
			}
			*field(c) = x
			return nil
		}
		x, err := decodeStructured[T](v.node, v.env)
		if err != nil {
			return err
		}
		*field(c) = x
		return nil
	}, func(c *C) string { return formatStructured(*field(c)) })
	s.whole = true
	s.FileOnly = fromText == nil
	return Setting[C]{s.kind(KindBlock)}
}

// decodeStructured decodes n into a T: scalars expanded, unknown keys
// refused, Line fields set.
func decodeStructured[T any](n *yaml.Node, env Env) (T, error) {
	var x T
	budget := maxStructuredNodes
	n, err := expandNode(n, env, 0, &budget)
	if err != nil {
		return x, err
	}
	if err := n.Decode(&x); err != nil {
		return x, plainDecodeError(err)
	}
	if err := walkStructured(n, reflect.ValueOf(&x).Elem(), 0); err != nil {
		return x, err
	}
	return x, nil
}

// yamlTypeMismatch is one of yaml.v3's type errors: "line 9: cannot
// unmarshal !!seq into map[string]string" (with the value quoted for a
// scalar).
var yamlTypeMismatch = regexp.MustCompile("^(line [0-9]+: )cannot unmarshal !!([a-z]+)(?: `[^`]*`)? into (.+)$")

// plainDecodeError words yaml.v3's decoding errors for the person who
// wrote the file: what was expected and what was written, with its line,
// never a Go type ("line 9: expected a block of name: value, got a list").
func plainDecodeError(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return fmt.Errorf("%s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	msgs := make([]string, len(te.Errors))
	for i, m := range te.Errors {
		msgs[i] = m
		if g := yamlTypeMismatch.FindStringSubmatch(m); g != nil {
			msgs[i] = g[1] + "expected " + goTypeWords(g[3]) + ", got " + yamlTagWords(g[2])
		}
	}
	return errors.New(strings.Join(msgs, "; "))
}

func yamlTagWords(tag string) string {
	switch tag {
	case "seq":
		return "a list"
	case "map":
		return "a block"
	case "str":
		return "a string"
	case "int", "float":
		return "a number"
	case "bool":
		return "true or false"
	case "null":
		return "nothing"
	}
	return "a " + tag
}

func goTypeWords(t string) string {
	switch {
	case strings.HasPrefix(t, "map["):
		return "a block of name: value"
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case t == "time.Duration":
		return "a duration (30s, 5m)"
	case t == "string":
		return "a string"
	case t == "bool":
		return "true or false"
	case strings.HasPrefix(t, "int") || strings.HasPrefix(t, "uint") || strings.HasPrefix(t, "float"):
		return "a number"
	}
	return "a block"
}

// expandNode returns a copy of n with aliases resolved and ${VAR} expanded
// in every scalar value (never in mapping keys).
func expandNode(n *yaml.Node, env Env, depth int, budget *int) (*yaml.Node, error) {
	if *budget--; *budget < 0 {
		return nil, fmt.Errorf("line %d: more than %d yaml nodes", n.Line, maxStructuredNodes)
	}
	if depth > maxStructuredDepth {
		return nil, fmt.Errorf("line %d: nested deeper than %d levels", n.Line, maxStructuredDepth)
	}
	n = deref(n)
	if n.Kind == yaml.AliasNode {
		return nil, fmt.Errorf("line %d: yaml alias chain too long", n.Line)
	}
	cp := *n
	switch n.Kind {
	case yaml.ScalarNode:
		if n.ShortTag() == "!!str" || strings.Contains(n.Value, "${") {
			s, err := expand(n.Value, env)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", n.Line, err)
			}
			cp.Value = s
		}
	case yaml.MappingNode, yaml.SequenceNode, yaml.DocumentNode:
		cp.Content = make([]*yaml.Node, len(n.Content))
		for i, c := range n.Content {
			if n.Kind == yaml.MappingNode && i%2 == 0 {
				k := deref(c)
				if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!merge" {
					return nil, fmt.Errorf("line %d: keys must be plain names (yaml merge keys are not supported)", c.Line)
				}
				cp.Content[i] = k
				continue
			}
			e, err := expandNode(c, env, depth+1, budget)
			if err != nil {
				return nil, err
			}
			cp.Content[i] = e
		}
	}
	return &cp, nil
}

// walkStructured checks that every mapping key of n names a field of v's
// struct types and sets their Line fields.
func walkStructured(n *yaml.Node, v reflect.Value, depth int) error {
	if depth > maxStructuredDepth {
		return fmt.Errorf("line %d: nested deeper than %d levels", n.Line, maxStructuredDepth)
	}
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	switch v.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return nil
		}
		fields, lineField := yamlFields(v.Type())
		if lineField >= 0 {
			v.Field(lineField).SetInt(int64(n.Line))
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			idx, ok := fields[k.Value]
			if !ok {
				names := sortedFieldNames(fields)
				guess := ""
				sch := newSchema()
				for _, f := range names {
					sch.add(f, false)
				}
				if g := sch.suggest(normalize(k.Value)); g != "" {
					guess = ", did you mean " + g + "?"
				}
				return fmt.Errorf("line %d: unknown key %q%s (want one of %s)", k.Line, k.Value, guess, strings.Join(names, ", "))
			}
			if err := walkStructured(n.Content[i+1], v.Field(idx), depth+1); err != nil {
				return err
			}
		}
	case reflect.Slice, reflect.Array:
		if n.Kind != yaml.SequenceNode {
			return nil
		}
		for i, c := range n.Content {
			if i >= v.Len() {
				break
			}
			if err := walkStructured(c, v.Index(i), depth+1); err != nil {
				return err
			}
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode || v.Type().Elem().Kind() != reflect.Struct {
			return nil
		}
		// Map values are copies: walk each, then store it back.
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := reflect.New(v.Type().Key()).Elem()
			if err := n.Content[i].Decode(key.Addr().Interface()); err != nil {
				return fmt.Errorf("line %d: %w", n.Content[i].Line, err)
			}
			elem := v.MapIndex(key)
			if !elem.IsValid() {
				continue
			}
			cp := reflect.New(elem.Type()).Elem()
			cp.Set(elem)
			if err := walkStructured(n.Content[i+1], cp, depth+1); err != nil {
				return err
			}
			v.SetMapIndex(key, cp)
		}
	}
	return nil
}

var lineType = reflect.TypeFor[Line]()

// yamlFields maps the yaml names of t's fields to their indexes, and
// returns the index of its Line field (-1 when it has none). Fields tagged
// "-" and unexported fields take no key.
func yamlFields(t reflect.Type) (map[string]int, int) {
	out := make(map[string]int, t.NumField())
	line := -1
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("yaml")
		if f.Type == lineType && tag == "-" {
			line = i
			continue
		}
		if !f.IsExported() || tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = i
	}
	return out, line
}

func sortedFieldNames(m map[string]int) []string { return sortedKeys(m) }

// formatStructured shows x on one line in yaml's flow style; "" when it is
// the zero value.
func formatStructured(x any) string {
	rv := reflect.ValueOf(x)
	if !rv.IsValid() || rv.IsZero() || (rv.Kind() == reflect.Slice || rv.Kind() == reflect.Map) && rv.Len() == 0 {
		return ""
	}
	var n yaml.Node
	if err := n.Encode(x); err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	flow(&n)
	out, err := yaml.Marshal(&n)
	if err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	return strings.TrimSpace(strings.ReplaceAll(string(out), "\n", " "))
}

func flow(n *yaml.Node) {
	if n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode {
		n.Style = yaml.FlowStyle
	}
	for _, c := range n.Content {
		flow(c)
	}
}
