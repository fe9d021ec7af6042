package config

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Files returns the absolute path of every configuration file the load
// read, in the order it read them: the main file, then the home file
// (client). A file that does not exist and was not required is not
// listed. The reload watcher watches these. A nil *Sources has none.
func (s *Sources) Files() []string {
	if s == nil {
		return nil
	}
	return slices.Clone(s.files)
}

// MaxFileBytes bounds each configuration file, the main one and every
// included one: 1 MiB is far more than any honest configuration.
const MaxFileBytes = 1 << 20

// The bounds of an include tree.
const (
	// maxIncludeDepth is how deep includes may nest: the main file
	// includes a file (depth 1) that includes another (depth 2), up to 8.
	maxIncludeDepth = 8
	// maxIncludeFiles is how many files one tree may include in all.
	maxIncludeFiles = 64
)

// includes counts the files of one include tree.
type includes struct {
	files int
}

// splitInclude returns root without its top-level include key, and the
// include key's value node; nil when root has none.
func splitInclude(root *yaml.Node) (*yaml.Node, *yaml.Node) {
	for i := 0; i+1 < len(root.Content); i += 2 {
		k := deref(root.Content[i])
		if k.Kind == yaml.ScalarNode && normalize(k.Value) == "include" {
			rest := *root
			rest.Content = append(slices.Clip(root.Content[:i]), root.Content[i+2:]...)
			return &rest, root.Content[i+1]
		}
	}
	return root, nil
}

// readIncludes reads the files f's include: names (a path or a list of
// paths and globs, relative to f's directory) and returns their values
// merged with own: later files override earlier ones key by key, and f's
// own keys override every file it includes; services: lists are
// concatenated in that order instead. A path that names no file is an
// error; a glob that matches none is not. Cycles, nesting deeper than
// maxIncludeDepth and more than maxIncludeFiles files are errors naming
// the include's file:line.
func (l *loader) readIncludes(f *yamlFile, n *yaml.Node, own layer, read func(string) ([]byte, error), sch *schema, inc *includes, chain []string) layer {
	n = deref(n)
	var entries []*yaml.Node
	switch n.Kind {
	case yaml.ScalarNode:
		if n.ShortTag() != "!!null" {
			entries = []*yaml.Node{n}
		}
	case yaml.SequenceNode:
		entries = n.Content
	default:
		l.fail("include", f.source(n), "expected a file, a glob or a list of them")
		return own
	}
	merged := layer{}
	for _, e := range entries {
		e = deref(e)
		src := f.source(e)
		name, err := scalarNode(e, f.env)
		if err != nil || strings.TrimSpace(name) == "" {
			l.fail("include", src, "expected a file name")
			continue
		}
		name = strings.TrimSpace(name)
		if !filepath.IsAbs(name) {
			name = filepath.Join(filepath.Dir(f.path), name)
		}
		paths := []string{name}
		glob := strings.ContainsAny(name, "*?[")
		if glob {
			if paths, err = filepath.Glob(name); err != nil {
				l.fail("include", src, fmt.Sprintf("invalid glob %q", name))
				continue
			}
		}
		for _, p := range paths {
			if len(chain) >= maxIncludeDepth {
				l.fail("include", src, fmt.Sprintf("includes nest deeper than %d files", maxIncludeDepth))
				return mergeLayers(merged, own)
			}
			if inc.files >= maxIncludeFiles {
				l.fail("include", src, fmt.Sprintf("more than %d files included", maxIncludeFiles))
				return mergeLayers(merged, own)
			}
			if cycle(chain, p) {
				l.fail("include", src, fmt.Sprintf("include cycle: %s includes %s, which is already being read", f.path, p))
				continue
			}
			inc.files++
			lay, _ := l.readFile(read, p, true, f.env, sch, inc, chain)
			merged = mergeLayers(merged, lay)
		}
	}
	return mergeLayers(merged, own)
}

// cycle reports whether p is one of the files of chain.
func cycle(chain []string, p string) bool {
	ap, _ := filepath.Abs(p)
	for _, c := range chain {
		if ac, _ := filepath.Abs(c); ac == ap {
			return true
		}
	}
	return false
}

// mergeLayers lays over onto base and returns base: a key of over wins,
// except services: and expose:, whose lists are concatenated, base's
// first.
func mergeLayers(base, over layer) layer {
	for k, v := range over {
		if prev, ok := base[k]; ok && (k == "services" || k == "expose") {
			prev.more = append(append(slices.Clip(prev.more), value{src: v.src, node: v.node, env: v.env, file: v.file}), v.more...)
			base[k] = prev
			continue
		}
		base[k] = v
	}
	return base
}
