package config

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"
)

// Key describes one setting and its spellings, for cmd to register flags and
// print help. The yaml spelling is Name, or any spelling that normalizes to
// it.
type Key struct {
	// Name is the canonical key as the contract spells it: "port",
	// "server.token", "scaling_allow_http", "scaling.cold_start".
	Name string
	// Env is the environment variable: APERIO_ and the uppercase normalized
	// key (APERIO_SERVER_TOKEN). Empty for a setting with no environment
	// spelling.
	Env string
	// EnvAliases are other variables read when Env is unset, in order (PORT,
	// HOST, LOG_LEVEL, APERIO_API_KEY). Env wins over them.
	EnvAliases []string
	// Flag is the client's command-line flag without its leading dashes
	// ("server-url" for --server-url). Empty for server keys: the server
	// takes no per-key flags.
	Flag string
	// Usage is a one-line help text.
	Usage string
	// Secret marks values --print-config prints as <set> or <unset>.
	Secret bool
	// FileOnly marks a structured setting with no one-line form: its
	// environment variable is refused, it is written in the config file
	// only (routes, rate_limits, headers...).
	FileOnly bool
	// Bool marks a boolean setting: a flag for it may stand alone and means
	// true.
	Bool bool
	// Kind is the type of the value, as the key's parser reads it.
	Kind Kind
	// Default is the value the key has when no surface sets it, as
	// --print-config prints it ("30s", "10MiB", "a,b"); empty for a secret
	// and for a key with no default of its own.
	Default string
	// Values are the values an enum key accepts, in order; nil for other
	// kinds.
	Values []string
}

// Kind is the type of a key's value: what its flag is, and what the
// configuration schema says of it.
type Kind string

// The kinds of value a key takes.
const (
	KindString   Kind = "string"
	KindEnum     Kind = "enum"     // a string from Key.Values, lowercased
	KindInt      Kind = "int"      // an integer
	KindFloat    Kind = "float"    // a decimal number
	KindBool     Kind = "bool"     // 1/0, true/false
	KindDuration Kind = "duration" // 90s, 5m, 1h30m, 7d (ParseDuration)
	KindSize     Kind = "size"     // bytes: 1048576, 512KiB, 10MiB (ParseSize)
	KindList     Kind = "list"     // strings: a yaml sequence or a comma list
	KindIntList  Kind = "intlist"  // integers: a yaml sequence or a comma list
	KindMap      Kind = "map"      // a yaml mapping or k=v,k2=v2
	KindBlock    Kind = "block"    // a yaml structure, written in the file only
)

// normalize returns the form in which keys compare: lowercase, with "." and
// "-" turned into "_".
func normalize(k string) string {
	return strings.Map(func(r rune) rune {
		if r == '.' || r == '-' {
			return '_'
		}
		return unicode.ToLower(r)
	}, k)
}

// setting is a Key bound to one field of a C: how a raw value sets it and
// how --print-config shows it.
type setting[C any] struct {
	Key
	norm   string
	parse  func(c *C, v value) error
	format func(c *C) string
	// whole is set when a yaml mapping is the value itself (fallbacks)
	// rather than a block of nested keys.
	whole bool
}

func newSetting[C any](name, usage string, parse func(*C, value) error, format func(*C) string) setting[C] {
	norm := normalize(name)
	return setting[C]{
		Key: Key{
			Name:  name,
			Env:   "APERIO_" + strings.ToUpper(norm),
			Flag:  strings.ReplaceAll(norm, "_", "-"),
			Usage: usage,
			Kind:  KindString,
		},
		norm:   norm,
		parse:  parse,
		format: format,
	}
}

func (s setting[C]) secret() setting[C] {
	s.Secret = true
	return s
}

func (s setting[C]) alias(env ...string) setting[C] {
	s.EnvAliases = env
	return s
}

func (s setting[C]) kind(k Kind) setting[C] {
	s.Kind = k
	return s
}

// oneOf records the values an enum setting accepts, for help and the
// schema; the table's check still compares the value with them.
func (s setting[C]) oneOf(set []string) setting[C] {
	s.Values = slices.Clone(set)
	return s
}

// scalarSetting builds a setting whose value is one scalar converted by conv.
func scalarSetting[C, T any](name, usage string, field func(*C) *T, conv func(string) (T, error), format func(T) string) setting[C] {
	return newSetting(name, usage, func(c *C, v value) error {
		s, err := v.scalar()
		if err != nil {
			return err
		}
		x, err := conv(s)
		if err != nil {
			return err
		}
		*field(c) = x
		return nil
	}, func(c *C) string { return format(*field(c)) })
}

func stringSetting[C any](name, usage string, field func(*C) *string) setting[C] {
	return scalarSetting(name, usage, field, func(s string) (string, error) {
		return strings.TrimSpace(s), nil
	}, identity)
}

// enumSetting is a string setting whose value is lowercased; Validate checks
// it against its set.
func enumSetting[C any](name, usage string, field func(*C) *string) setting[C] {
	return scalarSetting(name, usage, field, func(s string) (string, error) {
		return strings.ToLower(strings.TrimSpace(s)), nil
	}, identity).kind(KindEnum)
}

func intSetting[C any](name, usage string, field func(*C) *int) setting[C] {
	return scalarSetting(name, usage, field, parseInt, strconv.Itoa).kind(KindInt)
}

func floatSetting[C any](name, usage string, field func(*C) *float64) setting[C] {
	return scalarSetting(name, usage, field, parseFloat, func(f float64) string {
		return strconv.FormatFloat(f, 'g', -1, 64)
	}).kind(KindFloat)
}

func boolSetting[C any](name, usage string, field func(*C) *bool) setting[C] {
	s := scalarSetting(name, usage, field, parseBool, strconv.FormatBool)
	s.Bool = true
	return s.kind(KindBool)
}

func durationSetting[C any](name, usage string, field func(*C) *time.Duration) setting[C] {
	return scalarSetting(name, usage, field, ParseDuration, formatDuration).kind(KindDuration)
}

func sizeSetting[C any](name, usage string, field func(*C) *int64) setting[C] {
	return scalarSetting(name, usage, field, ParseSize, formatSize).kind(KindSize)
}

// listSetting builds a list setting: a yaml sequence, or a comma-separated
// scalar. each, when not nil, rewrites every item.
func listSetting[C any](name, usage string, field func(*C) *[]string, each func(string) string) setting[C] {
	return newSetting(name, usage, func(c *C, v value) error {
		items, err := v.list()
		if err != nil {
			return err
		}
		if each != nil {
			for i, it := range items {
				items[i] = each(it)
			}
		}
		*field(c) = items
		return nil
	}, func(c *C) string { return strings.Join(*field(c), ",") }).kind(KindList)
}

// intListSetting builds a list setting of integers.
func intListSetting[C any](name, usage string, field func(*C) *[]int) setting[C] {
	return newSetting(name, usage, func(c *C, v value) error {
		items, err := v.list()
		if err != nil {
			return err
		}
		ns := make([]int, len(items))
		for i, it := range items {
			if ns[i], err = parseInt(strings.TrimSpace(it)); err != nil {
				return err
			}
		}
		*field(c) = ns
		return nil
	}, func(c *C) string {
		ns := *field(c)
		parts := make([]string, len(ns))
		for i, n := range ns {
			parts[i] = strconv.Itoa(n)
		}
		return strings.Join(parts, ",")
	}).kind(KindIntList)
}

// mapSetting builds a map setting: a yaml mapping, or "k=v,k2=v2". Keys are
// lowercased (they are hostnames, not config keys).
func mapSetting[C any](name, usage string, field func(*C) *map[string]string) setting[C] {
	s := newSetting(name, usage, func(c *C, v value) error {
		pairs, err := v.pairs()
		if err != nil {
			return err
		}
		m := make(map[string]string, len(pairs))
		for _, p := range pairs {
			k := strings.ToLower(p[0])
			if _, dup := m[k]; dup {
				return fmt.Errorf("%q is listed twice", k)
			}
			m[k] = p[1]
		}
		*field(c) = m
		return nil
	}, func(c *C) string {
		m := *field(c)
		var b strings.Builder
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if b.Len() > 0 {
				b.WriteByte(',')
			}
			b.WriteString(k + "=" + m[k])
		}
		return b.String()
	})
	s.whole = true
	return s.kind(KindMap)
}

func identity(s string) string { return s }

// value is one raw value of a setting from one surface.
type value struct {
	src  Source
	node *yaml.Node // file values; nil for environment and flag values
	text string     // environment and flag values
	env  Env        // expands ${VAR} in file scalars
	// file is the file that holds node; nil for environment and flag
	// values.
	file *yamlFile
	// more are the services (or expose) lists of further included files, in order,
	// concatenated after this one (see readIncludes).
	more []value
}

// scalar returns v as one string, ${VAR}-expanded when it comes from a file.
func (v value) scalar() (string, error) {
	if v.node == nil {
		return v.text, nil
	}
	return scalarNode(deref(v.node), v.env)
}

func scalarNode(n *yaml.Node, env Env) (string, error) {
	switch n.Kind {
	case yaml.ScalarNode:
		if n.ShortTag() == "!!null" {
			return "", nil
		}
		return expand(n.Value, env)
	case yaml.SequenceNode:
		return "", errors.New("expected a single value, got a list")
	case yaml.MappingNode:
		return "", errors.New("expected a single value, got a mapping")
	}
	return "", errors.New("expected a single value")
}

// list returns v as a list: a yaml sequence of scalars, or a comma-separated
// scalar. Empty items are dropped.
func (v value) list() ([]string, error) {
	if v.node == nil || deref(v.node).Kind != yaml.SequenceNode {
		s, err := v.scalar()
		if err != nil {
			return nil, err
		}
		return splitList(s), nil
	}
	var out []string
	for _, it := range deref(v.node).Content {
		s, err := scalarNode(deref(it), v.env)
		if err != nil {
			return nil, fmt.Errorf("list item: %w", err)
		}
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

// pairs returns v as key/value pairs: a yaml mapping of scalars, or
// "k=v,k2=v2". Keys are not expanded.
func (v value) pairs() ([][2]string, error) {
	if v.node == nil || deref(v.node).Kind != yaml.MappingNode {
		s, err := v.scalar()
		if err != nil {
			return nil, err
		}
		var out [][2]string
		for _, item := range splitList(s) {
			k, val, ok := strings.Cut(item, "=")
			if !ok || strings.TrimSpace(k) == "" {
				return nil, fmt.Errorf("invalid entry %q (want host=url)", item)
			}
			out = append(out, [2]string{strings.TrimSpace(k), strings.TrimSpace(val)})
		}
		return out, nil
	}
	n := deref(v.node)
	out := make([][2]string, 0, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := deref(n.Content[i])
		if k.Kind != yaml.ScalarNode {
			return nil, errors.New("expected hostname keys")
		}
		val, err := scalarNode(deref(n.Content[i+1]), v.env)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k.Value, err)
		}
		out = append(out, [2]string{strings.TrimSpace(k.Value), strings.TrimSpace(val)})
	}
	return out, nil
}

// deref follows yaml aliases to the node they name. Chains are bounded;
// cycles through mappings are bounded by the walker's depth limit.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 8; i++ {
		n = n.Alias
	}
	return n
}

// schema is the set of keys a yaml mapping may hold.
type schema struct {
	leaves map[string]leaf // normalized key → leaf
	groups map[string]bool // normalized prefixes of leaves at "_" boundaries
	names  []string        // canonical names, in table order, for suggestions
	// hint, when not nil, explains an unknown key better than a suggestion
	// ("" when it has nothing to say).
	hint func(norm string) string
}

type leaf struct {
	name  string
	whole bool
}

func newSchema() *schema {
	return &schema{leaves: make(map[string]leaf), groups: make(map[string]bool)}
}

func (sch *schema) add(name string, whole bool) {
	norm := normalize(name)
	sch.leaves[norm] = leaf{name: name, whole: whole}
	sch.names = append(sch.names, name)
	for i := range len(norm) {
		if norm[i] == '_' {
			sch.groups[norm[:i]] = true
		}
	}
}

func addSettings[C any](sch *schema, tab []setting[C]) {
	for _, s := range tab {
		sch.add(s.Name, s.whole)
	}
}

// unknown explains why norm is not a key of sch.
func (sch *schema) unknown(norm string) string {
	if sch.hint != nil {
		if h := sch.hint(norm); h != "" {
			return h
		}
	}
	if s := sch.suggest(norm); s != "" {
		return "unknown key, did you mean " + s + "?"
	}
	return "unknown key"
}

// suggest returns the known key closest to norm by edit distance, or one
// that ends in "_"+norm (token → server.token), or "".
func (sch *schema) suggest(norm string) string {
	if norm == "" || len(norm) > 64 {
		return ""
	}
	best, bestDist := "", max(1, min(3, len(norm)/4))+1
	for _, name := range sch.names {
		if d := editDistance(norm, normalize(name)); d < bestDist {
			best, bestDist = name, d
		}
	}
	if best != "" {
		return best
	}
	for _, name := range sch.names {
		if strings.HasSuffix(normalize(name), "_"+norm) {
			return name
		}
	}
	return ""
}

// editDistance is the optimal string alignment distance between a and b:
// insertions, deletions, substitutions and adjacent transpositions cost 1.
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// keysOf returns the keys of tab, in order. With def, each key's Default is
// its field of *def as --print-config prints it (none for secrets).
func keysOf[C any](tab []setting[C], def *C) []Key {
	keys := make([]Key, len(tab))
	for i, s := range tab {
		keys[i] = s.Key
		keys[i].EnvAliases = slices.Clone(s.EnvAliases)
		keys[i].Values = slices.Clone(s.Values)
		if def != nil && !s.Secret {
			keys[i].Default = s.format(def)
		}
	}
	return keys
}
