package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// layer holds the values one surface gives, by normalized key.
type layer map[string]value

// loader collects the values, sources and problems of one load.
type loader struct {
	src    *Sources
	errs   []error
	failed map[string]bool // normalized keys that had a load problem
	// broken is set when a whole file could not be read or parsed: its
	// values are missing, so "required" problems would only mislead.
	broken bool
}

func newLoader() *loader {
	return &loader{src: newSources(), failed: make(map[string]bool)}
}

func (l *loader) fail(key string, src Source, msg string) {
	l.errs = append(l.errs, newError(key, src, msg))
	l.failed[normalize(key)] = true
}

// result joins the load problems with the validation problems, dropping
// validation problems of keys whose value already failed to load: a value
// that did not parse is reported once, not again as missing.
func (l *loader) result(problems []*Error) error {
	errs := l.errs
	if l.broken {
		problems = nil
	}
	for _, p := range problems {
		if !l.failed[normalize(p.Key)] {
			errs = append(errs, p)
		}
	}
	return errors.Join(errs...)
}

// apply sets every setting of tab on cfg from the first layer that has a
// value for it, and records the source under prefix+name; settings no layer
// has keep cfg's value and source. Values of lower layers are still parsed,
// into a scratch C, so that bad input on any surface is reported even when a
// higher one overrides it.
func apply[C any](l *loader, cfg *C, tab []setting[C], layers []layer, scratch func() *C, prefix string) {
	for _, s := range tab {
		won, winner := false, value{}
		for _, lay := range layers {
			v, ok := lay[s.norm]
			if !ok {
				continue
			}
			target := cfg
			if won {
				target = scratch()
			}
			if err := s.parse(target, v); err != nil {
				l.fail(prefix+s.Name, v.src, err.Error())
			}
			if !won {
				l.src.set(prefix+s.Name, v.src)
				won, winner = true, v
			} else if overridesEnv(winner, v) {
				l.src.warn(fmt.Sprintf("%s sets %s, overriding %s", winner.src.location(), prefix+s.Name, v.src.Name))
			}
		}
	}
}

// overridesEnv reports whether the file value won over the environment
// value lower: the documented order, but a trap when the file is an
// example copied into the working directory (issue 19), so the loaders
// warn. A file that writes the same text (server.token: ${APERIO_SERVER_TOKEN})
// overrides nothing.
func overridesEnv(won, lower value) bool {
	if won.src.Kind != SourceFile || lower.src.Kind != SourceEnv {
		return false
	}
	if won.node != nil && deref(won.node).Kind == yaml.ScalarNode {
		if s, err := won.scalar(); err == nil && strings.TrimSpace(s) == strings.TrimSpace(lower.text) {
			return false
		}
	}
	return true
}

// envLayer reads the environment spelling of every setting of tab: Env, or
// failing that the first alias that is set. Empty variables count as unset.
// rename, when not nil, maps a setting's normalized key to the key the value
// is stored under.
func envLayer[C any](into layer, tab []setting[C], env Env, rename func(string) string) {
	for _, s := range tab {
		for _, name := range append([]string{s.Env}, s.EnvAliases...) {
			if name == "" {
				continue
			}
			if text, ok := env.lookup(name); ok && text != "" {
				key := s.norm
				if rename != nil {
					key = rename(key)
				}
				into[key] = value{src: Source{Kind: SourceEnv, Name: name}, text: text}
				break
			}
		}
	}
}

// present reports whether any layer has a value for any setting of tab.
func present[C any](tab []setting[C], layers ...layer) bool {
	for _, s := range tab {
		for _, lay := range layers {
			if _, ok := lay[s.norm]; ok {
				return true
			}
		}
	}
	return false
}

// The walker's bounds. yaml aliases let a small document name the same
// mapping many times; these keep such a document from costing more than an
// honest one, which has far fewer keys.
const (
	maxDepth = 32
	maxSteps = 10_000
)

// yamlFile flattens the mappings of one yaml file into layers.
type yamlFile struct {
	l     *loader
	path  string
	env   Env
	steps int
	spent bool // maxSteps or maxDepth was hit and reported
}

// readYAML reads path and flattens its top-level mapping by sch. A missing
// file is an empty layer unless mustExist.
func (l *loader) readYAML(read func(string) ([]byte, error), path string, mustExist bool, env Env, sch *schema) (layer, *yamlFile) {
	return l.readFile(read, path, mustExist, env, sch, &includes{}, nil)
}

// readFile reads one file of an include tree: chain holds the files that
// include it, outermost first.
func (l *loader) readFile(read func(string) ([]byte, error), path string, mustExist bool, env Env, sch *schema, inc *includes, chain []string) (layer, *yamlFile) {
	out := layer{}
	f := &yamlFile{l: l, path: path, env: env}
	if read == nil {
		read = os.ReadFile
	}
	data, err := read(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && !mustExist {
			return out, f
		}
		msg := "cannot read file"
		if errors.Is(err, fs.ErrNotExist) {
			msg = "file does not exist"
		} else if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
			msg = "cannot read file: " + pe.Err.Error()
		}
		l.fail("", Source{Kind: SourceFile, Name: path}, msg)
		l.broken = true
		return out, f
	}
	l.src.read(path)
	if len(data) > MaxFileBytes {
		l.fail("", Source{Kind: SourceFile, Name: path}, fmt.Sprintf("file is larger than %d bytes", MaxFileBytes))
		l.broken = true
		return out, f
	}
	root, err := decodeYAML(data)
	if err != nil {
		line, msg := yamlErrorLine(err)
		l.fail("", Source{Kind: SourceFile, Name: path, Line: line}, msg)
		l.broken = true
		return out, f
	}
	if root == nil || root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" {
		return out, f
	}
	if root.Kind != yaml.MappingNode {
		l.fail("", Source{Kind: SourceFile, Name: path, Line: root.Line}, "the top level must be a mapping of settings")
		l.broken = true
		return out, f
	}
	root, includeNode := splitInclude(root)
	f.walk(root, "", nil, "", sch, out, 0)
	if includeNode == nil {
		return out, f
	}
	return l.readIncludes(f, includeNode, out, read, sch, inc, append(chain, path)), f
}

// decodeYAML parses exactly one yaml document and returns its root node,
// nil for an empty document.
func decodeYAML(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, err
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		return nil, fmt.Errorf("yaml: line %d: only one yaml document is allowed", extra.Line)
	case !errors.Is(err, io.EOF):
		return nil, err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, nil
	}
	return deref(doc.Content[0]), nil
}

// yamlErrorLine splits yaml.v3's "yaml: line N: msg" into N and msg.
func yamlErrorLine(err error) (int, string) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	rest, ok := strings.CutPrefix(msg, "line ")
	if !ok {
		return 0, msg
	}
	num, text, ok := strings.Cut(rest, ": ")
	n, convErr := strconv.Atoi(num)
	if !ok || convErr != nil {
		return 0, msg
	}
	return n, text
}

func (f *yamlFile) source(n *yaml.Node) Source {
	return Source{Kind: SourceFile, Name: f.path, Line: n.Line}
}

// budget counts one step of the walk and reports whether the walk may go on.
func (f *yamlFile) budget(depth int) bool {
	f.steps++
	if f.steps <= maxSteps && depth <= maxDepth {
		return true
	}
	if !f.spent {
		f.spent = true
		f.l.fail("", Source{Kind: SourceFile, Name: f.path}, "document nests too deeply or expands too far (yaml aliases?)")
	}
	return false
}

// walk flattens mapping n into out: a child key k of a group at prefix p is
// the key p_k, except that a child "enabled" is p itself. display is the key
// path as written, for messages about unknown keys; keyPrefix goes before
// every key named in a message ("services[1]."). Null values are skipped, so
// a key written without a value counts as unset.
func (f *yamlFile) walk(n *yaml.Node, prefix string, display []string, keyPrefix string, sch *schema, out layer, depth int) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if !f.budget(depth) {
			return
		}
		kn, vn := deref(n.Content[i]), deref(n.Content[i+1])
		if kn.Kind != yaml.ScalarNode || kn.ShortTag() == "!!merge" {
			f.l.fail(keyPrefix+strings.Join(display, "."), f.source(kn), "keys must be plain names (yaml merge keys are not supported)")
			continue
		}
		path := append(display[:len(display):len(display)], kn.Value)
		shown := keyPrefix + strings.Join(path, ".")
		norm := normalize(kn.Value)
		full := norm
		switch {
		case prefix != "" && norm == "enabled" && sch.leaves[prefix].name != "":
			full = prefix // the group's switch
		case prefix != "":
			full = prefix + "_" + norm
		}
		isNull := vn.Kind == yaml.ScalarNode && vn.ShortTag() == "!!null"
		lf, isLeaf := sch.leaves[full]
		isBlock := vn.Kind == yaml.MappingNode && !lf.whole && sch.groups[full]
		switch {
		case isLeaf && !isBlock:
			if isNull {
				continue
			}
			if prev, dup := out[full]; dup {
				f.l.fail(keyPrefix+lf.name, f.source(kn), fmt.Sprintf("set twice in this file (also at line %d)", prev.src.Line))
				continue
			}
			// The source is the key's line: that is where the setting is
			// written, even when the value is a block below it or an alias.
			out[full] = value{src: f.source(kn), node: vn, env: f.env, file: f}
		case isBlock || sch.groups[full] && isNull:
			if !isNull {
				f.walk(vn, full, path, keyPrefix, sch, out, depth+1)
			}
		case sch.groups[full] && co3mozHint(full) != "":
			// denied, outlier_ejection: co3moz keys that happen to
			// prefix Aperio's own (denied_ips, outlier_ejection_time).
			f.l.fail(shown, f.source(kn), co3mozHint(full))
		case sch.groups[full]:
			f.l.fail(shown, f.source(kn), "expected a block of settings, got a single value")
		default:
			msg := co3mozHint(full)
			if msg == "" {
				msg = sch.unknown(full)
			}
			f.l.fail(shown, f.source(kn), msg)
		}
	}
}
